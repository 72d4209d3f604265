"""Shared by the sweep's tests. They need Dagster: each module skips without it, saying so."""

import pytest

NEEDS_DAGSTER = "the sweep needs Dagster: pip install -e '.[orchestration]'"

# A tiny real slice of the plan: attn's sampled coverage-float32-grad case is 35 KiB (seq=2), and sdpa's
# backends run it on CPU without compiling; rms_norm's coverage-float16-grad sample is as small.
CASE = "attn.coverage-float32-grad"
BACKEND = "sdpa"
REFERENCE_ONLY_CASE = "rms_norm.coverage-float16-grad"


@pytest.fixture
def sweep_env(tmp_path, monkeypatch):
    """A store, a work directory and GPU leases of the test's own; fills time briefly."""
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")  # timing precision is not under test here
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_STORE", str(tmp_path / "store"))
    return tmp_path
