"""Screenshots of the kernel explorer on real rows: the overview and an op's named curves.

    python benchmarks/explorer_screenshots.py --rows benchmarks/results/h200_parallel_run3 \
        benchmarks/results/h200_curves_run3 --op rms_norm --out docs

The rows (JSONL shards, ``DIR/<op>.jsonl``) become a user cache of their own; the explorer shows it
beside the bundled published report (source "published + user"), in `streamlit run` and headless
Chromium, as tests/dashboards/test_browser.py drives them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from popcorn.schema import VERSION as SCHEMA  # noqa: E402
from tests.dashboards.browser import chromium_page, render, streamlit_app  # noqa: E402
from tests.dashboards.test_browser import MATRIX_READY, PLOT_READY  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="+", type=Path, required=True, help="shard directories of <op>.jsonl")
    ap.add_argument("--op", default="rms_norm", help="the kernel page to shoot")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        reports = cache / f"v{SCHEMA}" / "reports"
        reports.mkdir(parents=True)
        for directory in args.rows:  # later directories' rows of a key win, as in the cache
            for shard in sorted(directory.glob("*.jsonl")):
                with open(reports / shard.name, "a") as f:
                    f.write(shard.read_text())
        env = {"POPCORN_CACHE_DIR": str(cache), "POPCORN_STORE": str(Path(tmp) / "store")}
        args.out.mkdir(parents=True, exist_ok=True)
        source = "?source=published%2Buser"
        with streamlit_app(env) as base, chromium_page() as page:
            render(page, f"{base}/{source}", MATRIX_READY, args.out / "explorer-overview.png")
            render(page, f"{base}/kernel{source}&op={args.op}", PLOT_READY, args.out / f"explorer-{args.op}.png")
    for name in ("explorer-overview.png", f"explorer-{args.op}.png"):
        print(f"{args.out / name}: {(args.out / name).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
