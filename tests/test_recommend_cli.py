"""``fcctl recommend-thresholds`` through the CLI runner: human summary, --json keys, --out,
--emit, bad input one line and exit 2 with nothing written."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()
MOONCAKE = str(SAMPLES / "mooncake_conversation_2k.jsonl")
# A small node on the 2,000-request sample; a 2x2 grid, two rates. The pairs differ by less than
# the default margins (0.2 pp, 0.4 % TTFT: test_thresholds_that_do_not_matter), so these tests
# compare exactly (margins 0): the pick among measured differences, and the grid as given.
NODE = [
    "--gpus",
    "2",
    "--gpu-kv",
    "2GiB",
    "--host-memory",
    "4GiB",
    "--ssd",
    "64GiB",
    "--rates",
    "0.5,2",
    "--short-reply",
    "128,512",
    "--agent-context",
    "4096,16384",
    "--jobs",
    "1",
]
SMALL = [*NODE, "--decision-margin-pp", "0", "--decision-ttft-margin", "0"]


def _run(*args: str) -> Any:
    return runner.invoke(app, ["recommend-thresholds", *args])


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    result = _run(MOONCAKE, *SMALL, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_keys_are_exactly_the_documented_ones(doc: dict[str, Any]) -> None:
    assert list(doc) == [
        "schema_version",
        "recommendation",
        "ideal_hit_share",
        "rates",
        "grid",
        "misplacement",
        "hardware",
        "trace",
        "provenance",
        "sampling",
        "replicas",
    ]
    assert doc["sampling"] is None  # issue #19: only a run on sampled sessions has one
    assert doc["replicas"] is None  # only a sweep of more than one replica has it
    assert doc["schema_version"] == 3
    rec = doc["recommendation"]
    assert list(rec) == [
        "short_reply_tokens",
        "agent_context_tokens",
        "rate",
        "gpu_hit_share",
        "ttft_s",
        "matters",
        "spread",
        "why",
    ]
    assert list(rec["spread"]) == [
        "pairs",
        "hit_share_pp",
        "ttft_mean_ratio",
        "margin_pp",
        "ttft_margin",
    ]
    assert rec["matters"] is True and rec["spread"]["pairs"] == 4
    assert list(rec["ttft_s"]) == ["mean", "p99"] and rec["rate"] == 2.0
    assert len(doc["grid"]) == 2 * 2 * 2
    for g in doc["grid"]:
        assert list(g) == [
            "short_reply_tokens",
            "agent_context_tokens",
            "rate",
            "gpu_hit_share",
            "ttft_s",
            "ssd_read_bytes",
        ]
    for m in doc["misplacement"]:
        assert list(m) == ["change", "gpu_hit_share", "ttft_s", "ssd_read_bytes"]
    assert [r["rate"] for r in doc["rates"]] == [0.5, 2.0]
    for r in doc["rates"]:
        assert list(r["policies"]) == ["memory-only", "tiered", "flat", "flat-fcfs"]
        assert "cancelled_prefetches" in r["policies"]["tiered"]
    best = max(g["gpu_hit_share"] for g in doc["grid"] if g["rate"] == 2.0)
    assert rec["gpu_hit_share"] == best
    assert doc["hardware"]["host_memory_bytes"]["value"] == 4 * 2**30
    assert doc["provenance"]["fcctl_version"]


def test_thresholds_that_do_not_matter(tmp_path: Path) -> None:
    """Default margins on the same run: every pair is within 1 pp and 10 %, so the command says
    the thresholds do not matter, recommends and emits the placement's default pair (measured,
    on the grid), and suggests no wider grid."""
    from fcctl.layout.placement import DEFAULT_AGENT_CONTEXT_TOKENS, DEFAULT_SHORT_REPLY_TOKENS

    emit = tmp_path / "emit"
    result = _run(MOONCAKE, *NODE, "--json", "--emit", str(emit), "--emit-name", "fcs")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rec = doc["recommendation"]
    sp = rec["spread"]
    assert rec["matters"] is False and "do not matter" in rec["why"]
    assert sp["hit_share_pp"] <= sp["margin_pp"] == 1.0
    assert sp["ttft_mean_ratio"] <= 1 + sp["ttft_margin"] and sp["ttft_margin"] == 0.1
    default = (DEFAULT_SHORT_REPLY_TOKENS, DEFAULT_AGENT_CONTEXT_TOKENS)
    assert (rec["short_reply_tokens"], rec["agent_context_tokens"]) == default
    at = [g for g in doc["grid"] if g["rate"] == rec["rate"]]
    hits = [g["gpu_hit_share"] for g in at]
    assert sp["pairs"] == len(at) == 9  # the 2x2 grid gained the default values: 3x3
    assert abs(sp["hit_share_pp"] - 100 * (max(hits) - min(hits))) < 1e-9
    cell = next(g for g in at if (g["short_reply_tokens"], g["agent_context_tokens"]) == default)
    assert cell["gpu_hit_share"] == rec["gpu_hit_share"] and cell["ttft_s"] == rec["ttft_s"]
    text = (emit / "fcs" / "thresholds.py").read_text()
    assert f"short_reply_tokens={default[0]}," in text
    summary = _run(MOONCAKE, *NODE)
    assert "the thresholds do not matter here" in summary.stdout
    assert "wider" not in summary.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """One human-output run with --out and --emit: the two folders and its terminal summary
    (the summary is the same run's with or without --out, so one run serves both tests)."""
    root = tmp_path_factory.mktemp("recommend")
    out, emit = root / "out", root / "emit"
    result = _run(MOONCAKE, *SMALL, "--out", str(out), "--emit", str(emit), "--emit-name", "fcs")
    assert result.exit_code == 0, result.output
    return out, emit, result.stdout


def test_human_summary(written: tuple[Path, Path, str]) -> None:
    out = written[2]
    assert "recommended: short reply <=" in out and "misplacement cost:" in out
    assert "Placing every short chat on SSD" in out and "at 2 req/s." in out
    assert "memory-only" in out and "flat-fcfs" in out
    assert "sessions inferred" in out  # Mooncake has no session ids


def test_out_and_emit(written: tuple[Path, Path, str], doc: dict[str, Any]) -> None:
    out, emit, _ = written
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "recommend.json",
            "thresholds.toml",
            "grid.parquet",
            "rates.parquet",
            "misplacement.parquet",
            "grid_hit_share.png",
            "grid_ttft_p99.png",
            "hit_share.png",
            "ttft_p99.png",
        ]
    )
    rec = json.loads((out / "recommend.json").read_text())["recommendation"]
    assert rec == doc["recommendation"]  # same seed, same run
    toml = tomllib.loads((out / "thresholds.toml").read_text())
    assert toml["thresholds"] == {
        "short_reply_tokens": rec["short_reply_tokens"],
        "agent_context_tokens": rec["agent_context_tokens"],
    }
    assert toml["source"]["rate_per_s"] == 2.0 and toml["source"]["trace"] == MOONCAKE
    assert pl.read_parquet(out / "grid.parquet").height == 8  # a given grid is not extended
    assert pl.read_parquet(out / "misplacement.parquet").height == 6
    pkg = emit / "fcs"
    assert (pkg / "MANIFEST").is_file() and (pkg / "store.py").is_file()
    assert (pkg / "thresholds.toml").read_text() == (out / "thresholds.toml").read_text()
    assert f"short_reply_tokens={rec['short_reply_tokens']}," in (pkg / "thresholds.py").read_text()
    # Again without --force: refused before any work.
    again = _run(MOONCAKE, *SMALL, "--emit", str(emit), "--emit-name", "fcs")
    assert again.exit_code == 2 and "--emit" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rates", "fast"], "--rates: expected comma-separated numbers"),
        (["--rates", "0,1"], "--rates: each rate must be > 0"),
        (["--short-reply", "256,abc"], "--short-reply: expected comma-separated whole token"),
        (["--agent-context", "-5"], "--agent-context: each threshold must be an integer >= 0"),
        (["--objective", "fastest"], "--objective: must be one of hit, ttft-p99"),
        (["--target-rate", "-1"], "--target-rate: each rate must be > 0"),
        (["--target-rate", "nan"], "--target-rate: each rate must be > 0 and finite"),
        (["--rates", "inf"], "--rates: each rate must be > 0 and finite"),
        (["--prefill-tokens-per-s", "nan"], "--prefill-tokens-per-s: field"),
        (["--prefill-tokens-per-s", "inf"], "must be a finite number"),
        (["--gpus", "10000000"], "memory budget"),
        (["--emit", "x", "--emit-name", "numpy"], "--emit-name: must not shadow"),
        (["--emit", "x", "--emit-name", "json"], "--emit-name: must not shadow"),
        (["--out", "same", "--emit", "same"], "--out, --emit: must be separate"),
        (["--out", "a", "--emit", "a/pkg"], "--out, --emit: must be separate"),
        (["--jobs", "0"], "--jobs: must be an integer >= 1"),
        (["--decision-margin-pp", "-1"], "--decision-margin-pp: must be finite, in 0..100"),
        (["--decision-ttft-margin", "nan"], "--decision-ttft-margin: must be finite"),
        (["--emit", "x", "--emit-name", "not-a-name"], "--emit-name: must be a Python identifier"),
        (["--hardware", "h900-8x"], "--hardware: unknown preset"),
        (["--host-memory", "lots"], "--host-memory"),
        (["--model", "gpt-9"], "--model: unknown preset"),
    ],
)
def test_bad_flags_one_line_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = _run(str(SAMPLES / "claude_code_sample.jsonl.gz"), "--jobs", "1", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_bad_trace_and_out_dir_one_line_nothing_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": "x"}\n')
    out = tmp_path / "out"
    result = _run(str(bad), "--out", str(out))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()
    missing = _run(str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2 and len(missing.stderr.strip().splitlines()) == 1
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    refused = _run(str(SAMPLES / "claude_code_sample.jsonl.gz"), "--out", str(busy))
    assert refused.exit_code == 2 and "not empty" in refused.stderr
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]


def test_replicas_state_each_pick_its_stability_and_each_cells_range(tmp_path: Path) -> None:
    """Replica i is the sweep at seed + i: its pick is a plain sweep's at that seed; the
    stability is whether the picks agree; each cell's range holds every replica's figure."""
    from tests.plan_helpers import small_trace

    trace = str(small_trace(tmp_path, 400))
    r = _run(trace, *SMALL, "--seed", "5", "--replicas", "3", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    reps = doc["replicas"]
    assert reps["count"] == 3 and [p["seed"] for p in reps["picks"]] == [5, 6, 7]
    pairs = {(p["short_reply_tokens"], p["agent_context_tokens"]) for p in reps["picks"]}
    assert reps["stable"] == (len(pairs) == 1)
    first = doc["recommendation"]
    assert (first["short_reply_tokens"], first["agent_context_tokens"]) == (
        reps["picks"][0]["short_reply_tokens"],
        reps["picks"][0]["agent_context_tokens"],
    )
    alone = json.loads(_run(trace, *SMALL, "--seed", "6", "--json").stdout)
    assert alone["replicas"] is None
    one = alone["recommendation"]
    assert reps["picks"][1] == {
        "seed": 6,
        "short_reply_tokens": one["short_reply_tokens"],
        "agent_context_tokens": one["agent_context_tokens"],
        "gpu_hit_share": one["gpu_hit_share"],
        "ttft_mean_s": one["ttft_s"]["mean"],
        "ttft_p99_s": one["ttft_s"]["p99"],
    }
    assert len(reps["grid"]) == len(doc["grid"])
    for cell, rng in zip(doc["grid"], reps["grid"], strict=True):
        assert [cell[k] for k in ("short_reply_tokens", "agent_context_tokens", "rate")] == [
            rng[k] for k in ("short_reply_tokens", "agent_context_tokens", "rate")
        ]
        lo, hi = rng["gpu_hit_share"]["low"], rng["gpu_hit_share"]["high"]
        assert lo <= cell["gpu_hit_share"] <= hi
    seed6 = {
        (c["short_reply_tokens"], c["agent_context_tokens"], c["rate"]): c for c in alone["grid"]
    }
    for rng in reps["grid"]:
        c = seed6[(rng["short_reply_tokens"], rng["agent_context_tokens"], rng["rate"])]
        assert rng["ttft_mean_s"]["low"] <= c["ttft_s"]["mean"] <= rng["ttft_mean_s"]["high"]
    text = _run(trace, *SMALL, "--seed", "5", "--replicas", "3").stdout
    assert text.rstrip().splitlines()[-1].startswith("replicas: ")
    assert ("is stable" in text) == reps["stable"]
