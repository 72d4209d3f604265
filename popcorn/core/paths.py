"""Where popcorn keeps files: the user cache (measurements of this machine)."""

from __future__ import annotations

import os
from pathlib import Path

from popcorn.schema import VERSION as SCHEMA  # a new record schema generation starts a fresh cache directory


def cache_dir() -> Path:
    """``$POPCORN_CACHE_DIR`` or ``$XDG_CACHE_HOME/popcorn`` (``~/.cache/popcorn``), then ``v<SCHEMA>/reports``."""
    root = os.environ.get("POPCORN_CACHE_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "popcorn"
    return Path(root) / f"v{SCHEMA}" / "reports"
