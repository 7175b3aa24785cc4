"""``memory-only``: GPU caches plus a host-memory LRU; misses are recomputed.

SGLang HiCache without L3: every block a prefill produces is written through to host memory
(LRU, tail before head): the node's pool, or with ``host_scope`` "worker" the request's
worker's own (HiCache's per-instance pool); host hits are copied to the GPU at prefill start.
"""

from __future__ import annotations

from typing import Any

from ..engine import ArrivalQueue, Simulation

NAME = "memory-only"


class MemoryOnly:
    name = NAME
    tiered = False

    reads_into_gpu = False
    staging_bytes: int | None = 0

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.ready = ArrivalQueue(sim.workers)

    def on_arrival(self, r: int, now: float) -> None:
        sim = self.sim
        p, n_g, n_h, _ = sim.store.lookup_lru(sim.blocks[r], sim.worker_of[r], False)
        log = sim.log
        log.delivered_blocks[r] = p
        log.gpu_blocks[r] = n_g
        log.host_blocks[r] = n_h
        log.copy_blocks[r] = n_h
        self.ready.push(sim.worker_of[r], now, r)
        sim.make_ready(r, now)

    def pop_ready(self, w: int, now: float) -> int | None:
        return self.ready.pop(w)

    def on_prefill_start(self, r: int, now: float) -> None:
        pass

    def on_prefill_done(self, r: int, now: float) -> None:
        self.sim.store.host_insert(self.sim.blocks[r], self.tiered, self.sim.worker_of[r])

    def on_decode_done(self, r: int, now: float) -> None:
        pass

    def peaks(self) -> dict[str, int]:
        return {
            "peak_host_memory_bytes": self.sim.store.h_peak * self.sim.block_bytes,
            "peak_staging_bytes": 0,
            "peak_ssd_bytes": 0,
        }

    def extra(self) -> dict[str, Any]:
        return {}


def make(sim: Simulation) -> MemoryOnly:
    return MemoryOnly(sim)
