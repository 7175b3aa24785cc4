"""What a flat (FC-CIO) restore of some blocks reads: commands and bytes, from the planner.

A request's SSD blocks form *runs*: consecutive blocks of one turn's segment in one session
file. A restore is layer by layer (``SessionFile.restore_plans``): at layer ``l`` each run is
one extent, ``offset = segment + record + l * stride + first * P``, ``length = blocks * P``
(``P`` = one rank's bytes of one block at one layer), and the layer's extents are planned
by :func:`fcctl.layout.planner.plan_reads` (64 KiB gap, 4096 alignment).

:func:`read_cost` gives the same figures as planning every layer, without building the
extents: runs are sorted by (file, offset), which is their order at every layer, and two
consecutive runs of one file merge at layer ``l`` exactly when the planner's gap rule
merges their hole (the hole is below the gap rule's limit, found by asking ``plan_reads`` itself:
:func:`merge_limit`) or when
their 4096-aligned ranges touch. ``reference.ReferenceStore`` plans every layer with
``plan_reads``; the tests require equal results.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from fcctl.layout.alignment import PAGE_BYTES
from fcctl.layout.planner import DEFAULT_GAP_BYTES, Extent, plan_reads

ALIGN = PAGE_BYTES
GAP_BYTES = DEFAULT_GAP_BYTES


def planner_merges(hole_bytes: int, gap_bytes: int = GAP_BYTES) -> bool:
    """Whether ``plan_reads`` reads across a hole of ``hole_bytes`` between two extents."""
    probe = [Extent("probe", 0, 1), Extent("probe", 1 + hole_bytes, 1)]
    return plan_reads(probe, gap_bytes=gap_bytes).read_commands == 1


@functools.lru_cache(maxsize=16)
def merge_limit(gap_bytes: int = GAP_BYTES) -> int:
    """The smallest hole ``plan_reads`` does not read across: it reads across every hole
    below it and none from it on (the gap rule is a threshold; :func:`planner_merges` is asked
    at the two holes either side of the limit found by bisection, and a test asks it at every
    hole up to twice the gap)."""
    lo, hi = 0, gap_bytes + 1  # planner_merges(lo) holds for a gap >= 1; never at hi
    if not planner_merges(lo, gap_bytes):
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if planner_merges(mid, gap_bytes):
            lo = mid
        else:
            hi = mid
    return hi


class SegmentTable:
    """Growable per-segment columns: file, byte offset in the file, layer stride, blocks,
    owner (session), on_ssd."""

    def __init__(self) -> None:
        self.n = 0
        cap = 1024
        self.file = np.zeros(cap, dtype=np.int64)
        self.offset = np.zeros(cap, dtype=np.int64)
        self.stride = np.zeros(cap, dtype=np.int64)
        self.blocks = np.zeros(cap, dtype=np.int64)
        self.owner = np.zeros(cap, dtype=np.int64)

    def add(self, file: int, offset: int, stride: int, blocks: int, owner: int) -> int:
        if self.n == self.file.shape[0]:
            for name in ("file", "offset", "stride", "blocks", "owner"):
                old = getattr(self, name)
                new = np.zeros(old.shape[0] * 2, dtype=old.dtype)
                new[: old.shape[0]] = old
                setattr(self, name, new)
        s = self.n
        self.file[s] = file
        self.offset[s] = offset
        self.stride[s] = stride
        self.blocks[s] = blocks
        self.owner[s] = owner
        self.n += 1
        return s


def read_cost(
    runs: np.ndarray, segs: SegmentTable, *, layers: int, record_bytes: int, piece_bytes: int
) -> tuple[int, int]:
    """(read commands, bytes read) of one rank restoring ``runs`` ((segment, first, blocks)
    rows) at every layer."""
    if runs.shape[0] == 0:
        return 0, 0
    commands, total_bytes = _read_cost(
        runs, segs.file, segs.offset, segs.stride, layers, record_bytes, piece_bytes, merge_limit()
    )
    return int(commands), int(total_bytes)


@njit(cache=True)
def _read_cost(  # pragma: no cover - numba
    runs: np.ndarray,
    seg_file: np.ndarray,
    seg_offset: np.ndarray,
    seg_stride: np.ndarray,
    layers: int,
    record_bytes: int,
    piece_bytes: int,
    limit: int,
) -> tuple[int, int]:
    # One request's restore is a few runs: a compiled loop over layers and runs, instead of
    # numpy on (layers, runs) arrays whose per-call cost dominated flat's arrivals. The
    # integer arithmetic is the planner's (module docstring), so the figures are the same.
    k = runs.shape[0]
    file = np.empty(k, dtype=np.int64)
    base = np.empty(k, dtype=np.int64)
    for i in range(k):
        s = runs[i, 0]
        file[i] = seg_file[s]
        base[i] = seg_offset[s] + record_bytes + runs[i, 1] * piece_bytes
    # (file, offset) order, as np.lexsort((base, file)): stable by base, then stable by file.
    by_base = np.argsort(base, kind="mergesort")
    order = by_base[np.argsort(file[by_base], kind="mergesort")]
    commands = layers * k
    total = 0
    for lay in range(layers):
        prev_end = 0
        prev_a_end = 0
        for j in range(k):
            i = order[j]
            start = base[i] + lay * seg_stride[runs[i, 0]]
            end = start + runs[i, 2] * piece_bytes
            a_start = start - start % ALIGN
            a_end = end + (-end) % ALIGN
            total += a_end - a_start
            if j > 0 and file[i] == file[order[j - 1]]:
                a_hole = a_start - prev_a_end
                hole = start - prev_end
                if a_hole <= 0 or (hole > 0 and hole < limit):
                    commands -= 1
                    total += a_hole
            prev_end = end
            prev_a_end = a_end
    return commands, total
