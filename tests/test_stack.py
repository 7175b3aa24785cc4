from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fcctl.analyzers.reuse.stack import (
    dense_ids,
    flatten_accesses,
    log2_histogram_from_counts,
    percentiles_from_counts,
    percentiles_from_weighted,
    reference_stack_distances,
    reuse_pass,
    stack_distances,
)
from tests.analyze_helpers import example_trace, make_trace


def test_stack_distance_by_hand() -> None:
    # A B C A B B D A
    # pos3 A: B, C since pos0 -> 2;  pos4 B: C, A since pos1 -> 2;  pos5 B: nothing -> 0
    # pos7 A: B, D since pos3 (B twice counts once) -> 2; A B C D first -> -1
    blocks = [10, 11, 12, 10, 11, 11, 13, 10]
    assert list(stack_distances(blocks)) == [-1, -1, -1, 2, 2, 0, -1, 2]
    assert reference_stack_distances(blocks) == [-1, -1, -1, 2, 2, 0, -1, 2]


streams = st.lists(st.integers(min_value=0, max_value=12), max_size=120)


@settings(max_examples=300, deadline=None)
@given(streams, st.lists(st.integers(min_value=0, max_value=12), max_size=40))
def test_kernel_equals_reference(blocks: list[int], repeat: list[int]) -> None:
    # Appending a re-read run exercises the kernel's run shortcut.
    stream = blocks + repeat + repeat + blocks
    assert list(stack_distances(stream)) == reference_stack_distances(stream)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=10), max_size=6), max_size=25))
def test_kernel_equals_reference_across_chunks(requests: list[list[int]]) -> None:
    # State carried between kernel calls (progress chunks of whole requests) must not change
    # any distance: with 3-access chunks nearly every request is its own call.
    requests = requests + requests
    trace = make_trace(requests)
    acc = flatten_accesses(trace.requests)
    out = np.empty(acc.num_accesses, dtype=np.int64)
    rp = reuse_pass(
        acc, trace.requests["timestamp_s"].to_numpy(), per_access_out=out, chunk_accesses=3
    )
    stream = [b for r in requests for b in r]
    assert out.tolist() == reference_stack_distances(stream)
    assert int(rp.seconds_counts.sum()) == rp.num_reaccesses


def test_huge_ids_are_distinct() -> None:
    ids = [2**64 - 1, 0, 2**63, 2**64 - 1, 0]
    # 2^64-1 again: 0 and 2^63 in between -> 2; 0 again: 2^63 and 2^64-1 -> 2
    assert list(stack_distances(ids)) == [-1, -1, -1, 2, 2]


def test_flatten_dense_ids_and_offsets() -> None:
    acc = flatten_accesses(example_trace().requests)
    # first-appearance order: 1->0, 2->1, 3->2, 4->3, 5->4, 6->5
    assert acc.block.tolist() == [0, 1, 2, 0, 1, 3, 4, 0, 1, 3, 5, 2]
    assert acc.request_offsets.tolist() == [0, 3, 6, 7, 11, 12]
    assert acc.num_blocks == 6


def test_flatten_empty_and_null_lists() -> None:
    df = pl.DataFrame(
        {"hash_ids": [[7], [], None, [7, 8]]}, schema={"hash_ids": pl.List(pl.UInt64)}
    )
    acc = flatten_accesses(df)
    assert acc.block.tolist() == [0, 0, 1]
    assert acc.request_offsets.tolist() == [0, 1, 1, 1, 3]


def test_reuse_pass_outputs_by_hand() -> None:
    t = example_trace()
    acc = flatten_accesses(t.requests)
    rp = reuse_pass(acc, t.requests["timestamp_s"].to_numpy())
    # re-accesses (pos: stack, requests, seconds):
    #   3: 2, 1-0=1, 10   4: 2, 1, 10   7: 3, 3-1=2, 25   8: 3, 2, 25   9: 3, 2, 25
    #   11 (block 3 again, last at pos2): {1,2,4,5,6} in between -> 5, 4-0=4, 36
    assert rp.num_reaccesses == 6
    assert rp.stack_count.tolist()[:6] == [0, 0, 2, 3, 0, 1]
    assert rp.request_count.tolist()[:5] == [0, 2, 3, 0, 1]
    seconds = np.repeat(rp.seconds_values, rp.seconds_counts)
    assert sorted(seconds.tolist()) == [10, 10, 25, 25, 25, 36]
    # run-length encoded: r1 re-reads r0 twice (10 s), r3 re-reads r1 three times (25 s)
    assert rp.seconds_values.tolist() == [10, 25, 36] and rp.seconds_counts.tolist() == [2, 3, 1]
    assert rp.reused_per_request.tolist() == [0, 2, 0, 3, 1]
    assert rp.access_count.tolist() == [3, 3, 2, 2, 1, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=200))
def test_percentiles_from_counts_match_numpy(values: list[int]) -> None:
    counts = np.bincount(values)
    got = percentiles_from_counts(counts, [0, 50, 90, 99, 100])
    want = np.percentile(np.array(values), [0, 50, 90, 99, 100])
    assert got == pytest.approx(want.tolist(), rel=1e-12, abs=1e-12)


def test_percentiles_of_nothing_are_none() -> None:
    assert percentiles_from_counts(np.zeros(3, dtype=np.int64), [50]) == [None]


def test_log2_histogram() -> None:
    # values: 0 x3, 2 x2, 3 x5, 4 x1 -> [0,1):3 [1,2):0 [2,4):7 [4,8):1
    lo, hi, cnt = log2_histogram_from_counts(np.array([3, 0, 2, 5, 1]))
    assert lo.tolist() == [0, 1, 2, 4] and hi.tolist() == [1, 2, 4, 8]
    assert cnt.tolist() == [3, 0, 7, 1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1e6), st.integers(min_value=0, max_value=5)),
        min_size=1,
        max_size=50,
    )
)
def test_weighted_percentiles_match_numpy(pairs: list[tuple[float, int]]) -> None:
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    got = percentiles_from_weighted(values, counts, [0, 50, 90, 99, 100])
    if counts.sum() == 0:
        assert got == [None] * 5
    else:
        want = np.percentile(np.repeat(values, counts), [0, 50, 90, 99, 100])
        assert got == pytest.approx(want.tolist(), rel=1e-12, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=60), st.integers(0, 4))
def test_dense_ids_first_appearance(ids: list[int], repeats: int) -> None:
    stream = np.array(ids * (repeats + 1), dtype=np.uint64)
    dense, n = dense_ids(stream)
    first: dict[int, int] = {}
    want = [first.setdefault(int(x), len(first)) for x in stream]
    assert dense.tolist() == want and n == len(first)


def test_dense_ids_through_table_growth() -> None:
    # 200k distinct ids forces several doublings of the hash table (it starts at 65536 slots).
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**63, size=200_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    stream = np.concatenate([base, base[::-1], base[:1000]])
    dense, n = dense_ids(stream)
    uniq, first_idx, inverse = np.unique(stream, return_index=True, return_inverse=True)
    assert n == uniq.shape[0]
    # same partition as np.unique, numbered by first appearance
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(first_idx)] = np.arange(n)
    assert np.array_equal(dense, rank[inverse])
