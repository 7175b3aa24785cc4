"""``fcctl plan``: the whole path in one command, decision first, with --resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.recommend import RecommendResult
from fcctl.analyzers.replay import RateResult, ReplayResult
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import dumps
from fcctl.planning import decision_of, read_plan, target_rate
from tests.conftest import SAMPLES
from tests.plan_helpers import small_trace

runner = CliRunner()
MOONCAKE = str(SAMPLES / "mooncake_conversation_2k.jsonl")
FAST = ["--jobs", "1", "--rate", "2", "--replicas", "1"]


def _plan(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["plan", *args])


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A slice of the Mooncake sample: the steps, documents and resume checked here do not
    depend on the trace's length, and the whole sample's plan took minutes (the quick start's
    plan of the whole sample is checked by benchmarks/figures.py)."""
    return str(small_trace(tmp_path_factory.mktemp("trace"), 300))


@pytest.fixture(scope="module")
def planned(trace: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "p"
    r = _plan(trace, "-o", str(out), *FAST, "--emit", "--emit-name", "fcs")
    assert r.exit_code == 0, r.output
    (out / "stdout.txt").write_text(r.stdout)
    return out


def test_plan_writes_every_step_and_starts_with_the_decision(planned: Path) -> None:
    names = sorted(p.name for p in planned.iterdir())
    assert names == [
        "analyze.json",
        "emit",
        "plan.json",
        "recommend.json",
        "replay.json",
        "report.html",
        "stdout.txt",
    ]
    out = (planned / "stdout.txt").read_text()
    # The run's one decision first, at the user's point (issue #33).
    assert out.startswith("decision: ") and "requests/s served: given)" in out.splitlines()[0]
    doc = read_plan(planned)
    assert [s["name"] for s in doc["steps"]] == ["analyze", "replay", "recommend", "emit", "report"]
    assert all(s["status"] == "ran" for s in doc["steps"])
    replay = json.loads((planned / "replay.json").read_text())
    # The user's point is the replay's operating point, decided first; the sweep ran too.
    assert replay["operating_point"]["rate"] == 2.0 and len(replay["rates"]) >= 2
    assert doc["decision"]["best"] == replay["decision"]["best"]
    typed = ReplayResult.from_json(replay)
    assert doc["decision"] == decision_of(typed) | {"by_load": doc["decision"]["by_load"]}
    rec = json.loads((planned / "recommend.json").read_text())
    assert rec["recommendation"]["rate"] == 2.0
    text = (planned / "emit" / "fcs" / "thresholds.toml").read_text()
    assert f"short_reply_tokens = {rec['recommendation']['short_reply_tokens']}" in text
    html = (planned / "report.html").read_text()
    assert "<html" in html.lower() and "replay" in html


def test_resume_skips_unchanged_steps_and_reruns_from_a_change(planned: Path, trace: str) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in planned.iterdir() if p.is_file()}
    r = _plan(trace, "-o", str(planned), *FAST, "--emit", "--emit-name", "fcs", "--resume")
    assert r.exit_code == 0, r.output
    steps = {s["name"]: s["status"] for s in read_plan(planned)["steps"]}
    assert set(steps.values()) == {"reused"}
    # Decided from the documents read back: the same summary as the run that wrote them.
    assert r.stdout == (planned / "stdout.txt").read_text()
    assert (planned / "analyze.json").stat().st_mtime_ns == before["analyze.json"]
    # Another operating point: analyze is reused, replay and everything after it run again.
    r = _plan(trace, "-o", str(planned), *FAST[:2], "--rate", "1.5", *FAST[4:], "--resume")
    assert r.exit_code == 0, r.output
    steps = {s["name"]: s["status"] for s in read_plan(planned)["steps"]}
    assert steps == {"analyze": "reused", "replay": "ran", "recommend": "ran", "report": "ran"}
    assert r.stdout.startswith("decision: ")
    assert "requests/s served: given)" in r.stdout.splitlines()[0]


def test_plan_replays_three_replicas_by_default_and_resumes_at_the_same_count(
    trace: str, tmp_path: Path
) -> None:
    """The default 3 (fcctl.api.PLAN_REPLICAS); a resume at another count runs the replay step
    again, at the same count reuses it. This open-loop trace at offered rates draws nothing
    from the seed, so the decision reads the one run the others would repeat, and says so."""
    out = tmp_path / "p"
    r = _plan(trace, "-o", str(out), "--jobs", "1", "--rate", "2")
    assert r.exit_code == 0, r.output
    replayed = json.loads((out / "replay.json").read_text())
    assert replayed["decision"]["replicas"] == 1
    assert "replicas: 1 run of 3 (the others would repeat it)" in replayed["notes"]
    assert "1 replica(s)" in r.stdout
    r = _plan(trace, "-o", str(out), "--jobs", "1", "--rate", "2", "--replicas", "3", "--resume")
    assert r.exit_code == 0, r.output
    assert {s["status"] for s in read_plan(out)["steps"]} == {"reused"}
    r = _plan(trace, "-o", str(out), "--jobs", "1", "--rate", "2", "--replicas", "1", "--resume")
    assert r.exit_code == 0, r.output
    steps = {s["name"]: s["status"] for s in read_plan(out)["steps"]}
    assert steps["analyze"] == "reused" and steps["replay"] == "ran"
    assert json.loads((out / "replay.json").read_text())["decision"]["replicas"] == 1


def test_plan_refuses_what_it_would_damage(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    r = _plan(MOONCAKE, "-o", str(busy), *FAST)
    assert r.exit_code == 2 and "not an fcctl plan" in r.stderr
    assert (busy / "mine.txt").read_text() == "keep"
    r = _plan(MOONCAKE, "-o", str(tmp_path / "x"), *FAST, "--emit", "--emit-name", "numpy")
    assert r.exit_code == 2 and not (tmp_path / "x").exists()
    r = _plan(str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "y"), *FAST)
    assert r.exit_code == 2


def test_target_rate_rule(planned: Path) -> None:
    base = ReplayResult.from_json(json.loads((planned / "replay.json").read_text()))
    flat = base.rates[0].policies["flat"]

    def point(rate: float, best: str, sat: bool) -> RateResult:
        decision = dataclasses.replace(base.rates[0].decision, best=best)
        return RateResult(rate, {"flat": dataclasses.replace(flat, saturated=sat)}, decision)

    doc = dataclasses.replace(
        base,
        rates=(point(1, "none", False), point(2, "flat", False), point(4, "flat", True)),
        divergence_rate=2.0,
        operating_point=None,
    )
    assert target_rate(doc, 3.0) == (3.0, "your operating point")
    assert target_rate(doc, None)[0] == 2.0
    doc = dataclasses.replace(doc, divergence_rate=None)
    assert target_rate(doc, None)[0] == 2.0  # the highest unsaturated
    doc = dataclasses.replace(doc, rates=tuple(point(r, "flat", True) for r in (1, 2, 4)))
    assert target_rate(doc, None)[0] == 1.0


def test_step_documents_read_back_into_their_result_classes(planned: Path) -> None:
    for cls, name in ((ReplayResult, "replay.json"), (RecommendResult, "recommend.json")):
        text = (planned / name).read_text()
        result = cls.from_json(json.loads(text))
        assert dumps(result) + "\n" == text  # every key and value, in the document's order
    rec = RecommendResult.from_json(json.loads((planned / "recommend.json").read_text()))
    with pytest.raises(ValueError, match="facts: a recommendation read back"):
        rec.facts  # noqa: B018
    with pytest.raises(FcctlInputError, match="schema_version"):
        ReplayResult.from_json({"schema_version": 1})
