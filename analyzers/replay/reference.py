"""The plain reference store: the same rules as :class:`store.FastStore`, one Python step per
block, dicts and ``OrderedDict`` LRUs, and flat restores planned layer by layer with
:func:`fcctl.layout.planner.plan_reads` on real extents. Slow; for tests on small traces.

The event loop, time model, policies and schedulers are shared; what this replaces is every
part of the fast path that is fast by construction (numba kernels, arrays indexed by block,
the compiled read cost).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from fcctl.layout.planner import Extent, plan_reads

from .flatcost import ALIGN, GAP_BYTES, SegmentTable
from .store import CODE_GPU, CODE_HOST, CODE_SSD


class _Lru:
    """Most recently used last (``OrderedDict`` order); evicts from the front."""

    def __init__(self) -> None:
        self.d: OrderedDict[int, None] = OrderedDict()

    def touch(self, b: int) -> None:
        self.d.move_to_end(b)

    def insert(self, b: int) -> None:
        self.d[b] = None
        self.d.move_to_end(b)

    def pop_lru(self) -> int:
        return self.d.popitem(last=False)[0]

    def __contains__(self, b: int) -> bool:
        return b in self.d

    def __len__(self) -> int:
        return len(self.d)


def _last_occurrence(blocks: list[int]) -> list[int]:
    """``blocks`` with each block kept at its last occurrence."""
    seen: set[int] = set()
    out = []
    for b in reversed(blocks):
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out[::-1]


class ReferenceStore:
    """Same constructor and methods as :class:`store.FastStore`."""

    #: The reference implementation (:class:`~fcctl.analyzers.replay.spec.StoreFactory`).
    reference = True

    def __init__(
        self,
        *,
        num_blocks: int,
        max_request_blocks: int,
        workers: int,
        gpu_blocks: int,
        host_blocks: int,
        host_pools: int = 1,
        ssd_blocks: int = 0,
        blocks_per_bucket: int = 1,
        high_watermark: float = 0.9,
        low_watermark: float = 0.8,
        total_accesses: int = 0,
    ) -> None:
        self.gpu_blocks = gpu_blocks
        self.host_blocks = host_blocks
        self.gpu = [_Lru() for _ in range(workers)]  # each worker's own copies
        # Blocks running requests reference on each worker: cached, outside the LRU (never
        # evicted), block -> references.
        self.pinned: list[dict[int, int]] = [{} for _ in range(workers)]
        if host_pools not in (1, workers):
            raise ValueError(f"host_pools: 1 or one per worker ({workers}); got {host_pools!r}")
        self.host = [_Lru() for _ in range(host_pools)]  # the node's one, or one per worker
        self.h_peak = 0
        # tiered SSD: block -> write sequence; FIFO of (seq, block)
        self.ssd_seq: dict[int, int] = {}
        self.fifo: list[tuple[int, int]] = []
        self.next_seq = 0
        self.per_bucket = max(1, blocks_per_bucket)
        self.high = int(high_watermark * ssd_blocks)
        self.low = int(low_watermark * ssd_blocks)
        self._peak = 0
        self._recycled = 0
        self._written = 0
        self.mem_seg: list[dict[int, int]] = [{} for _ in range(host_pools)]
        self.ssd_seg: dict[int, tuple[int, int]] = {}  # block -> (segment, index)
        self.refs: dict[int, int] = {}
        self._codes: list[int] = []

    def host_pool(self, worker: int) -> int:
        return worker if len(self.host) > 1 else 0

    def lookup_lru(self, blk: np.ndarray, worker: int, use_ssd: bool) -> tuple[int, int, int, int]:
        host = self.host[self.host_pool(worker)]
        codes: list[int] = []
        pinned = self.pinned[worker]
        for b in blk.tolist():
            if b in self.gpu[worker] or b in pinned:
                codes.append(CODE_GPU)
            elif b in host:
                codes.append(CODE_HOST)
            elif use_ssd and b in self.ssd_seq:
                codes.append(CODE_SSD)
            else:
                break
        hits = blk[: len(codes)].tolist()
        self._touch(
            self.gpu[worker],
            [b for b, c in zip(hits, codes, strict=True) if c == CODE_GPU and b not in pinned],
        )
        self._touch(host, [b for b, c in zip(hits, codes, strict=True) if c == CODE_HOST])
        self._codes = codes
        return len(codes), codes.count(CODE_GPU), codes.count(CODE_HOST), codes.count(CODE_SSD)

    @staticmethod
    def _touch(lru: _Lru, blocks: list[int]) -> None:
        for b in reversed(_last_occurrence(blocks)):
            lru.touch(b)

    def prefix_codes(self, p: int) -> np.ndarray:
        return np.array(self._codes[:p], dtype=np.int8)

    def gpu_insert(self, blk: np.ndarray, worker: int, cap: int | None = None) -> None:
        cap = self.gpu_blocks if cap is None else cap
        if cap <= 0:
            return
        lru, pinned = self.gpu[worker], self.pinned[worker]
        for b in reversed(_last_occurrence(blk.tolist())):
            if b in pinned:  # cached already, outside the LRU
                continue
            if b in lru:
                lru.touch(b)
            else:
                lru.insert(b)
        self.gpu_trim(worker, cap)

    def gpu_prefix(self, blk: np.ndarray, worker: int) -> int:
        lru, pinned = self.gpu[worker], self.pinned[worker]
        p = 0
        for b in blk.tolist():
            if b not in lru and b not in pinned:
                break
            p += 1
        return p

    def gpu_prefixes(self, blk: np.ndarray) -> list[int]:
        return [self.gpu_prefix(blk, w) for w in range(len(self.gpu))]

    def gpu_trim(self, worker: int, cap: int) -> None:
        lru = self.gpu[worker]
        while len(lru) > max(cap - len(self.pinned[worker]), 0):
            lru.pop_lru()

    def gpu_pin(self, blk: np.ndarray, worker: int, cap: int) -> None:
        lru, pinned = self.gpu[worker], self.pinned[worker]
        for b in blk.tolist():
            if b in lru:
                del lru.d[b]
            pinned[b] = pinned.get(b, 0) + 1
        self.gpu_trim(worker, cap)

    def gpu_unpin(self, blk: np.ndarray, worker: int, cap: int) -> None:
        lru, pinned = self.gpu[worker], self.pinned[worker]
        released = []
        for b in blk.tolist():
            pinned[b] -= 1
            if pinned[b] == 0:
                del pinned[b]
                released.append(b)
        # Freed as vLLM frees a finished request's blocks: tail first, so the head is the
        # most recently used.
        for b in reversed(released):
            lru.insert(b)
        self.gpu_trim(worker, cap)

    def gpu_pinned(self, worker: int) -> int:
        return len(self.pinned[worker])

    def _ssd_append(self, b: int) -> None:
        self._written += 1
        self.ssd_seq[b] = self.next_seq
        self.fifo.append((self.next_seq, b))
        self.next_seq += 1
        self._peak = max(self._peak, len(self.ssd_seq))
        if len(self.ssd_seq) > self.high:
            while len(self.ssd_seq) > self.low and self.fifo:
                bucket = self.fifo[0][0] // self.per_bucket
                while self.fifo and self.fifo[0][0] // self.per_bucket == bucket:
                    seq, victim = self.fifo.pop(0)
                    if self.ssd_seq.get(victim) == seq:
                        del self.ssd_seq[victim]
                        self._recycled += 1

    def host_insert(self, blk: np.ndarray, tiered: bool, worker: int = 0) -> None:
        host = self.host[self.host_pool(worker)]
        blocks = blk.tolist()
        if tiered:  # blocks on SSD are not admitted again
            blocks = [b for b in blocks if b in host or b not in self.ssd_seq]
        for b in reversed(_last_occurrence(blocks)):
            if b in host:
                host.touch(b)
            else:
                host.insert(b)
        while len(host) > self.host_blocks:
            victim = host.pop_lru()
            if tiered and victim not in self.ssd_seq:
                self._ssd_append(victim)
        self.h_peak = max(self.h_peak, self.host_used_blocks)

    @property
    def host_used_blocks(self) -> int:
        return sum(len(h) for h in self.host)

    def host_used_blocks_of(self, pool: int) -> int:
        return len(self.host[pool])

    @property
    def ssd_used_blocks(self) -> int:
        return len(self.ssd_seq)

    @property
    def ssd_peak_blocks(self) -> int:
        return self._peak

    @property
    def ssd_recycled_blocks(self) -> int:
        return self._recycled

    @property
    def ssd_written_blocks(self) -> int:
        return self._written

    def lookup_flat(self, blk: np.ndarray, worker: int) -> tuple[int, int, int, int, np.ndarray]:
        mem_seg = self.mem_seg[self.host_pool(worker)]
        codes: list[int] = []
        runs: list[list[int]] = []
        last_ssd = -2
        pinned = self.pinned[worker]
        for i, b in enumerate(blk.tolist()):
            if b in self.gpu[worker] or b in pinned:
                codes.append(CODE_GPU)
            elif b in mem_seg:
                codes.append(CODE_HOST)
            elif b in self.ssd_seg:
                codes.append(CODE_SSD)
                seg, ix = self.ssd_seg[b]
                if runs and last_ssd == i - 1 and runs[-1][0] == seg and sum(runs[-1][1:]) == ix:
                    runs[-1][2] += 1
                else:
                    runs.append([seg, ix, 1])
                last_ssd = i
            else:
                break
        hits = blk[: len(codes)].tolist()
        self._touch(
            self.gpu[worker],
            [b for b, c in zip(hits, codes, strict=True) if c == CODE_GPU and b not in pinned],
        )
        self._codes = codes
        rows = np.array(runs, dtype=np.int64).reshape(-1, 3)
        return (
            len(codes),
            codes.count(CODE_GPU),
            codes.count(CODE_HOST),
            len([c for c in codes if c == CODE_SSD]),
            rows,
        )

    def flat_read_cost(
        self,
        runs: np.ndarray,
        segs: SegmentTable,
        *,
        layers: int,
        record_bytes: int,
        piece_bytes: int,
    ) -> tuple[int, int]:
        """Every layer planned by ``plan_reads`` on its real extents (one file per layer, so
        layers never merge: a restore plans them one by one)."""
        commands = 0
        nbytes = 0
        for layer in range(layers):
            extents = []
            for seg, first, n in runs.tolist():
                offset = (
                    int(segs.offset[seg])
                    + record_bytes
                    + layer * int(segs.stride[seg])
                    + first * piece_bytes
                )
                extents.append(Extent(f"file-{int(segs.file[seg])}", offset, n * piece_bytes))
            if extents:
                plan = plan_reads(extents, gap_bytes=GAP_BYTES, align=ALIGN)
                commands += plan.read_commands
                nbytes += plan.bytes_read
        return commands, nbytes

    def unstored_flat(self, blk: np.ndarray, worker: int) -> np.ndarray:
        mem_seg = self.mem_seg[self.host_pool(worker)]
        out: list[int] = []
        seen: set[int] = set()
        for b in blk.tolist():
            if b not in mem_seg and b not in self.ssd_seg and b not in seen:
                seen.add(b)
                out.append(b)
        return np.array(out, dtype=np.int32)

    def assign(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None:
        for i, b in enumerate(blocks.tolist()):
            if on_ssd:
                self.ssd_seg[b] = (segment, i)
            else:
                self.mem_seg[pool][b] = segment

    def clear(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None:
        for b in blocks.tolist():
            if on_ssd:
                if b in self.ssd_seg and self.ssd_seg[b][0] == segment:
                    del self.ssd_seg[b]
            elif self.mem_seg[pool].get(b) == segment:
                del self.mem_seg[pool][b]

    def add_refs(self, blk: np.ndarray, delta: int) -> None:
        for b in blk.tolist():
            self.refs[b] = self.refs.get(b, 0) + delta

    def refs_of(self, blocks: np.ndarray) -> np.ndarray:
        return np.array([self.refs.get(b, 0) for b in blocks.tolist()], dtype=np.int32)
