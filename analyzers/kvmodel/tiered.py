"""The tiered-storage baseline's model: a host-memory LRU tier in front of SSD bucket files.

Model (Mooncake/LMCache-style "memory in front, SSD behind"); iobench writes files in the
order it gives, and the replay simulator runs the same code:

* A block holds **all layers** of ``block_tokens`` tokens (``block_bytes``); it is the unit the
  memory tier caches and evicts.
* Turns arrive in the schedule's arrival order (sessions interleaved in time). A turn touches
  its session's earlier blocks still in memory and inserts its new ones, in one of two orders
  (``touch``): ``"head-first"`` (iobench's, the default): earlier blocks in block order, then the
  new ones, so a session's head is its least recently used block and leaves memory first;
  ``"tail-first"`` (the replay's, issue #8 §3 "a request's tail blocks go before its head"):
  every block from the tail to the head, so the head is most recent and the tail leaves first.
* When the tier holds more than ``memory_tier_bytes // block_bytes`` blocks the least recently
  used block leaves it and is appended to the current bucket. A block is written once, when it
  first leaves memory; a later touch of an evicted block would read it from SSD and does not
  rewrite it (no re-admission). At the end the blocks still in memory are flushed in LRU order.
* Buckets have a fixed capacity, ``floor(bucket_bytes / block_bytes)`` blocks, filled one after
  the other; the last holds only what is left. They are recycled first-in first-out: bucket 0
  first. A session's KV is usable only as a prefix, so recycling a bucket that holds block ``b``
  of a session cuts that session back to its first ``b`` blocks (:meth:`BucketPlacement.cut_by`).

So a bucket mixes sessions and one session's blocks scatter over buckets.

:class:`BucketRing` is that bucket rule online, the one implementation of it: blocks (dense
integer keys) are appended in eviction order, block ``seq`` of the writes sits in bucket
``seq // blocks_per_bucket`` at slot ``seq % blocks_per_bucket``, and above a high watermark the
oldest buckets are recycled first-in first-out down to a low one, dropping whatever blocks of
whatever sessions they hold. :func:`place_in_buckets` (iobench's file layout) runs the whole
eviction order through an unbounded ring; the replay simulator's tiered SSD
(:mod:`fcctl.analyzers.replay.store`) calls :func:`ring_append` from its numba kernels for
every host-memory eviction. No file I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numba import njit

from fcctl.common.errors import FcctlInputError

from .turns import TurnSchedule

DEFAULT_BUCKET_BYTES = 256 * 2**20
# The memory tier holds this fraction of the workload by default: small enough that most
# blocks are evicted while sessions are still active, which is the regime the paper studies.
DEFAULT_MEMORY_TIER_FRACTION = 1 / 8


def default_memory_tier_bytes(workload_bytes: int) -> int:
    """The default tier: :data:`DEFAULT_MEMORY_TIER_FRACTION` of the workload's bytes."""
    return int(workload_bytes * DEFAULT_MEMORY_TIER_FRACTION)


TouchOrder = Literal["head-first", "tail-first"]
TOUCH_ORDERS: tuple[TouchOrder, ...] = ("head-first", "tail-first")


