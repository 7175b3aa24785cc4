"""The auto sweep refines around a knee (analyzers/replay/sweep.py, step 4): where a policy's
mean TTFT or its achieved share of the offered rate changes sharply between two doublings,
points are added between them, bounded in count; and the saturation mark follows its rule
(analyzers/replay/operating.py) in the JSON and the terminal table alike."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from html import escape
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console

from fcctl.analyzers.replay import RateResult, ReplayConfig, ReplayResult, replay_trace
from fcctl.analyzers.replay.operating import AchievedRate, OperatingPoint, operating_point
from fcctl.analyzers.replay.sweep import (
    MAX_DOUBLINGS,
    MAX_KNEE_POINTS,
    MAX_REFINEMENTS,
    auto_rate_steps,
    is_knee,
)
from fcctl.common.jsonio import to_jsonable, write_json_file
from fcctl.common.provenance import collect_provenance
from fcctl.reports.html_report import make_report
from fcctl.reports.replay_report import SATURATION_LEGEND, render_summary
from tests.replay_helpers import TINY, random_time_trace, tiny_node

GOLDEN = Path(__file__).parent / "golden" / "replay_claude_code_sample.json"


def _template() -> RateResult:
    doc = json.loads(GOLDEN.read_text())
    # The golden document leaves provenance out (it changes every run); any real one will do.
    doc["provenance"] = to_jsonable(collect_provenance("2026-01-01T00:00:00Z"))
    return ReplayResult.from_json(doc).rates[0]


TEMPLATE = _template()


def _point(rate: float, ttft_s: float, served: float, best: str = "none") -> RateResult:
    """A hand-made load point: one policy, flat, at ``rate`` with this mean TTFT and rate served."""
    flat = TEMPLATE.policies["flat"]
    p = dataclasses.replace(
        flat,
        ttft_s=dataclasses.replace(flat.ttft_s, mean=ttft_s, p99=ttft_s),
        achieved_rate=AchievedRate(served, served, rate),
        offered_rate=rate,
    )
    return RateResult(rate, {"flat": p}, dataclasses.replace(TEMPLATE.decision, best=best))


def _node_with_a_knee(knee: float):  # type: ignore[no-untyped-def]
    """A node that serves every rate below ``knee`` at once (0.3 s) and floods above it (60 s,
    serving 85 % of the knee's rate)."""

    def run(rate: float) -> RateResult:
        if rate < knee:
            return _point(rate, 0.3, rate)
        return _point(rate, 60.0, 0.85 * knee)

    return run


def _sweep(run, capacity: float) -> tuple[list[RateResult], list[list[float]]]:  # type: ignore[no-untyped-def]
    steps = auto_rate_steps(capacity)
    rounds: list[list[float]] = []
    try:
        rates = next(steps)
        while True:
            rounds.append(rates)
            rates = steps.send([run(r) for r in rates])
    except StopIteration as done:
        return done.value[0], rounds


def test_a_known_knee_is_bracketed_to_a_ninth_of_a_doubling() -> None:
    """Doublings 1, 2, 4, 8, 16 (capacity 16): the knee at 5.3 lies between 4 and 8; three
    bisections (5.66, 4.76, 5.19) bracket it within 2^(1/8) of a doubling."""
    knee = 5.3
    points, rounds = _sweep(_node_with_a_knee(knee), 16.0)
    rates = [p.rate or 0.0 for p in points]
    assert rates == sorted(rates)
    doubled = [r for r in rates if math.isclose(math.log2(r) % 1, 0, abs_tol=1e-9)]
    assert doubled == [1.0, 2.0, 4.0, 8.0, 16.0]
    inside = [r for r in rates if 4.0 < r < 8.0]
    assert len(inside) == 3  # one knee: three bisections, each its own round
    assert [len(r) for r in rounds[len(doubled) :]] == [1, 1, 1]
    below = max(r for r in rates if r < knee)
    above = min(r for r in rates if r >= knee)
    assert above / below <= 2 ** (1 / 8) + 1e-9
    assert len(rates) <= MAX_DOUBLINGS + MAX_REFINEMENTS + MAX_KNEE_POINTS


def test_no_knee_no_points_and_a_gentle_rise_is_no_knee() -> None:
    """A node whose TTFT rises 1.5x per doubling and that serves what is offered has no knee:
    the sweep is the doublings alone."""

    def run(rate: float) -> RateResult:
        return _point(rate, 0.3 * 1.5 ** math.log2(rate), rate)

    points, _ = _sweep(run, 16.0)
    assert all(math.isclose(math.log2(p.rate or 0) % 1, 0, abs_tol=1e-9) for p in points)
    a, b = _point(1.0, 0.3, 1.0), _point(2.0, 0.3, 2.0)
    assert not is_knee(a, b, "flat")
    assert is_knee(a, _point(2.0, 0.61, 2.0), "flat")  # TTFT more than doubled
    assert is_knee(a, _point(2.0, 0.3, 1.7), "flat")  # 15 % further behind the offered rate
    assert not is_knee(a, _point(2.0, 0.3, 1.85), "flat")  # 7.5 %: inside the tolerance


def test_a_decision_refinement_on_the_knee_is_run_once() -> None:
    """When the decision changes across the knee, its refinement and the knee's first point are
    the same rate: it runs once."""
    knee = 5.3
    node = _node_with_a_knee(knee)

    def run(rate: float) -> RateResult:
        p = node(rate)
        return dataclasses.replace(
            p, decision=dataclasses.replace(p.decision, best="none" if rate < knee else "flat")
        )

    points, _ = _sweep(run, 16.0)
    rates = [p.rate for p in points]
    assert len(rates) == len(set(rates))
    assert len([r for r in rates if r and 4.0 < r < 8.0]) == 3


def test_a_real_sweep_adds_points_inside_each_policys_knee() -> None:
    """A small synthetic trace on a slow two-worker node: for each policy, the lowest pair of
    doublings between which its mean TTFT or served share jumps gets points between them."""
    trace = random_time_trace(9, requests=150)
    hw = tiny_node(prefill_tokens_per_s=400.0)
    config = ReplayConfig(
        geometry=TINY, hardware=hw, auto_rates=True, rates=(), policies=("memory-only", "flat")
    )
    result = replay_trace(trace, config)
    rates = [p.rate or 0.0 for p in result.rates]
    first = rates[0]
    doubled = [p for p in result.rates if np.isclose(np.log2((p.rate or 0) / first) % 1, 0)]
    extra = len(rates) - len(doubled)
    assert extra <= MAX_REFINEMENTS + MAX_KNEE_POINTS
    found = 0
    for name in ("memory-only", "flat"):
        pair = next(
            ((a, b) for a, b in itertools.pairwise(doubled) if is_knee(a, b, name)),
            None,
        )
        if pair is None:
            continue
        found += 1
        low, high = (pair[0].rate or 0.0), (pair[1].rate or 0.0)
        assert any(low < r < high for r in rates), (name, low, high, rates)
    assert found >= 1  # the node is slow enough that some policy floods inside the sweep


def _one_clock_run(served_per_s: float, rejected_every: int = 0) -> OperatingPoint:
    """100 requests arriving one a second (offered 1 req/s) on one worker serving them FIFO at
    ``served_per_s``; every ``rejected_every``-th request rejected (never run)."""
    arrival = np.arange(100, dtype=np.float64)
    ran = np.ones(100, dtype=bool)
    if rejected_every:
        ran[::rejected_every] = False
    first = np.zeros(100)
    free = 0.0
    for i in np.flatnonzero(ran):
        free = max(free, arrival[i]) + 1.0 / served_per_s
        first[i] = free
    table = pl.DataFrame(
        {
            "arrival_s": arrival[ran],
            "ready_s": arrival[ran],
            "start_s": first[ran] - 1e-3,
            "first_token_s": first[ran],
            "end_s": first[ran] + 1e-3,
            "worker": np.zeros(int(ran.sum()), dtype=np.int64),
            "session_index": np.flatnonzero(ran),
            "prefetch_s": [None] * int(ran.sum()),
        },
        schema_overrides={"prefetch_s": pl.Float64},
    )
    return operating_point(
        table,
        workers=1,
        offered_rate=1.0,
        closed_loop=False,
        ssd_read_used_s=0.0,
        ssd_write_used_s=0.0,
        pcie_bytes=0,
        pcie_bytes_per_s=1.0,
        staging_bytes=0,
        staging_peak_bytes=0,
        staging_integral=0.0,
        rejected_arrival_s=arrival[~ran],
    )


def _summary(op: OperatingPoint) -> str:
    """The terminal summary of one hand-made load point (offered 1 req/s) run at ``op``."""
    doc = json.loads(GOLDEN.read_text())
    doc["provenance"] = to_jsonable(collect_provenance("2026-01-01T00:00:00Z"))
    base = ReplayResult.from_json(doc)
    flat = dataclasses.replace(
        TEMPLATE.policies["flat"],
        offered_rate=1.0,
        achieved_rate=op.achieved_rate,
        saturated=op.saturated,
        saturated_by=op.saturated_by,
    )
    point = RateResult(1.0, {"flat": flat}, TEMPLATE.decision)
    result = dataclasses.replace(base, rates=(point,), operating_point=None)
    console = Console(record=True, width=250)
    render_summary(result, console)
    return console.export_text()


def _got_cell(text: str) -> str:
    (row,) = [line for line in text.splitlines() if "│ flat" in line]
    return row.split("│")[2].strip()


def test_a_node_more_than_ten_percent_behind_is_marked_saturated_everywhere() -> None:
    """Offered 1 req/s served at 0.8: the JSON says saturated by the node, and the terminal
    row marks it; served at 0.95 (inside the tolerance) neither does."""
    behind = _one_clock_run(0.8)
    assert behind.achieved_rate.central is not None
    assert behind.achieved_rate.central < 0.9
    assert behind.saturated and behind.saturated_by == "node"
    assert _got_cell(_summary(behind)).endswith("*")
    keeping_up = _one_clock_run(0.95)
    assert not keeping_up.saturated and keeping_up.saturated_by is None
    assert not _got_cell(_summary(keeping_up)).endswith(("*", "~"))


def test_rejected_requests_are_not_saturation_and_the_legend_says_so() -> None:
    """Offered 1 req/s, every fifth request rejected (never run), the rest served at once:
    served is 20 % under offered but the node kept up with every request it ran, so the rule
    (docs/simulator.md 6.1: against the part of the offered load that ran) leaves the row
    unmarked; the legend under the table states that rule, so the row reads as it is."""
    op = _one_clock_run(1000.0, rejected_every=5)
    assert op.achieved_rate.central is not None and op.achieved_rate.central < 0.85
    assert not op.saturated
    text = _summary(op)
    assert not _got_cell(text).endswith(("*", "~"))
    assert "of the offered load that ran (rejected requests excluded)" in " ".join(text.split())


def test_the_report_page_marks_the_same_points(tmp_path: Path) -> None:
    """The report's table of policies by rate carries the JSON's mark beside the served rate,
    with the terminal's legend."""
    doc = json.loads(GOLDEN.read_text())
    doc["provenance"] = to_jsonable(collect_provenance("2026-01-01T00:00:00Z"))
    base = ReplayResult.from_json(doc)
    behind, keeping_up = _one_clock_run(0.8), _one_clock_run(0.95)
    points = []
    for rate, op in ((1.0, behind), (0.5, keeping_up)):
        flat = dataclasses.replace(
            TEMPLATE.policies["flat"],
            offered_rate=rate,
            achieved_rate=op.achieved_rate,
            saturated=op.saturated,
            saturated_by=op.saturated_by,
        )
        points.append(RateResult(rate, {"flat": flat}, TEMPLATE.decision))
    result = dataclasses.replace(base, rates=tuple(points), operating_point=None)
    write_json_file(result, tmp_path / "replay.json")
    make_report([tmp_path / "replay.json"], tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    table = html[html.index('id="replay-table"') :]
    table = table[: table.index("</table>")]
    got_behind = f"{behind.achieved_rate.central:.3g}*"
    got_kept = f"{keeping_up.achieved_rate.central:.3g}<"
    assert got_behind in table and got_kept in table
    assert " ".join(escape(SATURATION_LEGEND).split()) in " ".join(html.split())
