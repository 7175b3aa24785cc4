"""The tiered baseline's model by hand: LRU eviction order, FIFO buckets, what a recycle cuts."""

from __future__ import annotations

import numpy as np
import pytest

from fcctl.analyzers.kvmodel.tiered import (
    DEFAULT_MEMORY_TIER_FRACTION,
    SessionCut,
    eviction_order,
    place_in_buckets,
)
from fcctl.analyzers.kvmodel.turns import SessionTurns, TurnSchedule, synthetic_turns
from fcctl.common.errors import FcctlInputError

# s0 appends 2 pages then 1; s1 appends 1 then 1; turns interleave s0, s1, s0, s1.
SCHEDULE = TurnSchedule(
    16,
    (SessionTurns(0, "s0", (2, 1)), SessionTurns(1, "s1", (1, 1))),
    ((0, 0), (1, 0), (0, 1), (1, 1)),
)


def test_lru_order_with_a_two_block_tier():
    # (0,0) inserts 00 01; (1,0) inserts 10, evicts 00; (0,1) touches 01 (00 is gone), inserts
    # 02, evicts 10; (1,1) cannot touch the evicted 10, inserts 11, evicts 01; flush 02, 11.
    order = eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=2)
    assert order.tolist() == [[0, 0], [1, 0], [0, 1], [0, 2], [1, 1]]


def test_no_tier_writes_in_arrival_order_and_a_big_tier_flushes_in_lru_order():
    assert eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=0).tolist() == [
        [0, 0],
        [0, 1],
        [1, 0],
        [0, 2],
        [1, 1],
    ]
    # Nothing evicted: (0,1) touched 00 01, (1,1) touched 10, so LRU first is 00 01 02 10 11.
    assert eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=100).tolist() == [
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 0],
        [1, 1],
    ]


def test_tier_capacity_is_whole_blocks():
    # 2.5 blocks of tier hold 2 blocks: the same order as a 2-block tier.
    assert (
        eviction_order(SCHEDULE, block_bytes=4, memory_tier_bytes=10).tolist()
        == eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=2).tolist()
    )


def test_buckets_fill_in_order_and_place_every_block():
    placed = place_in_buckets(SCHEDULE, block_bytes=1, bucket_bytes=2, memory_tier_bytes=2)
    assert placed.blocks_per_bucket == 2 and placed.buckets == 3
    assert placed.bucket_rows(0).tolist() == [[0, 0], [1, 0]]
    assert placed.bucket_rows(1).tolist() == [[0, 1], [0, 2]]
    assert placed.bucket_rows(2).tolist() == [[1, 1]]  # the last bucket is not padded
    # (bucket, slot) of each session's blocks.
    assert placed.placement[0].tolist() == [[0, 0], [1, 0], [1, 1]]
    assert placed.placement[1].tolist() == [[0, 1], [2, 0]]
    assert placed.sessions_in_bucket(0) == (0, 1)
    assert placed.sessions_per_bucket() == [2, 1, 1]
    assert placed.buckets_per_session() == [2, 2]


def test_what_fifo_recycling_cuts():
    placed = place_in_buckets(SCHEDULE, block_bytes=1, bucket_bytes=2, memory_tier_bytes=2)
    assert placed.prefix_blocks(0) == (3, 2)
    # Bucket 0 holds block 0 of both sessions: recycling it leaves neither any prefix.
    assert placed.cut_by(0) == (
        SessionCut(session=0, lost_blocks=(0,), prefix_blocks_before=3, prefix_blocks_after=0),
        SessionCut(session=1, lost_blocks=(0,), prefix_blocks_before=2, prefix_blocks_after=0),
    )
    assert [c.cut_blocks for c in placed.cut_by(0)] == [3, 2]
    # Bucket 1 then holds only blocks already orphaned: it cuts nothing more.
    assert placed.cut_by(1) == (SessionCut(0, (1, 2), 0, 0),)
    assert placed.cut_by(1)[0].cut_blocks == 0
    assert placed.prefix_blocks(3) == (0, 0)


def test_a_recycle_cuts_a_session_back_to_its_first_lost_block():
    # A big tier: order 00 01 02 10 11; one block per bucket, so recycling cuts block by block.
    placed = place_in_buckets(SCHEDULE, block_bytes=1, bucket_bytes=1, memory_tier_bytes=100)
    assert [placed.prefix_blocks(k) for k in range(6)] == [
        (3, 2),
        (0, 2),
        (0, 2),
        (0, 2),
        (0, 0),
        (0, 0),
    ]
    assert placed.cut_by(3) == (SessionCut(1, (0,), 2, 0),)


def test_lru_writes_a_session_in_block_order_so_its_first_recycle_cuts_it_whole():
    # A turn touches its prefix in block order, so a lower block is always less recently used:
    # every session reaches SSD in ascending block order, and under FIFO recycling the first
    # recycle that holds any of its blocks leaves it no prefix.
    schedule = synthetic_turns(block_tokens=16, sessions=5, tokens=16 * 12, turns=3)
    placed = place_in_buckets(schedule, block_bytes=1, bucket_bytes=4, memory_tier_bytes=7)
    for s in range(5):
        blocks = placed.order[placed.order[:, 0] == s, 1]
        assert blocks.tolist() == sorted(blocks.tolist())
    for k in range(placed.buckets):
        for cut in placed.cut_by(k):
            assert cut.prefix_blocks_after == 0


