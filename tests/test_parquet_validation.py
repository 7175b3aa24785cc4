"""Canonical Parquet is input like any other: every bad value is one line naming file, row, column.

Each case starts from a good canonical file written by ``write_canonical`` and changes one
thing: a value in one row, the metadata, or the columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.canonical import write_canonical
from fcctl.analyzers.traces.readers import TraceFormatError, read_trace
from fcctl.analyzers.traces.trace_metadata import METADATA_KEY, trace_metadata
from fcctl.cli import app
from tests.conftest import SAMPLES

CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"  # sessions, parents, 64-token hashes
AZURE = SAMPLES / "azure_conv_1k.csv"  # no hashes, no sessions
MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"  # order "time", no sessions


def _meta(source: Path) -> dict:
    return json.loads(trace_metadata(read_trace(source))[METADATA_KEY])


def write_variant(
    tmp_path: Path,
    source: Path,
    change: Callable[[pl.DataFrame], pl.DataFrame] = lambda f: f,
    meta: dict | None = None,
    *,
    with_metadata: bool = True,
) -> Path:
    """``source`` as canonical Parquet with ``change`` applied to the table and ``meta`` merged."""
    trace = read_trace(source)
    info = {**_meta(source), **(meta or {})}
    path = tmp_path / "bad.parquet"
    change(trace.requests).write_parquet(
        path, metadata={METADATA_KEY: json.dumps(info)} if with_metadata else None
    )
    return path


def set_at(column: str, row: int, value: object, dtype: pl.DataType | None = None):
    def change(frame: pl.DataFrame) -> pl.DataFrame:
        values = frame[column].to_list()
        values[row] = value
        return frame.with_columns(pl.Series(column, values, dtype=dtype or frame[column].dtype))

    return change


def expect(path: Path, *fragments: str) -> str:
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


VALUE_CASES = {
    "nan_timestamp": (CLAUDE, set_at("timestamp_s", 7, float("nan")), "row 7", "'timestamp_s'"),
    "inf_timestamp": (MOONCAKE, set_at("timestamp_s", 3, float("inf")), "row 3", "finite"),
    "null_timestamp": (MOONCAKE, set_at("timestamp_s", 5, None), "row 5", "must not be null"),
    "null_input": (CLAUDE, set_at("input_tokens", 9, None), "row 9", "'input_tokens'"),
    "negative_input": (CLAUDE, set_at("input_tokens", 4, -1), "row 4", "got -1"),
    "negative_output": (AZURE, set_at("output_tokens", 11, -7), "row 11", "'output_tokens'"),
    "null_request_index": (CLAUDE, set_at("request_index", 2, None), "row 2", "'request_index'"),
    "request_index_gap": (CLAUDE, set_at("request_index", 6, 600), "row 6", "0..n-1"),
    "parent_out_of_range": (CLAUDE, set_at("parent_request", 8, 10_000), "row 8", "got 10000"),
    "parent_negative": (CLAUDE, set_at("parent_request", 8, -1), "row 8", "'parent_request'"),
    "parent_is_itself": (CLAUDE, set_at("parent_request", 8, 8), "row 8", "itself"),
    # order 'session': a parent must be an earlier row of the same session.
    "parent_later": (CLAUDE, set_at("parent_request", 8, 20), "row 8", "earlier row"),
    "parent_other_session": (CLAUDE, set_at("parent_request", 100, 2), "row 100", "same session"),
    "block_size_varies": (CLAUDE, set_at("block_size_tokens", 13, 16), "row 13", "same in every"),
    "block_size_null": (CLAUDE, set_at("block_size_tokens", 13, None), "row 13", "null"),
    "hash_ids_null_row": (CLAUDE, set_at("hash_ids", 21, None), "row 21", "'hash_ids' is null"),
    "hash_id_null_element": (
        CLAUDE,
        set_at("hash_ids", 3, [5, None, 7]),
        "row 3",
        "element 1",
    ),
    "hash_id_negative": (
        MOONCAKE,
        lambda f: f.with_columns(pl.col("hash_ids").cast(pl.List(pl.Int64()))).pipe(
            set_at("hash_ids", 2, [1, -3])
        ),
        "row 2",
        "got -3",
    ),
    "input_tokens_past_int64": (
        MOONCAKE,
        lambda f: f.with_columns(pl.col("input_tokens").cast(pl.UInt64())).pipe(
            set_at("input_tokens", 12, 2**63 + 5)
        ),
        "row 12",
        "must fit Int64",
    ),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_bad_value_names_row_and_column(case: str, tmp_path: Path) -> None:
    source, change, *fragments = VALUE_CASES[case]
    expect(write_variant(tmp_path, source, change), *fragments)


METADATA_CASES = {
    "has_hashes_true_without_hashes": (
        AZURE,
        {"has_hashes": True, "block_size_tokens": 0},
        ["'hash_ids'", "has_hashes is true"],
    ),
    "has_hashes_false_with_hashes": (MOONCAKE, {"has_hashes": False}, ["has_hashes is false"]),
    "has_sessions_true_without": (MOONCAKE, {"has_sessions": True}, ["has_sessions is true"]),
    "has_sessions_false_with": (CLAUDE, {"has_sessions": False}, ["has_sessions is false"]),
    "block_size_disagrees": (CLAUDE, {"block_size_tokens": 16}, ["is 64", "is 16"]),
    "order_session_without_sessions": (MOONCAKE, {"order": "session"}, ["order 'session'"]),
    "has_hashes_not_bool": (CLAUDE, {"has_hashes": "yes"}, ["'has_hashes'", "got 'yes'"]),
    "block_size_not_int": (CLAUDE, {"block_size_tokens": 6.4}, ["'block_size_tokens'"]),
    "newer_schema": (CLAUDE, {"schema_version": 2}, ["'schema_version'", "got 2"]),
    "order_unknown": (CLAUDE, {"order": "random"}, ["'order'", "got 'random'"]),
    "path_not_str": (CLAUDE, {"path": 5}, ["'path'", "got 5"]),
}


@pytest.mark.parametrize("case", sorted(METADATA_CASES))
def test_metadata_that_disagrees_with_the_table(case: str, tmp_path: Path) -> None:
    source, meta, fragments = METADATA_CASES[case]
    expect(write_variant(tmp_path, source, meta=meta), *fragments)


def test_block_size_zero_with_hashes(tmp_path: Path) -> None:
    zero = lambda f: f.with_columns(pl.lit(0, pl.Int32()).alias("block_size_tokens"))  # noqa: E731
    expect(write_variant(tmp_path, MOONCAKE, zero, {"block_size_tokens": 0}), ">= 1")
    expect(write_variant(tmp_path, MOONCAKE, zero, with_metadata=False), "row 0", ">= 1")


def test_metadata_not_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    read_trace(CLAUDE).requests.write_parquet(path, metadata={METADATA_KEY: "{not json"})
    expect(path, f"metadata {METADATA_KEY!r}", "not JSON")


def test_rows_out_of_the_stated_order(tmp_path: Path) -> None:
    swap = lambda f: f.with_columns(  # noqa: E731
        pl.Series("timestamp_s", f["timestamp_s"].to_list()[::-1])
    )
    expect(write_variant(tmp_path, MOONCAKE, swap), "'timestamp_s'", "must not decrease")
    # order 'session': session trace_0001's rows, then another session, then trace_0001 again.
    frame = read_trace(CLAUDE).requests
    first = frame["session_id"][0]
    other = frame.filter(pl.col("session_id") != first)["session_id"][0]
    ids = frame["session_id"].to_list()
    ids[1] = other
    path = write_variant(tmp_path, CLAUDE, lambda f: f.with_columns(pl.Series("session_id", ids)))
    expect(path, "row 2", "'session_id'", "appears again")
    times = frame["timestamp_s"].to_list()
    times[2] = times[1] - 1.0
    path = write_variant(
        tmp_path, CLAUDE, lambda f: f.with_columns(pl.Series("timestamp_s", times))
    )
    expect(path, "row 2", "within a session")


def test_extra_missing_and_mistyped_columns(tmp_path: Path) -> None:
    # A user's own column is ignored with a note (issue #20.11), not refused.
    extra = lambda f: f.with_columns(pl.lit(1).alias("priority"))  # noqa: E731
    trace = read_trace(write_variant(tmp_path, CLAUDE, extra))
    assert "priority" not in trace.requests.columns
    assert "ignored non-canonical column(s) 'priority'" in trace.notes
    expect(write_variant(tmp_path, CLAUDE, lambda f: f.drop("hash_ids")), "missing column")
    floats = lambda f: f.with_columns(pl.col("input_tokens").cast(pl.Float64()))  # noqa: E731
    expect(write_variant(tmp_path, CLAUDE, floats), "'input_tokens'", "got Float64")
    flag = lambda f: f.with_columns(pl.col("turn") > 0)  # noqa: E731
    expect(write_variant(tmp_path, CLAUDE, flag), "'turn'", "got Boolean")


def test_time_ordered_table_may_hold_a_later_parent(tmp_path: Path) -> None:
    # Bailian logs can stamp a reply before the chat it follows; the reader keeps such parents,
    # so the Parquet written from it must read back.
    path = write_variant(tmp_path, MOONCAKE, set_at("parent_request", 3, 9, pl.Int64()))
    assert read_trace(path).requests["parent_request"][3] == 9


def test_parent_naming_no_request_without_metadata(tmp_path: Path) -> None:
    # Without metadata parents are remapped by request_index; one that names no row used to
    # become null silently.
    path = write_variant(
        tmp_path, CLAUDE, set_at("parent_request", 5, 999_999), with_metadata=False
    )
    expect(path, "row 5", "'parent_request'", "got 999999")


def test_not_parquet_truncated_and_garbage(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    write_canonical(read_trace(CLAUDE), good)
    data = good.read_bytes()
    cases = {
        "text.parquet": MOONCAKE.read_bytes()[:5000],
        "truncated.parquet": data[: len(data) // 2],
        "garbage.parquet": b"PAR1" + bytes(range(256)) * 40,
        "footer_only.parquet": data[-200:],
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(TraceFormatError) as caught:
            read_trace(path, format="parquet")
        assert "Parquet" in str(caught.value) and "\n" not in str(caught.value)


def test_good_files_still_read(tmp_path: Path) -> None:
    for source in (CLAUDE, AZURE, MOONCAKE, SAMPLES / "bailian_synthetic.jsonl"):
        out = tmp_path / f"{source.stem}.parquet"
        write_canonical(read_trace(source), out)
        assert read_trace(out).num_requests == read_trace(source).num_requests


def test_cli_exit_2_one_line(tmp_path: Path) -> None:
    path = write_variant(tmp_path, CLAUDE, set_at("timestamp_s", 7, float("nan")))
    result = CliRunner().invoke(app, ["convert", str(path), "-o", str(tmp_path / "o.parquet")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "row 7" in lines[0] and "'timestamp_s'" in lines[0]
    assert not (tmp_path / "o.parquet").exists()
