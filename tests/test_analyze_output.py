"""``fcctl analyze``/``convert`` gaps found in the issue #2 audit: output paths that cannot be
written fail early with one line, and the piped human summary reads well at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.analyze_helpers import one_line_exit_2 as _one_line_exit_2
from tests.conftest import SAMPLES
from tests.readers_helpers import GENERIC_SAMPLE_MAP

runner = CliRunner()
MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
AZURE = SAMPLES / "azure_conv_1k.csv"


def test_out_under_a_regular_file_fails_before_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["analyze", str(MOONCAKE), "--out", str(blocker / "sub" / "o")])
    err = _one_line_exit_2(result)
    assert "is not a directory" in err and str(blocker) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_out_where_mkdir_fails_is_one_line() -> None:
    # /proc refuses new entries even to root: the OSError at write time becomes one line.
    result = runner.invoke(app, ["analyze", str(AZURE), "--out", "/proc/fcctl-audit-out"])
    err = _one_line_exit_2(result)
    assert "--out /proc/fcctl-audit-out: cannot create it" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_convert_unwritable_output_is_one_line() -> None:
    result = runner.invoke(app, ["convert", str(AZURE), "-o", "/proc/fcctl-audit.parquet"])
    err = _one_line_exit_2(result)
    assert "/proc/fcctl-audit.parquet: cannot create it" in err


def test_convert_checks_output_before_parsing(tmp_path: Path) -> None:
    # A broken trace *and* a bad -o: the -o is reported, as it is checked first.
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = runner.invoke(app, ["convert", str(bad), "-o", str(tmp_path / "no" / "x.parquet")])
    err = _one_line_exit_2(result)
    assert "does not exist" in err


TRACE_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if p.suffix not in (".md", ".py"))
# A log of no known format is read through its column mapping (samples/README.md).
SAMPLE_ARGS = {"generic_log.csv": ["--columns", GENERIC_SAMPLE_MAP]}


@pytest.mark.parametrize("sample", TRACE_SAMPLES)
def test_piped_summary_fits_80_columns(sample: str) -> None:
    args = ["analyze", str(SAMPLES / sample), *SAMPLE_ARGS.get(sample, [])]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if line != line.rstrip()]  # no padding at line ends
    # The path is a row of its own (a title would wrap it into the middle of the table).
    assert any(line.split()[:1] == ["trace"] for line in lines if line.strip())
    assert "Verdict:" in result.stdout


def test_azure_summary_has_no_empty_tables_or_repeated_notes() -> None:
    result = runner.invoke(app, ["analyze", str(AZURE)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Memory tier" not in out  # every cell would be n/a without hashes
    assert out.count("no block hashes") <= 2  # the headline and the verdict, once each


def test_wrapped_verdict_reason_keeps_its_indent() -> None:
    result = runner.invoke(app, ["analyze", str(MOONCAKE)], env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Verdict:"))
    body = [line for line in lines[start + 1 :] if line.strip()]
    assert body and all(line.startswith("  ") for line in body)


def test_per_session_clock_trace_says_what_duration_and_tier_mean() -> None:
    result = runner.invoke(
        app, ["analyze", str(SAMPLES / "claude_code_sample.jsonl.gz")], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "longest session 5,418.0 s" in out
    assert "memory-tier hit shares are a best case" in out


def test_hash_id_beyond_64_bits_is_named_as_such(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    row = '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [3, %d]}\n'
    trace.write_text(row % 2**64)
    err = _one_line_exit_2(runner.invoke(app, ["analyze", str(trace)]))
    assert "line 1: hash_ids[1] must be an integer in [0, 2**64); got an integer beyond" in err


def test_claude_code_sessions_without_requests_is_one_line(tmp_path: Path) -> None:
    # Was a TypeError traceback from the session metrics of an empty table.
    trace = tmp_path / "cc.jsonl"
    trace.write_text('{"id": "s", "block_size": 64, "requests": []}\n')
    for command in (["analyze", str(trace)], ["convert", str(trace), "-o", str(tmp_path / "o")]):
        err = _one_line_exit_2(runner.invoke(app, command))
        assert "cc.jsonl: no requests in any of the 1 sessions" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cc.jsonl"]


def test_parquet_without_rows_is_one_line_naming_the_parquet_file(tmp_path: Path) -> None:
    import dataclasses

    from fcctl.analyzers.traces.canonical import write_canonical
    from fcctl.analyzers.traces.readers import read_trace

    trace = read_trace(SAMPLES / "claude_code_sample.jsonl.gz")
    empty = tmp_path / "empty.parquet"
    write_canonical(dataclasses.replace(trace, requests=trace.requests.head(0)), empty)
    err = _one_line_exit_2(runner.invoke(app, ["analyze", str(empty)]))
    assert "empty.parquet: the table has no rows" in err


@pytest.mark.parametrize("row", ["2023-11-16 18:15:47.6805900,,3", "2023-11-16 18:15:47.6805900,5"])
def test_azure_empty_or_missing_cell_is_named(row: str, tmp_path: Path) -> None:
    trace = tmp_path / "a.csv"
    trace.write_text(
        f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,2\n{row}\n"
    )
    err = _one_line_exit_2(runner.invoke(app, ["analyze", str(trace)]))
    assert "a.csv: row 2: field '" in err and "got an empty or missing cell" in err


def test_kv_settings_are_in_json_and_summary() -> None:
    args = ["analyze", str(AZURE), "--model", "llama-3.1-70b", "--tp", "4", "--kv-dtype", "fp8"]
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    # 80 layers x 8 KV heads (2 per rank x 4 ranks) x 128 dims x 2 (K, V) x 1 byte
    assert doc["kv"] == {
        "model": "llama-3.1-70b",
        "bytes_per_token": 80 * 8 * 128 * 2 * 1,
        "block_bytes": None,
        "tp": 4,
        "dtype_bytes": 1,
        "bytes_per_token_per_rank": 80 * 2 * 128 * 2 * 1,
        "description": "llama-3.1-70b (llama): hidden 8192, 80 layers, 64 heads, 8 KV heads x "
        "head dim 128, 1-byte KV, tp 4",
    }
    out = " ".join(runner.invoke(app, args).stdout.split())
    assert "llama-3.1-70b (llama): hidden 8192, 80 layers, 64 heads" in out
    assert "1-byte KV, tp 4" in out
    assert "163,840 B/token node total over tp 4 ranks (40,960 per rank)" in out


def test_memory_capacities_sorted_and_deduplicated() -> None:
    args = ["analyze", str(SAMPLES / "claude_code_sample.jsonl.gz"), "--json"]
    doc = json.loads(runner.invoke(app, [*args, "--memory", "1TiB,64GiB,64GiB"]).stdout)
    assert [p["capacity_bytes"] for p in doc["memory_tier"]] == [64 << 30, 1 << 40]


def test_json_run_leaves_piped_stderr_empty(tmp_path: Path) -> None:
    # No progress bar and no stray blank line when stderr is not a terminal.
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "fcctl", "analyze", str(MOONCAKE), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    json.loads(proc.stdout)


def test_out_tables_without_hashes_keep_their_columns(tmp_path: Path) -> None:
    import polars as pl

    out = tmp_path / "o"
    assert runner.invoke(app, ["analyze", str(AZURE), "--out", str(out)]).exit_code == 0
    hist = pl.read_parquet(out / "histograms.parquet")
    assert hist.columns == ["metric", "bucket_lo", "bucket_hi", "count"] and hist.height == 0
    req = pl.read_parquet(out / "requests.parquet")
    assert req.height == 1000
    assert req["blocks"].null_count() == 1000 and req["reused_blocks"].null_count() == 1000
