"""Replicas that do not multiply the cost blindly (issue #33 item 8): what the seed varies in a
concurrency run, which points replicas past the first replay, and the runs they skip."""

from __future__ import annotations

import numpy as np
import pytest

import fcctl
from fcctl.analyzers.replay.engine import admission_order
from fcctl.analyzers.replay.loadplan import LoadPlan
from fcctl.analyzers.replay.replicas import (
    _node_points,
    fixed_plan,
    inputs_of,
    replica_points,
)
from fcctl.analyzers.replay.verdict import meets_slo
from tests.conftest import SAMPLES

CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
MOONCAKE = str(SAMPLES / "mooncake_conversation_2k.jsonl")


def test_seed_zero_admits_sessions_in_the_traces_order_and_others_shuffle_it() -> None:
    starts = np.arange(0, 50, 5)
    assert admission_order(starts, 0) is starts
    one = admission_order(starts, 1)
    assert sorted(one.tolist()) == starts.tolist() and one.tolist() != starts.tolist()
    assert admission_order(starts, 1).tolist() == one.tolist()  # seeded: the same again
    assert admission_order(starts, 2).tolist() != one.tolist()


def _tables(seed: int) -> list[object]:
    r = fcctl.replay(
        CLAUDE, concurrency=[4], policies=["flat"], seed=seed, jobs=1, keep_tables=True
    )
    return [p.policies["flat"].table for p in r.rates]


def test_a_concurrency_replica_replays_other_sessions_together() -> None:
    """The seed is what replicas vary: in a concurrency run, which sessions are active at once
    (before this, every seed replayed the same run and the replicas' spread measured nothing)."""
    a, b = _tables(0)[0], _tables(1)[0]
    assert a is not None and b is not None
    assert a.height == b.height
    assert not a["ttft_s"].equals(b["ttft_s"])


def test_replicas_past_the_first_replay_the_points_the_decision_reads() -> None:
    """Per policy the longest leading run of points meeting the SLO over replica 0's draws,
    and two more; the operating point; computed here by hand from the same draws."""
    first = fcctl.replay(CLAUDE, concurrency=[2, 4, 8, 16, 32], jobs=1, keep_tables=True)
    keys = sorted(_node_points(first))
    for slo in (0.05, 0.5, 2.0, 60.0):
        inp = inputs_of([first], seed=0)
        want: set[tuple[float, int]] = set()
        for figures in inp.figures.values():
            m = np.stack([meets_slo(f, slo, 0.01) for f in figures])
            run = 0
            for d in range(m.shape[1]):
                k = 0
                while k < m.shape[0] and m[k, d]:
                    k += 1
                run = max(run, k)
            want.update(keys[: run + 2])
        if inp.operating_index is not None:
            want.add(keys[inp.operating_index])
        got = replica_points(first, slo)
        assert got == sorted(want)
        assert set(got) <= set(keys) and len(got) >= min(2, len(keys))


def test_a_replica_past_the_first_runs_only_its_points() -> None:
    """The replay with three replicas: replica 0 swept every point; the note names the others'
    points; the decision's replicas count is three."""
    r = fcctl.replay(CLAUDE, concurrency=[2, 4, 8, 16, 32], replicas=3, jobs=1, slo_ttft_p99_s=0.05)
    note = next(n for n in r.notes if n.startswith("replicas: seeds 0..2 at"))
    assert "sessions" in note
    assert r.decision is not None and r.decision.replicas == 3
    assert [p.concurrency for p in r.rates] == [2, 4, 8, 16, 32]


def test_fixed_plan_replays_exactly_the_points() -> None:
    sweep = LoadPlan(auto_concurrency=True, replicas=3, slo_ttft_p99_s=2.0)
    fixed = fixed_plan(sweep, [(0.0, 44), (0.0, 710)])
    assert fixed.concurrency == (44, 710) and not fixed.sweeps_sessions
    assert fixed.replicas == 1 and fixed.fixed_points(710) == [(None, 44), (None, 710)]
    both = LoadPlan(auto_rates=True, auto_concurrency=True, replicas=3)  # plan's: the trace picks
    assert fixed_plan(both, [(0.0, 1), (0.0, 5)]).concurrency == (1, 5)
    rates = LoadPlan(auto_rates=True, operating_rate=2.0, replicas=3)
    fixed = fixed_plan(rates, [(0.5, 0), (2.0, 0)])
    assert fixed.fixed_points(10) == [(2.0, None), (0.5, None)]
    assert not fixed.sweeps_rates


@pytest.mark.parametrize("replicas", [1, 3])
def test_an_open_loop_trace_at_offered_rates_runs_one_replica(replicas: int) -> None:
    """Its requests arrive at their own scaled timestamps; no seed draws anything, so the other
    replicas would repeat replica 0: they are not run, and no figure of the decision moves."""
    r = fcctl.replay(MOONCAKE, rates=[0.5, 2.0], replicas=replicas, jobs=1)
    one = fcctl.replay(MOONCAKE, rates=[0.5, 2.0], replicas=1, jobs=1)
    assert r.decision is not None and one.decision is not None
    assert r.decision.replicas == 1
    assert r.decision == one.decision
    said = [n for n in r.notes if n.startswith("replicas: 1 run of")]
    assert said == (
        [f"replicas: 1 run of {replicas} (the others would repeat it)"] if replicas > 1 else []
    )


def test_a_run_too_short_for_a_window_is_named_by_its_whole_runs_rate(tmp_path) -> None:
    """Two requests: the steady-state window is empty, so the decision's load is the whole
    run's served rate (as the per-load labels), not "0 requests/s served"."""
    trace = tmp_path / "two.jsonl"
    line = '{"timestamp": %d, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}\n'
    trace.write_text(line % 0 + line % 1000)
    r = fcctl.replay(str(trace), jobs=1)
    assert r.decision is not None and r.decision.load > 0
    assert all(x > 0 for x in r.decision.loads_swept)
