"""Hit shares over what was served beside those over all requests (issue #33 item 6):
hand-computed on a tiny trace, equal without rejections, named in the JSON, rendered."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from fcctl.analyzers.replay import ReplayConfig
from fcctl.analyzers.replay.result import ReplayResult
from fcctl.analyzers.replay.run import simulate
from fcctl.analyzers.replay.verdict import RequestTable, figure_draws
from fcctl.analyzers.replay.workload import build_workload
from fcctl.cli import app
from fcctl.layout.geometry import ModelInfo
from fcctl.reports.replay_report import render_summary
from tests.conftest import SAMPLES
from tests.replay_helpers import TINY, tiny_node, trace_of

# r1 (10 blocks = 160 tokens) is longer than the 100-token context and is rejected; r2 and r3
# reach blocks 4 and 5, which only the rejected r1 touched before them.
ROWS = [[1, 2, 3], list(range(1, 11)), [1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]
SHORT = replace(TINY, info=ModelInfo("test", "test", 0, 0, max_context_tokens=100))


def _run(rows: list[list[int]], geometry=SHORT):  # type: ignore[no-untyped-def]
    trace = trace_of(rows, timestamps=[0.0, 10.0, 20.0, 30.0][: len(rows)])
    # One worker whose pool holds every block: every possible hit is delivered from the GPU.
    config = ReplayConfig(geometry=geometry, hardware=tiny_node(gpus=1, gpu_kv=1000))
    return simulate(build_workload(trace, geometry, 1), config, "tiered", 1.0)


def test_served_and_all_shares_by_hand() -> None:
    p = _run(ROWS)
    assert dict(p.rejected_requests.reasons) == {"exceeds_max_context": 1}
    # All requests: 3 + 10 + 5 + 5 = 23 accesses of 10 distinct blocks -> 13 re-accesses.
    assert p.ideal_hit_share == pytest.approx(13 / 23)
    # Served (r0, r2, r3): 13 accesses of 5 distinct blocks -> 8 re-accesses; r2's blocks 4
    # and 5 were first touched by the rejected r1, so they are misses for the ideal too.
    assert p.ideal_hit_share_served == pytest.approx(8 / 13)
    # Delivered: r2 gets 1-3 (3), r3 gets 1-5 (5).
    assert p.delivered_blocks == 8
    assert p.gpu_hit_share_served == pytest.approx(8 / 13)
    assert p.gpu_hit_share == pytest.approx(8 / 23)
    # The hand-computed gap: 8/13 - 8/23, about 26.8 pp.
    assert p.gpu_hit_share_served - p.gpu_hit_share == pytest.approx(8 / 13 - 8 / 23)


def test_the_decision_share_is_the_served_share() -> None:
    # The run's decision (verdict.py) reads the same requests: with unit weights its GPU hit
    # share is gpu_hit_share_served exactly, not the share over all requests.
    trace = trace_of(ROWS, timestamps=[0.0, 10.0, 20.0, 30.0])
    config = ReplayConfig(geometry=SHORT, hardware=tiny_node(gpus=1, gpu_kv=1000), keep_tables=True)
    p = simulate(build_workload(trace, SHORT, 1), config, "tiered", 1.0)
    assert p.table is not None
    table = RequestTable.of(p.table)
    fig = figure_draws(table, np.ones((1, int(table.session.max()) + 1)))
    assert p.rejected_requests.count == 1
    assert fig.gpu_hit_share[0] == p.gpu_hit_share_served
    assert fig.gpu_hit_share[0] != p.gpu_hit_share


def test_without_rejections_the_two_are_equal() -> None:
    p = _run([ROWS[0], ROWS[2], ROWS[3]], geometry=TINY)
    assert p.rejected_requests.count == 0
    assert p.gpu_hit_share_served == p.gpu_hit_share == pytest.approx(8 / 13)
    assert p.ideal_hit_share_served == p.ideal_hit_share == pytest.approx(8 / 13)


# --- the CLI: the JSON names, the summary, the report page, older documents --------------------

# A 2-layer model (16 KiB blocks) whose 40,000-token context rejects most of the sample's
# Claude Code requests (they carry their whole history).
SMALL_CONTEXT = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "max_position_embeddings": 40000,
}


@pytest.fixture(scope="module")
def rejecting_doc(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    cfg = tmp_path_factory.mktemp("served") / "config.json"
    cfg.write_text(json.dumps(SMALL_CONTEXT))
    claude = str(SAMPLES / "claude_code_sample.jsonl.gz")
    r = CliRunner().invoke(
        app, ["replay", claude, "--rates", "0.5", "--model-config", str(cfg), "--json"]
    )
    assert r.exit_code == 0, r.output
    doc: dict = json.loads(r.stdout)  # type: ignore[type-arg]
    return doc


def test_json_names_both_shares(rejecting_doc: dict) -> None:  # type: ignore[type-arg]
    assert rejecting_doc["schema_version"] == 3
    for p in rejecting_doc["rates"][0]["policies"].values():
        rejected = p["rejected_requests"]["count"]
        assert 0 < rejected < p["requests"]
        # Same delivered blocks over fewer accesses: the served share is the larger.
        assert p["gpu_hit_share_served"] > p["gpu_hit_share"]
        assert p["ideal_hit_share"] == rejecting_doc["ideal_hit_share"]
        assert p["ideal_hit_share_served"] != p["ideal_hit_share"]
        assert p["gpu_hit_share_served"] <= p["ideal_hit_share_served"] + 1e-12


def test_summary_prints_both_shares(rejecting_doc: dict) -> None:  # type: ignore[type-arg]
    result = ReplayResult.from_json(rejecting_doc)
    console = Console(width=400, record=True)
    render_summary(result, console)
    text = console.export_text()
    p = rejecting_doc["rates"][0]["policies"]["tiered"]
    served, every = p["gpu_hit_share_served"], p["gpu_hit_share"]
    assert f"{100 * served:.2f}% / {100 * every:.2f}%" in text
    assert (
        f"{100 * p['ideal_hit_share_served']:.2f}% over served requests; "
        f"{100 * p['ideal_hit_share']:.2f}% over all" in text
    )


def test_report_page_prints_both_shares(
    rejecting_doc: dict,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    doc_path = tmp_path / "replay.json"
    doc_path.write_text(json.dumps(rejecting_doc))
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(doc_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    p = rejecting_doc["rates"][0]["policies"]["tiered"]
    assert f"{100 * p['gpu_hit_share_served']:.2f}% / {100 * p['gpu_hit_share']:.2f}%" in page
    assert "over served requests" in page


def test_an_older_document_is_refused_in_one_line(
    rejecting_doc: dict,  # type: ignore[type-arg]
) -> None:
    from fcctl.common.errors import InputError

    old = dict(rejecting_doc, schema_version=2)
    with pytest.raises(InputError, match=r"^replay: schema_version must be 3; got 2$"):
        ReplayResult.from_json(old)


def test_an_older_recommendation_is_refused_in_one_line() -> None:
    from fcctl.analyzers.recommend import RecommendResult
    from fcctl.common.errors import InputError

    with pytest.raises(InputError, match=r"^recommendation: schema_version must be 3; got 2$"):
        RecommendResult.from_json({"schema_version": 2})


@pytest.mark.parametrize("seed", range(20))
def test_served_ideal_share_counts_as_the_definition(seed: int) -> None:
    """The compiled served ideal equals the definition computed plainly with numpy (the
    served requests' accesses, less their distinct blocks, over their accesses) on random
    workloads with random rejections; all served gives the ideal over every request."""
    rng = np.random.default_rng(seed)
    rows = [
        [int(x) for x in rng.integers(0, 30, size=int(rng.integers(1, 12)))]
        for _ in range(int(rng.integers(1, 25)))
    ]
    w = build_workload(trace_of(rows), TINY, 1)
    served = rng.random(w.requests) < 0.6
    mask = np.repeat(served, np.diff(w.offsets))
    accesses = int(mask.sum())
    distinct = np.unique(w.block[mask]).shape[0]
    expected = (accesses - distinct) / accesses if accesses else None
    assert w.served_ideal_hit_share(served) == expected
    assert w.served_ideal_hit_share(np.ones(w.requests, dtype=np.bool_)) == w.ideal_hit_share
