"""``fcctl plan --concurrency``: the recommender's rate comes from the served load at a
concurrency (a concurrency sweep has no offered rates), and the summary says which and why."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.replay import RateResult, ReplayResult
from fcctl.analyzers.replay.operating import AchievedRate
from fcctl.cli import app
from fcctl.common.jsonio import to_jsonable
from fcctl.common.provenance import collect_provenance
from fcctl.planning import target_rate
from tests.conftest import SAMPLES
from tests.plan_helpers import small_trace

runner = CliRunner()
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"
GOLDEN = Path(__file__).parent / "golden"


def _thresholds_line(stdout: str) -> str:
    (line,) = [s for s in stdout.splitlines() if "thresholds measured at" in s]
    return line


@pytest.mark.parametrize(
    ("trace", "extra"),
    [
        ("mooncake", ["--concurrency", "4"]),
        ("claude", ["--concurrency", "2,8"]),
        ("claude", ["--concurrency", "4", "--sample-sessions", "0.5"]),
    ],
)
def test_a_concurrency_plan_recommends_at_the_rate_it_served(
    tmp_path: Path, trace: str, extra: list[str]
) -> None:
    source = small_trace(tmp_path) if trace == "mooncake" else CLAUDE
    out = tmp_path / "p"
    r = runner.invoke(
        app, ["plan", str(source), "-o", str(out), "--jobs", "1", "--replicas", "1", *extra]
    )
    assert r.exit_code == 0, r.output
    replay = ReplayResult.from_json(json.loads((out / "replay.json").read_text()))
    rec = json.loads((out / "recommend.json").read_text())
    highest = max(p.concurrency or 0 for p in replay.rates)
    (at,) = [p for p in replay.rates if p.concurrency == highest]
    served = at.policies["flat"].achieved_rate.central
    assert served is not None and rec["recommendation"]["rate"] == pytest.approx(served)
    line = _thresholds_line(r.stdout)
    assert f"thresholds measured at {served:.3g} req/s" in line
    assert f"the rate flat served in the steady-state window at {highest:,} sessions" in line


def test_the_concurrency_rule_by_hand() -> None:
    """Hand-made points: the highest calm concurrency's flat rate; every point saturated, the
    lowest; only the node's own sizes count."""
    doc = json.loads((GOLDEN / "replay_claude_code_sample.json").read_text())
    # The golden document leaves provenance out (it changes every run); any real one will do.
    doc["provenance"] = to_jsonable(collect_provenance("2026-01-01T00:00:00Z"))
    base = ReplayResult.from_json(doc)
    flat = base.rates[0].policies["flat"]
    sizes = {"host_memory_bytes": 1}

    def point(c: int, got: float, sat: bool, at: dict[str, int] = sizes) -> RateResult:
        p = dataclasses.replace(flat, saturated=sat, achieved_rate=AchievedRate(got, got))
        return RateResult(None, {"flat": p}, base.rates[0].decision, c, at)

    load = {**base.load, "axis": "concurrency"}
    doc_c = dataclasses.replace(
        base,
        load=load,
        operating_point=None,
        divergence_rate=None,
        rates=(
            point(1, 0.5, False),
            point(4, 1.5, False),
            point(16, 2.0, True),
            point(64, 9.0, False, {"host_memory_bytes": 2}),
        ),
    )
    rate, why = target_rate(doc_c, None)
    assert rate == 1.5 and "at 4 sessions active" in why and "no policy saturated" in why
    assert target_rate(doc_c, 0.7) == (0.7, "your operating point")
    every = dataclasses.replace(doc_c, rates=tuple(point(c, c, True) for c in (2, 8)))
    rate, why = target_rate(every, None)
    assert rate == 2.0 and "lowest concurrency" in why
