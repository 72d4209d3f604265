"""popcorn: validated, measured, dispatched GPU kernels behind pure-PyTorch references."""

__version__ = "0.1.0"
