"""``flat`` (FlatCake): write-time placement, per-session files, two queues, direct SSD->GPU.

* Writes (at prefill end): the request's blocks stored nowhere are split into a leading run
  whose prefix-tree reference count is > 1 (shared with a request in flight) and the rest;
  each piece is placed by :class:`fcctl.layout.placement.PlacementRule`. A memory piece is
  one memory segment; an SSD piece is appended as one turn segment to the session's FC-CIO
  file (``layout.session_format`` sizes: record + one 4096-aligned range per layer).
* Host memory is the node's one pool, or with ``host_scope`` "worker" one pool per worker
  (``host_memory_bytes / workers``): a request finds and writes memory blocks in its worker's
  pool only, so a block may have a memory home in several pools (and one SSD home: the SSD
  is the node's). "Stored nowhere" means in neither this worker's pool nor on SSD.
* Reclamation: each memory pool and the SSD have a
  :class:`fcctl.layout.reclaim.SessionReclaimer` (whole sessions, least recently active
  first, never one being read).
* Reads: memory blocks are copied to the GPU at prefill start. SSD blocks are one prefetch
  straight into the GPU window, planned per layer by the planner (:mod:`..flatcost`),
  scheduled by :class:`fcctl.layout.scheduler.TwoQueueScheduler` (one per worker, slots =
  window streams); a full window makes it wait, nothing is cancelled.

The *reference count* is the number of requests in flight (arrived, not done decoding,
this one included) whose prompt holds the block: what SGLang's radix tree counts as locks.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from fcctl.layout.placement import Medium, PlacementRule, PlacementSignals
from fcctl.layout.reclaim import SessionReclaimer
from fcctl.layout.scheduler import Scheduler, TwoQueueScheduler
from fcctl.layout.session_format import DATA_START, record_bytes, segment_bytes

from ..engine import Simulation
from ..flatcost import SegmentTable

NAME = "flat"


@njit(cache=True)
def _shared_head(refs: np.ndarray) -> tuple[int, int]:  # pragma: no cover - numba
    """(how many leading blocks have a reference count above 1, the least of those counts;
    0 when there are none). One call instead of four numpy calls on a short array a write."""
    n = 0
    least = 0
    while n < refs.shape[0] and refs[n] > 1:
        if n == 0 or refs[n] < least:
            least = refs[n]
        n += 1
    return n, least


class Flat:
    name = NAME
    reads_into_gpu = True  # SSD -> GPU window directly (GDS): the bytes cross the GPU's link
    #: The windows are sized per read (two layers of the blocks restored), not a fixed pool.
    staging_bytes: int | None = None

    def __init__(self, sim: Simulation, scheduler: Callable[[int], Scheduler]) -> None:
        self.sim = sim
        hw = sim.hw
        g = sim.w.geometry
        self.rule: PlacementRule = sim.spec.placement
        self.layers = g.layers
        self.piece = g.bytes_per_block_per_layer(sim.w.block_tokens)  # one rank
        self.record = record_bytes(g.layers)
        # Per-request facts as Python ints, read once or twice a request.
        self.turn: list[int] = sim.w.turn.tolist()
        self.prev_request: list[int] = sim.w.prev_request.tolist()
        self.session: list[int] = sim.w.session.tolist()
        self.sched = [scheduler(hw.window_streams) for _ in range(sim.workers)]
        # One memory reclaimer per host pool (the node's, or each worker's share).
        self.mems = [
            SessionReclaimer(
                sim.host_pool_bytes,
                high_watermark=hw.high_watermark,
                low_watermark=hw.low_watermark,
            )
            for _ in range(sim.host_pools)
        ]
        self.mem_peak = 0  # bytes, all pools together
        self.ssd = SessionReclaimer(
            hw.ssd_bytes, high_watermark=hw.high_watermark, low_watermark=hw.low_watermark
        )
        self.segs = SegmentTable()
        #: (on SSD, session, memory pool; 0 for SSD) -> its segments there and their blocks.
        self.owner_segs: dict[tuple[bool, int, int], list[tuple[int, np.ndarray]]] = {}
        self.file_of: dict[int, int] = {}
        self.file_end: dict[int, int] = {}
        self.next_file = 0
        self.prefetch: dict[int, tuple[float, int, tuple[int, ...]]] = {}
        self.placed: Counter[str] = Counter()

    # reads --------------------------------------------------------------------------------
    def on_arrival(self, r: int, now: float) -> None:
        sim = self.sim
        w = sim.worker_of[r]
        blk = sim.blocks[r]
        sim.store.add_refs(blk, 1)
        owner = self.session[r]
        self.mems[sim.store.host_pool(w)].touch(owner, now)
        self.ssd.touch(owner, now)
        p, n_g, n_m, n_s, runs = sim.store.lookup_flat(blk, w)
        log = sim.log
        log.delivered_blocks[r] = p
        log.gpu_blocks[r] = n_g
        log.host_blocks[r] = n_m
        log.ssd_blocks[r] = n_s
        log.copy_blocks[r] = n_m
        if n_s == 0:
            self.sched[w].submit(r, now, 0, now)
            sim.make_ready(r, now)
            return
        commands, nbytes = sim.store.flat_read_cost(
            runs, self.segs, layers=self.layers, record_bytes=self.record, piece_bytes=self.piece
        )
        ranks = sim.stored_ranks
        log.ssd_read_commands[r] = commands * ranks
        log.ssd_read_bytes[r] = nbytes * ranks
        owners = tuple(np.unique(self.segs.owner[runs[:, 0]]).tolist())  # sorted, each once
        window = min(2 * n_s * self.piece * ranks, n_s * sim.block_bytes)
        self.prefetch[r] = (sim.ssd_work_s(nbytes * ranks, commands * ranks), window, owners)
        self.sched[w].submit(r, now, n_s * sim.block_bytes, now)
        self._kick(w, now)

    def _kick(self, w: int, now: float) -> None:
        for r in self.sched[w].start_prefetches(now):
            work, window, owners = self.prefetch[r]  # type: ignore[index]
            for o in owners:
                self.ssd.begin_read(o, now)
            self.sim.staging.set(now, self.sim.staging.level + window)
            request = int(r)  # type: ignore[call-overload]
            self.sim.read_started(request, now)
            self.sim.ssd_link.add(
                request, work, now, functools.partial(self._read_done, request, w)
            )

    def _read_done(self, r: int, w: int, now: float) -> None:
        _, window, owners = self.prefetch.pop(r)
        for o in owners:
            self.ssd.end_read(o, now)
        self.sim.staging.set(now, self.sim.staging.level - window)
        log = self.sim.log
        log.prefetch_s[r] = now - log.arrival_s[r]
        self.sched[w].prefetch_done(r, now)
        self._kick(w, now)
        self.sim.make_ready(r, now)

    def pop_ready(self, w: int, now: float) -> int | None:
        r = self.sched[w].pop_ready(now)
        return None if r is None else int(r)  # type: ignore[call-overload]

    def on_prefill_start(self, r: int, now: float) -> None:
        pass

    # writes -------------------------------------------------------------------------------
    def on_prefill_done(self, r: int, now: float) -> None:
        sim = self.sim
        w = sim.worker_of[r]
        pool = sim.store.host_pool(w)
        new = sim.store.unstored_flat(sim.blocks[r], w)
        if new.shape[0] == 0:
            return
        shared, least_ref = _shared_head(sim.store.refs_of(new))
        prev = self.prev_request[r]
        for piece, ref in ((new[:shared], 2), (new[shared:], 1)):
            if piece.shape[0] == 0:
                continue
            signals = PlacementSignals(
                turn=self.turn[r],
                context_tokens=sim.input_tokens[r],
                previous_reply_tokens=sim.output_tokens[prev] if prev >= 0 else None,
                prefix_ref_count=least_ref if ref > 1 else 1,
                memory_free_bytes=self.mems[pool].free_bytes,
                bytes_to_write=piece.shape[0] * sim.block_bytes,
            )
            placement = self.rule.place(signals)
            self.placed[placement.reason.value] += int(piece.shape[0])
            self._write(self.session[r], piece, placement.medium == Medium.SSD, now, pool)

    def _write(self, owner: int, blocks: np.ndarray, on_ssd: bool, now: float, pool: int) -> None:
        sim = self.sim
        n = int(blocks.shape[0])
        if on_ssd:
            file = self.file_of.get(owner)
            if file is None:
                file = self.file_of[owner] = self.next_file
                self.next_file += 1
                self.file_end[file] = DATA_START
            layer_bytes = n * self.piece
            seg_bytes = segment_bytes(self.layers, layer_bytes)
            stride = (seg_bytes - self.record) // self.layers
            seg = self.segs.add(file, self.file_end[file], stride, n, owner)
            self.file_end[file] += seg_bytes
            nbytes = seg_bytes * sim.stored_ranks
            reclaimer = self.ssd
            sim.ssd_write(nbytes, now)
        else:
            seg = self.segs.add(-1, 0, 0, n, owner)
            nbytes = n * sim.block_bytes
            reclaimer = self.mems[pool]
        home = 0 if on_ssd else pool
        sim.store.assign(blocks, seg, on_ssd, pool=home)
        self.owner_segs.setdefault((on_ssd, owner, home), []).append((seg, blocks))
        reclaimer.add(owner, nbytes, now)
        if not on_ssd:
            self.mem_peak = max(self.mem_peak, sum(m.used_bytes for m in self.mems))
        for dropped in reclaimer.reclaim(now):
            o = int(dropped.session)  # type: ignore[call-overload]
            for s, b in self.owner_segs.pop((on_ssd, o, home), []):
                sim.store.clear(b, s, on_ssd, pool=home)
            if on_ssd:
                self.file_of.pop(o, None)

    def on_decode_done(self, r: int, now: float) -> None:
        self.sim.store.add_refs(self.sim.blocks[r], -1)

    def peaks(self) -> dict[str, int]:
        return {
            "peak_host_memory_bytes": self.mem_peak,
            "peak_staging_bytes": self.sim.staging.peak,
            "peak_ssd_bytes": self.ssd.peak_used_bytes,
        }

    def extra(self) -> dict[str, Any]:
        return {"placed_blocks": dict(sorted(self.placed.items()))}


def make(sim: Simulation) -> Flat:
    return Flat(sim, TwoQueueScheduler)
