"""popcorn: validated, measured, dispatched GPU kernels behind pure-PyTorch references."""

__version__ = "0.1.0"

from popcorn.dispatch import explain, use  # noqa: E402 - installs the dispatcher on the op registry

__all__ = ["explain", "use"]
