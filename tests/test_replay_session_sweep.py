"""The automatic sweep of concurrent sessions (analyzers/replay/session_sweep.py) and the labels
of load points by what they achieved (analyzers/replay/achieved.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import fcctl
from fcctl.analyzers.replay import LoadPlan, RateResult, RunSpec, replay_trace
from fcctl.analyzers.replay.achieved import is_reached, load_label, load_words, served_rate
from fcctl.analyzers.replay.operating import SATURATION_TOLERANCE
from fcctl.analyzers.replay.session_sweep import (
    MAX_SESSION_POINTS,
    amplification,
    auto_concurrency_steps,
    session_counts,
    stop_reason,
)
from tests.replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node

POLICIES = ("memory-only", "flat")


def test_session_counts_double_to_the_traces_sessions_then_grow_by_multiples() -> None:
    # 710 sessions, the whole Claude Code trace: 1/16 of them doubling, then all of them.
    assert session_counts(710, growth=False) == [44, 88, 176, 352, 710]
    assert session_counts(710, growth=True) == [44, 88, 176, 352, 710, 1420, 2840, 5680]
    # No doubling just under S: the last step to today's load is 1.5x-3x.
    assert session_counts(5, growth=False) == [1, 2, 5]
    assert session_counts(1, growth=True) == [1, 2, 4, 8]
    assert len(session_counts(10**6, growth=True)) <= MAX_SESSION_POINTS
    assert [amplification(c, 710) for c in (44, 710, 711, 1420, 5680)] == [1, 1, 2, 2, 8]


def _sessions_run(sessions: int = 12) -> tuple[list[RateResult], str]:
    """The sweep on a small closed-loop trace, run point by point."""
    trace = random_session_trace(3, sessions=sessions, turns=5)
    spec = RunSpec(geometry=TINY, hardware=tiny_node(prefill_tokens_per_s=400.0))
    steps = auto_concurrency_steps(sessions)
    try:
        wanted = next(steps)
        while True:
            plan = LoadPlan(policies=POLICIES, concurrency=tuple(wanted))
            wanted = steps.send(list(replay_trace(trace, spec, plan).rates))
    except StopIteration as done:
        points, why = done.value
    return points, why


def _with(
    point: RateResult, *, served: float | None = None, p99: float | None = None
) -> RateResult:
    """``point`` with every policy's served rate or p99 TTFT set (to test the stop rules)."""
    policies = {}
    for name, p in point.policies.items():
        if served is not None:
            p = dataclasses.replace(
                p, achieved_rate=dataclasses.replace(p.achieved_rate, central=served)
            )
        if p99 is not None:
            p = dataclasses.replace(p, ttft_s=dataclasses.replace(p.ttft_s, p99=p99))
        policies[name] = p
    return dataclasses.replace(point, policies=policies)


def test_stop_rules_growth_and_slo() -> None:
    points, _ = _sessions_run()
    low, high = points[0], points[1]
    # The leading policy's served rate grew less than 10 %: the load stopped reaching the node.
    assert stop_reason(_with(low, served=1.0), _with(high, served=1.05), None) is not None
    assert "stopped growing" in (
        stop_reason(_with(low, served=1.0), _with(high, served=1.05), None) or ""
    )
    assert stop_reason(_with(low, served=1.0), _with(high, served=1.2), None) is None
    # Every layout's p99 over the SLO stops it; one layout within it does not.
    assert "SLO" in (stop_reason(None, _with(high, p99=3.0), 2.0) or "")
    one_within = dict(_with(high, p99=3.0).policies)
    one_within["flat"] = dataclasses.replace(
        one_within["flat"], ttft_s=dataclasses.replace(one_within["flat"].ttft_s, p99=1.0)
    )
    assert stop_reason(None, dataclasses.replace(high, policies=one_within), 2.0) is None


