"""Bad input: one line naming the file, the line/row and the field, the rule and the value."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fcctl.analyzers.traces.readers import TraceFormatError, read_trace
from fcctl.common.errors import FcctlInputError

GOOD = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}


def line(**changes: object) -> str:
    row = {**GOOD, **changes}
    for key in [k for k, v in changes.items() if v is ...]:
        del row[key]
    return json.dumps(row)


def expect_error(path: Path, *fragments: str, fmt: str | None = None) -> str:
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path, fmt)
    message = str(caught.value)
    assert isinstance(caught.value, FcctlInputError) and isinstance(caught.value, ValueError)
    assert "\n" not in message
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


MOONCAKE_CASES = {
    "bad_json": ([line(), '{"timestamp": 1, "input_length":'], ["line 2", "invalid JSON"]),
    "not_object": ([line(), "[1, 2]"], ["line 2", "JSON object", "got [1, 2]"]),
    "missing_field": ([line(input_length=...)], ["line 1", "missing field 'input_length'"]),
    "mistyped_field": (
        [line(), line(input_length="abc")],
        ["line 2", "'input_length'", "non-negative integer", "got 'abc'"],
    ),
    "negative_length": ([line(output_length=-5)], ["line 1", "'output_length'", "got -5"]),
    "bool_is_not_int": ([line(input_length=True)], ["'input_length'", "got True"]),
    "timestamp_string": ([line(timestamp="noon")], ["'timestamp'", "got 'noon'"]),
    "hash_ids_not_list": ([line(hash_ids="0,1")], ["'hash_ids'", "list", "got '0,1'"]),
    "hash_id_negative": ([line(hash_ids=[0, -1])], ["hash_ids[1]", "[0, 2**64)", "got -1"]),
    # orjson turns integers beyond 64 bits into floats; the message still says what it was.
    "hash_id_too_big": (
        [line(hash_ids=[5, 2**64])],
        ["hash_ids[1]", "[0, 2**64)", "got an integer beyond 64 bits"],
    ),
    "hash_id_float": ([line(), line(hash_ids=[3, 1.5])], ["line 2", "hash_ids[1]", "got 1.5"]),
    "hash_id_string": ([line(hash_ids=["7"])], ["hash_ids[0]", "got '7'"]),
}


@pytest.mark.parametrize("case", sorted(MOONCAKE_CASES))
def test_mooncake_bad_records(case: str, tmp_path: Path) -> None:
    lines, fragments = MOONCAKE_CASES[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    expect_error(path, *fragments, fmt="mooncake")


def test_bad_record_detected_format(tmp_path: Path) -> None:
    # Detection looks at line 1 only; the bad line 3 is still reported with its number.
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([line(), line(), line(input_length=-1)]) + "\n")
    expect_error(path, "line 3", "'input_length'", "got -1")


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(line(timestamp=i) for i in range(5000)) + "\n").encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    expect_error(path, "gzip", "truncated")


def test_broken_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(b"\x1f\x8b" + b"this is not deflate data at all" * 10)
    expect_error(path, "gzip")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    expect_error(path, "empty")
    expect_error(path, "empty", fmt="mooncake")


def test_empty_gzip(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl.gz"
    path.write_bytes(gzip.compress(b""))
    expect_error(path, "empty")


def test_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a trace\n")
    expect_error(path, "unknown trace format", "pass `format` to choose")
    expect_error(path, "unknown format 'nope'", fmt="nope")


def test_nonexistent_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "missing.jsonl", "no such file")


def test_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("x")
    expect_error(tmp_path, "no trace_*.json")
    expect_error(tmp_path, "no trace_*.json", fmt="claude-code")
    expect_error(tmp_path, "directory", fmt="mooncake")


# --- Claude Code --------------------------------------------------------------------------


def session(requests: list[object], **extra: object) -> dict:
    return {"id": "trace_x", "block_size": 64, "requests": requests, **extra}


def cc_req(**changes: object) -> dict:
    row = {"t": 0.0, "type": "n", "in": 64, "out": 1, "hash_ids": [1], **changes}
    return {k: v for k, v in row.items() if v is not ...}


def write_sessions(path: Path, sessions: list[object]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return path


def test_claude_code_bad_subagent_request(tmp_path: Path) -> None:
    marker = {"t": 3.0, "type": "subagent", "requests": [cc_req(), cc_req(**{"in": "abc"})]}
    path = write_sessions(tmp_path / "cc.jsonl", [session([cc_req()]), session([cc_req(), marker])])
    expect_error(path, "line 2", "requests[1].requests[1]", "'in'", "got 'abc'")


@pytest.mark.parametrize(
    ("record", "fragments"),
    [
        (session([cc_req(t=...)]), ["requests[0]", "missing field 't'"]),
        (session([cc_req(hash_ids=[1, -4])]), ["hash_ids[1]", "got -4"]),
        (session([cc_req(hash_ids={"a": 1})]), ["'hash_ids'", "got {'a': 1}"]),
        (session([cc_req(hash_ids=[2**40])]), ["2**40", f"got {2**40}"]),
        (session([cc_req(out=-2)]), ["'out'", "got -2"]),
        (session("nope"), ["'requests'", "got 'nope'"]),
        ({"block_size": 64, "requests": []}, ["missing field 'id'"]),
        (session([], block_size=0), ["'block_size'", "got 0"]),
        (session([{"t": 1.0, "type": "subagent", "requests": 5}]), ["'requests'", "got 5"]),
    ],
)
def test_claude_code_bad_sessions(record: dict, fragments: list[str], tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "cc.jsonl", [record])
    expect_error(path, "line 1", *fragments, fmt="claude-code")


def test_claude_code_duplicate_ids_and_mixed_block_sizes(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "dup.jsonl", [session([cc_req()]), session([cc_req()])])
    expect_error(path, "line 2", "'id'", "unique", "'trace_x'")
    other = session([cc_req()], block_size=16)
    other["id"] = "trace_y"
    path = write_sessions(tmp_path / "mixed.jsonl", [session([cc_req()]), other])
    expect_error(path, "line 2", "'block_size'", "got 16")


def test_claude_code_bad_json_file_in_directory(tmp_path: Path) -> None:
    (tmp_path / "trace_0001.json").write_text(json.dumps(session([cc_req()])))
    (tmp_path / "trace_0002.json").write_text('{"id": "trace_0002", ')
    with pytest.raises(TraceFormatError, match=r"trace_0002\.json: invalid JSON"):
        read_trace(tmp_path)


# --- Bailian ------------------------------------------------------------------------------


def qwen(chat: int, parent: int, **changes: object) -> str:
    row = {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": 1.0,
        "input_length": 32,
        "output_length": 1,
        "type": "text",
        "turn": 1,
        "hash_ids": [1, 2],
        **changes,
    }
    return json.dumps({k: v for k, v in row.items() if v is not ...})


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        ([qwen(1, -1), qwen(1, -1)], ["line 2", "'chat_id'", "unique", "line 1"]),
        ([qwen(1, 2), qwen(2, 1)], ["line 1", "cycle"]),
        ([qwen(1, -1, turn="2")], ["'turn'", "got '2'"]),
        ([qwen(1, -1, timestamp=...)], ["missing field 'timestamp'"]),
        ([qwen(1, -7)], ["'parent_chat_id'", "got -7"]),
    ],
)
def test_bailian_bad_records(lines: list[str], fragments: list[str], tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n")
    expect_error(path, *fragments)


# --- Azure --------------------------------------------------------------------------------

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        (ROW + "2023-11-16 18:15:47.1,abc,3\n", ["row 2", "'ContextTokens'", "got 'abc'"]),
        (ROW + ROW + "2023-11-16 18:15:47.1,5,-3\n", ["row 3", "'GeneratedTokens'", "'-3'"]),
        ("yesterday,1,2\n", ["row 1", "'TIMESTAMP'", "got 'yesterday'"]),
        ("", ["empty"]),
    ],
)
def test_azure_bad_rows(body: str, fragments: list[str], tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(HEADER + body)
    expect_error(path, *fragments)


def test_azure_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens\n" + "2023-11-16 18:15:46.6805900,374\n")
    expect_error(path, "missing column 'GeneratedTokens'", fmt="azure")


# --- Parquet ------------------------------------------------------------------------------


def test_parquet_missing_and_mistyped_columns(tmp_path: Path) -> None:
    import polars as pl

    from tests.readers_helpers import canonical_frame

    path = tmp_path / "a.parquet"
    canonical_frame().drop("turn").write_parquet(path)
    expect_error(path, "missing column 'turn'")
    canonical_frame(input_tokens=["a", "b", "c"]).write_parquet(path)
    expect_error(path, "column 'input_tokens'", "Int64", "got String")
    canonical_frame().with_columns(pl.col("request_index") * 0).write_parquet(path)
    expect_error(path, "'request_index'", "unique")


def test_truncated_parquet(tmp_path: Path) -> None:
    from fcctl.analyzers.traces.canonical import write_canonical
    from tests.conftest import SAMPLES

    good = tmp_path / "good.parquet"
    write_canonical(read_trace(SAMPLES / "azure_conv_1k.csv"), good)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes()[:-100])
    expect_error(bad, "Parquet", fmt="parquet")


def test_line_numbers_count_blank_lines_and_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line() + "\n\n" + line() + "\n" + line(input_length=-3))  # no final newline
    expect_error(path, "line 4", "got -3")
    path.write_text(line() + "\n\n" + line(timestamp=7))
    assert read_trace(path).requests["timestamp_s"].to_list() == [0.0, 0.007]
