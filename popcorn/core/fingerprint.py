"""Code fingerprints: a hash of the normalized AST of everything an implementation runs.

Records carry the fingerprint of the reference and of each adapter, so evidence measured
against older code is recognised as stale without comparing versions. A fingerprint covers
the function itself (blind to comments, docstrings and its own registration decorator) and,
transitively, every function and class of the same project it reaches: module-level helpers,
helpers in other project modules (``numerics.upcast``), classes of closed-over objects, and
the plain constants it reads. Code outside the project (torch, a kernel library) is covered by
the versions a record carries instead. Every value enters the hash through a canonical text
(sets sorted), so one code base has one fingerprint in every process and Python 3.11-3.13.
"""

from __future__ import annotations

import ast
import dis
import enum
import hashlib
import inspect
import textwrap
import types

# Top-level packages whose code a fingerprint follows, besides the hashed object's own.
PROJECT = frozenset({"popcorn"})


def _strip(node: ast.AST, decorators: bool) -> ast.AST:
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = child.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                child.body = body[1:] or [ast.Pass()]
    if not decorators:  # the hashed object's own decorators register it; they are not its code
        for top in getattr(node, "body", ()):
            if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top.decorator_list = []
    return node


def _serialize(node) -> str:
    """A canonical dump that leaves out empty and None fields, so fields a newer Python adds with an
    empty default (``type_params`` in 3.12) do not change the text: one hash on 3.11 through 3.13."""
    if isinstance(node, ast.AST):
        parts = [f"{f}={_serialize(v)}" for f in node._fields
                 if (v := getattr(node, f, None)) is not None and v != []]
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_serialize(v) for v in node) + "]"
    return repr(node)


def normalized_source(obj, decorators: bool = False) -> str:
    """The canonical AST dump of ``obj``'s source (a function or class), or of ``obj`` itself if a string.
    ``decorators``: keep the decorators of the top definition (a helper's ``@triton.autotune`` is code)."""
    source = obj if isinstance(obj, str) else textwrap.dedent(inspect.getsource(obj))
    return _serialize(_strip(ast.parse(source), decorators))


def canonical(value) -> str | None:
    """A process-independent text for plain data (sets and dict keys sorted), None for anything else."""
    if isinstance(value, enum.Enum) or (hasattr(type(value), "__members__") and isinstance(
            getattr(value, "name", None), str)):  # Python and pybind11 enums (torch's SDPBackend)
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return repr(value)
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value)
    if isinstance(value, (tuple, list)):
        parts = [canonical(v) for v in value]
        return None if None in parts else f"{type(value).__name__}({','.join(parts)})"
    if isinstance(value, (set, frozenset)):
        parts = [canonical(v) for v in value]
        return None if None in parts else "set(" + ",".join(sorted(parts)) + ")"
    if isinstance(value, dict):
        items = [(canonical(k), canonical(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "dict(" + ",".join(sorted(f"{k}:{v}" for k, v in items)) + ")"
    return None


def _top(module: str | None) -> str:
    return (module or "").split(".", 1)[0]


def _unwrap(value):
    """Code objects hidden in wrappers: methods, static/class methods, properties, triton's JIT objects."""
    for _ in range(8):
        if isinstance(value, (types.MethodType, staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        elif not inspect.isfunction(value) and not inspect.isclass(value) and (
                inspect.isfunction(getattr(value, "fn", None)) or hasattr(getattr(value, "fn", None), "fn")):
            value = value.fn  # triton.jit / autotune / heuristics keep the Python function in .fn
        else:
            break
    return value


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTR_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"})


def _code_refs(code: types.CodeType) -> tuple[list[str], list[str]]:
    """(global names, attribute names) ``code`` and its nested functions load, in first-use order.

    Kept apart so ``torch.softmax`` (an attribute) is not mistaken for a module global of the same
    name (the ``softmax`` Op itself)."""
    globs: list[str] = []
    attrs: list[str] = []
    for ins in dis.get_instructions(code):
        into = globs if ins.opname in _GLOBAL_OPS else attrs if ins.opname in _ATTR_OPS else None
        if into is not None and isinstance(ins.argval, str) and ins.argval not in into:
            into.append(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            g, a = _code_refs(const)
            globs += [n for n in g if n not in globs]
            attrs += [n for n in a if n not in attrs]
    return globs, attrs


class _Walk:
    """Depth-first over the project code an object reaches, each object once, in first-reference order."""

    def __init__(self, scope: set[str]):
        self.scope = scope
        self.seen: set[int] = set()
        self.parts: list[str] = []

    def ours(self, value) -> bool:
        return _top(getattr(value, "__module__", None)) in self.scope

    def visit(self, obj, *, root: bool = False) -> None:
        obj = _unwrap(obj)
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
        try:
            source = normalized_source(obj, decorators=not root)
            self.parts.append(source if root else f"{name}:{source}")
        except (OSError, TypeError):
            # builtins and functions built at runtime have no source: their qualified name stands in
            self.parts.append(f"{name}:<no source>")
            return
        if inspect.isclass(obj):
            for base in obj.__mro__[1:]:
                if self.ours(base):
                    self.visit(base)
            for member in vars(obj).values():
                member = _unwrap(member)
                if inspect.isfunction(member):
                    self.references(member)
            return
        if inspect.isfunction(obj):
            self.references(obj)

    def references(self, fn: types.FunctionType) -> None:
        """Globals, module attributes and closure cells ``fn`` reads."""
        names, attrs = _code_refs(fn.__code__)
        found = []
        for n in names:
            if n in fn.__globals__ and not n.startswith("__"):
                found.append((n, fn.__globals__[n]))
        for cell_name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                found.append((cell_name, cell.cell_contents))
            except ValueError:  # a name the function closes over that is not bound yet
                continue
        for n, value in found:
            if isinstance(value, types.ModuleType):
                if _top(value.__name__) in self.scope:  # `numerics.upcast`: the attributes it reads
                    for attr in attrs:
                        if attr in vars(value):
                            self.value(f"{value.__name__}.{attr}", vars(value)[attr])
                continue
            self.value(n, value)

    def value(self, name: str, value) -> None:
        text = canonical(value)
        if text is not None:
            self.parts.append(f"{name}={text}")
            return
        code = _unwrap(value)
        if inspect.isfunction(code) or inspect.isclass(code):
            if self.ours(code):
                self.visit(code)
        elif self.ours(type(value)):
            self.visit(type(value))  # an object of ours (a Compiled runner): its class is its code


def fingerprint(*objs, declared: str = "") -> str:
    """12 hex chars identifying the code of ``objs`` (functions, classes or source strings) and the project
    code they reach, plus ``declared`` (registration data in canonical text); None is skipped."""
    h = hashlib.sha1()
    if declared:
        h.update(declared.encode() + b"\0")
    for obj in objs:
        if obj is None:
            continue
        if isinstance(obj, str):
            h.update(normalized_source(obj).encode())
        else:
            walk = _Walk(set(PROJECT) | {_top(getattr(_unwrap(obj), "__module__", None))} - {"", "builtins"})
            walk.visit(obj, root=True)
            h.update("\n".join(walk.parts).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]