def test_a_stop_below_the_traces_sessions_still_runs_todays_load() -> None:
    points, _ = _sessions_run()
    by_c = {p.concurrency: p for p in points}
    steps = auto_concurrency_steps(16, slo_ttft_p99_s=1e-9)  # every point breaks the SLO
    first = next(steps)
    assert first == [1]
    # The SLO stop at 1 session skips the doublings and runs the trace's 16 sessions, then ends.
    assert steps.send([by_c[1]]) == [16]
    with pytest.raises(StopIteration) as done:
        steps.send([dataclasses.replace(by_c[1], concurrency=16)])
    ran, why = done.value.value
    assert [p.concurrency for p in ran] == [1, 16]
    assert "SLO" in why and "today's load" in why


def test_the_sweep_runs_up_to_the_traces_sessions_in_order() -> None:
    points, why = _sessions_run(12)
    ran = [p.concurrency for p in points]
    assert ran[-1] == 12 and ran == sorted(ran) and ran[0] == 1
    assert set(ran) <= set(session_counts(12, growth=False))
    assert why


def test_a_closed_loop_trace_sweeps_sessions_and_a_timed_trace_rates() -> None:
    spec = RunSpec(geometry=TINY, hardware=tiny_node(prefill_tokens_per_s=400.0))
    both = LoadPlan(policies=POLICIES, auto_rates=True, auto_concurrency=True, rates=())
    paced = replay_trace(random_session_trace(5, sessions=8, turns=4), spec, both)
    assert paced.load["axis"] == "concurrency"
    assert all(p.rate is None for p in paced.rates)
    # Today's load, all of the trace's sessions active, is the operating point.
    assert paced.operating_point is not None and paced.operating_point.concurrency == 8
    note = next(n for n in paced.notes if n.startswith("concurrency auto"))
    assert "today's load" in note and "8 of the trace's sessions" in note
    timed = replay_trace(random_time_trace(5, requests=60), spec, both)
    assert timed.load["axis"] == "rate" and all(p.rate is not None for p in timed.rates)


def test_labels_name_the_load_served_and_mark_an_offered_rate_not_reached() -> None:
    assert load_words(16.0, None, 15.0) == "15 req/s served (offered 16)"
    assert load_words(1.6, None, 0.078) == "0.078 req/s served (offered 1.6 req/s: not reached)"
    assert load_words(None, 44, 0.078) == "44 sessions active, 0.078 req/s served"
    # The boundary is the saturation tolerance the replay judges "saturated" by.
    assert is_reached(10.0, 10.0 * (1 - SATURATION_TOLERANCE))
    assert not is_reached(10.0, 10.0 * (1 - SATURATION_TOLERANCE) - 1e-9)
    # On a real run of a self-paced trace far beyond its pace, the label is what was served.
    trace = random_session_trace(4, sessions=6, turns=4)
    spec = RunSpec(geometry=TINY, hardware=tiny_node())
    point = replay_trace(trace, spec, LoadPlan(policies=POLICIES, rates=(1000.0,))).rates[0]
    served = served_rate(point)
    assert served is not None and served < 900.0
    label = load_label(point)
    assert label.startswith(f"{served:.3g} req/s served") and "not reached" in label


def test_the_automatic_sessions_sweep_takes_no_sessions_or_rate_beside_it() -> None:
    from fcctl.common.errors import FcctlInputError

    for bad in ({"concurrency": (4,)}, {"operating_rate": 2.0}):
        with pytest.raises(FcctlInputError, match=r"^concurrency: auto sweeps the sessions"):
            LoadPlan(auto_concurrency=True, **bad)
    # With both automatic axes the trace picks; a user's rate keeps the rates.
    both = LoadPlan(auto_rates=True, auto_concurrency=True, rates=())
    assert both.for_workload(True).axis == "concurrency"
    assert both.for_workload(False).axis == "rate"
    assert LoadPlan(auto_rates=True, rates=()).for_workload(True).axis == "rate"


