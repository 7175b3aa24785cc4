"""The operating point of a replay (analyzers/replay/operating.py): hand-computed interval
figures, the window, saturation, and the identities the JSON promises on real runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fcctl.analyzers.replay import ReplayConfig, replay_trace
from fcctl.analyzers.replay.operating import (
    SATURATION_TOLERANCE,
    occupancy,
    union_length,
    window_of,
)
from fcctl.analyzers.replay.run import simulate
from fcctl.analyzers.replay.workload import build_workload
from tests.replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node, trace_of


def test_union_length_by_hand() -> None:
    s = np.array([0.0, 1.0, 5.0, 6.0, 2.0])
    e = np.array([2.0, 3.0, 6.0, 7.0, 2.5])
    # [0, 3) and [5, 7): 3 + 2
    assert union_length(s, e) == pytest.approx(5.0)
    assert union_length(np.array([]), np.array([])) == 0.0
    assert union_length(np.array([1.0]), np.array([1.0])) == 0.0


def test_occupancy_by_hand() -> None:
    # [0, 2) and [1, 3) inside [0, 5]: level 1, 2, 1 on [0,1), [1,2), [2,3): area 4 -> 0.8.
    got = occupancy(np.array([0.0, 1.0]), np.array([2.0, 3.0]), 0.0, 5.0)
    assert got.mean == pytest.approx(0.8) and got.max == 2
    # Back to back: never two at once.
    got = occupancy(np.array([0.0, 1.0]), np.array([1.0, 2.0]), 0.0, 2.0)
    assert got.mean == pytest.approx(1.0) and got.max == 1
    # Clipped to the span.
    got = occupancy(np.array([-5.0]), np.array([10.0]), 0.0, 2.0)
    assert got.mean == pytest.approx(1.0) and got.max == 1


def test_window_drops_the_first_and_last_tenth() -> None:
    w = window_of(np.arange(11, dtype=float))  # ranks 1 .. 9
    assert (w.start_s, w.end_s, w.requests) == (1.0, 9.0, 9)
    one = window_of(np.array([3.0]))
    assert (one.start_s, one.end_s, one.requests) == (3.0, 3.0, 1)


def test_utilisation_is_busy_time_over_workers_and_span() -> None:
    """The documented identity: summed prefill busy time / (workers x span) == prefill_mean,
    recomputed here from the per-request table."""
    trace = random_session_trace(3, sessions=8, turns=6)
    hw = tiny_node(host=20, ssd=200)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    w = build_workload(trace, TINY, 2)
    for policy in ("memory-only", "tiered", "flat"):
        p = simulate(w, config, policy, 2.0)
        t = p.table
        assert t is not None
        span = float(t["end_s"].max() - t["arrival_s"].min())
        busy = (t["first_token_s"] - t["start_s"]).to_numpy()
        per_worker = np.bincount(t["worker"].to_numpy(), weights=busy, minlength=2)
        assert p.utilisation.prefill_mean == pytest.approx(per_worker.sum() / (2 * span))
        assert p.utilisation.prefill_max == pytest.approx(per_worker.max() / span)
        assert 0 <= p.utilisation.prefill_mean <= p.utilisation.prefill_max <= 1
        assert 0 <= p.utilisation.decode_mean <= 1 and 0 <= p.utilisation.ssd_read <= 1
        assert 0 <= p.utilisation.ssd_write <= 1
        if policy == "memory-only":
            assert p.ssd_write_bytes == 0 and p.utilisation.ssd_write == 0
        else:  # every byte written was charged on the drives: write share = bytes / capacity
            assert p.ssd_write_bytes > 0
            assert p.utilisation.ssd_write == pytest.approx(
                p.ssd_write_bytes / hw.ssd_write_rate / span
            )
            days = span / 86400
            assert p.drive_writes_per_day == pytest.approx(p.ssd_write_bytes / hw.ssd_bytes / days)
        # Phases in order for every request.
        assert (t["arrival_s"] <= t["ready_s"]).all() and (t["ready_s"] <= t["start_s"]).all()
        assert (t["start_s"] <= t["first_token_s"]).all()
        assert (t["first_token_s"] <= t["end_s"]).all()
        assert p.sessions_active.max <= w.sessions and p.sessions_active.mean > 0
        assert p.staging.peak_bytes >= p.staging.mean_bytes >= 0
        if policy == "memory-only":
            assert p.utilisation.ssd_read == 0 and p.queue_depth.ssd_max == 0
            assert p.staging.bytes == 0 and p.prefetch_s.mean is None
        if policy == "tiered":
            assert p.staging.bytes == hw.staging_bytes
        # TTFT split: the window's requests are those that read from SSD and those that did not.
        assert p.ttft_s.ssd.requests + p.ttft_s.no_ssd.requests == p.ttft_s.requests
        if p.prefetch_s.mean is not None:
            assert p.prefetch_s.wait_mean is not None and p.prefetch_s.read_mean is not None
            assert p.prefetch_s.wait_mean + p.prefetch_s.read_mean == pytest.approx(
                p.prefetch_s.mean
            )


def test_staging_waits_show_in_prefetch_wait() -> None:
    """A staging buffer of one request's reads: later prefetches wait for it, and the wait
    shows in wait_mean while the SSD queue depth exceeds one."""
    hashes = [list(range(100 * s, 100 * s + 12)) for s in range(6)]
    # Each session: a first turn, then the same prompt again once everything left the GPU/host.
    rows = hashes + [[*h, 999_000 + i] for i, h in enumerate(hashes)]
    trace = trace_of(rows, timestamps=[0.001 * i for i in range(6)] + [5.0] * 6)
    hw = tiny_node(
        gpu_kv=2,
        host=2,
        ssd=400,
        staging=12,
        prefetch_timeout_max_s=100.0,
        prefetch_timeout_base_s=100.0,
    )
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    p = simulate(build_workload(trace, TINY, 2), config, "tiered", 1.0)
    assert p.cancelled_prefetches == 0
    assert p.prefetch_s.wait_mean is not None and p.prefetch_s.wait_mean > 0
    assert p.queue_depth.ssd_max >= 2
    assert p.staging.peak_bytes == 12 * (hw.staging_bytes // 12)


def test_open_loop_not_saturated_when_idle_and_saturated_when_flooded() -> None:
    trace = random_time_trace(1, requests=200)
    w = build_workload(trace, TINY, 2)
    idle = simulate(w, ReplayConfig(geometry=TINY, hardware=tiny_node()), "flat", 0.5)
    assert idle.offered_rate == 0.5 and not idle.saturated
    assert idle.achieved_rate.central == pytest.approx(0.5, rel=0.5)
    # Prefill at 20 tokens/s: a request of >= 16 tokens takes ~1 s, 1000 req/s cannot be served.
    slow = tiny_node(prefill_tokens_per_s=20.0)
    flooded = simulate(w, ReplayConfig(geometry=TINY, hardware=slow), "flat", 1000.0)
    assert flooded.saturated
    assert flooded.achieved_rate.central is not None
    assert flooded.achieved_rate.central < (1 - SATURATION_TOLERANCE) * 1000.0
    # The busier worker carries prefill chunks in most iterations (the rest: decodes alone, at
    # 1/20 s a token too).
    assert flooded.utilisation.prefill_max > 0.75
    assert flooded.saturated_by == "node" and idle.saturated_by is None
    # One clock: the unloaded schedule is the trace's own, the offered rate over the window.
    assert idle.achieved_rate.unloaded == pytest.approx(0.5)


def test_saturation_by_the_sessions_pace_is_told_from_the_node() -> None:
    """Per-session clocks: sessions of many turns with long gaps cannot offer 50 req/s over
    the window even on an idle node: saturated, by the trace's pacing; the same sessions on
    a node slowed to a crawl are saturated by the node."""
    rows, sessions, times = [], [], []
    for s in range(6):
        for k in range(8):
            rows.append([1000 * s + j for j in range(k + 1)])
            sessions.append(f"s{s}")
            times.append(30.0 * k)  # 30 s think time between turns
    trace = trace_of(rows, sessions=sessions, timestamps=times, output_tokens=[2] * len(rows))
    w = build_workload(trace, TINY, 2)
    idle = simulate(w, ReplayConfig(geometry=TINY, hardware=tiny_node()), "flat", 50.0)
    assert idle.saturated and idle.saturated_by == "trace-pacing"
    assert idle.utilisation.prefill_max < 0.05
    u = idle.achieved_rate.unloaded
    assert u is not None and idle.achieved_rate.central == pytest.approx(u, rel=0.1)
    crawl = tiny_node(prefill_tokens_per_s=0.5)  # a 16-token block: 32 s
    slow = simulate(w, ReplayConfig(geometry=TINY, hardware=crawl), "flat", 50.0)
    assert slow.saturated and slow.saturated_by == "node"


def test_replay_document_has_a_decision_per_rate() -> None:
    trace = random_session_trace(5, sessions=10, turns=5)
    result = replay_trace(
        trace, ReplayConfig(geometry=TINY, hardware=tiny_node(host=10), rates=(0.5, 4.0))
    )
    for r in result.rates:
        assert r.decision.best in ("none", "memory-only", "tiered", "flat")
        assert r.decision.why
    named = [r.rate for r in result.rates if r.decision.best != "none"]
    assert result.divergence_rate == (min(named) if named else None)
    assert result.decision_margins == {"margin_pp": 1.0, "ttft_margin": 0.1}


# --- load axes: concurrency and think time (analyzers/replay/load.py) -------------------------


def test_parse_think_time_and_concurrency() -> None:
    from fcctl.analyzers.replay.load import ThinkTime, parse_concurrency, parse_think_time
    from fcctl.common.errors import InputError

    assert parse_think_time("original") == ThinkTime("original")
    assert parse_think_time("capped:60").apply(100.0) == 60.0
    assert parse_think_time("scale:0.5").apply(10.0) == 5.0
    assert parse_think_time("none").apply(10.0) == 0.0
    for bad in ("capped", "capped:-1", "scale:nan", "scale:inf", "sometimes", "none:3"):
        with pytest.raises(InputError, match=r"^think_time: "):
            parse_think_time(bad)
    assert parse_concurrency("16,all,4,4") == (4, 16, None)
    assert parse_concurrency(3) == (3,)
    for bad in ("0", "-2", "1.5", "x", ""):
        with pytest.raises(InputError, match=r"^concurrency: "):
            parse_concurrency(bad)


def _session_spans(table):  # type: ignore[no-untyped-def]
    import polars as pl

    return (
        table.group_by("session_index")
        .agg(pl.col("arrival_s").min().alias("a"), pl.col("end_s").max().alias("e"))
        .sort("a")
    )


def test_concurrency_one_runs_sessions_back_to_back() -> None:
    trace = random_session_trace(7, sessions=6, turns=4)
    w = build_workload(trace, TINY, 2)
    config = ReplayConfig(geometry=TINY, hardware=tiny_node(), keep_tables=True)
    p = simulate(w, config, "flat", None, concurrency=1)
    assert p.concurrency == 1 and p.offered_rate is None and not p.saturated
    spans = _session_spans(p.table)
    a, e = spans["a"].to_numpy(), spans["e"].to_numpy()
    assert a[0] == 0.0
    # Each session starts exactly when the one before it ends.
    assert np.array_equal(a[1:], e[:-1])
    assert p.sessions_active.max == 1


def test_concurrency_all_starts_every_session_at_zero() -> None:
    trace = random_session_trace(8, sessions=7, turns=3)
    w = build_workload(trace, TINY, 2)
    config = ReplayConfig(geometry=TINY, hardware=tiny_node(), keep_tables=True)
    p = simulate(w, config, "tiered", None, concurrency=w.sessions)
    spans = _session_spans(p.table)
    assert (spans["a"] == 0.0).all()
    assert p.sessions_active.max == w.sessions


def test_think_time_none_and_capped() -> None:
    from fcctl.analyzers.replay.load import ThinkTime

    # Gaps of 50 s between turns, short service: the think time decides the arrivals.
    rows = [[1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5]]
    trace = trace_of(rows, sessions=["s"] * 3, timestamps=[0.0, 50.0, 100.0])
    w = build_workload(trace, TINY, 2)
    for think, expect_gap in ((ThinkTime("none"), None), (ThinkTime("capped", 5.0), 5.0)):
        config = ReplayConfig(
            geometry=TINY, hardware=tiny_node(), keep_tables=True, think_time=think
        )
        p = simulate(w, config, "memory-only", None, concurrency=1)
        t = p.table.sort("arrival_s")
        arrival, end = t["arrival_s"].to_numpy(), t["end_s"].to_numpy()
        if expect_gap is None:  # the next turn follows the previous output at once
            assert np.array_equal(arrival[1:], end[:-1])
        else:
            assert np.allclose(arrival[1:], np.maximum(arrival[:-1] + expect_gap, end[:-1]))
    # At a rate, a per-session trace's think time applies the same way.
    config = ReplayConfig(
        geometry=TINY, hardware=tiny_node(), keep_tables=True, think_time=ThinkTime("scale", 0.0)
    )
    p = simulate(w, config, "memory-only", 1.0)
    t = p.table.sort("arrival_s")
    assert np.array_equal(t["arrival_s"].to_numpy()[1:], t["end_s"].to_numpy()[:-1])


def test_concurrency_fast_equals_reference() -> None:
    from fcctl.analyzers.replay.reference import ReferenceStore
    from fcctl.analyzers.replay.store import FastStore

    trace = random_session_trace(11, sessions=8, turns=5)
    w = build_workload(trace, TINY, 2)
    config = ReplayConfig(geometry=TINY, hardware=tiny_node(host=10, ssd=60), keep_tables=True)
    for policy in ("memory-only", "tiered", "flat", "flat-fcfs"):
        fast = simulate(w, config, policy, None, concurrency=3, store_factory=FastStore)
        ref = simulate(w, config, policy, None, concurrency=3, store_factory=ReferenceStore)
        assert fast.table is not None and ref.table is not None
        assert fast.table.equals(ref.table)
        assert dataclasses.replace(fast, table=None) == dataclasses.replace(ref, table=None)


def test_replay_concurrency_cli(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from typer.testing import CliRunner

    from fcctl.cli import app
    from tests.conftest import SAMPLES

    runner = CliRunner()
    claude = str(SAMPLES / "claude_code_sample.jsonl.gz")
    r = runner.invoke(
        app,
        [
            "replay",
            claude,
            "--concurrency",
            "2,all",
            "--think-time",
            "capped:60",
            "--policies",
            "memory-only,flat",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["load"]["axis"] == "concurrency" and doc["load"]["think_time"] == "capped:60"
    assert [p["concurrency"] for p in doc["rates"]] == [2, doc["trace"]["sessions"]]
    assert all(p["rate"] is None for p in doc["rates"])
    assert doc["divergence_rate"] is None
    both = runner.invoke(app, ["replay", claude, "--concurrency", "2", "--rates", "1"])
    assert both.exit_code == 2 and "not both" in both.stderr
    bad = runner.invoke(app, ["replay", claude, "--think-time", "capped:x"])
    assert bad.exit_code == 2 and bad.stderr.startswith("fcctl: error: --think-time: capped")
    mooncake = str(SAMPLES / "mooncake_conversation_2k.jsonl")
    one_clock = runner.invoke(app, ["replay", mooncake, "--think-time", "none", "--rates", "1"])
    assert one_clock.exit_code == 2 and "only 'original' applies" in one_clock.stderr
    out = tmp_path / "o"
    r = runner.invoke(
        app, ["replay", claude, "--concurrency", "2", "--policies", "flat", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert (out / "requests-flat-c2.parquet").is_file()


# --- SSD bandwidth caps, writes and read amplification ---------------------------------------


def test_one_restore_alone_gets_the_stream_cap_and_two_share_the_link() -> None:
    from fcctl.analyzers.replay.timemodel import EventQueue, PsLink

    done: dict[str, float] = {}
    ev = EventQueue()
    link = PsLink(ev, cap=0.25)  # one transfer may take a quarter of the link
    link.add("a", 1.0, 0.0, lambda t: done.__setitem__("a", t))
    ev.run()
    assert done["a"] == pytest.approx(4.0)  # alone: capped at 1/4
    ev = EventQueue()
    link = PsLink(ev, cap=0.25)
    for k in "abcdefgh":  # eight streams: each gets 1/8, below the cap
        link.add(k, 1.0, 0.0, lambda t, k=k: done.__setitem__(k, t))
    ev.run()
    assert done["h"] == pytest.approx(8.0)
    assert link.used_s["read"] == pytest.approx(8.0) and link.busy_s == pytest.approx(8.0)
    ev = EventQueue()
    link = PsLink(ev, cap=0.5)
    link.add("r", 1.0, 0.0, lambda t: done.__setitem__("r", t))
    link.add("w", 1.0, 0.0, None, kind="write")
    ev.run()
    assert done["r"] == pytest.approx(2.0)
    assert link.used_s == {"read": pytest.approx(1.0), "write": pytest.approx(1.0)}


def test_flat_writes_equal_its_placed_ssd_segment_bytes() -> None:
    """Nothing is reclaimed on a large SSD, so the SSD reclaimer's peak (the sum of the segment
    bytes placed, record and alignment included) equals the bytes written, exactly."""
    from fcctl.layout.session_format import segment_bytes

    trace = random_session_trace(21, sessions=6, turns=5)
    hw = tiny_node(host=0, ssd=10_000)  # no memory: every write goes to SSD
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    w = build_workload(trace, TINY, 2)
    p = simulate(w, config, "flat", 1.0)
    placed = sum(p.details["placed_blocks"].values())
    assert placed > 0 and p.ssd_write_bytes > placed * w.block_bytes
    assert p.ssd_write_bytes == p.peak_ssd_bytes
    # One block's segment: a record plus one 4096-aligned range per layer.
    assert segment_bytes(TINY.layers, TINY.bytes_per_block_per_layer(16)) >= w.block_bytes


def test_read_amplification_counts_discarded_cancelled_reads_exactly() -> None:
    """Two sessions restore 10 blocks each from SSD; the second restore is cancelled by its
    timeout while the first completes: amplification = (bytes read by both) / (bytes the
    completed one delivered), exactly."""
    first = [list(range(10)), list(range(12))]
    second = [list(range(100, 110)), list(range(100, 112))]
    trace = trace_of(
        [first[0], second[0], first[1], second[1]],
        sessions=["a", "b", "a", "b"],
        timestamps=[0.0, 0.0, 10.0, 10.0],
    )
    hw = tiny_node(
        gpu_kv=0,
        host=0,
        ssd=1000,
        ssd_read_bytes_per_s=1e6,
        ssd_command_s=0.0,
        staging=10,
        prefetch_timeout_base_s=0.3,
        prefetch_timeout_per_1k_tokens_s=0.0,
        ssd_stream_bytes_per_s=None,
        ssd_write_bytes_per_s=1e12,
    )
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    w = build_workload(trace, TINY, 1)
    p = simulate(w, config, "tiered", None, concurrency=2)
    t = p.table
    cancelled = t.filter(t["cancelled"])
    completed = t.filter(~t["cancelled"] & (t["ssd_blocks"] > 0))
    assert cancelled.height == 1 and completed.height == 1
    read = int(t["ssd_read_bytes"].sum())
    delivered = int(completed["ssd_blocks"][0]) * w.block_bytes
    assert int(cancelled["ssd_read_bytes"][0]) > 0  # it had read something before the timeout
    assert p.ssd_delivered_bytes == delivered == 10 * w.block_bytes
    assert p.read_amplification == read / delivered
    assert p.read_amplification > 1


# --- GPU memory holds running requests (#15.3) ------------------------------------------------


def _shared_pool_node(pool_blocks: int, **kw):  # type: ignore[no-untyped-def]
    # One worker; running requests and cached prefixes share the GPU pool (the presets' model).
    return tiny_node(gpus=1, gpu_kv=pool_blocks, gpu_running_kv_bytes=None, **kw)


def test_requests_larger_than_the_pool_or_the_context_are_rejected() -> None:
    from dataclasses import replace

    from fcctl.layout.geometry import ModelInfo

    rows = [list(range(4)), list(range(100, 130)), list(range(200, 204))]
    trace = trace_of(rows, timestamps=[0.0, 1.0, 2.0], output_tokens=[8, 8, 8])
    hw = _shared_pool_node(10)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    p = simulate(build_workload(trace, TINY, 1), config, "flat", 1.0)
    assert p.rejected_requests.count == 1
    assert dict(p.rejected_requests.reasons) == {"kv_exceeds_gpu_pool": 1}
    t = p.table
    assert t["rejected"].to_list() == [None, "kv_exceeds_gpu_pool", None]
    assert np.isnan(t["first_token_s"][1]) and not np.isnan(t["first_token_s"][2])
    # Its accesses were never delivered: the hit share counts them as misses.
    assert p.delivered_blocks <= p.block_accesses - 30
    # A model whose context is 100 tokens rejects the 30-block (480-token) prompt for that.
    short = replace(TINY, info=ModelInfo("test", "test", 0, 0, max_context_tokens=100))
    big = tiny_node(gpus=1)  # a pool for all of them: only the context limit applies
    config = ReplayConfig(geometry=short, hardware=big, keep_tables=True)
    p = simulate(build_workload(trace, short, 1), config, "tiered", 1.0)
    assert dict(p.rejected_requests.reasons) == {"exceeds_max_context": 1}


def test_every_request_rejected_is_one_line_of_bad_input() -> None:
    from fcctl.common.errors import InputError

    trace = trace_of([list(range(30))])
    config = ReplayConfig(geometry=TINY, hardware=_shared_pool_node(10))
    with pytest.raises(InputError, match="every request was rejected"):
        simulate(build_workload(trace, TINY, 1), config, "flat", 1.0)


def test_running_requests_wait_for_gpu_memory() -> None:
    """Two requests of 5 prompt + 3 output blocks arrive together on one worker with an 11-block
    pool: the first's prompt becomes cached at its first token but stays referenced (not
    evictable) until its decode ends, beside its 3 output blocks, so the second (8 blocks)
    waits until then (5 + 3 + 8 > 11)."""
    rows = [list(range(5)), list(range(100, 105))]
    trace = trace_of(rows, timestamps=[0.0, 0.0], output_tokens=[48, 48])
    config = ReplayConfig(geometry=TINY, hardware=_shared_pool_node(11), keep_tables=True)
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", 1.0)
    t = p.table.sort("start_s")
    first, second = t.row(0, named=True), t.row(1, named=True)
    assert second["start_s"] == pytest.approx(first["end_s"])
    assert p.rejected_requests.count == 0
    # With a pool of 16 both fit: the second starts when the worker is free (after prefill).
    config = ReplayConfig(geometry=TINY, hardware=_shared_pool_node(16), keep_tables=True)
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", 1.0)
    t = p.table.sort("start_s")
    assert t["start_s"][1] == pytest.approx(t["first_token_s"][0])


def test_running_requests_shrink_the_prefix_cache() -> None:
    """A shared pool evicts cached prefixes for a running request: a prompt cached before a
    big request runs is gone after it (with a separate pool it stays)."""
    small = list(range(4))
    big = list(range(100, 112))
    rows = [small, big, [*small, 999]]
    trace = trace_of(rows, timestamps=[0.0, 10.0, 20.0], output_tokens=[8, 8, 8])
    w = build_workload(trace, TINY, 1)
    shared = ReplayConfig(geometry=TINY, hardware=_shared_pool_node(16), keep_tables=True)
    apart = ReplayConfig(geometry=TINY, hardware=tiny_node(gpus=1, gpu_kv=16), keep_tables=True)
    got_shared = simulate(w, shared, "memory-only", 1.0).table["gpu_blocks"][2]
    got_apart = simulate(w, apart, "memory-only", 1.0).table["gpu_blocks"][2]
    assert got_apart == 4
    assert got_shared < 4


def test_shared_pool_fast_equals_reference() -> None:
    from fcctl.analyzers.replay.reference import ReferenceStore
    from fcctl.analyzers.replay.store import FastStore

    trace = random_session_trace(13, sessions=8, turns=5)
    hw = tiny_node(gpu_kv=40, host=10, ssd=60, gpu_running_kv_bytes=None)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    w = build_workload(trace, TINY, 2)
    for policy in ("memory-only", "tiered", "flat"):
        fast = simulate(w, config, policy, 3.0, store_factory=FastStore)
        ref = simulate(w, config, policy, 3.0, store_factory=ReferenceStore)
        assert fast.table is not None and ref.table is not None
        assert fast.table.equals(ref.table)
        assert dataclasses.replace(fast, table=None) == dataclasses.replace(ref, table=None)


# --- topology: MLA at tp > 1 reads and copies the same bytes in tiered and flat (#15.6) --------


def test_mla_tp8_reads_the_same_bytes_in_tiered_and_flat() -> None:
    from fcctl.analyzers.replay.engine import Simulation
    from fcctl.analyzers.replay.policies import POLICIES
    from fcctl.analyzers.replay.store import FastStore
    from fcctl.layout.geometry import model_geometry

    # Turn 0 writes 64 blocks; no GPU cache and no host memory, so turn 1 reads them from SSD.
    rows = [list(range(64)), list(range(66))]
    trace = trace_of(rows, sessions=["s", "s"], timestamps=[0.0, 100.0])
    got = {}
    for tp in (1, 8):
        geo = model_geometry("deepseek-v3", tp=tp)
        hw = tiny_node(
            gpus=tp,
            gpu_kv=0,
            host=0,
            ssd=10_000,
            staging=10_000,
            prefetch_timeout_base_s=1e6,
            prefetch_timeout_max_s=1e6,
            gpu_running_kv_bytes=1 << 50,
        )
        config = ReplayConfig(geometry=geo, hardware=hw, keep_tables=True)
        w = build_workload(trace, geo, 1)
        for policy in ("tiered", "flat"):
            p = simulate(w, config, policy, 1.0)
            row = p.table.row(1, named=True)
            got[(tp, policy)] = (row["ssd_read_bytes"], row["ssd_read_commands"])
            assert row["ssd_blocks"] == 64
        sim = Simulation(w, config.spec, POLICIES["tiered"], rate=1.0, store_factory=FastStore)
        got[(tp, "copy_s")] = sim.copy_s(64)
        got[(tp, "block_bytes")] = w.block_bytes
    # The latent is stored once: the same node bytes whatever tp, in both layouts.
    assert got[(1, "block_bytes")] == got[(8, "block_bytes")]
    assert got[(8, "tiered")] == got[(1, "tiered")]
    assert got[(8, "flat")] == got[(1, "flat")]
    tiered_bytes, flat_bytes = got[(8, "tiered")][0], got[(8, "flat")][0]
    assert flat_bytes == pytest.approx(tiered_bytes, rel=0.05)  # records and alignment only
    # Every rank receives the whole latent over its own link: tp 8 copies take as long as tp 1.
    assert got[(8, "copy_s")] == pytest.approx(got[(1, "copy_s")])


# --- routers and per-worker GPU copies (#15.5) --------------------------------------------------


def test_round_robin_routes_in_arrival_order_and_caches_copies_per_worker() -> None:
    # Four requests with the same prompt, one after another: round-robin sends them to workers
    # 0, 1, 0, 1; each worker keeps its own copy, so the third and fourth hit their own GPU.
    rows = [list(range(6))] * 4
    trace = trace_of(rows, timestamps=[0.0, 10.0, 20.0, 30.0])
    config = ReplayConfig(
        geometry=TINY, hardware=tiny_node(gpu_kv=20), keep_tables=True, router="round-robin"
    )
    p = simulate(build_workload(trace, TINY, 2), config, "memory-only", 1.0)
    t = p.table.sort("arrival_s")
    assert t["worker"].to_list() == [0, 1, 0, 1]
    assert t["gpu_blocks"].to_list() == [0, 0, 6, 6]


def test_kv_aware_follows_the_cached_prefix_and_spreads_load() -> None:
    # A shared prompt cached on one worker draws its later users there while that worker is
    # idle; two fresh prompts arriving together go to different workers.
    rows = [list(range(8)), [*range(8), 100], list(range(200, 208)), list(range(300, 308))]
    trace = trace_of(rows, timestamps=[0.0, 10.0, 20.0, 20.0])
    config = ReplayConfig(geometry=TINY, hardware=tiny_node(gpu_kv=40), keep_tables=True)
    p = simulate(build_workload(trace, TINY, 2), config, "memory-only", 1.0)
    t = p.table.sort("request_index")
    w = t["worker"].to_list()
    assert w[1] == w[0] and t["gpu_blocks"][1] == 8
    assert w[2] != w[3]


def test_default_router_balances_mooncake_at_its_natural_rate() -> None:
    """The issue's bar: no worker above 2x the mean prefill utilisation on the Mooncake
    conversation sample at its own rate with the default router (first-block routing put one
    worker at 0.999 on the whole trace)."""
    from fcctl.analyzers.replay import PRESETS
    from fcctl.analyzers.traces.readers import read_trace
    from fcctl.layout.geometry import model_geometry
    from tests.conftest import SAMPLES

    trace = read_trace(SAMPLES / "mooncake_conversation_2k.jsonl")
    geo = model_geometry("llama-3.1-8b")
    w = build_workload(trace, geo, 8)
    natural = w.natural_rate_per_s()
    assert natural is not None
    p = simulate(w, ReplayConfig(geometry=geo, hardware=PRESETS["h200-8x"]), "flat", natural)
    u = p.utilisation
    assert u.prefill_mean > 0.05  # the node is doing real work at this rate
    assert u.prefill_max <= 2 * u.prefill_mean


# --- batched, chunked prefill and decode (#15.4) --------------------------------------------


def _one_worker_run(trace, **values):  # type: ignore[no-untyped-def]
    hw = tiny_node(gpus=1, **values)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", 1.0)
    assert p.table is not None and p.rejected_requests.count == 0
    return p, p.table.sort("request_index")


def test_a_long_cold_prefill_holds_a_short_request_for_at_most_one_chunk() -> None:
    """A 400 K-token cold prompt and a 1 K-token one arriving while it runs, on one worker:
    the short one waits for the chunk in flight, then runs beside the next chunk; without
    chunking it waits for the whole long prefill."""
    long_prompt = list(range(25_000))  # 400 K tokens
    short_prompt = list(range(100_000, 100_064))  # 1 K tokens
    trace = trace_of([long_prompt, short_prompt], timestamps=[0.0, 0.001], output_tokens=[4, 4])
    rate = 20_000.0  # tokens/s: an iteration of k prompt tokens takes k / rate
    _, t = _one_worker_run(trace, prefill_tokens_per_s=rate)
    chunk = 8192
    short = t.row(1, named=True)
    in_flight = chunk / rate  # the long prompt's chunk running when the short one arrives
    own = (chunk + 1024) / rate  # the next iteration: the long one's chunk and the short prompt
    assert short["ttft_s"] <= in_flight + own + 1e-9
    assert short["start_s"] - short["arrival_s"] <= in_flight + 1e-9
    # The long prompt took one chunk an iteration: its prefill spans at least 400K / rate.
    long = t.row(0, named=True)
    assert long["first_token_s"] - long["start_s"] >= 400_000 / rate - 1e-9
    # One iteration for everything (no chunking, no budget): the short one waits it out.
    _, t = _one_worker_run(
        trace, prefill_tokens_per_s=rate, prefill_chunk_tokens=1 << 20, max_batched_tokens=1 << 20
    )
    assert t["start_s"][1] >= t["first_token_s"][0]
    assert t["ttft_s"][1] > 10 * (in_flight + own)


def test_decode_time_is_the_kv_bytes_read_at_hbm_bandwidth() -> None:
    """One request alone: 1024 prompt tokens, 11 output tokens, so 10 decode iterations after
    the first token; iteration j reads (1025 + j) tokens' KV and computes one token."""
    trace = trace_of([list(range(64))], timestamps=[0.0], output_tokens=[11])
    rate = 20_000.0
    per_token_bytes = TINY.bytes_per_token_per_rank
    for hbm in (1e9, 4e9):
        _, t = _one_worker_run(trace, prefill_tokens_per_s=rate, hbm_bytes_per_s=hbm)
        kv_s = per_token_bytes / hbm
        want = sum(1 / rate + (1025 + j) * kv_s for j in range(10))
        row = t.row(0, named=True)
        assert row["end_s"] - row["first_token_s"] == pytest.approx(want, rel=1e-9)


