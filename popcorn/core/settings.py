"""Every environment variable popcorn reads, in one place, read when asked (never at import time),
so a variable set after ``import popcorn`` still takes effect.

| variable | what it sets | default |
|---|---|---|
| POPCORN_BENCH=1 | every call measures its exact case first (as ``bench=True``) | off |
| POPCORN_CACHE_DIR | the user cache of this machine's measurements | $XDG_CACHE_HOME/popcorn, ~/.cache/popcorn |
| POPCORN_REPORT | the published report directory dispatch reads | the bundled popcorn/reports |
| POPCORN_STORE | the Delta report store (a path or URI) | $XDG_DATA_HOME/popcorn/store, ~/.local/share/... |
| POPCORN_BENCH_TARGET_MS | time spent measuring each quantity (precision for throughput) | 100 |
"""

from __future__ import annotations

import os
from pathlib import Path


class Settings:
    """The values, read from the environment by :func:`settings` (a plain class: cheap to import)."""

    __slots__ = ("bench", "cache_root", "report_dir", "store", "bench_target_ms")

    def __init__(self, *, bench: bool, cache_root: Path, report_dir: Path | None, store: str,
                 bench_target_ms: float):
        self.bench, self.cache_root, self.report_dir = bench, cache_root, report_dir
        self.store, self.bench_target_ms = store, bench_target_ms

    def __repr__(self) -> str:
        return "Settings(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


def settings() -> Settings:
    env = os.environ
    home = Path.home()
    cache = env.get("POPCORN_CACHE_DIR") or Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "popcorn"
    store = env.get("POPCORN_STORE") or str(Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
                                            / "popcorn" / "store")
    try:
        target = float(env.get("POPCORN_BENCH_TARGET_MS") or 100)
    except ValueError:
        raise ValueError(f"POPCORN_BENCH_TARGET_MS={env['POPCORN_BENCH_TARGET_MS']!r} is not a number of "
                         "milliseconds; unset it or give e.g. 100") from None
    return Settings(bench=env.get("POPCORN_BENCH") == "1", cache_root=Path(cache),
                    report_dir=Path(env["POPCORN_REPORT"]) if env.get("POPCORN_REPORT") else None,
                    store=store, bench_target_ms=target)