def eviction_order(
    schedule: TurnSchedule,
    *,
    block_bytes: int,
    memory_tier_bytes: int,
    touch: TouchOrder = "head-first",
) -> np.ndarray:
    """The order blocks reach SSD: an ``(n, 2)`` int64 array of ``(session, block)`` rows.

    Every block of every session appears exactly once (the final flush writes what is left).
    ``touch`` is the order a turn touches its blocks in (module docstring): iobench's
    ``"head-first"`` or the replay's ``"tail-first"``.
    """
    if memory_tier_bytes < 0:
        raise FcctlInputError(
            f"memory_tier_bytes: must be >= 0; got {memory_tier_bytes!r}",
            parameter="memory_tier_bytes",
        )
    if block_bytes < 1:
        raise FcctlInputError(f"block_bytes: must be >= 1; got {block_bytes!r}")
    if touch not in TOUCH_ORDERS:
        raise FcctlInputError(f"touch: must be one of {', '.join(TOUCH_ORDERS)}; got {touch!r}")
    capacity_blocks = memory_tier_bytes // block_bytes
    tier: OrderedDict[tuple[int, int], None] = OrderedDict()
    stored: list[tuple[int, int]] = []
    next_block = [0] * len(schedule.sessions)
    for session, turn in schedule.arrivals:
        old = next_block[session]
        added = schedule.sessions[session].turn_blocks[turn]
        if touch == "head-first":
            for block in range(old):
                key = (session, block)
                if key in tier:
                    tier.move_to_end(key)
            for block in range(old, old + added):
                tier[(session, block)] = None
        else:
            for block in range(old + added - 1, -1, -1):
                key = (session, block)
                if block >= old:
                    tier[key] = None
                elif key in tier:
                    tier.move_to_end(key)
        next_block[session] += added
        while len(tier) > capacity_blocks:
            stored.append(tier.popitem(last=False)[0])
    stored.extend(tier.keys())  # the final flush, least recently used first
    return np.array(stored, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class SessionCut:
    """What recycling one bucket (first-in first-out) does to one session it holds blocks of.

    ``lost_blocks``: the session's blocks in that bucket, ascending. ``prefix_blocks_before``
    / ``_after``: the session's usable prefix (blocks ``0 .. n-1`` all still stored) before and
    after the recycle, the earlier buckets already recycled.
    """

    session: int
    lost_blocks: tuple[int, ...]
    prefix_blocks_before: int
    prefix_blocks_after: int

    @property
    def cut_blocks(self) -> int:
        """Blocks this recycle makes unusable: lost ones and the later ones they orphan."""
        return self.prefix_blocks_before - self.prefix_blocks_after


@dataclass(frozen=True, eq=False)
class BucketPlacement:
    """Where the tier's evictions land: bucket ``k`` holds ``order[k * blocks_per_bucket:]``'s
    next ``blocks_per_bucket`` rows, slot by slot.

    ``placement[s][b]`` is ``(bucket, slot)`` of session ``s``'s block ``b`` (int64 rows).
    """

    block_bytes: int
    blocks_per_bucket: int
    memory_tier_bytes: int
    order: np.ndarray
    session_blocks: tuple[int, ...]
    placement: tuple[np.ndarray, ...]

    @property
    def buckets(self) -> int:
        return -(-len(self.order) // self.blocks_per_bucket)

    def bucket_rows(self, bucket: int) -> np.ndarray:
        """The ``(session, block)`` rows bucket ``bucket`` holds, in slot order."""
        self._check_bucket(bucket)
        start = bucket * self.blocks_per_bucket
        return self.order[start : start + self.blocks_per_bucket]

    def sessions_in_bucket(self, bucket: int) -> tuple[int, ...]:
        """The sessions with at least one block in ``bucket``, ascending."""
        return tuple(int(s) for s in np.unique(self.bucket_rows(bucket)[:, 0]))

    def sessions_per_bucket(self) -> list[int]:
        return [len(self.sessions_in_bucket(k)) for k in range(self.buckets)]

    def buckets_per_session(self) -> list[int]:
        return [int(np.unique(where[:, 0]).size) for where in self.placement]

    def prefix_blocks(self, recycled: int) -> tuple[int, ...]:
        """Each session's usable prefix after the first ``recycled`` buckets were recycled.

        A session keeps blocks ``0 .. p-1`` where ``p`` is its lowest block held by a recycled
        bucket (all its blocks when none is).
        """
        if not 0 <= recycled <= self.buckets:
            raise ValueError(f"recycled: must be in 0..{self.buckets}; got {recycled!r}")
        prefix = np.array(self.session_blocks, dtype=np.int64)
        gone = self.order[: recycled * self.blocks_per_bucket]
        np.minimum.at(prefix, gone[:, 0], gone[:, 1])
        return tuple(int(p) for p in prefix)

    def cut_by(self, bucket: int) -> tuple[SessionCut, ...]:
        """What recycling ``bucket`` cuts, buckets ``0 .. bucket-1`` already recycled (FIFO).

        One entry per session holding a block in it, ascending by session; a session already
        cut below those blocks by an earlier recycle has ``cut_blocks == 0``.
        """
        rows = self.bucket_rows(bucket)
        before = self.prefix_blocks(bucket)
        after = self.prefix_blocks(bucket + 1)
        return tuple(
            SessionCut(
                session=s,
                lost_blocks=tuple(int(b) for b in np.sort(rows[rows[:, 0] == s, 1])),
                prefix_blocks_before=before[s],
                prefix_blocks_after=after[s],
            )
            for s in self.sessions_in_bucket(bucket)
        )

    def _check_bucket(self, bucket: int) -> None:
        if not 0 <= bucket < self.buckets:
            raise ValueError(f"bucket: must be in 0..{self.buckets - 1}; got {bucket!r}")


def place_in_buckets(
    schedule: TurnSchedule,
    *,
    block_bytes: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    memory_tier_bytes: int | None = None,
) -> BucketPlacement:
    """Run the LRU tier over ``schedule`` and fill fixed-size buckets in eviction order.

    ``memory_tier_bytes`` defaults to :func:`default_memory_tier_bytes` of the schedule's bytes.
    """
    if bucket_bytes < block_bytes:
        raise FcctlInputError(
            f"bucket_bytes: must hold at least one block of {block_bytes} bytes; "
            f"got {bucket_bytes!r}",
            parameter="bucket_bytes",
        )
    if memory_tier_bytes is None:
        memory_tier_bytes = default_memory_tier_bytes(schedule.blocks * block_bytes)
    order = eviction_order(schedule, block_bytes=block_bytes, memory_tier_bytes=memory_tier_bytes)
    per_bucket = bucket_bytes // block_bytes
    session_blocks = tuple(s.blocks for s in schedule.sessions)
    placement = [np.zeros((n, 2), dtype=np.int64) for n in session_blocks]
    bounds = np.cumsum([0, *session_blocks])
    # The ring (unbounded: iobench writes every block, nothing is recycled) puts row i of the
    # order at write sequence i, so in bucket i // per_bucket at slot i % per_bucket.
    ring = BucketRing(num_keys=int(bounds[-1]), blocks_per_bucket=per_bucket)
    keys = bounds[order[:, 0]] + order[:, 1]
    ring.append(keys)
    where_all = ring.bucket_slot(keys)
    by_session = np.argsort(order[:, 0], kind="stable")
    for s, where in enumerate(placement):
        rows = by_session[bounds[s] : bounds[s + 1]]
        where[order[rows, 1]] = where_all[rows]
        where.setflags(write=False)
    order.setflags(write=False)
    return BucketPlacement(
        block_bytes=block_bytes,
        blocks_per_bucket=per_bucket,
        memory_tier_bytes=memory_tier_bytes,
        order=order,
        session_blocks=session_blocks,
        placement=tuple(placement),
    )


# BucketRing.meta slots
_NEXT, _OLDEST, _USED, _PEAK, _PER, _HIGH, _LOW, _RING, _WRITTEN, _RECYCLED = range(10)


@njit(cache=True)
def ring_append(  # pragma: no cover - numba
    key: int, seq_of: np.ndarray, ring: np.ndarray, meta: np.ndarray
) -> None:
    """Append block ``key`` at the next write sequence; recycle buckets if above the high mark.

    ``seq_of[key]``: the block's write sequence, -1 when not on SSD. ``ring``: the keys of the
    last ``len(ring)`` writes by sequence modulo its length. A recycle takes the oldest bucket
    (sequences ``k * per .. (k + 1) * per - 1``, or up to the last write) and drops each of its
    blocks whose sequence is still that one, until the used count is at the low watermark.
    """
    seq = meta[_NEXT]
    seq_of[key] = seq
    ring[seq % meta[_RING]] = key
    meta[_NEXT] = seq + 1
    meta[_USED] += 1
    meta[_WRITTEN] += 1
    if meta[_USED] > meta[_PEAK]:
        meta[_PEAK] = meta[_USED]
    if meta[_USED] > meta[_HIGH]:
        per = meta[_PER]
        while meta[_USED] > meta[_LOW] and meta[_OLDEST] < meta[_NEXT]:
            start = meta[_OLDEST]
            end = min((start // per + 1) * per, meta[_NEXT])
            for q in range(start, end):
                k = ring[q % meta[_RING]]
                if seq_of[k] == q:
                    seq_of[k] = -1
                    meta[_USED] -= 1
                    meta[_RECYCLED] += 1
            meta[_OLDEST] = end


@njit(cache=True)
def _ring_append_all(  # pragma: no cover - numba
    keys: np.ndarray, seq_of: np.ndarray, ring: np.ndarray, meta: np.ndarray
) -> None:
    for i in range(keys.shape[0]):
        ring_append(keys[i], seq_of, ring, meta)


class BucketRing:
    """Fixed-size SSD buckets filled in eviction order, recycled first-in first-out (module
    docstring). Keys are dense block ids ``0 .. num_keys - 1``; capacities in blocks.

    ``capacity_blocks=None``: unbounded, nothing is recycled (iobench's layout). Otherwise
    recycling starts when more than ``int(high_watermark * capacity_blocks)`` blocks are held
    and stops at ``int(low_watermark * capacity_blocks)``. ``max_writes`` bounds the ring buffer
    (at most ``high + 2`` entries are ever needed; fewer when fewer writes can happen).
    The arrays are public so numba kernels can call :func:`ring_append` on them directly.
    """

    def __init__(
        self,
        *,
        num_keys: int,
        blocks_per_bucket: int,
        capacity_blocks: int | None = None,
        high_watermark: float = 0.9,
        low_watermark: float = 0.8,
        max_writes: int | None = None,
    ) -> None:
        if blocks_per_bucket < 1:
            raise ValueError(f"blocks_per_bucket: must be >= 1; got {blocks_per_bucket!r}")
        if not 0 <= low_watermark <= high_watermark <= 1:
            raise ValueError(
                "watermarks: must satisfy 0 <= low <= high <= 1; "
                f"got low {low_watermark!r}, high {high_watermark!r}"
            )
        n = max(num_keys, 1)
        writes = n if max_writes is None else max_writes
        if capacity_blocks is None:
            high = low = np.iinfo(np.int64).max
            size = max(1, writes)
        else:
            high = int(high_watermark * capacity_blocks)
            low = int(low_watermark * capacity_blocks)
            size = max(1, min(high + 2, writes + 1))
        self.blocks_per_bucket = blocks_per_bucket
        self.seq_of = np.full(n, -1, dtype=np.int64)
        self.ring = np.zeros(size, dtype=np.int64 if n > 2**31 - 1 else np.int32)
        self.meta = np.zeros(10, dtype=np.int64)
        self.meta[_PER] = blocks_per_bucket
        self.meta[_HIGH] = high
        self.meta[_LOW] = low
        self.meta[_RING] = size

    @property
    def unbounded(self) -> bool:
        return bool(self.meta[_HIGH] == np.iinfo(np.int64).max)

    def append(self, keys: np.ndarray, *, use_kernel: bool = False) -> None:
        """Write ``keys`` in this order (each must not be on SSD already).

        An unbounded ring never recycles, so :func:`ring_append` reduces to numbering the
        writes; that is done in numpy (iobench then never starts numba's compiler, which costs
        tens of MiB of RSS; ``use_kernel`` forces the kernel, for the test that they agree).
        """
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if use_kernel or not self.unbounded:
            _ring_append_all(keys, self.seq_of, self.ring, self.meta)
            return
        start = int(self.meta[_NEXT])
        seq = np.arange(start, start + keys.shape[0], dtype=np.int64)
        self.seq_of[keys] = seq
        self.ring[seq % self.meta[_RING]] = keys
        n = keys.shape[0]
        self.meta[_NEXT] += n
        self.meta[_USED] += n
        self.meta[_WRITTEN] += n
        self.meta[_PEAK] = max(self.meta[_PEAK], self.meta[_USED])

    def holds(self, keys: np.ndarray) -> np.ndarray:
        """Whether each key is on SSD now (written and not recycled)."""
        return self.seq_of[keys] >= 0

    def bucket_slot(self, keys: np.ndarray) -> np.ndarray:
        """``(bucket, slot)`` rows (int64) of keys on SSD: write sequence // and % per bucket."""
        seq = self.seq_of[keys]
        if (seq < 0).any():
            raise ValueError("bucket_slot: a key is not on SSD")
        per = self.blocks_per_bucket
        return np.stack([seq // per, seq % per], axis=1)

    @property
    def used_blocks(self) -> int:
        return int(self.meta[_USED])

    @property
    def peak_blocks(self) -> int:
        return int(self.meta[_PEAK])

    @property
    def written_blocks(self) -> int:
        return int(self.meta[_WRITTEN])

    @property
    def recycled_blocks(self) -> int:
        return int(self.meta[_RECYCLED])

    @property
    def recycled_buckets(self) -> int:
        """Buckets recycled so far (the oldest write still held, // per bucket)."""
        return int(self.meta[_OLDEST]) // self.blocks_per_bucket