def test_prefill_busy_is_at_most_the_union_of_prefill_intervals() -> None:
    """Batched prefills overlap in time: the worker's prefill busy time (the utilisation's
    numerator) is its iterations carrying chunks, never more than the union of its requests'
    [start, first token) intervals, and the identity with prefill_mean holds."""
    from fcctl.analyzers.replay.operating import union_length

    trace = random_session_trace(5, sessions=12, turns=6)
    hw = tiny_node(host=20, ssd=200, prefill_tokens_per_s=2000.0)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    w = build_workload(trace, TINY, 2)
    p = simulate(w, config, "flat", 50.0)
    t = p.table
    assert t is not None
    span = float(t["end_s"].max() - t["arrival_s"].min())
    unions = []
    overlapped = False
    for worker in (0, 1):
        mine = t.filter(t["worker"] == worker)
        s, e = mine["start_s"].to_numpy(), mine["first_token_s"].to_numpy()
        unions.append(union_length(s, e))
        overlapped |= float((e - s).sum()) > unions[-1] + 1e-9
    # Busy time summed over workers / (workers x span) is prefill_mean; the busiest is the max.
    assert p.utilisation.prefill_mean * 2 * span <= sum(unions) + 1e-9
    assert p.utilisation.prefill_max * span <= max(unions) + 1e-9
    assert p.utilisation.prefill_mean > 0
    assert overlapped  # the case the identity is about: prefills shared iterations


