"""The dims vocabulary: one table of canonical dim names, their pools and anchors.

Names are canonical across ops: counts are plural (``heads``), extents singular (``seq``).
A size derived from another is written as an expression (``head_dim/2``), never a new name.
``pool`` is what the case plan draws from: powers of two, tile +-1 neighbours and production
sizes. ``anchor`` pins the dim on production curves (a Llama-3-class model); ``long_anchor``
pins it on long-context curves, where only temporal axes grow.
"""

from __future__ import annotations

from dataclasses import dataclass

_K = 1024
_TEMPORAL_POOL = (2, 3, 8, 9, 16, 17, 33, 37, 64, 65, 128, 129, 161, 256, 512, 697, 1024, 1447, 1448, 1449,
                  2048, 3010, 4096, 8 * _K, 16 * _K, 32 * _K, 64 * _K, 128 * _K, 256 * _K, 512 * _K, 1024 * _K)
_FEATURE_POOL = (8, 16, 17, 21, 33, 57, 64, 65, 128, 129, 150, 256, 400, 512, 768, 1024, 1536, 2048, 2560, 3072,
                 4096, 5120, 6144, 8192, 10240, 12288, 14336, 16384, 18432, 22016, 24576, 28672, 32768, 53248)
_VOCAB_POOL = (2, 3, 7, 8, 16, 17, 27, 33, 64, 65, 101, 128, 129, 256, 372, 512, 715, 1024, 1375, 2048, 4096,
               32000, 32768, 50257, 50304, 128256, 151936, 152064, 256000)
_HEADS_POOL = (1, 2, 4, 6, 8, 12, 16, 18, 20, 24, 28, 32, 36, 40, 48, 64, 72, 80, 96, 128)
_HEAD_DIM_POOL = (16, 32, 48, 64, 80, 96, 128, 192, 256)
_MATRIX_POOL = (1, 2, 3, 8, 16, 17, 19, 32, 64, 65, 128, 256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class Dim:
    name: str
    pool: tuple[int, ...]
    anchor: int
    long_anchor: int | None = None  # None: keep the production anchor on long-context curves
    temporal: bool = False  # grows with context length; capped on production curves
    cap: int | None = None  # the largest value on production curves (temporal default: 32K)
    coverage: tuple[int, ...] | None = None  # the covering array's values, when not the whole pool


def _dims(*dims: Dim) -> dict[str, Dim]:
    return {d.name: d for d in dims}


DIMS: dict[str, Dim] = _dims(
    Dim("seq", _TEMPORAL_POOL, 4096, temporal=True),
    # training calls token-wise ops on batch x sequence rows: production curves run to 64K tokens
    Dim("tokens", _TEMPORAL_POOL, 4096, temporal=True, cap=64 * _K),
    Dim("total", _TEMPORAL_POOL, 4096, temporal=True),
    Dim("hidden", _FEATURE_POOL, 4096, 256),
    Dim("intermediate", _FEATURE_POOL, 14336, 512),
    Dim("in_features", _FEATURE_POOL, 4096, 256),
    Dim("out_features", _FEATURE_POOL, 4096, 256),
    Dim("normalized_shape", _FEATURE_POOL, 4096, 256),
    Dim("channels", _FEATURE_POOL, 4096, 256),
    Dim("vocab", _VOCAB_POOL, 128256, 4096),
    Dim("heads", _HEADS_POOL, 32, 1),
    Dim("q_heads", _HEADS_POOL, 32, 1),
    Dim("kv_heads", (1, 2, 4, 8, 16, 32, 40, 64, 128), 8, 1),
    Dim("head_dim", _HEAD_DIM_POOL, 128, 64),
    Dim("batch", (1, 2, 4, 8, 16, 32, 64), 8, 1),
    Dim("width", (8, 16, 17, 33, 64, 128, 256, 512, 1024), 256, 64),
    Dim("rows", _MATRIX_POOL, 4096, 256),
    Dim("cols", _MATRIX_POOL, 4096, 256),
    Dim("inner", (16, 17, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192), 4096, 256),
    Dim("boundaries", tuple(range(2, 18)) + (33, 65, 129, 257, 513, 1025), 33, 2),
    # '...': the leading variadic extent; 0 means no batch dims at all.
    Dim("...", (0, 1, 2, 4, 8, 16, 32, 64), 0, 1),
    # '...' of a row-wise op (register_kernel(batch="token_rows")): the batch x sequence token rows it is
    # called on in training; edge sizes (no batch, one row, tails) stay in the covering array.
    Dim("token_rows", (0, 1, 2, 3, 4, 8, 16, 17, 32, 64, 128, 256, 512, 1024, 1447, 2048, 4096, 8 * _K, 16 * _K,
                       32 * _K, 64 * _K, 128 * _K, 256 * _K, 512 * _K, 1024 * _K), 4096, temporal=True, cap=64 * _K,
        coverage=(0, 1, 3, 17, 64, 1447, 4096, 64 * _K)),
)
# Vocabulary entries a leading '...' can stand for (register_kernel(batch=...)).
BATCH_DIMS = ("...", "token_rows")

# Dims the plan does not know draw from these seeds: powers of two and tile+-1 neighbours.
GRID = (1, 2, 3, 8, 16, 17, 33, 64, 65, 128, 129, 256, 512, 1024, 2048, 4096, 8192, 32768, 131072, 1048576)


def dim(name: str) -> Dim:
    """The vocabulary entry for ``name``; unknown dims fall back to GRID with its median as anchor."""
    if name in DIMS:
        return DIMS[name]
    return Dim(name, GRID, GRID[len(GRID) // 2])