def test_every_block_once_and_the_default_tier():
    schedule = synthetic_turns(block_tokens=16, sessions=6, tokens=16 * 40, turns=4)
    placed = place_in_buckets(schedule, block_bytes=10, bucket_bytes=160)
    assert placed.memory_tier_bytes == int(6 * 40 * 10 * DEFAULT_MEMORY_TIER_FRACTION)
    rows = {tuple(r) for r in placed.order.tolist()}
    assert len(placed.order) == len(rows) == 240
    # The placement is the inverse of the order.
    for s, where in enumerate(placed.placement):
        for b, (bucket, slot) in enumerate(where.tolist()):
            assert placed.bucket_rows(bucket)[slot].tolist() == [s, b]
    assert not placed.order.flags.writeable


def test_bad_sizes_are_refused():
    with pytest.raises(FcctlInputError, match="memory_tier_bytes: must be >= 0; got -1"):
        eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=-1)
    with pytest.raises(FcctlInputError, match="bucket_bytes: must hold at least one block"):
        place_in_buckets(SCHEDULE, block_bytes=8, bucket_bytes=4)
    placed = place_in_buckets(SCHEDULE, block_bytes=1, bucket_bytes=2, memory_tier_bytes=2)
    with pytest.raises(ValueError, match=r"bucket: must be in 0\.\.2; got 3"):
        placed.bucket_rows(3)
    with pytest.raises(ValueError, match=r"recycled: must be in 0\.\.3; got 4"):
        placed.prefix_blocks(4)
    assert isinstance(placed.order, np.ndarray)


def test_tail_first_touch_evicts_a_turns_tail_before_its_head():
    # (0,0) inserts 01 then 00 (00 most recent); (1,0) inserts 10, evicts 01; (0,1) inserts 02,
    # touches 00, evicts 10; (1,1) inserts 11, evicts 02; flush 00, 11. Head-first (iobench's
    # order, the test above) evicts 00 first instead.
    order = eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=2, touch="tail-first")
    assert order.tolist() == [[0, 1], [1, 0], [0, 2], [0, 0], [1, 1]]
    with pytest.raises(FcctlInputError, match="touch: must be one of"):
        eviction_order(SCHEDULE, block_bytes=1, memory_tier_bytes=2, touch="sideways")


def test_bucket_ring_recycles_whole_buckets_first_in_first_out():
    from fcctl.analyzers.kvmodel.tiered import BucketRing

    # 4 blocks of SSD, buckets of 2, high mark 3 blocks, low mark 2.
    ring = BucketRing(
        num_keys=6, blocks_per_bucket=2, capacity_blocks=4, high_watermark=0.75, low_watermark=0.5
    )
    ring.append(np.array([0, 1, 2]))
    assert ring.holds(np.arange(3)).all() and ring.recycled_blocks == 0
    ring.append(np.array([3]))  # 4 > 3: bucket 0 (keys 0, 1) goes, 2 left
    assert ring.holds(np.arange(4)).tolist() == [False, False, True, True]
    assert (ring.used_blocks, ring.peak_blocks, ring.recycled_buckets) == (2, 4, 1)
    ring.append(np.array([4, 5]))  # 4 > 3 again: bucket 1 (keys 2, 3)
    assert ring.holds(np.arange(6)).tolist() == [False, False, False, False, True, True]
    assert ring.bucket_slot(np.array([4, 5])).tolist() == [[2, 0], [2, 1]]
    assert (ring.written_blocks, ring.recycled_blocks, ring.recycled_buckets) == (6, 4, 2)
    with pytest.raises(ValueError, match="not on SSD"):
        ring.bucket_slot(np.array([0]))


def test_place_in_buckets_is_the_unbounded_ring():
    from fcctl.analyzers.kvmodel.tiered import BucketRing

    schedule = synthetic_turns(block_tokens=16, sessions=4, tokens=16 * 20, turns=3)
    placed = place_in_buckets(schedule, block_bytes=1, bucket_bytes=3, memory_tier_bytes=7)
    first = np.cumsum([0, *[s.blocks for s in schedule.sessions]])
    ring = BucketRing(num_keys=int(first[-1]), blocks_per_bucket=3)
    keys = first[placed.order[:, 0]] + placed.order[:, 1]
    ring.append(keys)
    assert ring.recycled_blocks == 0
    for s, where in enumerate(placed.placement):
        assert ring.bucket_slot(np.arange(first[s], first[s + 1])).tolist() == where.tolist()


def test_unbounded_ring_numbers_writes_as_the_kernel_does():
    from fcctl.analyzers.kvmodel.tiered import BucketRing

    keys = np.random.default_rng(3).permutation(50)
    rings = [BucketRing(num_keys=50, blocks_per_bucket=4) for _ in range(2)]
    for ring, kernel in zip(rings, (False, True), strict=True):
        ring.append(keys[:20], use_kernel=kernel)
        ring.append(keys[20:], use_kernel=kernel)
    assert rings[0].seq_of.tolist() == rings[1].seq_of.tolist()
    assert rings[0].ring.tolist() == rings[1].ring.tolist()
    assert rings[0].meta.tolist() == rings[1].meta.tolist()
