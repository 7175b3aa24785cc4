"""The share of requests a replay rejected (never ran), with the flag that changes it, in the
first lines of ``replay``'s summary, ``plan``'s summary and the report (issue 33 item 4)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.replay import ReplayResult
from fcctl.cli import app
from fcctl.planning import decision_of, summary_lines
from tests.conftest import SAMPLES
from tests.plan_helpers import small_trace

runner = CliRunner()
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
#: A GPU pool of 2 GiB per GPU: most of the sample's requests no longer fit one worker's pool.
SMALL_POOL = ["--gpu-kv", "2GiB", "--host-memory", "4GiB"]


def _invoke(*args: str):  # type: ignore[no-untyped-def]
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r


def _rejected(replay_doc: dict) -> tuple[int, int, dict[str, int]]:
    """(rejected, requests, reasons) of the document's operating point, read from the JSON."""
    point = replay_doc["operating_point"] or replay_doc["rates"][0]
    p = next(iter(point["policies"].values()))
    return p["rejected_requests"]["count"], p["requests"], p["rejected_requests"]["reasons"]


def _decision_paragraph(html: str) -> str:
    start = html.index('<p class="decision">')
    return re.sub(r"<[^>]+>", "", html[start : html.index("</p>", start)])


@pytest.fixture(scope="module")
def small_pool_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("rejected") / "p"
    r = _invoke(
        "plan",
        CLAUDE,
        "-o",
        str(out),
        "--jobs",
        "1",
        "--rate",
        "0.5",
        "--replicas",
        "1",
        *SMALL_POOL,
    )
    return out, r.stdout


def test_plan_summary_states_the_share_its_reason_and_flag(
    small_pool_plan: tuple[Path, str],
) -> None:
    out, stdout = small_pool_plan
    count, requests, reasons = _rejected(json.loads((out / "replay.json").read_text()))
    assert set(reasons) == {"kv_exceeds_gpu_pool"} and count / requests > 0.05
    share = f"{100 * count / requests:.3g} %"
    lines = stdout.splitlines()
    first = lines[0]
    # Above 5 % the decision itself says its figures leave those requests out.
    assert first.startswith("decision: ") and "requests/s served: given" in first
    assert f"the figures exclude the {share} of requests rejected" in first
    # The rejected share comes right after the decision block (its SLO line ends it).
    second = lines[next(i for i, line in enumerate(lines) if line.startswith("  SLO: ")) + 1]
    assert second.startswith(f"  rejected: {share} of requests ({count:,} of {requests:,})")
    assert "--gpu-kv" in second and "larger than one worker's GPU KV pool" in second


def test_report_first_paragraph_states_the_share_and_flag(
    small_pool_plan: tuple[Path, str],
) -> None:
    out, _ = small_pool_plan
    count, requests, _ = _rejected(json.loads((out / "replay.json").read_text()))
    text = _decision_paragraph((out / "report.html").read_text())
    assert f"{100 * count / requests:.2f}% of the requests ({count:,} of {requests:,})" in text
    assert "--gpu-kv, --gpus, --tp or --hardware" in text


def test_replay_summary_names_the_context_and_its_flag(tmp_path: Path) -> None:
    # The default model's 128 K context rejects some of the sample's requests (the public
    # trace's 30 % in small): the line names the reason and --model.
    _invoke(
        "replay",
        CLAUDE,
        "--policies",
        "tiered",
        "--rates",
        "0.5",
        "--jobs",
        "1",
        "--out",
        str(tmp_path / "o"),
    )
    doc = json.loads((tmp_path / "o" / "replay.json").read_text())
    count, requests, reasons = _rejected(doc)
    assert count > 0 and set(reasons) == {"exceeds_max_context"}
    r = _invoke("replay", CLAUDE, "--policies", "tiered", "--rates", "0.5", "--jobs", "1")
    lines = r.stdout.splitlines()
    # Right after the run's decision block (its SLO line ends it), before the per-load detail.
    block_end = next(i for i, line in enumerate(lines) if line.startswith("  SLO: "))
    rejected = lines[block_end + 1]
    assert lines[block_end + 2].startswith("decision at ")
    assert rejected.startswith(
        f"rejected: {100 * count / requests:.3g} % of requests ({count:,} of {requests:,})"
    )
    assert "longer than the model's context (change with --model or --model-config)" in rejected
    # Under 5 % plan states the share but does not qualify the decision.
    typed = ReplayResult.from_json(doc)
    summary = summary_lines(typed, None, None, decision_of(typed))
    block_end = next(i for i, line in enumerate(summary) if line.startswith("  SLO: "))
    assert summary[block_end + 1].startswith("  rejected: ") and "exclude" not in summary[0]


def test_nothing_is_added_without_rejections(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    out = tmp_path / "p"
    r = _invoke("plan", str(trace), "-o", str(out), "--jobs", "1", "--rate", "2", "--replicas", "1")
    assert _rejected(json.loads((out / "replay.json").read_text()))[0] == 0
    assert "rejected" not in r.stdout and "exclude" not in r.stdout
    assert "rejected" not in _decision_paragraph((out / "report.html").read_text())
