"""The run's one decision reads the same in every rendering (issue #33 item 1): one ``fcctl plan``
on the Claude Code sample gives replay.json's and plan.json's ``decision``, the terminal summary
and the report's first paragraph; each names the same policy, load, ratio and spread flag."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.replay import ReplayResult, verdict_sentences
from fcctl.analyzers.replay.verdict import capacity_words
from fcctl.cli import app
from tests.conftest import SAMPLES

CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("renderings") / "p"
    r = CliRunner().invoke(
        app, ["plan", CLAUDE, "-o", str(out), "--jobs", "1", "--rate", "0.5", "--replicas", "1"]
    )
    assert r.exit_code == 0, r.output
    return out, r.stdout


def test_every_rendering_names_the_same_decision(plan_run: tuple[Path, str]) -> None:
    out, stdout = plan_run
    replay_doc = json.loads((out / "replay.json").read_text())
    plan_doc = json.loads((out / "plan.json").read_text())
    verdict = ReplayResult.from_json(replay_doc).decision
    assert verdict is not None
    fields = ("best", "load", "load_unit", "ratio", "inside_spread", "objective", "reason")
    for key in fields:
        assert plan_doc["decision"][key] == replay_doc["decision"][key], key
    # The user's --rate is the operating point: the decision says so.
    assert verdict.operating_point == "given"
    text = verdict_sentences(verdict).splitlines()
    head = text[0]
    assert head.startswith(f"decision: {verdict.best} (") and verdict.load_unit in head
    assert f"{verdict.load:.3g} {verdict.load_unit}" in head
    # The terminal summary's first lines are those words (plan may append a rejected share).
    summary = stdout.splitlines()
    start = next(i for i, line in enumerate(summary) if line.startswith("decision: "))
    assert summary[start].startswith(head)
    # The rest follow in order, then what the figures exclude (the rejected share).
    assert summary[start + 1 : start + len(text)] == text[1:]
    assert summary[start + len(text)].startswith("  rejected: ")
    # The growth lines render the same capacities, in the same words, and the same SLO.
    assert plan_doc["decision"]["capacity"] == replay_doc["decision"]["capacity"]
    capacity = next(line for line in summary if line.startswith("  capacity at SLO "))
    assert f"p99 TTFT <= {verdict.slo_ttft_p99_s:g} s" in capacity
    for name, c in verdict.capacity.items():
        words = capacity_words(c, verdict.load_unit, verdict.loads_swept)
        assert f"{name} {words}" in capacity
        assert f"  {name}: capacity {words};" in "\n".join(text)
    if verdict.ratio is not None:
        flag = "inside the spread" if verdict.inside_spread else "beyond the spread"
        ratio_line = next(line for line in text if line.lstrip().startswith("ratio over"))
        assert f"{verdict.ratio.median:.2f}x" in ratio_line and flag in ratio_line
        assert ratio_line in summary
    # The report's first paragraph carries the same sentences.
    html = (out / "report.html").read_text()
    start_p = html.index('<p class="decision">')
    raw = re.sub(r"<br>", "\n", html[start_p : html.index("</p>", start_p)])
    paragraph = unescape(re.sub(r"<[^>]+>", "", raw))  # tags off before "&lt;" turns into "<"
    for line in text:
        assert line.strip() in paragraph, line
