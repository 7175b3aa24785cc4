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
from fcctl.analyzers.replay.verdict import Capacity, capacity_words
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
    assert re.match(r"decision: \S+ \([^,]+, at [0-9.]+ requests/s served: given\)", lines[0])
    growth = next(line for line in lines[:14] if line.startswith("  growth: "))
    assert f"x today's load, {ran[0]:,} session" in growth
    assert f"to 8x today's load, {ran[-1]:,} sessions, " in growth
    capacity = next(line for line in lines[:15] if line.startswith("  capacity at SLO "))
    assert all(name in capacity for name in ("memory-only", "tiered", "flat"))
    assert "requests/s served" in capacity
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
    assert "requests/s served" in growth and "sessions" not in growth


def _with_capacities(replay: ReplayResult, best: str, **caps: Capacity) -> ReplayResult:
    """``replay`` whose run-level decision names ``best`` at today's (lightest) load, with
    ``caps`` as the capacities: the growth lines must read only these."""
    v = replay.decision
    assert v is not None
    low = min(v.loads_swept)
    verdict = dataclasses.replace(
        v, best=best, load=low, operating_point="given", capacity={**v.capacity, **caps}
    )
    points = sorted(replay.rates, key=lambda p: p.concurrency or 0)
    return dataclasses.replace(replay, decision=verdict, operating_point=points[0])


def test_the_decision_change_is_read_from_the_verdicts_capacities(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, _ = claude_plan
    replay = _replay(out)
    v = replay.decision
    assert v is not None
    loads = v.loads_swept
    order = sorted(range(len(loads)), key=loads.__getitem__)
    low, second, top = loads[order[0]], loads[order[1]], loads[order[-1]]
    # memory-only holds the SLO only at the lightest load, flat to the second, tiered past the
    # heaviest: above the lightest load fewer layouts hold it, and tiered holds it furthest.
    moved = _with_capacities(
        replay,
        "memory-only",
        **{
            "memory-only": Capacity(low, low, low, False),
            "flat": Capacity(second, low, second, False),
            "tiered": Capacity(top, top, top, True),
        },
    )
    growth, capacity = growth_lines(moved)
    assert "the decision at today's load (memory-only) changes at " in growth
    first_heavier = next(x for x in loads if x > low)  # the first point swept past today's
    assert growth.endswith(f"{first_heavier:.3g} requests/s served: tiered")
    assert "tiered at least " in capacity and "(the highest load swept)" in capacity
    # Every layout holding the SLO across the range: the decision does not change.
    held = Capacity(top, top, top, True)
    same = _with_capacities(replay, "flat", **{n: held for n in v.capacity})
    assert "the decision at today's load (flat) does not change within it" in growth_lines(same)[0]
    # None holding it at today's load: said so.
    none = Capacity(0.0, 0.0, 0.0, False)
    failed = _with_capacities(replay, "none", **{n: none for n in v.capacity})
    assert growth_lines(failed)[0].endswith("no layout holds the SLO at it")
    # And an SLO below every layout's own p99 at the lightest load: no capacity can exist.
    lightest = min(
        (p for p in replay.rates if p.concurrency is not None), key=lambda p: p.concurrency or 0
    )
    low = min(q.ttft_s.p99 for q in lightest.policies.values() if q.ttft_s.p99 is not None)
    assert failed.decision is not None
    tight = dataclasses.replace(
        failed, decision=dataclasses.replace(failed.decision, slo_ttft_p99_s=low / 2)
    )
    assert growth_lines(tight)[0].endswith(
        "; every layout misses it already at the lightest load swept, so no capacity exists "
        "at this SLO: --slo-ttft-p99 sets the team's bound"
    )


def test_capacity_lines_render_the_verdicts_capacities(
    claude_plan: tuple[Path, list[str]],
) -> None:
    out, lines = claude_plan
    replay = _replay(out)
    v = replay.decision
    assert v is not None
    _, capacity = growth_lines(replay)
    assert f"p99 TTFT <= {v.slo_ttft_p99_s:g} s" in capacity
    for name, c in v.capacity.items():
        assert f"{name} {capacity_words(c, v.load_unit, v.loads_swept)}" in capacity
        # The decision block prints the same words: one capacity, two places.
        words = f"  {name}: capacity {capacity_words(c, v.load_unit, v.loads_swept)};"
        assert any(line.startswith(words) for line in lines)
    # On the sessions axis a capacity names the sessions that served it.
    top = max(v.loads_swept)
    moved = _with_capacities(replay, "flat", flat=Capacity(top * 0.99, top, top, False))
    _, capacity = growth_lines(moved)
    assert re.search(
        r"flat [0-9.]+ requests/s served \(95 % [^)]*\), about [0-9,]+ sessions", capacity
    )


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
