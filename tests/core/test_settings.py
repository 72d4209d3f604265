import pytest

from popcorn.core.paths import cache_dir
from popcorn.core.settings import settings


def test_variables_set_after_import_take_effect(monkeypatch, tmp_path):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("POPCORN_BENCH", "1")
    monkeypatch.setenv("POPCORN_STORE", str(tmp_path / "store"))
    s = settings()
    assert s.bench and s.store == str(tmp_path / "store") and cache_dir().is_relative_to(tmp_path / "a")
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.delenv("POPCORN_BENCH")
    assert cache_dir().is_relative_to(tmp_path / "b") and not settings().bench


def test_defaults_follow_xdg(monkeypatch, tmp_path):
    for name in ("POPCORN_CACHE_DIR", "POPCORN_STORE", "POPCORN_REPORT", "POPCORN_BENCH_TARGET_MS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    s = settings()
    assert s.cache_root == tmp_path / "cache" / "popcorn"
    assert s.store == str(tmp_path / "data" / "popcorn" / "store")
    assert s.report_dir is None and s.bench_target_ms == 100


def test_a_bad_number_names_the_variable(monkeypatch):
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "fast")
    with pytest.raises(ValueError, match="POPCORN_BENCH_TARGET_MS='fast'"):
        settings()


def test_shared_holds_is_a_positive_whole_number_or_no_limit(monkeypatch):
    from popcorn.core.settings import shared_holds

    monkeypatch.delenv("POPCORN_SHARED_HOLDS", raising=False)
    assert shared_holds() is None
    monkeypatch.setenv("POPCORN_SHARED_HOLDS", "3")
    assert shared_holds() == 3
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("POPCORN_SHARED_HOLDS", bad)
        with pytest.raises(ValueError, match=f"POPCORN_SHARED_HOLDS='{bad}' is not a positive whole number"):
            shared_holds()


def test_reprimes_is_a_whole_number_or_the_default(monkeypatch):
    from popcorn.core.settings import reprimes

    monkeypatch.delenv("POPCORN_REPRIMES", raising=False)
    assert reprimes(3) == 3
    monkeypatch.setenv("POPCORN_REPRIMES", "0")
    assert reprimes(3) == 0
    for bad in ("-1", "two", "1.5"):
        monkeypatch.setenv("POPCORN_REPRIMES", bad)
        with pytest.raises(ValueError, match=f"POPCORN_REPRIMES='{bad}' is not a whole number"):
            reprimes(3)


def test_device_state_is_one_of_three_or_primed(monkeypatch):
    from popcorn.core.settings import device_state

    monkeypatch.delenv("POPCORN_DEVICE_STATE", raising=False)
    assert device_state() == "primed"
    for ok in ("primed", "unprimed", "off"):
        monkeypatch.setenv("POPCORN_DEVICE_STATE", ok)
        assert device_state() == ok
    monkeypatch.setenv("POPCORN_DEVICE_STATE", "fast")
    with pytest.raises(ValueError, match="POPCORN_DEVICE_STATE='fast' is not one of primed, unprimed, off"):
        device_state()
