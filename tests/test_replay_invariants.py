"""Invariants of the replay on hand-made and random traces, and hand-computed scenarios."""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import (
    BLOCK_BYTES,
    TINY,
    random_session_trace,
    random_time_trace,
    tiny_node,
    trace_of,
)

from fcctl.analyzers.kvmodel.tiered import eviction_order, place_in_buckets
from fcctl.analyzers.kvmodel.turns import synthetic_turns
from fcctl.analyzers.replay import POLICIES, ReplayConfig, build_workload, simulate
from fcctl.analyzers.replay.store import FastStore
from fcctl.common.jsonio import to_jsonable
from fcctl.layout.placement import PlacementRule
from fcctl.layout.session_format import record_bytes, segment_bytes

RULE = PlacementRule(short_reply_tokens=200, agent_context_tokens=64)
TRACES = [random_session_trace(s) for s in range(4)] + [random_time_trace(s) for s in range(4)]


def _run(trace, hw, policy, rate, **kw):
    config = ReplayConfig(geometry=TINY, hardware=hw, placement=RULE, keep_tables=True, **kw)
    return simulate(build_workload(trace, TINY, hw.gpus), config, policy, rate)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("trace_no", range(len(TRACES)))
def test_never_beats_ideal_and_conserves_blocks(policy: str, trace_no: int) -> None:
    trace = TRACES[trace_no]
    for hw in (tiny_node(), tiny_node(gpu_kv=0, host=5, ssd=30)):
        r = _run(trace, hw, policy, 30.0)
        assert r.gpu_hit_share <= r.ideal_hit_share + 1e-12
        t = r.table
        assert (t["delivered_blocks"] <= t["blocks"]).all()
        assert (t["gpu_blocks"] + t["host_blocks"] + t["ssd_blocks"] == t["delivered_blocks"]).all()
        delivered_tokens = np.minimum(t["delivered_blocks"] * 16, trace.requests["input_tokens"])
        assert (t["recomputed_tokens"] + delivered_tokens == trace.requests["input_tokens"]).all()
        assert (t["ttft_s"] > 0).all()


@pytest.mark.parametrize("trace_no", range(len(TRACES)))
def test_memory_only_with_unbounded_memory_at_low_rate_delivers_the_ideal(trace_no: int) -> None:
    # One request at a time: every re-access finds its block, stored when the earlier prefill
    # finished (a request whose prefix another is still prefilling would recompute it).
    hw = tiny_node(gpu_kv=0, host=10**6)
    r = _run(TRACES[trace_no], hw, "memory-only", 0.001)
    assert r.gpu_hit_share == pytest.approx(r.ideal_hit_share)


@pytest.mark.parametrize("policy", ["memory-only", "tiered", "flat", "flat-fcfs"])
def test_no_gpu_no_memory_delivers_nothing_without_ssd(policy: str) -> None:
    hw = tiny_node(gpu_kv=0, host=0, ssd=0)
    for trace in TRACES[:3]:
        r = _run(trace, hw, policy, 10.0)
        assert r.gpu_hit_share == 0.0
        assert r.ssd_read_bytes == 0


@pytest.mark.parametrize("trace_no", range(len(TRACES)))
def test_memory_only_never_falls_as_memory_grows(trace_no: int) -> None:
    shares = [
        _run(TRACES[trace_no], tiny_node(gpu_kv=2, host=h), "memory-only", 0.001).gpu_hit_share
        for h in (0, 2, 5, 10, 20, 50, 200)
    ]
    assert shares == sorted(shares)


def test_nothing_read_from_a_medium_never_written() -> None:
    for trace in TRACES:
        mem = _run(trace, tiny_node(), "memory-only", 30.0)
        assert mem.delivered_from["ssd"] == 0 and mem.ssd_read_bytes == 0
        tiered = _run(trace, tiny_node(ssd=0), "tiered", 30.0)
        assert tiered.delivered_from["ssd"] == 0 and tiered.ssd_read_bytes == 0
        flat = _run(trace, tiny_node(host=0), "flat", 30.0)
        assert flat.delivered_from["host"] == 0
        assert set(flat.details["placed_blocks"]) <= {"memory_full"}


