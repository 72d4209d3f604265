"""Adding a backend is one adapter file plus its registration line, and the conformance test
(tests/kernels/test_conformance.py) validates it without being edited: shown here by running that
test file in a fresh pytest process with a toy backend registered by a plugin."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ADAPTER = '''
import torch


def rms_norm(x, weight, eps):
    """The toy kernel: rms_norm computed in fp32{tweak}."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps){scale}
    return (y * weight.float() if weight is not None else y).to(x.dtype)
'''

PLUGIN = '''
from popcorn.core import Backend, declare_backend
from popcorn.kernels import rms_norm

declare_backend(Backend("toy", None, compiles=False))  # a torch-only family: always installed
rms_norm.register("toy", source="toy_rms:rms_norm")  # the registration line
'''


def run_conformance(tmp_path, scale: str) -> subprocess.CompletedProcess:
    (tmp_path / "toy_rms.py").write_text(ADAPTER.format(tweak=" (off by 1%)" if scale else "", scale=scale))
    (tmp_path / "toy_plugin.py").write_text(textwrap.dedent(PLUGIN))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "toy_plugin", "-p", "no:cacheprovider",
                           "tests/kernels/test_conformance.py", "-k", "rms_norm-toy"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_new_backend_is_validated_by_the_unedited_conformance_test(tmp_path):
    done = run_conformance(tmp_path, scale="")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.slow
def test_the_conformance_test_fails_a_wrong_new_backend(tmp_path):
    done = run_conformance(tmp_path, scale=" * 1.01")
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rms_norm:toy" in done.stdout