# --- staging: a stated, swept parameter (#15.8) -------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_staging_of_the_peak_restore_bytes_cancels_nothing_for_staging(seed: int) -> None:
    """Staging of at least the peak concurrent restore bytes (the peak occupancy with unbounded
    staging) never makes a prefetch wait: the run is the unbounded one, every figure equal,
    and no prefetch is cancelled waiting for staging; a smaller buffer does cancel for it."""
    from tests.replay_helpers import BLOCK_BYTES

    trace = random_session_trace(seed, sessions=24, turns=6)
    w = build_workload(trace, TINY, 2)

    def run(staging_blocks: int, ssd_bytes_per_s: float):  # type: ignore[no-untyped-def]
        hw = tiny_node(
            host=4,
            ssd=400,
            staging=staging_blocks,
            ssd_read_bytes_per_s=ssd_bytes_per_s,
            ssd_stream_bytes_per_s=None,
        )
        return simulate(w, ReplayConfig(geometry=TINY, hardware=hw), "tiered", 200.0)

    for ssd_rate in (20e6, 2e9):
        unbounded = run(1 << 30, ssd_rate)
        peak = unbounded.staging.peak_bytes
        assert peak > 0 and peak % BLOCK_BYTES == 0
        at_peak = run(peak // BLOCK_BYTES, ssd_rate)
        assert at_peak.details["cancelled_waiting_for_staging"] == 0
        assert dataclasses.replace(at_peak, staging=unbounded.staging) == unbounded
        assert at_peak.staging.bytes == peak
        if ssd_rate == 2e9:  # reads far inside their timeouts: nothing is cancelled at all
            assert at_peak.cancelled_prefetches == 0
        d = at_peak.details
        assert d["cancelled_waiting_for_staging"] + d["cancelled_reading"] == (
            at_peak.cancelled_prefetches
        )
    if seed == 0:  # two blocks of staging: prefetches queue for it and some time out waiting
        assert run(2, 20e6).details["cancelled_waiting_for_staging"] > 0