def test_same_seed_same_result_and_seeds_differ() -> None:
    trace = random_session_trace(11, sessions=10)
    a = _run(trace, tiny_node(), "flat", 20.0, seed=3)
    b = _run(trace, tiny_node(), "flat", 20.0, seed=3)
    c = _run(trace, tiny_node(), "flat", 20.0, seed=4)
    assert to_jsonable(a) == to_jsonable(b)
    assert a.table.equals(b.table)
    assert not a.table["arrival_s"].equals(c.table["arrival_s"])


def test_cancellation_by_hand() -> None:
    # Turn 0 writes 10 blocks; no GPU cache, no host memory: tiered puts them straight on SSD.
    # Turn 1 reads them: 163,840 bytes at 1 MB/s (no command cost) would take 0.16384 s, the
    # timeout is 0.05 s: cancelled with 0.05 / 0.16384 of the bytes read. With --cancel credit
    # 3 whole blocks (in prefix order) are delivered and the other 7 recomputed; with discard
    # (the default) what was read is thrown away and all 10 are recomputed.
    trace = trace_of([list(range(10)), list(range(12))], sessions=["s", "s"], timestamps=[0, 10])
    hw = tiny_node(
        gpu_kv=0,
        host=0,
        ssd=1000,
        ssd_read_bytes_per_s=1e6,
        ssd_command_s=0.0,
        prefetch_timeout_base_s=0.05,
        prefetch_timeout_per_1k_tokens_s=0.0,
        ssd_stream_bytes_per_s=None,
    )
    r = _run(trace, hw, "tiered", 1.0, cancel="credit")
    row = r.table.row(1, named=True)
    assert row["cancelled"] and r.cancelled_prefetches == 1
    assert row["ssd_blocks"] == 3 and row["delivered_blocks"] == 3
    assert row["ssd_read_bytes"] == round(0.05 / 0.16384 * 10 * BLOCK_BYTES) == 50000
    assert row["prefetch_s"] == pytest.approx(0.05)
    assert row["recomputed_tokens"] == 12 * 16 - 3 * 16
    d = _run(trace, hw, "tiered", 1.0)
    row = d.table.row(1, named=True)
    assert row["cancelled"] and row["ssd_read_bytes"] == 50000
    assert row["ssd_blocks"] == 0 and row["delivered_blocks"] == 0
    assert row["recomputed_tokens"] == 12 * 16
    assert d.read_amplification is None  # bytes read, none delivered
    # The same read without a timeout problem completes and delivers all 10.
    ok = _run(
        trace, tiny_node(gpu_kv=0, host=0, ssd=1000, prefetch_timeout_base_s=5.0), "tiered", 1.0
    )
    assert ok.table.row(1, named=True)["ssd_blocks"] == 10 and ok.cancelled_prefetches == 0
    # flat never cancels: its read waits and delivers everything.
    flat = _run(trace, hw, "flat", 1.0)
    assert flat.cancelled_prefetches == 0 and flat.table.row(1, named=True)["ssd_blocks"] == 10


def test_per_session_reclamation_by_hand() -> None:
    # Sessions a, b, c write one 10-block turn each (first turns: SSD), one second apart; then
    # b and a come back. A segment of 10 blocks is 4096 + 2 x 81920 = 167,936 bytes, so three
    # are 503,808 > 0.9 x 450,000: reclaim to <= 360,000 drops the oldest session, a, whole.
    seg = segment_bytes(2, 10 * TINY.bytes_per_block_per_layer(16))
    assert seg == record_bytes(2) + 2 * 81920 == 167936
    ids = {k: list(range(i * 100, i * 100 + 10)) for i, k in enumerate("abc")}
    trace = trace_of(
        [ids["a"], ids["b"], ids["c"], ids["b"] + [901], ids["a"] + [900]],
        sessions=["a", "b", "c", "b", "a"],
        timestamps=[0, 1, 2, 3, 4],
        order="time",
    )
    hw = tiny_node(gpu_kv=0, host=0, ssd=0, ssd_bytes=450000)
    r = _run(trace, hw, "flat", 5 / 4)  # the trace's own rate: times unchanged
    t = r.table
    # b's history is read whole (its one new block fits under the watermark); a's is gone.
    assert t["ssd_blocks"].to_list() == [0, 0, 0, 10, 0]
    assert t["recomputed_tokens"].to_list()[4] == 11 * 16
    # The peak: a's new 11-block turn lands beside b, c and b's new block before the reclaim
    # (a itself was dropped when c's write crossed the watermark).
    piece = TINY.bytes_per_block_per_layer(16)
    assert r.peak_ssd_bytes == 2 * seg + segment_bytes(2, piece) + segment_bytes(2, 11 * piece)


