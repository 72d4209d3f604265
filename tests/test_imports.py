"""The runtime stays slim: importing popcorn and its ops pulls in none of the heavy extras."""

import subprocess
import sys

HEAVY = ("pyarrow", "triton", "dagster", "deltalake", "streamlit")


def test_import_popcorn_and_its_ops_is_slim():
    code = ("import sys, popcorn, popcorn.kernels, popcorn.dispatch.table; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cli_help_lists_the_command_groups():
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    for group in ("ops", "bench", "sweep"):
        assert group in out.stdout
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "--help"], capture_output=True, text=True,
                         timeout=120)
    for cmd in ("fill", "merge", "check", "publish", "view"):
        assert cmd in out.stdout
