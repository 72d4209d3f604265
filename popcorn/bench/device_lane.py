"""The device's lanes and memory across processes: several fills on one GPU (sweep partitions side by
side, two users) keep timing alone on the device and within its memory, as one fill's arbiter does
for its own workers (:class:`DeviceLane`, :class:`DeviceMemory`).

Two flock(2) locks per device in the lane directory (POPCORN_LANE_DIR): ``<key>.lane``, held shared
around each correctness trial and exclusive around timing, and ``<key>.gate``, which an exclusive
hold takes first and keeps, so that no new shared hold of any process starts while timing waits or
runs (a stream of trials from other fills cannot starve it). Locks belong to the process: one that
dies, however, holds nothing. The key is the device's UUID, so two fills that see one GPU under
different CUDA_VISIBLE_DEVICES numbering still share its lanes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from popcorn.core.settings import settings

from .lane import EXCLUSIVE, SHARED


def lane_dir(device: torch.device) -> Path | None:
    """Where the device's locks live: POPCORN_LANE_DIR, else ``<tmp>/popcorn-lanes`` on CUDA; None (no
    cross-process lanes) on CPU unless POPCORN_LANE_DIR is set, or when it is ``off``."""
    raw = settings().lane_dir
    if raw == "off":
        return None
    if raw:
        return Path(raw)
    return Path(tempfile.gettempdir()) / "popcorn-lanes" if device.type == "cuda" else None


def device_key(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    try:
        return "cuda-" + str(torch.cuda.get_device_properties(device).uuid)
    except Exception:  # noqa: BLE001 - a build without the uuid: this process's numbering
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        index = device.index or 0
        return f"cuda-{visible[index] if index < len(visible) and visible[index] else index}"


def _shared_dir(directory: Path) -> Path:
    """``directory``, made if missing as a shared one (sticky and world-writable, like /tmp): fills of
    several users on one machine share a device."""
    if not directory.exists():
        directory.mkdir(parents=True, exist_ok=True)
        try:
            directory.chmod(0o1777)
        except OSError:
            pass  # made by another user meanwhile, or a file system without modes
    return directory


def _open_shared(path: Path, write: bool = False):
    """``path`` opened for flock, made readable and writable by every user when this process creates it.
    A lock needs no write access, so a lock file another user made opens read-only; the memory ledger
    does need it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        if os.fstat(fd).st_mode & 0o666 != 0o666:
            try:
                os.fchmod(fd, 0o666)  # the umask kept other users out
            except OSError:
                pass  # another user's file, writable by us already
        return os.fdopen(fd, "r+")
    except PermissionError:
        if write:
            raise PermissionError(f"{path} is not writable by this user: fills that share a device need a "
                                  "lane directory they can all write; set POPCORN_LANE_DIR to one") from None
        return open(path)  # noqa: SIM115


class DeviceLane:
    """One process's side of a device's lanes: :meth:`take` a lane, :meth:`release` it."""

    def __init__(self, directory: Path, key: str):
        directory = _shared_dir(directory)
        self.key = key
        self._lane = _open_shared(directory / f"{key}.lane")  # held for the process's life
        self._gate = _open_shared(directory / f"{key}.gate")
        self.held: str | None = None

    def take(self, kind: str) -> None:
        """Block until the device's ``kind`` lane is this process's."""
        if self.held is not None:
            raise RuntimeError(f"the device lane is already held ({self.held}); holds do not nest")
        if kind == SHARED:
            fcntl.flock(self._gate, fcntl.LOCK_SH)  # waits while any process times or waits to
            try:
                fcntl.flock(self._lane, fcntl.LOCK_SH)
            finally:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
        elif kind == EXCLUSIVE:
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(self._lane, fcntl.LOCK_EX)
            except BaseException:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
                raise
        else:
            raise ValueError(f"unknown lane {kind!r}")
        self.held = kind

    def release(self) -> None:
        if self.held is None:
            return
        fcntl.flock(self._lane, fcntl.LOCK_UN)
        if self.held == EXCLUSIVE:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.held = None

    def close(self) -> None:
        self.release()
        self._lane.close()
        self._gate.close()


def for_device(device: torch.device) -> DeviceLane | None:
    """The process's lane on ``device``, or None where lanes are not shared across processes."""
    directory = lane_dir(device)
    return None if directory is None else DeviceLane(directory, device_key(device))


class DeviceMemory:
    """The device memory that fills on one device have reserved, in the ledger ``<key>.mem`` (JSON under
    flock): what each reservation holds and, in the order asked, who waits. A reservation is granted
    when it is the oldest waiting and fits beside every other process's, so fills that share a GPU
    never run it out of memory that one case alone fits in (an OOM row would then be false evidence),
    and a large case is never overtaken. Entries of processes that died are dropped."""

    POLL_S = 0.05

    def __init__(self, directory: Path, key: str):
        self.path = _shared_dir(directory) / f"{key}.mem"

    def reserve(self, name: str, nbytes: int, capacity: int, closed=lambda: False) -> bool:
        """Block until ``nbytes`` (at most ``capacity`` in all) are ``name``'s; False when ``closed()``
        turned true first (the fill is stopping: nothing reserved)."""
        with self._ledger() as book:
            book["held"].pop(name, None)  # a re-reservation waits holding nothing (see Arbiter.reserve)
            book["waiting"].append(name)
        while True:
            with self._ledger() as book:
                first = book["waiting"][0] if book["waiting"] else None
                others = sum(book["held"].values())
                if first == name and others + nbytes <= capacity:
                    book["waiting"].pop(0)
                    book["held"][name] = nbytes
                    return True
                if closed():
                    book["waiting"].remove(name)
                    return False
            time.sleep(self.POLL_S)

    def release(self, name: str) -> None:
        with self._ledger() as book:
            book["held"].pop(name, None)
            book["waiting"] = [w for w in book["waiting"] if w != name]

    def held(self) -> dict[str, int]:
        with self._ledger() as book:
            return dict(book["held"])

    def free(self, capacity: int) -> int:
        """Bytes of ``capacity`` a reservation asked now would get at once: none while others wait."""
        with self._ledger() as book:
            return 0 if book["waiting"] else max(0, capacity - sum(book["held"].values()))

    @contextlib.contextmanager
    def _ledger(self):
        with _open_shared(self.path, write=True) as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read()
            book = json.loads(text) if text.strip() else {"held": {}, "waiting": []}
            before = json.dumps(book, sort_keys=True)
            book["held"] = {k: v for k, v in book["held"].items() if _alive(k)}
            book["waiting"] = [w for w in book["waiting"] if isinstance(w, str) and _alive(w)]
            yield book
            if json.dumps(book, sort_keys=True) != before:
                f.seek(0)
                f.truncate()
                f.write(json.dumps(book))
                f.flush()


def _alive(name: str) -> bool:
    """Whether the process of reservation ``name`` ("<pid>-<slot>") still runs."""
    try:
        os.kill(int(name.split("-")[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def memory_for(device: torch.device) -> DeviceMemory | None:
    """The device's memory ledger, where fills share the device's lanes (:func:`lane_dir`)."""
    directory = lane_dir(device)
    return None if directory is None else DeviceMemory(directory, device_key(device))
