"""Issue #10 §4: the optional ``type`` column, and the readers of the traces people publish now.

Every case is a tiny hand-made file whose figures (requests, sessions, blocks, reuse) are
worked out by hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.canonical import read_canonical, traces_equal, write_canonical
from fcctl.analyzers.readers import TraceFormatError, read_trace
from fcctl.analyzers.readers._common import build_frame, null_hash_column
from fcctl.analyzers.schema import COLUMNS, OPTIONAL_COLUMNS, SCHEMA, Trace, table_columns
from fcctl.cli import app


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def column(trace: Trace, name: str) -> list:
    return trace.requests[name].to_list()


def error_of(path: Path, **kwargs: object) -> str:
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    return message


def cli_error(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


# --- the optional ``type`` column -----------------------------------------------------------


def _typed_trace() -> Trace:
    frame = build_frame(
        timestamp_s=np.array([0.0, 1.0]),
        input_tokens=np.array([10, 20]),
        output_tokens=np.array([1, 2]),
        block_size_tokens=0,
        hash_ids=null_hash_column(2),
        request_type=["coder", None],
    )
    return Trace(path="t.jsonl", format="bailian", requests=frame, has_hashes=False)


def test_optional_columns_schema() -> None:
    assert OPTIONAL_COLUMNS == {"type": pl.String()}
    assert table_columns(["hash_ids", "type", "x"]) == [*COLUMNS, "type"]
    assert table_columns(COLUMNS) == list(COLUMNS)


def test_build_frame_without_type_has_nine_columns() -> None:
    frame = build_frame(
        timestamp_s=np.array([0.0]),
        input_tokens=np.array([1]),
        output_tokens=np.array([1]),
        block_size_tokens=0,
        hash_ids=null_hash_column(1),
    )
    assert frame.schema == pl.Schema(SCHEMA)


def test_type_column_round_trips_through_canonical_parquet(tmp_path: Path) -> None:
    trace = _typed_trace()
    assert trace.requests.columns == [*COLUMNS, "type"]
    out = tmp_path / "t.parquet"
    write_canonical(trace, out)
    back = read_canonical(out)
    assert column(back, "type") == ["coder", None]
    assert back.requests.schema["type"] == pl.String()
    assert traces_equal(trace, back)


@pytest.mark.parametrize(
    "dtype", [pl.String(), pl.Categorical(), pl.Enum(["coder", "text"]), pl.Null()]
)
def test_parquet_accepts_type_as_text_or_null(tmp_path: Path, dtype: pl.DataType) -> None:
    frame = _typed_trace().requests
    if dtype == pl.Null():
        frame = frame.with_columns(pl.lit(None).alias("type"))
    else:
        frame = frame.with_columns(pl.col("type").cast(dtype))
    frame.write_parquet(tmp_path / "t.parquet")
    back = read_trace(tmp_path / "t.parquet")
    assert back.requests.schema["type"] == pl.String()
    assert column(back, "type") == (["coder", None] if dtype != pl.Null() else [None, None])


def test_parquet_refuses_a_numeric_type_column_and_other_extras(tmp_path: Path) -> None:
    frame = _typed_trace().requests
    frame.with_columns(pl.lit(3).alias("type")).write_parquet(tmp_path / "n.parquet")
    message = error_of(tmp_path / "n.parquet")
    assert "n.parquet: column 'type' must be String (nullable); got Int32" in message
    frame.with_columns(pl.lit(3).alias("priority")).write_parquet(tmp_path / "e.parquet")
    message = error_of(tmp_path / "e.parquet")
    assert "unexpected column(s) 'priority'" in message and "optionally type" in message
