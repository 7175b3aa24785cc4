"""FC-MAS request scheduling: a ready queue and an SSD-preparing queue (and the FCFS ablation).

:class:`TwoQueueScheduler` (FlatCake):

* A request whose history KV is all in GPU or host memory (``ssd_bytes == 0``) enters the
  **ready** queue at once.
* Any other request enters the **SSD-preparing** queue. Its history is prefetched straight
  into the GPU staging window; the window holds ``prefetch_slots`` restores at once (two
  layer buffers per stream, one stream per restore). Among waiting requests the next
  prefetch goes to the highest ``priority = 1 + wait_time_s / (ssd_bytes / size_unit_bytes)``
  (waiting time since the request's original arrival over the KV to read, in GB by default:
  a 1 GB and a 4 GB request that have both waited 2 s get 3 and 1.5), ties to the earlier
  arrival. The large request's priority keeps rising, so it is never starved.
* A full window makes a prefetch **wait**; nothing is ever cancelled.
* A finished prefetch re-enters the ready queue **by original arrival time**, not at its
  tail: time spent preparing counts as time in line.
* The ready queue releases the earliest arrival first.

:class:`FcfsScheduler` is the paper's one-queue ablation: prefetches start in arrival order
(window permitting), and the ready queue releases strictly in arrival order, so a request
whose KV is in memory waits behind an earlier one still reading from SSD.

Both take the caller's clock (seconds) in every call; no threads, no wall clock.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from typing import Protocol

from .errors import InputError

#: The paper's priority example measures KV in GB.
DEFAULT_SIZE_UNIT_BYTES = 1e9


class Scheduler(Protocol):
    """What an engine (or the simulator) drives; every method takes the current time."""

    def submit(self, request: Hashable, arrival_s: float, ssd_bytes: int, now_s: float) -> None:
        """A request arrived (``arrival_s``) needing ``ssd_bytes`` from SSD (0: none)."""

    def start_prefetches(self, now_s: float) -> list[Hashable]:
        """The requests whose SSD prefetch starts now (the window permitting)."""

    def prefetch_done(self, request: Hashable, now_s: float) -> None:
        """``request``'s prefetch finished: its window slot is free, it is ready."""

    def pop_ready(self, now_s: float) -> Hashable | None:
        """The next request to prefill, or ``None``."""


def _check_slots(prefetch_slots: int) -> int:
    if (
        not isinstance(prefetch_slots, int)
        or isinstance(prefetch_slots, bool)
        or (prefetch_slots < 1)
    ):
        raise InputError(
            f"prefetch_slots: must be an integer >= 1; got {prefetch_slots!r}",
            parameter="prefetch_slots",
        )
    return prefetch_slots


def _check_bytes(ssd_bytes: int) -> None:
    if ssd_bytes < 0:
        raise InputError(f"ssd_bytes: must be >= 0; got {ssd_bytes!r}", parameter="ssd_bytes")


class TwoQueueScheduler:
    """FlatCake's ready + SSD-preparing queues (module docstring)."""

    def __init__(
        self, prefetch_slots: int, *, size_unit_bytes: float = DEFAULT_SIZE_UNIT_BYTES
    ) -> None:
        self.prefetch_slots = _check_slots(prefetch_slots)
        if not size_unit_bytes > 0:
            raise InputError(
                f"size_unit_bytes: must be > 0; got {size_unit_bytes!r}",
                parameter="size_unit_bytes",
            )
        self.size_unit_bytes = float(size_unit_bytes)
        self._seq = 0
        self._ready: list[tuple[float, int, Hashable]] = []
        # request -> (arrival_s, seq, ssd_bytes)
        self._preparing: dict[Hashable, tuple[float, int, int]] = {}
        self._in_flight: dict[Hashable, tuple[float, int]] = {}

    @property
    def preparing(self) -> int:
        """Requests waiting for a prefetch to start."""
        return len(self._preparing)

    @property
    def in_flight(self) -> int:
        """Prefetches running (window slots taken)."""
        return len(self._in_flight)

    def priority(self, request: Hashable, now_s: float) -> float:
        """``1 + wait_time_s / (ssd_bytes / size_unit_bytes)`` of a waiting request."""
        arrival, _, nbytes = self._preparing[request]
        return 1.0 + (now_s - arrival) / (nbytes / self.size_unit_bytes)

    def submit(self, request: Hashable, arrival_s: float, ssd_bytes: int, now_s: float) -> None:
        _check_bytes(ssd_bytes)
        self._seq += 1
        if ssd_bytes == 0:
            heapq.heappush(self._ready, (arrival_s, self._seq, request))
        else:
            self._preparing[request] = (arrival_s, self._seq, ssd_bytes)

    def start_prefetches(self, now_s: float) -> list[Hashable]:
        started: list[Hashable] = []
        while self._preparing and len(self._in_flight) < self.prefetch_slots:
            best = max(
                self._preparing,
                key=lambda r: (
                    self.priority(r, now_s),
                    -self._preparing[r][0],
                    -self._preparing[r][1],
                ),
            )
            arrival, seq, _ = self._preparing.pop(best)
            self._in_flight[best] = (arrival, seq)
            started.append(best)
        return started

    def prefetch_done(self, request: Hashable, now_s: float) -> None:
        try:
            arrival, seq = self._in_flight.pop(request)
        except KeyError:
            raise InputError(
                f"request: no prefetch in flight for it; got {request!r}", parameter="request"
            ) from None
        heapq.heappush(self._ready, (arrival, seq, request))

    def pop_ready(self, now_s: float) -> Hashable | None:
        if not self._ready:
            return None
        return heapq.heappop(self._ready)[2]


class FcfsScheduler:
    """One first-come first-served queue (the ablation ``flat-fcfs`` runs)."""

    def __init__(self, prefetch_slots: int) -> None:
        self.prefetch_slots = _check_slots(prefetch_slots)
        self._queue: deque[Hashable] = deque()  # arrival order
        self._ready: set[Hashable] = set()
        self._waiting: deque[Hashable] = deque()  # need SSD, prefetch not started
        self._in_flight: set[Hashable] = set()

    @property
    def preparing(self) -> int:
        return len(self._waiting)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def submit(self, request: Hashable, arrival_s: float, ssd_bytes: int, now_s: float) -> None:
        # Requests are submitted in arrival order; the queue keeps that order.
        _check_bytes(ssd_bytes)
        self._queue.append(request)
        if ssd_bytes == 0:
            self._ready.add(request)
        else:
            self._waiting.append(request)

    def start_prefetches(self, now_s: float) -> list[Hashable]:
        started: list[Hashable] = []
        while self._waiting and len(self._in_flight) < self.prefetch_slots:
            r = self._waiting.popleft()
            self._in_flight.add(r)
            started.append(r)
        return started

    def prefetch_done(self, request: Hashable, now_s: float) -> None:
        if request not in self._in_flight:
            raise InputError(
                f"request: no prefetch in flight for it; got {request!r}", parameter="request"
            )
        self._in_flight.remove(request)
        self._ready.add(request)

    def pop_ready(self, now_s: float) -> Hashable | None:
        if self._queue and self._queue[0] in self._ready:
            r = self._queue.popleft()
            self._ready.remove(r)
            return r
        return None