def test_bucket_fifo_matches_the_tiered_model() -> None:
    # The store's SSD buckets, fed analyzers.kvmodel.tiered's eviction order, recycle first-in
    # first-out exactly as BucketPlacement says: each session keeps the prefix it computes.
    schedule = synthetic_turns(block_tokens=16, sessions=5, tokens=16 * 24, turns=3)
    order = eviction_order(schedule, block_bytes=1, memory_tier_bytes=10)
    placement = place_in_buckets(schedule, block_bytes=1, bucket_bytes=8, memory_tier_bytes=10)
    first = np.cumsum([0, *[s.blocks for s in schedule.sessions]])
    ssd = 60
    store = FastStore(
        num_blocks=int(first[-1]),
        max_request_blocks=1,
        workers=1,
        gpu_blocks=0,
        host_blocks=0,
        ssd_blocks=ssd,
        blocks_per_bucket=8,
        total_accesses=int(first[-1]),
    )
    for session, block in order.tolist():
        store.host_insert(np.array([first[session] + block], dtype=np.int32), True)
    recycled = store.ssd.recycled_buckets
    assert recycled > 0
    expected = placement.prefix_blocks(recycled)
    on_ssd = store.ssd.seq_of >= 0
    for s in range(len(schedule.sessions)):
        held = on_ssd[first[s] : first[s + 1]]
        prefix = int(np.argmin(held)) if not held.all() else int(held.shape[0])
        assert prefix == expected[s]


@pytest.mark.parametrize("store_name", ["fast", "reference"])
def test_replay_host_lru_evicts_in_the_tiered_librarys_tail_first_order(store_name: str) -> None:
    # The replay's host LRU (whole prompt looked up, then inserted, as a tiered request does)
    # writes to SSD in exactly analyzers.kvmodel.tiered.eviction_order(touch="tail-first");
    # iobench's
    # head-first order differs on the same schedule (docs/simulator.md §3).
    from fcctl.analyzers.replay.reference import ReferenceStore

    schedule = synthetic_turns(block_tokens=16, sessions=5, tokens=16 * 24, turns=4)
    first = np.cumsum([0, *[s.blocks for s in schedule.sessions]])
    total = int(first[-1])
    factory = FastStore if store_name == "fast" else ReferenceStore
    store = factory(
        num_blocks=total,
        max_request_blocks=total,
        workers=1,
        gpu_blocks=0,
        host_blocks=10,
        ssd_blocks=10 * total,
        blocks_per_bucket=4,
        total_accesses=total,
    )
    written: list[int] = []
    seen = [0] * len(schedule.sessions)
    for session, turn in schedule.arrivals:
        seen[session] += schedule.sessions[session].turn_blocks[turn]
        blk = np.arange(first[session], first[session] + seen[session], dtype=np.int32)
        store.lookup_lru(blk, 0, True)
        store.host_insert(blk, True)
    if store_name == "fast":
        on_ssd = np.flatnonzero(store.ssd.seq_of[:total] >= 0)
        written = on_ssd[np.argsort(store.ssd.seq_of[on_ssd])].tolist()
    else:
        written = [b for _, b in sorted((q, b) for b, q in store.ssd_seq.items())]
    tail_first = eviction_order(schedule, block_bytes=1, memory_tier_bytes=10, touch="tail-first")
    expected = (first[tail_first[:, 0]] + tail_first[:, 1])[: len(written)].tolist()
    assert len(written) == total - 10 and written == expected
    head_first = eviction_order(schedule, block_bytes=1, memory_tier_bytes=10)
    assert (first[head_first[:, 0]] + head_first[:, 1])[: len(written)].tolist() != expected
