"""``fcctl analyze`` through typer's runner: human output, --json, --out, golden JSON, bad input.

Golden files: ``tests/golden/analyze_<sample>.json`` hold the --json document for a bundled
sample without ``provenance`` and with ``trace.path`` reduced to the file name. Regenerate
after an intended change with ``UPDATE_GOLDEN=1 python3 -m pytest tests/test_analyze_cli.py``.
"""

from __future__ import annotations

import json
import os
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
TOP_KEYS = {
    "schema_version",
    "trace",
    "kv",
    "once_only_block_share",
    "reuse_access_share",
    "reuse_distance",
    "sessions",
    "memory_tier",
    "verdict",
    "provenance",
}


def _run(*args: str) -> Any:
    return runner.invoke(app, ["analyze", *args])


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    doc.pop("provenance")
    doc["trace"] = dict(doc["trace"], path=Path(doc["trace"]["path"]).name)
    return doc


@pytest.mark.parametrize(
    "sample", ["claude_code_sample.jsonl.gz", "mooncake_conversation_2k.jsonl"]
)
def test_json_matches_golden(sample: str) -> None:
    result = _run(str(SAMPLES / sample), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert TOP_KEYS <= set(doc)
    assert doc["schema_version"] == 1
    golden = GOLDEN / f"analyze_{sample.split('.')[0]}.json"
    got = _comparable(doc)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(got, indent=2, allow_nan=False) + "\n")
    approx_equal(got, json.loads(golden.read_text()))


def test_json_keys_and_types_claude_code() -> None:
    result = _run(str(SAMPLES / "claude_code_sample.jsonl.gz"), "--json", "--memory", "1GiB,8GiB")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # exactly one document on stdout
    t = doc["trace"]
    assert set(t) == {
        "path",
        "format",
        "requests",
        "sessions",
        "sessions_inferred",
        "block_size_tokens",
        "block_accesses",
        "distinct_blocks",
        "duration_s",
        "schedule",
        "converted_from",
        "sampled",
        "sample_rate",
        "sampling",
        "dataset",
        "fingerprint",
    }
    assert t["fingerprint"].startswith("sha256:")
    assert t["sampled"] is False and t["sample_rate"] is None and t["sampling"] is None
    assert t["format"] == "claude-code" and t["sessions_inferred"] is False
    assert isinstance(t["sessions"], int) and t["block_size_tokens"] == 64
    assert doc["kv"] == {
        "model": "llama-3.1-8b",
        "bytes_per_token": 131072,
        "block_bytes": 64 * 131072,
        "tp": 1,
        "dtype_bytes": 2,
        "bytes_per_token_per_rank": 131072,
        "description": "llama-3.1-8b (llama): hidden 4096, 32 layers, 32 heads, 8 KV heads x "
        "head dim 128, 2-byte KV, tp 1",
    }
    for unit in ("requests", "seconds", "stack_blocks", "stack_bytes"):
        assert set(doc["reuse_distance"][unit]) == {"p50", "p90", "p99"}
    assert set(doc["sessions"]["kv_bytes"]) == {"p50", "p90", "p99", "max", "mean"}
    tier = doc["memory_tier"]
    assert [p["capacity_bytes"] for p in tier] == [2**30, 8 * 2**30]
    assert [p["capacity_blocks"] for p in tier] == [
        2**30 // (64 * 131072),
        8 * 2**30 // (64 * 131072),
    ]
    assert tier[0]["lru_hit_share"] <= tier[1]["lru_hit_share"] <= doc["reuse_access_share"]
    layout = doc["verdict"]["layout"]
    assert layout in ("flat", "tiered", "load-dependent") and doc["verdict"]["reasons"]
    checks = doc["verdict"]["checks"]
    names = [c["name"] for c in checks]
    # memory_serves_ideal is weighed only when sessions reach GBs and the tier filters
    assert names in (
        ["share_of_ideal", "session_kv_p90_bytes"],
        ["share_of_ideal", "memory_serves_ideal", "session_kv_p90_bytes"],
    )
    for c in checks:
        assert set(c) == {"name", "value", "threshold", "unit", "passed"}
    sessions_check = checks[-1]
    assert sessions_check["value"] == doc["sessions"]["kv_bytes"]["p90"]
    assert sessions_check["threshold"] == 2**30 and sessions_check["unit"] == "bytes"
    # tiered exactly when every check passed; load-dependent exactly when only the session
    # size failed while the tier serves the ideal
    passed = {c["name"]: c["passed"] for c in checks}
    assert (layout == "tiered") == all(passed.values())
    assert (layout == "load-dependent") == (
        passed.get("memory_serves_ideal", False) and not passed["session_kv_p90_bytes"]
    )
    for key in ("fcctl_version", "python", "host", "started_utc", "finished_utc"):
        assert key in doc["provenance"]


def test_model_flags_change_kv_bytes() -> None:
    result = _run(
        str(SAMPLES / "claude_code_sample.jsonl.gz"),
        "--json",
        "--model",
        "deepseek-v3",
        "--kv-dtype",
        "fp8",
    )
    assert result.exit_code == 0, result.output
    # MLA latent 576 x 61 layers x 1 byte
    assert json.loads(result.stdout)["kv"]["bytes_per_token"] == 576 * 61
    result = _run(
        str(SAMPLES / "claude_code_sample.jsonl.gz"),
        "--json",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "16",
    )
    # 8 KV heads over 16 ranks are replicated: 16 ranks x 1 head x 2 x 128 x 2 B x 80 layers
    assert json.loads(result.stdout)["kv"]["bytes_per_token"] == 16 * 2 * 128 * 2 * 80


