"""The op catalog: one module per op holding its reference and backend registrations.

``from popcorn.kernels import rms_norm`` gives the Op; ``OPS`` maps every op name to its Op.
"""

from popcorn.core.registry import Op

from .add_rms_norm import add_rms_norm
from .attn import attn
from .attn_varlen import attn_varlen
from .cross_entropy import cross_entropy
from .embedding import embedding
from .geglu import geglu
from .gelu import gelu
from .group_norm import group_norm
from .jsd import jsd
from .kl_div import kl_div
from .l2_norm import l2_norm
from .layer_norm import layer_norm
from .linear import linear
from .linear_cross_entropy import linear_cross_entropy
from .logsumexp import logsumexp
from .matmul import matmul
from .rms_norm import rms_norm
from .rope import rope
from .softmax import softmax
from .swiglu import swiglu
from .swish import swish

OPS: dict[str, Op] = {v.name: v for v in list(globals().values()) if isinstance(v, Op)}
for _op in OPS.values():
    _op.enable_library()  # torch.ops.popcorn.<name>: what torch.compile sees

__all__ = sorted(OPS) + ["OPS"]
