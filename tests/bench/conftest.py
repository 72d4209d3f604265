"""Fixtures shared by the fill tests."""

import multiprocessing as mp
import threading
import time

import pytest

from popcorn.bench import lane


@pytest.fixture
def toy_cache(tmp_path, monkeypatch):
    """A user cache under tmp_path/cache and a 2 ms timing target: timing precision is not under test."""
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")
    return tmp_path


class Supervisor:
    """A fill supervisor's side of a worker's lane pipe, answering every shared request at once: what the
    worker asked is in ``asked``; :meth:`settled` waits for the releases still in the pipe."""

    def __init__(self):
        self.worker_end, self._end = mp.Pipe()
        self.asked: list = []
        self._thread = threading.Thread(target=self._answer, daemon=True)
        self._thread.start()

    def _answer(self):
        while True:
            try:
                message = self._end.recv()
            except (EOFError, OSError):
                return
            self.asked.append(message)
            if message[1] == lane.SHARED:
                self._end.send("go")

    def settled(self, count: int) -> list:
        for _ in range(100):
            if len(self.asked) >= count:
                break
            time.sleep(0.05)
        return self.asked

    def close(self):
        self.worker_end.close()  # the answering thread reads EOF and ends, before its end of the pipe closes
        self._thread.join(5)
        self._end.close()


@pytest.fixture
def lane_supervisor():
    """This process as a fill's worker whose lane requests a :class:`Supervisor` answers."""
    supervisor = Supervisor()
    lane.connect(supervisor.worker_end)
    try:
        yield supervisor
    finally:
        lane.connect(None)
        supervisor.close()
