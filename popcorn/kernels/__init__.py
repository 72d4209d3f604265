"""The op catalog: one module per op holding its reference and backend registrations.

``from popcorn.kernels import rms_norm`` gives the Op; ``OPS`` maps every op name to its Op.
"""

from popcorn.core.registry import Op

from .rms_norm import rms_norm

OPS: dict[str, Op] = {v.name: v for v in list(globals().values()) if isinstance(v, Op)}

__all__ = sorted(OPS) + ["OPS"]