def test_growth_past_the_traces_sessions_ends_when_the_served_rate_stops_growing() -> None:
    points, _ = _sessions_run()
    base = points[0]
    steps = auto_concurrency_steps(4, growth=True)
    asked = [next(steps)]
    # Served 1, 2, 4 req/s at 1, 2, 4 sessions; 4.2 at 8 sessions (2x today's): under 10 %.
    for served in (1.0, 2.0, 4.0):
        c = asked[-1][0]
        asked.append(steps.send([_with(dataclasses.replace(base, concurrency=c), served=served)]))
    assert asked == [[1], [2], [4], [8]]
    with pytest.raises(StopIteration) as done:
        steps.send([_with(dataclasses.replace(base, concurrency=8), served=4.2)])
    ran, why = done.value.value
    assert [p.concurrency for p in ran] == [1, 2, 4, 8]
    assert "stopped growing" in why and "from 4 to 8 sessions" in why


def test_growth_stops_at_the_most_copies_the_memory_budget_holds() -> None:
    # The multiples past the trace's sessions are cut at the limit the budget gives.
    assert session_counts(710, growth=True, growth_limit=4)[-2:] == [1420, 2840]
    assert session_counts(710, growth=True, growth_limit=1)[-1] == 710
    steps = auto_concurrency_steps(5, growth=True, growth_limit=1)
    assert next(steps) == [1]
    points, _ = _sessions_run()
    base = points[0]
    asked = [[1]]
    with pytest.raises(StopIteration) as done:
        while True:
            c = asked[-1][0]
            asked.append(steps.send([_with(dataclasses.replace(base, concurrency=c), served=c)]))
    ran, why = done.value.value
    assert max(p.concurrency or 0 for p in ran) == 5
    assert "memory budget holds no 2x amplification" in why


def test_the_budget_limits_growth_once_per_worker_process() -> None:
    from fcctl.analyzers.replay.amplify import amplified_bytes
    from fcctl.analyzers.replay.parallel import Execution
    from fcctl.analyzers.replay.run import growth_within_budget, simulation_workload

    trace = random_session_trace(seed=3)
    spec = RunSpec(geometry=TINY, hardware=tiny_node())
    w = simulation_workload(trace, spec.geometry, spec.hardware)
    plan = LoadPlan(policies=POLICIES, auto_concurrency=True, amplify_growth=True)
    plan = plan.for_workload(w.closed_loop)
    room = amplified_bytes(w, 4)  # holds 2x and 4x once, not 8x
    assert growth_within_budget(w, plan, Execution(jobs=1, memory_budget_bytes=room)) == 4
    # Two workers each build their own copy: the same budget holds 2x at most.
    assert growth_within_budget(w, plan, Execution(jobs=2, memory_budget_bytes=room)) <= 2
    assert growth_within_budget(w, plan, Execution(jobs=1, memory_budget_bytes=1)) == 1
    no_growth = dataclasses.replace(plan, amplify_growth=False)
    assert growth_within_budget(w, no_growth, Execution(jobs=1, memory_budget_bytes=room)) is None


def test_requests_rejected_for_their_length_do_not_make_a_light_load_not_reached(
    tmp_path: Path,
) -> None:
    """Half the requests are longer than llama-3.1-8b's context: at a light offered rate the
    node serves every request that ran, so the rate is reached, though what was served is half
    of what was offered (the saturation rule holds served to the part of the offered rate that
    ran; the label reads that rule, not the raw numbers)."""
    import json

    lines = [
        json.dumps(
            {
                "timestamp": 1000 * i,
                "input_length": 200_000 if i % 2 else 1024,
                "output_length": 10,
                "hash_ids": [10 * i + k for k in range(2 if i % 2 == 0 else 400)],
            }
        )
        for i in range(400)
    ]
    trace = tmp_path / "half_too_long.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    r = fcctl.replay(str(trace), rates=[0.5], policies=["flat"], jobs=1)
    point = r.rates[0]
    served = served_rate(point)
    assert served is not None and served < 0.6 * 0.5  # half of the offered rate was rejected
    assert not is_reached(0.5, served)  # by the raw numbers it would read "not reached"
    assert not point.policies["flat"].saturated
    assert "not reached" not in load_label(point)
    assert load_label(point) == f"{served:.3g} req/s served (offered 0.5)"