def test_human_output_mooncake_says_inferred() -> None:
    result = _run(str(SAMPLES / "mooncake_conversation_2k.jsonl"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "INFERRED" in out and "Memory tier" in out and "Verdict:" in out
    assert "once-only block share" in out


def test_human_output_azure_says_reuse_unmeasurable() -> None:
    result = _run(str(SAMPLES / "azure_conv_1k.csv"))
    assert result.exit_code == 0, result.output
    assert "Reuse cannot be measured" in result.stdout
    doc = json.loads(_run(str(SAMPLES / "azure_conv_1k.csv"), "--json").stdout)
    assert doc["reuse_access_share"] is None and doc["sessions"] is None
    assert doc["request_sizes"]["arrival_rate_per_s"] > 0


def test_out_dir_files(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = _run(str(SAMPLES / "claude_code_sample.jsonl.gz"), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {
        "analysis.json",
        "requests.parquet",
        "sessions.parquet",
        "histograms.parquet",
        "reuse_distance_cdf.png",
        "session_kv_cdf.png",
        "memory_tier_curve.png",
    } <= names
    doc = json.loads((out / "analysis.json").read_text())
    assert doc == json.loads(result.stdout)
    req = pl.read_parquet(out / "requests.parquet")
    assert req.height == doc["trace"]["requests"]
    assert int(req["blocks"].sum()) == doc["trace"]["block_accesses"]
    sess = pl.read_parquet(out / "sessions.parquet")
    assert sess.height == doc["trace"]["sessions"]
    assert (out / "memory_tier_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_out_dir_refuses_non_empty_without_force(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = _run(str(SAMPLES / "azure_conv_1k.csv"), "--out", str(out))
    assert result.exit_code == 2
    assert "not empty" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert (out / "keep.txt").read_text() == "mine"
    # --force replaces only an earlier analysis (one with analysis.json), never other data.
    result = _run(str(SAMPLES / "azure_conv_1k.csv"), "--out", str(out), "--force")
    assert result.exit_code == 2 and "only an earlier analyze output" in result.stderr
    assert (out / "keep.txt").read_text() == "mine"
    (out / "analysis.json").write_text("{}")
    result = _run(str(SAMPLES / "azure_conv_1k.csv"), "--out", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert not (out / "keep.txt").exists() and (out / "analysis.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--memory", "12XB"], "--memory"),
        (["--model", "no-such-model"], "--model"),
        (["--kv-dtype", "int3"], "--kv-dtype"),
        (["--tp", "0"], "--tp"),
    ],
)
def test_bad_flags_exit_2_one_line(args: list[str], needle: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = _run(str(SAMPLES / "azure_conv_1k.csv"), *args, "--out", str(out))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fcctl: error:") and needle in lines[0]
    assert "Traceback" not in result.output and not out.exists()


def test_bad_trace_exit_2_nothing_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [2]}\n'
    )
    out = tmp_path / "report"
    for trace in (bad, tmp_path / "missing.jsonl"):
        result = _run(str(trace), "--out", str(out))
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and str(trace.name) in result.stderr
        assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_model_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 64,
            }
        )
    )
    result = _run(str(SAMPLES / "azure_conv_1k.csv"), "--json", "--model-config", str(cfg))
    assert result.exit_code == 0, result.output
    # 2 x kv_heads 2 x head_dim 16 x 2 B x 2 layers = 256
    assert json.loads(result.stdout)["kv"]["bytes_per_token"] == 256


def test_bailian_sessions_from_ids() -> None:
    result = _run(str(SAMPLES / "bailian_synthetic.jsonl"), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["trace"]["format"] == "bailian" and doc["trace"]["sessions_inferred"] is False
    assert doc["trace"]["sessions"] >= 1 and doc["sessions"]["turns"]["p50"] >= 1


def test_canonical_parquet_gives_the_same_figures(tmp_path: Path) -> None:
    src = SAMPLES / "mooncake_conversation_2k.jsonl"
    pq = tmp_path / "t.parquet"
    assert runner.invoke(app, ["convert", str(src), "-o", str(pq)]).exit_code == 0
    direct = _comparable(json.loads(_run(str(src), "--json").stdout))
    via = _comparable(json.loads(_run(str(pq), "--json").stdout))
    for doc in (direct, via):
        doc["trace"].pop("path")
        doc["trace"].pop("format")
        doc["trace"].pop("converted_from")  # the Parquet names its source; the source, none
        doc.pop("notes")
    approx_equal(via, direct)


@pytest.mark.slow
def test_whole_claude_code_trace_under_8_gib(shared_traces: Path) -> None:
    import subprocess
    import sys

    trace = shared_traces / "weka_kv_cache_tester" / "claude_code_traces.jsonl.gz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fcctl", "analyze", str(trace), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert usage.ru_maxrss < 8 * 2**20  # KiB
    doc = json.loads(out)
    assert doc["trace"]["sessions"] == 710 and doc["trace"]["block_accesses"] > 90_000_000
