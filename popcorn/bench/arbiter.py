"""The supervisor's side of the device lanes (:mod:`popcorn.bench.lane`) and of device memory.

:class:`Arbiter` grants holds to the workers of a parallel fill, one slot per worker: any number
of shared holds (correctness trials) at once, or one exclusive hold (timing) with nothing else on
the device. The lanes are phase-fair: a waiting exclusive hold stops new shared ones, so timing
never starves behind a stream of trials, and a shared hold waits for the exclusive holds asked before
it, then goes before those asked after it. The timings queued together thus run back to back: each
waits for the device to drain of trials once per batch, not once per timing (run 10: with a drain per
timing, the lane cycled at about 0.6 s per pair). Holds belong to a slot, so a worker that dies or is killed mid-hold frees them
(:meth:`Arbiter.drop`). The arbiter also hands out device memory by reservation: a case group
reserves its correctness footprint before its worker starts, so parallel cases never run a device
out of memory that one case alone would fit in; with a ``ledger``, the reservations of other fills
on the device count too. It keeps the seconds the exclusive lane was held (the fill's GPU busy time) and
the seconds the lanes spent in each state (:meth:`Arbiter.occupancy`): exclusive, shared, handing over
(nothing held while holds wait: a drain's tail) or free (nothing asked).
"""

from __future__ import annotations

import os
import threading
import time

from .lane import EXCLUSIVE, SHARED


class Closed(RuntimeError):
    """The fill is stopping: no lane or memory is granted any more."""


LANE_STATES = ("exclusive", "shared", "handover", "free")


