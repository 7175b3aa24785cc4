"""``fcctl replay`` through the CLI runner: human table, --json, --out, bad input, golden.

Regenerate the golden file after an intended change with
``UPDATE_GOLDEN=1 python3 -m pytest tests/test_replay_cli.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.analyze_helpers import approx_equal
from tests.conftest import SAMPLES

runner = CliRunner()
GOLDEN = Path(__file__).parent / "golden"
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
# Small enough that every tier is used on the five-session sample.
TIGHT = [
    "--gpu-kv",
    "8GiB",
    "--host-memory",
    "16GiB",
    "--ssd",
    "64GiB",
    "--staging",
    "8GiB",
    "--gpus",
    "2",
]
POLICY_KEYS = {
    "gpu_hit_share_served",
    "ideal_hit_share_served",
    "gpu_hit_share",
    "ideal_hit_share",
    "ttft_s",
    "ssd_read_bytes",
    "read_amplification",
    "prefetch_s",
    "cancelled_prefetches",
    "recomputed_tokens",
    "peak_host_memory_bytes",
    "peak_staging_bytes",
    "peak_ssd_bytes",
    "offered_rate",
    "achieved_rate",
    "saturated",
    "saturated_by",
    "concurrency",
    "utilisation",
    "staging",
    "sessions_active",
    "queue_depth",
}


def _run(*args: str) -> Any:
    return runner.invoke(app, ["replay", *args])


def test_json_document_and_golden() -> None:
    result = _run(CLAUDE, "--rates", "0.5,2", *TIGHT, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # exactly one document
    assert doc["schema_version"] == 3
    assert {
        "trace",
        "kv",
        "hardware",
        "ideal_hit_share",
        "rates",
        "divergence_rate",
        "decision_margins",
        "provenance",
    } <= set(doc)
    assert [r["rate"] for r in doc["rates"]] == [0.5, 2.0]
    for r in doc["rates"]:
        assert list(r["policies"]) == ["memory-only", "tiered", "flat", "flat-fcfs"]
        assert list(r["decision"]) == ["best", "margin_pp", "ttft_ratio", "ssd_read_ratio", "why"]
        for p in r["policies"].values():
            assert POLICY_KEYS <= set(p)
            assert list(p["ttft_s"]) == [
                "mean",
                "p50",
                "p99",
                "ssd",
                "no_ssd",
                "window_s",
                "requests",
            ]
            assert list(p["prefetch_s"]) == ["mean", "wait_mean", "read_mean", "p99"]
            assert p["offered_rate"] == r["rate"]
            assert list(p["achieved_rate"]) == ["whole", "central", "unloaded"]
            assert list(p["utilisation"]) == [
                "prefill_mean",
                "prefill_max",
                "decode_mean",
                "ssd_read",
                "ssd_write",
                "pcie",
            ]
            assert list(p["staging"]) == ["bytes", "peak_bytes", "mean_bytes"]
            assert list(p["sessions_active"]) == ["mean", "max"]
            assert p["ideal_hit_share"] == doc["ideal_hit_share"]
            assert p["gpu_hit_share"] <= doc["ideal_hit_share"]
            # This tight node rejects some requests: the same hits over fewer accesses.
            assert p["rejected_requests"]["count"] > 0
            assert p["gpu_hit_share_served"] > p["gpu_hit_share"]
    hw = doc["hardware"]
    assert hw["gpu_kv_bytes"] == {"value": 8 * 2**30, "source": "--gpu-kv"}
    assert all(v["source"] for k, v in hw.items() if k != "name" and k != "prefill_tokens_per_s")
    got = dict(doc)
    got.pop("provenance")
    got["trace"] = dict(got["trace"], path=Path(got["trace"]["path"]).name)
    golden = GOLDEN / "replay_claude_code_sample.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(got, indent=2, allow_nan=False) + "\n")
    approx_equal(got, json.loads(golden.read_text()))


def test_human_table() -> None:
    result = _run(CLAUDE, "--rates", "1", "--policies", "memory-only,flat", *TIGHT)
    assert result.exit_code == 0, result.output
    out = result.stdout
    # This tight node rejects requests: the ideal over served requests, then over all.
    assert "% over served requests; 92.64% over all, the " in out
    assert "'served / all' where requests were rejected" in out
    assert "memory-only" in out and "flat" in out and "tiered" not in out
    assert "TTFT s" in out and "got/s" in out
    # The summary starts with the run's one decision, then each load point's, then divergence.
    assert out.startswith("decision: ") and "requests/s served" in out.splitlines()[0]
    # Each load point by what it served, the offered rate as detail.
    assert re.search(r"\ndecision at [0-9.]+ req/s served \(offered 1 req/s", out)
    assert "decision divergence rate: " in out


def test_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = _run(CLAUDE, "--rates", "1", "--policies", "tiered,flat", *TIGHT, "--out", str(out))
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "hit_share.png",
        "replay.json",
        "requests-flat-rate1.parquet",
        "requests-tiered-rate1.parquet",
        "ttft.png",
    ]
    table = pl.read_parquet(out / "requests-flat-rate1.parquet")
    assert table.height == 264 and "ttft_s" in table.columns
    assert json.loads((out / "replay.json").read_text())["schema_version"] == 3
    again = _run(CLAUDE, "--rates", "1", "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.stderr


def test_out_dir_with_a_size_list_keeps_every_points_table(tmp_path: Path) -> None:
    """Two staging sizes at one rate are two load points: two tables, named by the size."""
    out = tmp_path / "r"
    result = _run(
        CLAUDE, "--rates", "1", "--policies", "tiered", "--staging", "16GiB,1TiB", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir() if p.suffix == ".parquet")
    assert names == [
        "requests-tiered-rate1-staging16GiB.parquet",
        "requests-tiered-rate1-staging1TiB.parquet",
    ]
    doc = json.loads((out / "replay.json").read_text())
    staged = [p["sizes"]["staging_bytes"] for p in doc["rates"]]
    assert staged == [16 << 30, 1 << 40]
    for name in names:
        assert pl.read_parquet(out / name).height == 264


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "lru"], "--policies: unknown policy"),
        (["--rates", "0"], "--rates: each rate must be > 0"),
        (["--rates", "nan"], "--rates: each rate must be > 0 and finite"),
        (["--prefill-tokens-per-s", "nan"], "--prefill-tokens-per-s: field"),
        (["--prefill-tokens-per-s", "inf"], "--prefill-tokens-per-s: field"),
        (["--prefill-tokens-per-s", "0"], "--prefill-tokens-per-s: field"),
        (["--gpus", "10000000"], "--gpus: 10000000 GPUs make"),
        (["--rates", "fast"], "--rates: expected comma-separated numbers"),
        (["--hardware", "h900-8x"], "--hardware: unknown preset"),
        (["--gpu-kv", "12 parsecs"], "--gpu-kv"),
        (["--short-reply", "-3"], "--short-reply: must be"),
        (["--model", "gpt-9"], "--model: unknown preset"),
        (["--io-profile", "/nonexistent.json"], "--io-profile: file not found"),
    ],
)
def test_bad_flags_one_line_exit_2(args: list[str], message: str) -> None:
    result = _run(CLAUDE, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_bad_hardware_file_names_file_and_field(tmp_path: Path) -> None:
    hw = tmp_path / "hw.toml"
    hw.write_text('preset = "h100-8x"\nssd_bytes = "4TiB"\nwarp_drive = 3\n')
    result = _run(CLAUDE, "--hardware", str(hw))
    assert result.exit_code == 2
    assert "hw.toml: unknown field 'warp_drive'" in result.stderr
    hw.write_text('ssd_bytes = "4TiB"\ngpus = 2.5\n')
    result = _run(CLAUDE, "--hardware", str(hw))
    assert result.exit_code == 2 and "field 'gpus': must be a whole number" in result.stderr
    hw.write_text('ssd_bytes = "1TiB"\ngpus = 2\n')
    result = _run(CLAUDE, "--hardware", str(hw), "--rates", "1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["hardware"]["ssd_bytes"] == {"value": 2**40, "source": str(hw)}
    assert doc["workers"] == 2


def test_trace_without_hashes_is_refused() -> None:
    result = _run(str(SAMPLES / "azure_conv_1k.csv"))
    assert result.exit_code == 2
    assert "replay needs per-request block hashes" in result.stderr


def test_io_profile_derives_ssd_figures(tmp_path: Path) -> None:
    doc = {
        "schema_version": 1,
        "fio": {"available": True, "seq_read_bytes_per_s": 2.0e9},
        "layouts": {
            "flat": [{"concurrency": 16, "restore_bytes_per_s": 1.8e9}],
            "eviction": [
                {
                    "concurrency": 16,
                    "restore_bytes_per_s": 1.0e9,
                    "bytes_requested": 2**31,
                    "bytes_read": 2**31,
                    "read_commands": 32768,
                }
            ],
        },
    }
    path = tmp_path / "io.json"
    path.write_text(json.dumps(doc))
    result = _run(CLAUDE, "--rates", "1", "--io-profile", str(path), "--json")
    assert result.exit_code == 0, result.output
    hw = json.loads(result.stdout)["hardware"]
    assert hw["ssd_read_bytes_per_s"]["value"] == 2.0e9
    assert "fio.seq_read_bytes_per_s" in hw["ssd_read_bytes_per_s"]["source"]
    expected = (2**31 / 1.0e9 - 2**31 / 2.0e9) / 32768
    assert hw["ssd_command_s"]["value"] == pytest.approx(expected)
    assert "layouts.eviction[concurrency=16]" in hw["ssd_command_s"]["source"]
