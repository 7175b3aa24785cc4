"""The tiered-storage baseline's model: a host-memory LRU tier in front of SSD bucket files.

Model (Mooncake/LMCache-style "memory in front, SSD behind"); iobench writes files in the
order it gives, and the replay simulator runs the same code:

* A block holds **all layers** of ``block_tokens`` tokens (``block_bytes``); it is the unit the
  memory tier caches and evicts.
* Turns arrive in the schedule's arrival order (sessions interleaved in time). A turn first
  touches its session's earlier blocks still in memory (LRU touch, in block order: the prefix
  is reused), then inserts its new blocks as most recently used.
* When the tier holds more than ``memory_tier_bytes // block_bytes`` blocks the least recently
  used block leaves it and is appended to the current bucket. A block is written once, when it
  first leaves memory; a later touch of an evicted block would read it from SSD and does not
  rewrite it (no re-admission). At the end the blocks still in memory are flushed in LRU order.
* Buckets have a fixed capacity, ``floor(bucket_bytes / block_bytes)`` blocks, filled one after
  the other; the last holds only what is left. They are recycled first-in first-out: bucket 0
  first. A session's KV is usable only as a prefix, so recycling a bucket that holds block ``b``
  of a session cuts that session back to its first ``b`` blocks (:meth:`BucketPlacement.cut_by`).

So a bucket mixes sessions and one session's blocks scatter over buckets. Pure: numpy only, no
file I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from fcctl.analyzers.turns import TurnSchedule

from fcctl.common.errors import FcctlInputError

DEFAULT_BUCKET_BYTES = 256 * 2**20
# The memory tier holds this fraction of the workload by default: small enough that most
# blocks are evicted while sessions are still active, which is the regime the paper studies.
DEFAULT_MEMORY_TIER_FRACTION = 1 / 8


def default_memory_tier_bytes(workload_bytes: int) -> int:
    """The default tier: :data:`DEFAULT_MEMORY_TIER_FRACTION` of the workload's bytes."""
    return int(workload_bytes * DEFAULT_MEMORY_TIER_FRACTION)


def eviction_order(
    schedule: TurnSchedule, *, block_bytes: int, memory_tier_bytes: int
) -> np.ndarray:
    """The order blocks reach SSD: an ``(n, 2)`` int64 array of ``(session, block)`` rows.

    Every block of every session appears exactly once (the final flush writes what is left).
    """
    if memory_tier_bytes < 0:
        raise FcctlInputError(f"--memory-tier: must be >= 0; got {memory_tier_bytes!r}")
    if block_bytes < 1:
        raise FcctlInputError(f"block_bytes: must be >= 1; got {block_bytes!r}")
    capacity_blocks = memory_tier_bytes // block_bytes
    tier: OrderedDict[tuple[int, int], None] = OrderedDict()
    stored: list[tuple[int, int]] = []
    next_block = [0] * len(schedule.sessions)
    for session, turn in schedule.arrivals:
        for block in range(next_block[session]):
            key = (session, block)
            if key in tier:
                tier.move_to_end(key)
        added = schedule.sessions[session].turn_blocks[turn]
        for block in range(next_block[session], next_block[session] + added):
            tier[(session, block)] = None
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
            f"--bucket-size: must hold at least one block of {block_bytes} bytes; "
            f"got {bucket_bytes!r}"
        )
    if memory_tier_bytes is None:
        memory_tier_bytes = default_memory_tier_bytes(schedule.blocks * block_bytes)
    order = eviction_order(schedule, block_bytes=block_bytes, memory_tier_bytes=memory_tier_bytes)
    per_bucket = bucket_bytes // block_bytes
    session_blocks = tuple(s.blocks for s in schedule.sessions)
    placement = [np.zeros((n, 2), dtype=np.int64) for n in session_blocks]
    # Row i of the order sits in bucket i // per_bucket at slot i % per_bucket.
    index = np.arange(len(order), dtype=np.int64)
    where_all = np.stack([index // per_bucket, index % per_bucket], axis=1)
    by_session = np.argsort(order[:, 0], kind="stable")
    bounds = np.cumsum([0, *session_blocks])
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
