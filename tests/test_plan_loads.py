"""``fcctl plan`` at loads the trace really reaches (issue #33, items 3-5): sessions swept for a
self-paced trace and rates for a timed one, every load named by what it achieved, the growth
answer and the model in the first lines, and the report's load-free verdict stated with its
size and the sentence that explains a difference."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.replay import ReplayResult
from fcctl.cli import app
from fcctl.planning import growth_lines, longest_context_preset, model_lines
from tests.conftest import SAMPLES
from tests.plan_helpers import small_trace

runner = CliRunner()
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"


def _plan(source: Path, out: Path, *extra: str) -> list[str]:
    r = runner.invoke(
        app, ["plan", str(source), "-o", str(out), "--jobs", "1", "--replicas", "1", *extra]
    )
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


@pytest.fixture(scope="module")
def claude_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("claude") / "p"
    return out, _plan(CLAUDE, out)


def _replay(out: Path) -> ReplayResult:
    return ReplayResult.from_json(json.loads((out / "replay.json").read_text()))


def test_a_self_paced_trace_sweeps_sessions_up_to_todays_load(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, lines = claude_plan
    replay = _replay(out)
    sessions = replay.trace.sessions
    assert replay.load["axis"] == "concurrency"
    assert all(p.rate is None for p in replay.rates)
    # Doubling from a few sessions to all of them, today's load (the operating point), then
    # past them by amplification: 2x, 4x, 8x the trace's sessions (the sample fits the budget).
    ran = sorted(p.concurrency or 0 for p in replay.rates)
    assert ran[0] < sessions and sessions in ran
    assert [c for c in ran if c > sessions] == [2 * sessions, 4 * sessions, 8 * sessions]
    assert {p.amplify for p in replay.rates if (p.concurrency or 0) > sessions} == {2, 4, 8}
    assert replay.operating_point is not None and replay.operating_point.concurrency == sessions
    # The first lines: the decision at today's load by sessions and what they were served,
    # then the growth answer with its range in multiples of today's load, and capacity.
    assert re.match(rf"decision at {sessions:,} sessions active, [0-9.]+ req/s served: ", lines[0])
    growth = next(line for line in lines[:4] if line.startswith("  growth: "))
    assert f"swept {ran[0]:,}-{ran[-1]:,} sessions" in growth
    assert f"x-8x today's load: all {sessions:,} of the trace's sessions" in growth
    capacity = next(line for line in lines[:5] if line.startswith("  capacity "))
    assert all(name in capacity for name in ("memory-only", "tiered", "flat"))
    assert "req/s served" in capacity
    by_load = json.loads((out / "plan.json").read_text())["decision"]["by_load"]
    assert by_load and all(re.match(r"[0-9,]+ sessions? active, ", s) for s, _ in by_load)
    assert not any("offered" in label for label, _ in by_load)


def test_a_timed_trace_sweeps_offered_rates_named_by_what_was_served(tmp_path: Path) -> None:
    out = tmp_path / "p"
    lines = _plan(small_trace(tmp_path), out)
    replay = _replay(out)
    assert replay.load["axis"] == "rate"
    assert all(p.rate is not None and p.concurrency is None for p in replay.rates)
    by_load = json.loads((out / "plan.json").read_text())["decision"]["by_load"]
    assert by_load and all(re.match(r"[0-9.]+ req/s served \(offered ", s) for s, _ in by_load)
    # A rate the node did not reach is marked, never named as the load.
    marked = [s for s, _ in by_load if "not reached" in s]
    assert all(s.endswith("req/s: not reached)") for s in marked)
    growth = next(line for line in lines if line.startswith("  growth: "))
    assert "req/s served" in growth and "sessions" not in growth


def test_the_decision_change_is_found_at_its_multiple_of_todays_load(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, _ = claude_plan
    replay = _replay(out)
    sessions = replay.trace.sessions
    # Today's load made the lightest point, and the heaviest's decision made another layout's:
    # the growth line names where the decision changes, in multiples of today's load.
    points = sorted(replay.rates, key=lambda p: p.concurrency or 0)
    lightest, heaviest = points[0], points[-1]
    other = "flat" if lightest.decision.best != "flat" else "tiered"
    changed = dataclasses.replace(
        heaviest, decision=dataclasses.replace(heaviest.decision, best=other)
    )
    moved = dataclasses.replace(
        replay,
        rates=tuple(changed if p is heaviest else p for p in replay.rates),
        operating_point=lightest,
    )
    (growth, _capacity) = growth_lines(moved)
    multiple = f"{(heaviest.concurrency or 0) / sessions:.2g}x today's load"
    assert f"it changes at {multiple}, {heaviest.concurrency:,} sessions (" in growth
    assert f"{lightest.decision.best} -> {other}" in growth
    # Today's load the heaviest again, the lighter change is named from there.
    back = dataclasses.replace(moved, operating_point=changed)
    (growth, _capacity) = growth_lines(back)
    assert (
        f"the decision at today's load is {other}; lighter, {lightest.decision.best} at " in growth
    )
    assert "does not change" in growth_lines(replay)[0]


def test_capacity_reads_the_slo(claude_plan: tuple[Path, list[str]]) -> None:
    out, _ = claude_plan
    replay = _replay(out)
    _, tight = growth_lines(replay, 1e-9)
    assert "within the 1e-09 s SLO" in tight
    assert tight.count("below the lightest load swept") == 3
    _, loose = growth_lines(replay, 1e9)
    assert "below the lightest" not in loose and loose.count("at least") == 3


def test_a_model_that_rejects_over_5_percent_names_the_preset_that_serves_it(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, _ = claude_plan
    replay = _replay(out)
    name, context = longest_context_preset()
    assert name == "qwen2.5-7b-1m" and context == 1_010_000
    # The sample's 4.92 % rejected stays under the 5 % that calls for a line.
    assert model_lines(replay) == []
    point = replay.operating_point
    assert point is not None
    heavier = {
        n: dataclasses.replace(
            p,
            rejected_requests=dataclasses.replace(
                p.rejected_requests,
                count=p.requests // 5,
                reasons={"exceeds_max_context": p.requests // 5},
            ),
        )
        for n, p in point.policies.items()
    }
    rejecting = dataclasses.replace(
        replay, operating_point=dataclasses.replace(point, policies=heavier)
    )
    (line,) = model_lines(rejecting)
    assert f"--model {name} (1,010,000 tokens of context" in line
    requests = next(iter(heavier.values())).requests
    assert f"rejects {100 * (requests // 5) / requests:.3g} % of the requests" in line


def test_the_reports_load_free_verdict_states_its_size_and_why_it_may_differ(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, _ = claude_plan
    html = (out / "report.html").read_text()
    heading = re.search(r'<h3 id="verdict">([^<]*)</h3>', html)
    assert heading is not None
    # The node's host memory (h200-8x: 1 TiB), the size plan's analyze judges at.
    assert heading.group(1).startswith("Load-free verdict at a 1.00 TiB memory tier: ")
    assert "Verdict: " not in html
    after = html[heading.end() : heading.end() + 600]
    assert "without load" in after and "the one to follow" in after


def test_capacity_ends_where_more_sessions_stop_reaching_the_node(
    claude_plan: tuple[Path, list[str]],
) -> None:
    """A closed loop throttles itself rather than saturate: a point whose served rate grew
    under 10 % over the lighter one is past the layout's capacity."""
    out, _ = claude_plan
    replay = _replay(out)
    points = sorted(replay.rates, key=lambda p: p.concurrency or 0)
    second, heaviest = points[-2], points[-1]
    flat = second.policies["flat"]
    stalled = dataclasses.replace(
        heaviest.policies["flat"],
        achieved_rate=dataclasses.replace(flat.achieved_rate, central=flat.achieved_rate.central),
    )
    policies = {**heaviest.policies, "flat": stalled}
    moved = dataclasses.replace(
        replay,
        rates=tuple(
            dataclasses.replace(p, policies=policies) if p is heaviest else p for p in replay.rates
        ),
    )
    _, capacity = growth_lines(moved)
    assert f"flat {second.concurrency:,} sessions (" in capacity
    assert f"memory-only at least {heaviest.concurrency:,} sessions" in capacity
