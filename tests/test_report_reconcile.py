"""#16.5: the report reconciles its inputs: one trace (fingerprints) unless --allow-mixed, the
decision from replay at the user's operating point and never two contradicting verdicts, and a
synthetic iobench workload labelled as such."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.conftest import SAMPLES
from tests.report_helpers import Samples, report_samples_fixture  # noqa: F401

runner = CliRunner()
MOONCAKE = str(SAMPLES / "mooncake_conversation_2k.jsonl")
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


def _json(tmp: Path, name: str, *args: str) -> Path:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    path = tmp / name
    path.write_text(r.stdout)
    return path


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("reconcile")
    return {
        "analyze": _json(tmp, "analyze.json", "analyze", MOONCAKE),
        "replay": _json(
            tmp,
            "replay.json",
            "replay",
            MOONCAKE,
            "--rate",
            "3",
            "--rates",
            "1",
            "--policies",
            "memory-only,tiered,flat",
        ),
        "replay_claude": _json(
            tmp,
            "replay-cc.json",
            "replay",
            CLAUDE,
            "--rates",
            "1",
            "--policies",
            "memory-only,flat",
        ),
    }


def _decision(html: str) -> str:
    m = re.search(r'<p class="decision">(.*?)</p>', html, flags=re.S)
    assert m is not None
    return re.sub(r"<[^>]+>", "", m.group(1))


def test_mixing_traces_is_refused_naming_both(docs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = runner.invoke(
        app, ["report", str(docs["analyze"]), str(docs["replay_claude"]), "-o", str(out)]
    )
    assert r.exit_code == 2 and not out.exists()
    assert "different traces" in r.stderr
    assert "mooncake_conversation_2k.jsonl" in r.stderr and "claude_code_sample" in r.stderr
    r = runner.invoke(
        app,
        [
            "report",
            str(docs["analyze"]),
            str(docs["replay_claude"]),
            "-o",
            str(out),
            "--allow-mixed",
        ],
    )
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "Trace of this section: " in html
    assert "On " in _decision(html)  # each sentence of the decision names its trace


def test_the_decision_is_replays_at_the_operating_point(
    docs: dict[str, Path], tmp_path: Path
) -> None:
    replay = json.loads(docs["replay"].read_text())
    analyze = json.loads(docs["analyze"].read_text())
    best = replay["decision"]["best"]
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(docs["analyze"]), str(docs["replay"]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = _decision(out.read_text())
    # The run's one decision, at the load served at the user's operating point (issue #33).
    assert re.match(rf"decision: {best} \([^,]+, at [0-9.]+ requests/s served: given\)", text)
    # analyze's load-free verdict is not stated beside it (it may contradict the replay's).
    assert analyze["verdict"]["layout"] == "flat" and best != "flat"
    assert "Verdict" not in text and "flat at" not in text
    assert "Without load, a 256 GiB memory tier serves" in text
    # Alone, analyze's verdict is the decision.
    alone = tmp_path / "a.html"
    r = runner.invoke(app, ["report", str(docs["analyze"]), "-o", str(alone)])
    assert r.exit_code == 0, r.output
    assert _decision(alone.read_text()).startswith("Verdict flat")


def test_a_synthetic_iobench_workload_is_labelled(report_samples: Samples, tmp_path: Path) -> None:
    out = tmp_path / "r.html"  # a real iobench run of generated sessions
    r = runner.invoke(app, ["report", str(report_samples.iobench_dir), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "with a synthetic workload (generated sessions, not the trace)" in _decision(
        out.read_text()
    )
