"""The published dispatch table, loaded with the standard library alone.

``load()`` reads ``$POPCORN_REPORT`` (a directory written by ``popcorn bench publish``) or the
bundled ``popcorn/reports``: the version named in ``CURRENT``, then ``dispatch-v<N>.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from popcorn.core.settings import settings

BUNDLED = Path(__file__).resolve().parents[1] / "reports"


@dataclass(frozen=True)
class DispatchTable:
    store_version: int | None
    ops: dict  # op -> {"ref_hash", "impl_hash": {impl: hash}, "rows": [...]}
    source: str

    def rows(self, op: str) -> list[dict]:
        return self.ops.get(op, {}).get("rows", [])


def load(directory: str | Path | None = None) -> DispatchTable:
    """The current published table; an empty one when nothing was published there yet."""
    root = Path(directory or settings().report_dir or BUNDLED)
    current = root / "CURRENT"
    if not current.exists():
        return DispatchTable(None, {}, str(root))
    version = current.read_text().strip()
    path = root / f"dispatch-v{version}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{current} names version {version}, but {path} is missing; republish with "
                                "`popcorn bench publish`") from None
    return DispatchTable(data["store_version"], data["ops"], str(path))
