"""The op model: shape grammar, dims vocabulary, registry, backends, fingerprints, errors."""

from .backends import BACKENDS, Backend, declare_backend
from .case import Case
from .errors import BackendUnavailable, DispatchError
from .implementation import Gate, Implementation, absent, dtypes, one_of
from .registry import Op, register_kernel
from .shapes import BOOL, F32, FLOAT, FP32, HALF, INT, Bool, Float, Half, Int, TensorSpec

__all__ = [
    "BACKENDS", "Backend", "declare_backend", "Case", "BackendUnavailable", "DispatchError",
    "Gate", "Implementation", "absent", "dtypes", "one_of", "Op", "register_kernel", "BOOL", "F32", "FLOAT", "FP32", "HALF", "INT",
    "Bool", "Float", "Half", "Int", "TensorSpec",
]
