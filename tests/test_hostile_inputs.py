"""Issue #20: hostile values in trace files end in one line and exit 2, never a traceback,
a wrong answer, or an allocation sized by the input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.readers_helpers import (
    CSV_LOG,
    CSV_MAP,
    cli_error,
    error_of,
    tracelab_round,
    write_jsonl,
)


def bailian_row(chat_id: int, t: float, turn: int) -> dict:
    return {
        "chat_id": chat_id,
        "parent_chat_id": -1,
        "timestamp": t,
        "input_length": 16,
        "output_length": 1,
        "type": "text",
        "turn": turn,
        "hash_ids": [chat_id],
    }


@pytest.mark.parametrize("turn", [2**31, 2**40, -(2**31) - 1, 2**64])
def test_bailian_turn_beyond_int32(tmp_path: Path, turn: int) -> None:
    # turn is an Int32 column; these used to escape as a polars cast traceback.
    path = write_jsonl(tmp_path / "b.jsonl", [bailian_row(1, 0.0, turn), bailian_row(2, 1.0, 1)])
    message = error_of(path)
    # (2**64 is beyond what the JSON parser keeps as an int: it arrives as a float.)
    assert "b.jsonl: line 1: field 'turn' must be " in message, message
    assert "line 1: field 'turn'" in cli_error("analyze", str(path))


@pytest.mark.parametrize("field", ["input_length", "chat_id"])
def test_bailian_int_beyond_int64(tmp_path: Path, field: str) -> None:
    row = {**bailian_row(1, 0.0, 0), field: 2**63}
    path = write_jsonl(tmp_path / "b.jsonl", [row])
    message = error_of(path)
    assert f"line 1: field {field!r} must be" in message and str(2**63) in message, message


@pytest.mark.parametrize("block_size", ["3000000000", "2147483648"])
def test_generic_block_size_beyond_int32(tmp_path: Path, block_size: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG)
    mapping = CSV_MAP.replace("block_size=16", f"block_size={block_size}")
    line = cli_error("analyze", str(path), "--columns", mapping)
    assert "block_size must be <= 2147483647" in line and block_size in line


def test_tracelab_huge_token_count_refused_before_allocation(tmp_path: Path) -> None:
    # 10**12 tokens is 1.6e10 64-token ids (116 GiB): refused from the count, not by MemoryError.
    good = tracelab_round("claude:s1", 0, 200, 0, 10, [("user_message", "2026-06-01T00:00:00Z")])
    huge = tracelab_round("claude:s1", 1, 10**12, 0, 10, [("user_message", "2026-06-01T00:00:05Z")])
    path = write_jsonl(tmp_path / "r.jsonl", [good, huge])
    assert len(path.read_bytes().splitlines()[1]) < 400
    message = error_of(path)
    assert "r.jsonl: line 2: field 'input_tokens_total' (1000000000000)" in message, message
    assert "memory cap" in message


def mooncake_rows(t: float) -> list[dict]:
    return [
        {"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]},
        {"timestamp": t, "input_length": 16, "output_length": 1, "hash_ids": [1]},
    ]


def cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from fcctl.cli import app

    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


# 1e305 ms used to be filed under day=-9223372036854775808; 2**53 s is the documented edge.
HOSTILE_MS = [1e305, 1.7e308, -1e300, 2.0**53 * 1000 * 1.5, 2.0**53 * 1000]


@pytest.mark.parametrize("t", HOSTILE_MS)
@pytest.mark.parametrize("partition", [[], ["--partition-by", "day"]], ids=["file", "day"])
def test_convert_never_writes_what_analyze_refuses(
    tmp_path: Path, t: float, partition: list[str]
) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", mooncake_rows(t))
    out = tmp_path / ("out" if partition else "out.parquet")
    code, output = cli("convert", str(source), "-o", str(out), *partition)
    if code == 2:
        assert "m.jsonl: request 2 in file order: timestamp" in output, output
        assert len(output.strip().splitlines()) == 1 and not out.exists()
        return
    assert code == 0, output
    if partition:
        days = [p.name for p in out.iterdir() if p.name.startswith("day=")]
        assert all(not d.startswith("day=-") for d in days), days
    code, output = cli("analyze", str(out), "--json")
    assert code == 0, output


@pytest.mark.parametrize("t", [float("inf"), 1e300, -(2.0**54)])
def test_parquet_reader_refuses_timestamp_beyond_rule(tmp_path: Path, t: float) -> None:
    import polars as pl

    from fcctl.analyzers.traces.readers import read_trace

    source = write_jsonl(tmp_path / "m.jsonl", mooncake_rows(1.0))
    table = read_trace(source).requests
    table = table.with_columns(pl.Series("timestamp_s", [0.0, t]))
    path = tmp_path / "t.parquet"
    table.write_parquet(path)
    message = error_of(path)
    assert "t.parquet: row " in message, message
    assert "column 'timestamp_s' must be a finite number of seconds within" in message, message


def canonical_table(tmp_path: Path):
    from fcctl.analyzers.traces.readers import read_trace

    rows = [
        {"timestamp": i * 1000, "input_length": 16, "output_length": 1, "hash_ids": [i % 2]}
        for i in range(3)
    ]
    return read_trace(write_jsonl(tmp_path / "ok.jsonl", rows)).requests


def test_parquet_extra_column_ignored_with_note(tmp_path: Path) -> None:
    import polars as pl

    from fcctl.analyzers.traces.readers import read_trace

    path = tmp_path / "extra.parquet"
    table = canonical_table(tmp_path)
    table.with_columns(pl.lit(1).alias("mine"), pl.lit("x").alias("host")).write_parquet(path)
    trace = read_trace(path)
    assert "mine" not in trace.requests.columns and trace.requests.height == 3
    assert [n for n in trace.notes if "ignored" in n] == [
        "ignored non-canonical column(s) 'mine', 'host'"
    ]


def test_dataset_extra_column_and_type_in_one_file_only(tmp_path: Path) -> None:
    import polars as pl

    from fcctl.analyzers.traces.dataset import read_dataset

    table = canonical_table(tmp_path)
    folder = tmp_path / "ds"
    folder.mkdir()
    # a.parquet lacks the optional type column, b.parquet has it plus a user column: the
    # assembled table has type null for a's rows (this used to be "schema lengths differ").
    table.write_parquet(folder / "a.parquet")
    table.with_columns(pl.lit("chat").alias("type"), pl.lit(7).alias("mine")).write_parquet(
        folder / "b.parquet"
    )
    trace = read_dataset(folder)
    assert trace.requests.height == 6
    types = trace.requests["type"].to_list()
    assert (types.count("chat"), types.count(None)) == (3, 3), types
    assert [n for n in trace.notes if "ignored" in n] == ["ignored non-canonical column(s) 'mine'"]
    code, output = cli("analyze", str(folder))
    assert code == 0, output
