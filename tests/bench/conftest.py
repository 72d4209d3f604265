"""Fixtures shared by the fill tests."""

import pytest


@pytest.fixture
def toy_cache(tmp_path, monkeypatch):
    """A user cache under tmp_path/cache and a 2 ms timing target: timing precision is not under test."""
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")
    return tmp_path
