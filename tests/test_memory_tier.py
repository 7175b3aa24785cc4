from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fcctl.analyzers.reuse.analyze import analyze_trace
from fcctl.analyzers.reuse.memory_tier import (
    DEFAULT_MEMORY_CAPACITIES_BYTES,
    memory_tier,
    reference_lru_hit_share,
)
from fcctl.analyzers.reuse.stack import flatten_accesses, reuse_pass
from tests.analyze_helpers import TEN_BYTES_PER_TOKEN, example_trace, make_trace


def test_memory_tier_by_hand() -> None:
    # block bytes 40; stack distances [2,2,3,3,3,5]; 12 accesses; ideal hit share 6/12.
    caps = [80, 120, 199, 240, 10_000]  # 2, 3, 4 (floor 4.975), 6, 250 blocks
    res = analyze_trace(example_trace(), geometry=TEN_BYTES_PER_TOKEN, memory_capacities_bytes=caps)
    got = [(p.capacity_blocks, p.lru_hit_share, p.share_of_ideal) for p in res.memory_tier]
    # C=2: no distance < 2 -> 0;  C=3: 2,2 -> 2/12;  C=4: + 3,3,3 -> 5/12;  C=6, 250: all 6/12
    want = [(2, 0.0, 0.0), (3, 2 / 12, 1 / 3), (4, 5 / 12, 5 / 6), (6, 0.5, 1.0), (250, 0.5, 1.0)]
    for (gb, gh, gi), (wb, wh, wi) in zip(got, want, strict=True):
        assert gb == wb and gh == pytest.approx(wh) and gi == pytest.approx(wi)
    assert res.memory_tier[2].ssd_reuse_share == pytest.approx(1 / 6)


def test_defaults_are_documented_values() -> None:
    gib = 1 << 30
    assert DEFAULT_MEMORY_CAPACITIES_BYTES == (16 * gib, 64 * gib, 256 * gib, 1024 * gib)
    res = analyze_trace(example_trace(), geometry=TEN_BYTES_PER_TOKEN)
    assert [p.capacity_bytes for p in res.memory_tier] == list(DEFAULT_MEMORY_CAPACITIES_BYTES)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(min_value=0, max_value=25), max_size=8), min_size=1, max_size=30),
    st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=5),
)
def test_one_pass_curve_equals_plain_lru(requests: list[list[int]], capacities: list[int]) -> None:
    trace = make_trace(requests)
    acc = flatten_accesses(trace.requests)
    rp = reuse_pass(acc, trace.requests["timestamp_s"].to_numpy())
    n = acc.num_accesses
    block_bytes = 7
    points = memory_tier(
        rp.stack_count if n else None,
        block_accesses=n,
        reuse_access_share=rp.num_reaccesses / n if n else None,
        block_bytes=block_bytes,
        capacities_bytes=[c * block_bytes + 3 for c in capacities],  # floor() drops the +3
    )
    stream = [b for r in requests for b in r]
    for c, p in zip(capacities, points, strict=True):
        assert p.capacity_blocks == c
        if n:
            assert p.lru_hit_share == pytest.approx(reference_lru_hit_share(stream, c), abs=1e-12)


def test_reference_lru_by_hand() -> None:
    # capacity 2: A B A (hit) C (evicts B) B (miss) A (miss: A was LRU after C, B) -> 1/6
    assert reference_lru_hit_share(list("ABACBA"), 2) == pytest.approx(1 / 6)
    assert np.isclose(reference_lru_hit_share(list("AAAA"), 1), 3 / 4)
