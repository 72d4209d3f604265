"""Code fingerprints: a hash of normalized AST, blind to comments, docstrings and decorators.

Records carry the fingerprint of the reference and of each adapter, so evidence measured
against older code is recognised as stale without comparing versions.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import inspect
import textwrap


def _strip(node: ast.AST) -> ast.AST:
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            child.decorator_list = []
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = child.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                child.body = body[1:] or [ast.Pass()]
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


def normalized_source(obj) -> str:
    """The canonical AST dump of ``obj``'s source (a function or class), or of ``obj`` itself if a string."""
    source = obj if isinstance(obj, str) else textwrap.dedent(inspect.getsource(obj))
    return _serialize(_strip(ast.parse(source)))


def _closure_values(obj) -> str:
    """Plain values a factory closed over (an SDPA backend enum, a block size): same source, other code."""
    cells = getattr(obj, "__closure__", None) or ()
    plain = (str, int, float, bool, type(None), tuple, enum.Enum)
    values = []
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # a name the function closes over that is not bound yet
            continue
        if isinstance(value, plain):
            values.append(value)
    return repr(values)


def fingerprint(*objs) -> str:
    """12 hex chars identifying the code of ``objs`` (functions, classes or source strings); None is skipped."""
    h = hashlib.sha1()
    for obj in objs:
        if obj is None:
            continue
        try:
            h.update(normalized_source(obj).encode())
            h.update(_closure_values(obj).encode())
        except (OSError, TypeError):
            # Builtins and lambdas built at runtime have no source; their qualified name stands in.
            h.update(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}".encode())
        h.update(b"\0")
    return h.hexdigest()[:12]
