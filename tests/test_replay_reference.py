"""The fast path (numba store, vectorised read cost) against the plain reference store, on
small random traces, for every policy and every metric and per-request figure."""

from __future__ import annotations

import pytest
from replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node

from fcctl.analyzers.replay import (
    POLICIES,
    Hardware,
    ReplayConfig,
    build_workload,
    simulate,
    with_values,
)
from fcctl.analyzers.replay.engine import DEFAULT_ROUTER
from fcctl.analyzers.replay.reference import ReferenceStore
from fcctl.analyzers.replay.store import FastStore
from fcctl.common.jsonio import to_jsonable
from fcctl.layout.placement import PlacementRule

NODES = {
    "tight": tiny_node(),
    "no-gpu": tiny_node(gpu_kv=0, host=10, ssd=60, bucket=4),
    "roomy": tiny_node(gpu_kv=64, host=400, ssd=4000, window_streams=2),
}


def _fast_equals_reference(seed: int, hw: Hardware, policy: str, router: str) -> None:
    trace = random_session_trace(seed) if seed % 2 == 0 else random_time_trace(seed)
    config = ReplayConfig(
        geometry=TINY,
        hardware=hw,
        keep_tables=True,
        router=router,
        placement=PlacementRule(short_reply_tokens=200, agent_context_tokens=64),
    )
    workload = build_workload(trace, TINY, hw.gpus)
    for rate in (5.0, 40.0):
        fast = simulate(workload, config, policy, rate, store_factory=FastStore)
        ref = simulate(workload, config, policy, rate, store_factory=ReferenceStore)
        assert to_jsonable(fast) == to_jsonable(ref)
        assert fast.table is not None and ref.table is not None
        assert fast.table.equals(ref.table)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("node", list(NODES))
@pytest.mark.parametrize("seed", range(6))
def test_fast_equals_reference(policy: str, node: str, seed: int) -> None:
    _fast_equals_reference(seed, NODES[node], policy, DEFAULT_ROUTER)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("node", list(NODES))
@pytest.mark.parametrize("router", ["kv-aware", "round-robin"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_equals_reference_with_a_host_pool_per_worker(
    policy: str, node: str, router: str, seed: int
) -> None:
    # host_scope "worker": lookups, writes and evictions per worker pool. Round-robin moves
    # sessions between workers, so blocks miss in one pool and are duplicated in another.
    hw = with_values(NODES[node], {"host_scope": "worker"}, "test")
    _fast_equals_reference(seed, hw, policy, router)


def test_flat_read_cost_gap_rule_is_the_planners_threshold() -> None:
    """read_cost merges a hole exactly when plan_reads itself would (the limit is found by
    bisection; here asked at every hole around it and at a spread of others)."""
    from fcctl.analyzers.replay.flatcost import GAP_BYTES, merge_limit, planner_merges

    limit = merge_limit()
    assert limit == GAP_BYTES  # plan_reads merges a hole strictly below its gap
    holes = [*range(0, 4 * 4096), *range(limit - 4096, limit + 4096), 3 * GAP_BYTES]
    assert all(planner_merges(h) == (h < limit) for h in holes)
    assert merge_limit(1) == 1 and merge_limit(0) == 1  # touching extents always merge


@pytest.mark.parametrize("seed", range(40))
def test_flat_read_cost_equals_planning_every_layer(seed: int) -> None:
    """The compiled read cost gives the commands and bytes of planning every layer's real
    extents with plan_reads (the reference store's way), on random restores: segments laid
    out one after another in a few files as flat writes them (with holes below, at and above
    the gap between them; pieces not page multiples, so aligned ranges touch or overlap), and
    runs (at most two, apart, per segment) given in any order."""
    import numpy as np

    from fcctl.analyzers.replay.flatcost import GAP_BYTES, SegmentTable, read_cost

    rng = np.random.default_rng(seed)
    layers = int(rng.integers(1, 6))
    piece = int(rng.choice([100, 4096, 5000, 40960]))
    record = int(rng.choice([0, 512, 4096]))
    segs = SegmentTable()
    sizes = []
    file_end = [0, 0, 0, 0]
    for _ in range(int(rng.integers(1, 2000))):  # > 1024: the table grows too
        blocks = int(rng.integers(1, 9))
        stride = blocks * piece + int(rng.choice([0, 96, 4000, GAP_BYTES]))
        hole = int(rng.choice([0, 1, 4095, GAP_BYTES - 1, GAP_BYTES, GAP_BYTES + 1, 10**6]))
        f = int(rng.integers(0, 4))
        offset = file_end[f] + hole
        file_end[f] = offset + record + layers * stride
        segs.add(f, offset, stride, blocks, 0)
        sizes.append(blocks)
    rows = []
    for s in rng.choice(segs.n, size=min(segs.n, int(rng.integers(1, 12))), replace=False):
        n = sizes[int(s)]
        cut = int(rng.integers(1, n + 1))  # a run in [0, cut), another maybe in [cut + 1, n)
        first = int(rng.integers(0, cut))
        rows.append((int(s), first, int(rng.integers(1, cut - first + 1))))
        if cut + 1 < n and rng.random() < 0.5:
            rows.append((int(s), cut + 1, int(rng.integers(1, n - cut))))
    runs = np.array(rows, dtype=np.int64)[rng.permutation(len(rows))]
    expected = ReferenceStore.flat_read_cost(
        None,  # type: ignore[arg-type]  # the method reads no state of the store
        runs,
        segs,
        layers=layers,
        record_bytes=record,
        piece_bytes=piece,
    )
    got = read_cost(runs, segs, layers=layers, record_bytes=record, piece_bytes=piece)
    assert got == expected
    assert all(isinstance(x, int) for x in got)
