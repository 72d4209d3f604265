"""Backend families: the package behind each implementation name, its version range and extra.

An implementation named ``fla`` or ``fla:recurrent`` resolves to family ``fla`` through the
prefix before the colon, so variants share one pin and one install hint.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from dataclasses import dataclass

from .errors import BackendUnavailable


@dataclass(frozen=True)
class Backend:
    name: str
    package: str | None  # distribution name; None: part of torch, always installed
    module: str | None = None  # import name, when it differs from the distribution
    versions: str = ""  # PEP 440 specifier, e.g. ">=0.6,<0.8"
    extra: str | None = None
    # JIT-compiles on a first call (inductor, Triton): the fill's watchdog leaves room for that
    compiles: bool = True
    # seconds a first call may take where compiling takes longer than a fill's --timeout (quack: CuTe DSL
    # compiles every autotune config of a GEMM before its on-disk cache is warm); a false timeout would
    # prune every larger case of the curve
    first_call_s: float = 0.0

    @functools.cached_property
    def version(self) -> str | None:
        """The installed version, torch's for torch-native families, None when missing."""
        dist = self.package or "torch"
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            # A source checkout on sys.path without dist metadata still counts as installed.
            try:
                found = self.module is not None and importlib.util.find_spec(self.module) is not None
            except ModuleNotFoundError:  # a dotted module (flash_attn.cute) whose parent is missing
                found = False
            return "0+unknown" if found else None

    def problem(self) -> str | None:
        """Why this family cannot run here, or None when it can."""
        if self.package is None:
            return None
        hint = f"pip install 'popcorn[{self.extra}]'" if self.extra else f"pip install '{self.package}{self.versions}'"
        if self.version is None:
            return f"backend '{self.name}' needs package '{self.package}', which is not installed: {hint}"
        if self.versions and self.version != "0+unknown":
            from packaging.specifiers import SpecifierSet  # lazily: only non-torch families pay

            if self.version not in SpecifierSet(self.versions, prereleases=True):
                return (f"backend '{self.name}' supports {self.package}{self.versions}, "
                        f"but {self.version} is installed: {hint}")
        return None

    @property
    def available(self) -> bool:
        return self.problem() is None

    def require(self) -> None:
        reason = self.problem()
        if reason:
            raise BackendUnavailable(reason)


_TORCH = Backend("torch", None, compiles=False)

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        _TORCH,
        Backend("compile", None),
        Backend("sdpa", None, compiles=False),
        Backend("popcorn", "triton", versions=">=3.3"),
        Backend("liger", "liger-kernel", "liger_kernel", ">=0.8,<0.9", "liger"),
        Backend("fla", "fla-core", "fla", ">=0.6,<0.7", "fla"),  # flash-linear-attention's kernels
        Backend("quack", "quack-kernels", "quack", ">=0.6,<0.7", "quack", first_call_s=900.0),
        # cuDNN's graph API through its frontend: norms as torch custom ops with autograd (cudnn.ops.norm)
        Backend("cudnn", "nvidia-cudnn-frontend", "cudnn", ">=1.32,<2", "cudnn"),
        # FlashAttention 4: the CuTe DSL port of FlashAttention (SM90 and SM100 kernels, forward and backward),
        # the FlashAttention that installs from the package index on Hopper (FA3 builds from source); its
        # kernels compile on a first call of each configuration, as quack's do
        Backend("fa4", "flash-attn-4", "flash_attn.cute", ">=4.0.0b36,<4.1", "fa4", first_call_s=300.0),
        Backend("unsloth", "unsloth", "unsloth", ">=2026.3", "unsloth"),
    )
}


def declare_backend(backend: Backend) -> Backend:
    """Add a family (idempotent for an identical declaration)."""
    if BACKENDS.get(backend.name, backend) != backend:
        raise ValueError(f"backend family '{backend.name}' is already declared differently")
    BACKENDS[backend.name] = backend
    return backend


def family(impl_name: str) -> Backend:
    """The family of an implementation name such as ``fla:recurrent``."""
    prefix = impl_name.split(":", 1)[0]
    try:
        return BACKENDS[prefix]
    except KeyError:
        raise ValueError(
            f"implementation '{impl_name}' belongs to no declared backend family; "
            f"declare one with declare_backend(Backend('{prefix}', ...)) (known: {', '.join(BACKENDS)})"
        ) from None
