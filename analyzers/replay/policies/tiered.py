"""``tiered`` (Mooncake-like): host memory in front of SSD buckets, SSD hits staged through host.

* Writes: every new block enters the host LRU at prefill end (the node's pool, or with
  ``host_scope`` "worker" its worker's); a pool evicts (tail before head:
  ``eviction_order(touch="tail-first")``) to the node's one SSD in eviction order into
  fixed-size buckets, recycled first-in first-out at the SSD's high watermark: the store
  appends each eviction to :class:`fcctl.analyzers.kvmodel.tiered.BucketRing`, the bucket
  model iobench's eviction layout is built with. A block already on SSD (evicted from
  another worker's pool) is not written again.
* Reads: host hits are copied to the GPU at prefill start. SSD hits are a prefetch: it needs
  host staging space (``min(its bytes, staging_bytes)``, first come first served), reads one
  command per block and layer per rank (the eviction layout, as ``iobench`` reads it) on the
  shared SSD link, and holds its staging space until the request's prefill starts (the copy
  to the GPU happens then).
* Staging: the buffer is ``staging_bytes`` per node (8 GiB per worker: LMCache's suggested
  ``gds_buffer_size``), taken from the read's start and held until the request's prefill
  starts. A staging buffer of at least the peak concurrent restore bytes (the peak staging
  occupancy with unbounded staging) never makes a prefetch wait: the run is the unbounded one
  and no prefetch is cancelled for staging (``details.cancelled_waiting_for_staging``).
* Timeout: ``prefetch_timeout_s(tokens)`` after arrival (SGLang HiCache's rule) a prefetch
  still waiting for staging or still reading is cancelled and the prefix from its first SSD
  block on is recomputed (``--cancel discard``, the default: HiCache's ``terminate_prefetch``
  releases what was read); with ``--cancel credit`` the blocks already read (in prefix order, in
  proportion to the read's progress) are delivered. Either way the bytes read count in
  ``ssd_read_bytes``, so discarded reads raise ``read_amplification``.
* Writes: a block evicted from host memory that is not on SSD is written to SSD at that moment
  (``ssd_write_bytes``), a transfer on the same drives as the reads.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from typing import Any

import numpy as np

from ..engine import ArrivalQueue, Simulation
from ..store import CODE_GPU, CODE_HOST, CODE_SSD

NAME = "tiered"


class _Prefetch:
    __slots__ = ("bytes", "codes", "n_ssd", "reserve", "started", "work_s")

    def __init__(self, n_ssd: int, nbytes: int, work_s: float, reserve: int, codes: np.ndarray):
        self.n_ssd = n_ssd
        self.bytes = nbytes
        self.work_s = work_s
        self.reserve = reserve
        self.codes = codes
        self.started = False


class Tiered:
    name = NAME
    reads_into_gpu = False  # SSD reads land in host staging; the copy to the GPU is separate

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.staging_bytes: int | None = sim.hw.staging_bytes
        # --cancel credit: a cancelled prefetch still delivers the blocks it had read.
        self.credit_cancelled = sim.spec.cancel == "credit"
        self.ready = ArrivalQueue(sim.workers)
        self.staging_free = sim.hw.staging_bytes
        self.waiting: deque[int] = deque()
        self.pending: dict[int, _Prefetch] = {}
        self.held: dict[int, int] = {}  # request -> staging bytes held until prefill start
        self.cancelled = 0
        # Why: still waiting for staging space at the timeout, or still reading.
        self.cancelled_waiting = 0
        self.layer_commands = sim.w.geometry.layers * sim.stored_ranks

    def on_arrival(self, r: int, now: float) -> None:
        sim = self.sim
        w = sim.worker_of[r]
        p, n_g, n_h, n_s = sim.store.lookup_lru(sim.blocks[r], w, True)
        log = sim.log
        log.delivered_blocks[r] = p
        log.gpu_blocks[r] = n_g
        log.host_blocks[r] = n_h
        log.ssd_blocks[r] = n_s
        log.copy_blocks[r] = n_h + n_s
        if n_s == 0:
            self._ready(r, now)
            return
        nbytes = n_s * sim.block_bytes
        commands = n_s * self.layer_commands
        log.ssd_read_commands[r] = commands
        pf = _Prefetch(
            n_s,
            nbytes,
            sim.ssd_work_s(nbytes, commands),
            min(nbytes, sim.hw.staging_bytes),
            sim.store.prefix_codes(p).copy(),
        )
        self.pending[r] = pf
        self.waiting.append(r)
        timeout = sim.hw.prefetch_timeout_s(n_s * sim.w.block_tokens)
        sim.events.push(now + timeout, self._timeout, r)
        self._start_waiting(now)

    def _start_waiting(self, now: float) -> None:
        while self.waiting:
            r = self.waiting[0]
            pf = self.pending[r]
            if pf.reserve > self.staging_free:
                return
            self.waiting.popleft()
            self._take_staging(-pf.reserve, now)
            pf.started = True
            self.sim.read_started(r, now)
            self.sim.ssd_link.add(r, pf.work_s, now, functools.partial(self._read_done, r))

    def _read_done(self, r: int, now: float) -> None:
        pf = self.pending.pop(r)
        log = self.sim.log
        log.ssd_read_bytes[r] = pf.bytes
        log.prefetch_s[r] = now - log.arrival_s[r]
        self.held[r] = pf.reserve
        self._ready(r, now)

    def _timeout(self, now: float, r: Any) -> None:
        pf = self.pending.pop(r, None)
        if pf is None:
            return  # finished in time
        sim = self.sim
        log = sim.log
        done_fraction = 0.0
        if pf.started:
            left = sim.ssd_link.cancel(r, now)
            done_fraction = 1.0 - left / pf.work_s if pf.work_s > 0 else 1.0
            self._take_staging(pf.reserve, now)
        else:
            self.waiting.remove(r)
            self.cancelled_waiting += 1
        read_blocks = min(pf.n_ssd, math.floor(done_fraction * pf.n_ssd + 1e-9))
        log.ssd_read_bytes[r] = round(done_fraction * pf.bytes)
        if not self.credit_cancelled:
            read_blocks = 0  # 'discard': what the cancelled read brought in is thrown away
        log.prefetch_s[r] = now - log.arrival_s[r]
        log.cancelled[r] = True
        self.cancelled += 1
        # The prefix now ends at the first SSD block not read.
        ssd_pos = np.flatnonzero(pf.codes == CODE_SSD)
        end = int(ssd_pos[read_blocks]) if read_blocks < pf.n_ssd else pf.codes.shape[0]
        head = pf.codes[:end]
        log.delivered_blocks[r] = end
        log.gpu_blocks[r] = int(np.count_nonzero(head == CODE_GPU))
        log.host_blocks[r] = int(np.count_nonzero(head == CODE_HOST))
        log.ssd_blocks[r] = read_blocks
        log.copy_blocks[r] = log.host_blocks[r] + read_blocks
        self._ready(r, now)
        self._start_waiting(now)

    def _ready(self, r: int, now: float) -> None:
        self.ready.push(self.sim.worker_of[r], self.sim.log.arrival_s[r], r)
        self.sim.make_ready(r, now)

    def pop_ready(self, w: int, now: float) -> int | None:
        return self.ready.pop(w)

    def on_prefill_start(self, r: int, now: float) -> None:
        held = self.held.pop(r, 0)
        if held:
            self._take_staging(held, now)
            self._start_waiting(now)

    def _take_staging(self, freed: int, now: float) -> None:
        """Staging bytes come back (``freed`` > 0) or are taken (< 0); the meter follows."""
        self.staging_free += freed
        self.sim.staging.set(now, self.sim.hw.staging_bytes - self.staging_free)

    def on_prefill_done(self, r: int, now: float) -> None:
        store = self.sim.store
        written = store.ssd_written_blocks
        store.host_insert(self.sim.blocks[r], True, self.sim.worker_of[r])
        # Host evictions of blocks not yet on SSD are written to it now, on the read drives.
        self.sim.ssd_write((store.ssd_written_blocks - written) * self.sim.block_bytes, now)

    def on_decode_done(self, r: int, now: float) -> None:
        pass

    def peaks(self) -> dict[str, int]:
        bb = self.sim.block_bytes
        return {
            "peak_host_memory_bytes": self.sim.store.h_peak * bb,
            "peak_staging_bytes": self.sim.staging.peak,
            "peak_ssd_bytes": self.sim.store.ssd_peak_blocks * bb,
        }

    def extra(self) -> dict[str, Any]:
        return {
            "recycled_blocks": self.sim.store.ssd_recycled_blocks,
            "cancelled_waiting_for_staging": self.cancelled_waiting,
            "cancelled_reading": self.cancelled - self.cancelled_waiting,
        }


def make(sim: Simulation) -> Tiered:
    return Tiered(sim)
