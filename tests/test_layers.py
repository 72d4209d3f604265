"""The import contract (pyproject.toml's [tool.importlinter]): layers import downward only
(schema <- core <- kernels | dispatch <- bench <- cli) and sibling modules import without cycles."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contract_holds():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is missing: pip install -e '.[dev]' installs import-linter")
    done = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_core_reaches_the_layers_above_only_through_installed_hooks():
    code = ("import sys, popcorn; "
            "assert 'popcorn.bench' not in sys.modules, 'import popcorn loaded the bench layer'; "
            "from popcorn.core import registry; "
            "assert registry.Layers.dispatcher is not None and registry.Layers.harness is not None")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
