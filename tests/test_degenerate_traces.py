"""The smallest traces a user can give never crash a command: one request, two identical
one-block requests (the only reuse an immediate repeat), all distinct, one block 50 times.

Regression: ``_counts_cdf`` indexed past its counts when the only stack distance seen was 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app

runner = CliRunner()
ROW = '{{"timestamp": {t}, "input_length": 600, "output_length": 10, "hash_ids": {h}}}\n'

# name -> (hash lists, once-only block share, reuse access share), computed by hand.
CASES = {
    "one": ([[1]], 1.0, 0.0),
    "repeat": ([[1], [1]], 0.0, 0.5),
    "distinct": ([[1, 2], [3, 4], [5, 6]], 1.0, 0.0),
    "same50": ([[7]] * 50, 0.0, 49 / 50),
}


def _write(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(ROW.format(t=i, h=h) for i, h in enumerate(CASES[name][0])))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_analyze_degenerate(tmp_path: Path, name: str) -> None:
    res = runner.invoke(app, ["analyze", str(_write(tmp_path, name)), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    _, once_only, reuse = CASES[name]
    assert doc["once_only_block_share"] == pytest.approx(once_only)
    assert doc["reuse_access_share"] == pytest.approx(reuse)
    # Every tier holds the lone reused block: it serves the whole ideal when there is one.
    for tier in doc["memory_tier"]:
        assert tier["lru_hit_share"] == pytest.approx(reuse)


@pytest.mark.parametrize("name", sorted(CASES))
def test_analyze_degenerate_human(tmp_path: Path, name: str) -> None:
    res = runner.invoke(app, ["analyze", str(_write(tmp_path, name))])
    assert res.exit_code == 0, res.output
    assert "Verdict" in res.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_degenerate(tmp_path: Path, name: str) -> None:
    res = runner.invoke(app, ["replay", str(_write(tmp_path, name)), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["trace"]["requests"] == len(CASES[name][0])
    assert 0.0 <= doc["ideal_hit_share"] <= 1.0
