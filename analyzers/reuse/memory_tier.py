"""Memory-tier LRU hit shares for any number of capacities from one stack-distance pass.

An LRU cache of ``C`` blocks hits an access exactly when its stack distance is ``< C``
(:mod:`analyzers.reuse.stack`), so with ``stack_count[d]`` = re-accesses at distance ``d``:

* ``lru_hit_share(C)`` = (accesses with stack distance < C) / all block accesses
  = ``cumsum(stack_count)[C - 1] / block_accesses``: a lookup per capacity, no re-simulation;
* ``capacity_blocks`` = floor(capacity_bytes / block_bytes);
* ``share_of_ideal`` = lru_hit_share / reuse_access_share (the infinite cache's hit share);
* ``ssd_reuse_share`` = 1 - share_of_ideal: the share of reuse a memory tier of that size
  cannot serve, which would have to come from the SSD (or be recomputed).

Defaults when ``--memory`` is absent: 16 GiB, 64 GiB, 256 GiB, 1 TiB of host memory for KV
(a small node's spare DRAM, a typical KV-offload budget, a large node, and the most a single
node realistically dedicates).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

GiB = 1 << 30
DEFAULT_MEMORY_CAPACITIES_BYTES: tuple[int, ...] = (16 * GiB, 64 * GiB, 256 * GiB, 1024 * GiB)


@dataclass(frozen=True)
class MemoryTierPoint:
    """One capacity's figures (definitions above); field names are the JSON keys."""

    capacity_bytes: int
    capacity_blocks: int | None
    lru_hit_share: float | None
    share_of_ideal: float | None
    ssd_reuse_share: float | None
    # Issue #10: estimated from a SHARDS sample (capacity above the exact head), not counted.
    sampled: bool = False


class HitCounter:
    """Cumulative stack-distance counts: ``hits(C)`` = accesses an LRU of C blocks hits."""

    def __init__(self, stack_count: np.ndarray) -> None:
        self._cum = np.cumsum(stack_count)

    def hits(self, capacity_blocks: int) -> int:
        if capacity_blocks <= 0 or self._cum.shape[0] == 0:
            return 0
        return int(self._cum[min(capacity_blocks, self._cum.shape[0]) - 1])


def memory_tier(
    stack_count: np.ndarray | None,
    *,
    block_accesses: int,
    reuse_access_share: float | None,
    block_bytes: int | None,
    capacities_bytes: Iterable[int],
) -> tuple[MemoryTierPoint, ...]:
    """One :class:`MemoryTierPoint` per capacity; shares are None when reuse is unmeasurable."""
    caps = list(capacities_bytes)
    if stack_count is None or not block_bytes or block_accesses == 0:
        return tuple(
            MemoryTierPoint(c, c // block_bytes if block_bytes else None, None, None, None)
            for c in caps
        )
    counter = HitCounter(stack_count)
    out = []
    for c in caps:
        blocks = c // block_bytes
        hit_share = counter.hits(blocks) / block_accesses
        if reuse_access_share:
            ideal = hit_share / reuse_access_share
            out.append(MemoryTierPoint(c, blocks, hit_share, ideal, 1.0 - ideal))
        else:
            out.append(MemoryTierPoint(c, blocks, hit_share, None, None))
    return tuple(out)


def hit_curve(
    stack_count: np.ndarray, block_accesses: int, points: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """(capacity_blocks, lru_hit_share) at log-spaced capacities up to the largest distance + 1.

    From there on every re-access hits: the curve is flat at the reuse access share.
    """
    seen = np.flatnonzero(stack_count)
    top = int(seen[-1]) + 1 if seen.shape[0] else 1
    caps = np.unique(np.concatenate([np.geomspace(1, top, num=points).astype(np.int64), [top]]))
    cum = np.concatenate([[0], np.cumsum(stack_count)])
    hits = cum[np.minimum(caps, cum.shape[0] - 1)]
    return caps, hits / max(block_accesses, 1)


def reference_lru_hit_share(blocks: Sequence[int], capacity_blocks: int) -> float:
    """Plain LRU simulation (OrderedDict): the share of accesses that hit."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for b in blocks:
        if b in cache:
            hits += 1
            cache.move_to_end(b)
        else:
            cache[b] = None
            if len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return hits / len(blocks) if blocks else 0.0
