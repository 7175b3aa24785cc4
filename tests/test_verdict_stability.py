"""The run's one decision is stable over seeds on the bundled samples (issue #33 item 5).

Each trace is replayed for real with seeds 1, 2 and 3 (two replicas each, seeds ``s`` and
``s + 1``), the decision read from the per-request tables; the same ``best`` every time."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl import api
from fcctl.analyzers.replay.replicas import inputs_of
from fcctl.analyzers.replay.verdict import decide_run
from fcctl.analyzers.traces.dataset import read_dataset
from fcctl.analyzers.traces.schema import Trace
from fcctl.cli import app
from tests.conftest import SAMPLES

POLICIES = ("memory-only", "tiered", "flat")


def _synth(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    out = tmp_path_factory.mktemp("synth") / "s"
    r = CliRunner().invoke(app, ["synth", "--requests", "600", "--sessions", "80", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return read_dataset(out)


@pytest.mark.parametrize(
    ("name", "rates"),
    [
        ("claude_code_sample.jsonl.gz", [0.5, 4.0]),
        ("mooncake_conversation_2k.jsonl", [1.0, 8.0]),
        ("synth", [1.0, 8.0]),
    ],
)
def test_three_seeds_give_the_same_decision(
    name: str, rates: list[float], tmp_path_factory: pytest.TempPathFactory
) -> None:
    source: Trace | Path = _synth(tmp_path_factory) if name == "synth" else SAMPLES / name
    bests = []
    for seed in (1, 2, 3):
        runs = [
            api.replay(source, policies=POLICIES, rates=rates, seed=seed + i, keep_tables=True)
            for i in range(2)
        ]
        verdict = decide_run(inputs_of(runs, draws=60, seed=seed))
        assert set(verdict.capacity) == set(POLICIES)
        assert verdict.replicas == 2 and verdict.draws == 60
        bests.append(verdict.best)
    assert bests[0] == bests[1] == bests[2], bests
