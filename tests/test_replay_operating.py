"""The operating point of a replay (analyzers/replay/operating.py): hand-computed interval
figures, the window, saturation, and the identities the JSON promises on real runs."""

from __future__ import annotations

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
        assert p.utilisation.ssd_write is None
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
    hw = tiny_node(gpu_kv=2, host=2, ssd=400, staging=12, prefetch_timeout_max_s=100.0,
                   prefetch_timeout_base_s=100.0)  # fmt: skip
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
    assert flooded.utilisation.prefill_max > 0.9  # the busier worker never idles


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
