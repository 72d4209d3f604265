"""Where popcorn keeps files: the user cache (measurements of this machine)."""

from __future__ import annotations

from pathlib import Path

from popcorn.schema import VERSION as SCHEMA  # a new record schema generation starts a fresh cache directory

from .settings import settings


def cache_dir() -> Path:
    """``$POPCORN_CACHE_DIR`` or ``$XDG_CACHE_HOME/popcorn`` (``~/.cache/popcorn``), then ``v<SCHEMA>/reports``."""
    return settings().cache_root / f"v{SCHEMA}" / "reports"
