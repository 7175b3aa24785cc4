"""#19.1: replay, recommend-thresholds and plan read what analyze reads: a dataset of canonical
Parquet parts gives the single file's figures; one too large for the memory budget is refused
before it is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "parts"
    r = runner.invoke(
        app,
        ["convert", CLAUDE, "-o", str(out), "--partition-by", "session-hash", "--partitions", "3"],
    )
    assert r.exit_code == 0, r.output
    assert len(list(out.rglob("*.parquet"))) >= 2
    return out


def _doc(*args: str) -> dict:  # type: ignore[type-arg]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_replay_of_a_dataset_equals_the_file(dataset: Path) -> None:
    args = ["--rates", "1", "--policies", "memory-only,flat"]
    a = _doc("replay", CLAUDE, *args)
    b = _doc("replay", str(dataset), *args)
    assert a["trace"]["fingerprint"] == b["trace"]["fingerprint"]
    assert a["rates"] == b["rates"]
    glob = _doc("replay", str(dataset / "*" / "*.parquet"), *args)
    assert glob["rates"] == a["rates"]


def test_recommend_of_a_dataset_equals_the_file(dataset: Path) -> None:
    args = [
        "--rates",
        "1",
        "--short-reply",
        "128,512",
        "--agent-context",
        "4096,65536",
        "--jobs",
        "1",
    ]
    a = _doc("recommend-thresholds", CLAUDE, *args)
    b = _doc("recommend-thresholds", str(dataset), *args)
    assert a["trace"]["fingerprint"] == b["trace"]["fingerprint"]
    assert a["recommendation"] == b["recommendation"] and a["grid"] == b["grid"]


def test_a_dataset_over_the_memory_budget_is_refused_before_reading(dataset: Path) -> None:
    r = runner.invoke(app, ["replay", str(dataset), "--rates", "1", "--memory-budget", "1MiB"])
    assert r.exit_code == 2
    assert "268,683 block accesses" in r.stderr and "over the memory budget" in r.stderr