class Arbiter:
    def __init__(self, memory_bytes: int | None = None, ledger=None, shared_cap: int | None = None):
        self._cv = threading.Condition()
        self.shared_cap = shared_cap  # the most shared holds at once (None: any number)
        self.closed = False
        self._shared: dict[int, int] = {}  # slot -> shared holds
        self._exclusive: int | None = None  # the slot holding the exclusive lane
        self._exclusive_waiting = 0
        self._tickets = 0  # exclusive holds asked for so far
        self._handovers = 0  # exclusive holds ended so far
        self._shared_waiting: list[int] = []  # per shared request waiting, the exclusive holds asked before it
        self._since = 0.0
        self.busy_s = 0.0  # seconds the exclusive lane was held
        self._marked = time.monotonic()
        self._states = dict.fromkeys(LANE_STATES, 0.0)  # lane state -> seconds
        self._shared_s = 0.0  # seconds x shared holds: their mean number at once
        self.memory = memory_bytes  # None: memory is not arbitrated (CPU)
        self.ledger = ledger  # the device's reservations across processes (device_lane.DeviceMemory), if shared
        self._reserved: dict[int, int] = {}  # slot -> bytes
        self._beyond: dict[int, int] = {}  # slot -> bytes its idle worker holds beyond the allowance for it
        self._queue: list = []  # reservations waiting, in the order asked

    # -- lanes -----------------------------------------------------------------------------------
    def acquire(self, slot: int, kind: str) -> None:
        with self._cv:
            if kind == SHARED:
                asked = self._tickets
                self._mark()
                self._shared_waiting.append(asked)
                try:
                    self._cv.wait_for(lambda: self.closed or self._exclusive is None
                                      and (not self._exclusive_waiting or self._handovers >= asked)
                                      and (self.shared_cap is None or sum(self._shared.values()) < self.shared_cap))
                finally:
                    self._mark()
                    self._shared_waiting.remove(asked)
                self._check_open()
                self._shared[slot] = self._shared.get(slot, 0) + 1
            elif kind == EXCLUSIVE:
                self._mark()
                self._tickets += 1
                self._exclusive_waiting += 1
                try:  # shared requests whose earlier exclusive holds have all ended go first
                    self._cv.wait_for(lambda: self.closed or self._exclusive is None
                                      and not any(n for s, n in self._shared.items() if s != slot)
                                      and not any(a <= self._handovers for a in self._shared_waiting))
                finally:
                    self._mark()
                    self._exclusive_waiting -= 1
                self._check_open()
                self._exclusive, self._since = slot, time.monotonic()
            else:
                raise ValueError(f"unknown lane {kind!r}")

    def started(self, slot: int) -> None:
        """The slot's exclusive hold has the device across processes too: busy time counts from now."""
        with self._cv:
            if self._exclusive == slot:
                self._since = time.monotonic()

    def release(self, slot: int) -> None:
        """Release the slot's most recent hold (exclusive first: a worker times with no trial open)."""
        with self._cv:
            self._mark()
            if self._exclusive == slot:
                self._end_exclusive()
            elif self._shared.get(slot):
                self._shared[slot] -= 1
            self._cv.notify_all()

    def close(self) -> None:
        """Refuse every hold and reservation from now on, waking those who wait (they raise Closed)."""
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def _check_open(self) -> None:
        if self.closed:
            raise Closed("the fill is stopping")

    def _mark(self) -> None:
        """Add the seconds since the last change to the lanes' state until now (call it, holding the lock,
        before each change)."""
        now = time.monotonic()
        spent, self._marked = now - self._marked, now
        holds = sum(self._shared.values())
        state = ("exclusive" if self._exclusive is not None else "shared" if holds
                 else "handover" if self._exclusive_waiting or self._shared_waiting else "free")
        self._states[state] += spent
        if state == "shared":
            self._shared_s += holds * spent

    def occupancy(self) -> dict:
        """Seconds the lanes spent in each of LANE_STATES so far (``handover``: nothing held while a hold
        waits) and ``mean_shared``, the mean number of shared holds while any was held."""
        with self._cv:
            self._mark()
            shared = self._states["shared"]
            return {**self._states, "mean_shared": self._shared_s / shared if shared else 0.0}

    def _end_exclusive(self) -> None:
        self.busy_s += time.monotonic() - self._since
        self._exclusive = None
        self._handovers += 1

    # -- memory ----------------------------------------------------------------------------------
    def reserve(self, slot: int, nbytes: int, solo: bool = False) -> None:
        """Reserve ``nbytes`` of device memory for the slot's case (``solo``: the whole device, e.g. to
        retry an OOM that other cases may have caused); blocks until it is free. Reservations are
        granted in the order asked, so a large case is never overtaken by a stream of small ones."""
        if self.memory is None:
            return
        # A re-reservation (an OOM retried alone) gives up the slot's memory while it waits, here and in the
        # device's ledger: kept, it would deadlock against a case queued ahead that needs that memory (in
        # the ledger, another slot of this fill granted the whole device here first, and every fill behind it)
        if self.ledger is not None:
            self.ledger.release(self._name(slot))
        with self._cv:
            if self._reserved.pop(slot, None):
                self._cv.notify_all()
            ticket = object()
            self._queue.append(ticket)
            try:
                self._cv.wait_for(lambda: self.closed or self._queue[0] is ticket
                                  and self._taken(slot) + self._want(nbytes, solo) <= self._capacity())
            finally:
                self._queue.remove(ticket)
                self._cv.notify_all()
            self._check_open()
            want = self._reserved[slot] = self._want(nbytes, solo)
        if self.ledger is not None and not self.ledger.reserve(self._name(slot), want, self.memory,
                                                               closed=lambda: self.closed):
            self.unreserve(slot)
            raise Closed("the fill is stopping")

    def _capacity(self) -> int:
        """What the fill's cases may reserve now: its memory less what idle workers hold beyond their allowance."""
        return max(0, self.memory - sum(self._beyond.values()))

    def _taken(self, slot: int) -> int:
        return sum(b for s, b in self._reserved.items() if s != slot)

    def _want(self, nbytes: int, solo: bool) -> int:
        """A case larger than the capacity gets all of it once nothing else is reserved: should it run out
        there, the runner retries it alone, every other worker stopped."""
        return self._capacity() if solo else min(nbytes, self._capacity())

    def beyond(self, slot: int, nbytes: int) -> None:
        """The slot's worker, idle, holds ``nbytes`` of device memory beyond what the fill allowed each
        worker (0: within it, or the worker stopped): cases may reserve that much less until it says
        otherwise."""
        with self._cv:
            if nbytes > 0:
                self._beyond[slot] = nbytes
            else:
                self._beyond.pop(slot, None)
            self._cv.notify_all()

    def unreserve(self, slot: int) -> None:
        if self.ledger is not None:
            self.ledger.release(self._name(slot))
        with self._cv:
            self._reserved.pop(slot, None)
            self._cv.notify_all()

    @staticmethod
    def _name(slot: int) -> str:
        return f"{os.getpid()}-{slot}"

    def free(self) -> int:
        """Bytes a reservation asked now would get at once (none while one waits), the device's ledger
        counted; a fill picks the cases it takes next by it (:func:`popcorn.bench.runner.first_fit`)."""
        if self.memory is None:
            return 0
        with self._cv:
            if self._queue:
                return 0
            free = self._capacity() - sum(self._reserved.values())
        return max(0, min(free, self.ledger.free(self.memory))) if self.ledger is not None else max(0, free)

    def others_reserved(self, slot: int) -> bool:
        """Whether other cases hold device memory: this fill's, or other fills' on the device."""
        with self._cv:
            if any(b for s, b in self._reserved.items() if s != slot):
                return True
        return self.ledger is not None and any(b for k, b in self.ledger.held().items() if k != self._name(slot))

    def describe(self) -> str:
        """The lanes and memory now, in words (a stalled fill's report)."""
        gib = 2**30
        with self._cv:
            lanes = (f"exclusive lane: slot {self._exclusive}" if self._exclusive is not None else "exclusive lane: free")
            shared = sorted(s for s, n in self._shared.items() if n)
            text = (f"{lanes}, {self._exclusive_waiting} waiting; shared holds: slots {shared or 'none'}, "
                    f"{len(self._shared_waiting)} waiting")
            if self.memory is not None:
                held = ", ".join(f"slot {s} {b / gib:.2f}" for s, b in sorted(self._reserved.items()))
                text += (f"; memory reserved (GiB) of {self.memory / gib:.1f}: {held or 'none'}, "
                         f"{len(self._queue)} reservations queued")
        if self.ledger is not None:
            others = {k: round(b / gib, 2) for k, b in self.ledger.held().items() if not k.startswith(f"{os.getpid()}-")}
            text += f"; other fills on the device hold (GiB): {others or 'nothing'}"
        return text

    # -- a worker gone ---------------------------------------------------------------------------
    def drop(self, slot: int) -> None:
        """Free every lane the slot's worker held (it died or was killed); its memory stays reserved
        until the slot unreserves, as the case is still its own."""
        with self._cv:
            self._mark()
            if self._exclusive == slot:
                self._end_exclusive()
            self._shared.pop(slot, None)
            self._cv.notify_all()

    def busy(self) -> float:
        """Seconds the exclusive lane has been held so far, including a hold in progress."""
        with self._cv:
            return self.busy_s + (time.monotonic() - self._since if self._exclusive is not None else 0.0)
