"""The optional ``type`` column, and the readers of the traces people publish now (TraceLab
rounds, Dynamo agentic, Bailian/Qwen, generic logs through ``--columns``).

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

from fcctl.analyzers.traces.canonical import read_canonical, traces_equal, write_canonical
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.readers._common import build_frame, null_hash_column
from fcctl.analyzers.traces.schema import COLUMNS, OPTIONAL_COLUMNS, SCHEMA, Trace, table_columns
from fcctl.cli import app
from tests.conftest import SAMPLES
from tests.readers_helpers import (
    CSV_LOG,
    CSV_MAP,
    GENERIC_SAMPLE_MAP,
    cli_error,
    error_of,
    tracelab_round,
    write_jsonl,
)


def column(trace: Trace, name: str) -> list:
    return trace.requests[name].to_list()


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
    assert OPTIONAL_COLUMNS == {"type": pl.String(), "think_time_s": pl.Float64()}
    assert table_columns(["hash_ids", "type", "x"]) == [*COLUMNS, "type"]
    assert table_columns(["think_time_s", "type"]) == [*COLUMNS, "type", "think_time_s"]
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


def test_parquet_refuses_a_numeric_type_column_and_ignores_other_extras(tmp_path: Path) -> None:
    frame = _typed_trace().requests
    frame.with_columns(pl.lit(3).alias("type")).write_parquet(tmp_path / "n.parquet")
    message = error_of(tmp_path / "n.parquet")
    assert "n.parquet: column 'type' must be String (nullable); got Int32" in message
    # issue #20.11: the user's own columns are dropped and named once in the notes
    frame.with_columns(pl.lit(3).alias("priority")).write_parquet(tmp_path / "e.parquet")
    trace = read_trace(tmp_path / "e.parquet")
    assert "priority" not in trace.requests.columns
    assert "ignored non-canonical column(s) 'priority'" in trace.notes


def analyze_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["analyze", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- TraceLab rounds ------------------------------------------------------------------------

S1, S2 = "claude:s1", "codex:s2"
B1, B2 = 1 << 40, 2 << 40  # namespace of the 1st and 2nd session in file order


def tracelab_rows() -> list[dict]:
    t = "2026-06-01T00:00:"
    return [
        # line 1: s1 round 1; two tool results, the prompt is complete at the second (+9 s)
        tracelab_round(
            S1,
            1,
            300,
            210,
            100,
            [("tool_result", t + "05Z"), ("tool_result", t + "09Z"), ("reasoning", t + "12Z")],
        ),
        # line 2: s2 round 0 at +3 s, written with an offset; its cached prefix (100) is longer
        # than its (empty) session context: capped
        tracelab_round(S2, 0, 128, 100, 0, [("user_message", "2026-06-01T02:00:03.000+02:00")]),
        # line 3: s1 round 0 at +0 s
        tracelab_round(S1, 0, 200, 0, 10, [("user_message", t + "00Z"), ("text", t + "02Z")]),
        # line 4: s1 round 2, no input event: its earliest event; no offset: UTC (+20 s)
        tracelab_round(S1, 2, 400, 384, 0, [("text", t + "21"), ("text", t + "20")]),
        # line 5: s1 round 3 at +30 s, a short prefix: the chain forks after one block
        tracelab_round(S1, 3, 256, 64, 0, [("user_message", t + "30Z")]),
    ]


def test_tracelab_hand_made_chain(tmp_path: Path) -> None:
    trace = read_trace(write_jsonl(tmp_path / "r.jsonl", tracelab_rows()))
    assert trace.format == "tracelab" and trace.order == "time"
    assert trace.has_sessions and trace.has_hashes and trace.block_size_tokens == 64
    assert trace.requests.schema == pl.Schema(SCHEMA)
    assert column(trace, "timestamp_s") == [0.0, 3.0, 9.0, 20.0, 30.0]
    assert column(trace, "session_id") == [S1, S2, S1, S1, S1]
    assert column(trace, "turn") == [0, 0, 1, 2, 3]
    assert column(trace, "parent_request") == [None, None, 0, 2, 3]
    assert column(trace, "input_tokens") == [200, 128, 300, 400, 256]
    # s1 r0: 3 new blocks; its context (200 + 10 tokens) is those 3 blocks.
    # s1 r1: reuses floor(210/64) = 3, prompt has 4 blocks, context 400 tokens = 6 blocks: the
    #        prompt's new block 3 and the reply's 4, 5.
    # s1 r2: reuses 6 (its prefix 384 covers the previous reply's blocks too).
    # s1 r3: prefix 64 reuses 1 block; 3 new ids, the chain forks.
    assert column(trace, "hash_ids") == [
        [B1 | 0, B1 | 1, B1 | 2],
        [B2 | 0, B2 | 1],
        [B1 | 0, B1 | 1, B1 | 2, B1 | 3],
        [B1 | k for k in range(6)],
        [B1 | 0, B1 | 6, B1 | 7, B1 | 8],
    ]
    assert any("synthesised from provider-reported prefix lengths" in n for n in trace.notes)
    assert any(n.startswith("1 of 5 rounds report a cached prefix longer") for n in trace.notes)


def test_tracelab_figures_through_the_cli(tmp_path: Path) -> None:
    doc = analyze_json(str(write_jsonl(tmp_path / "r.jsonl", tracelab_rows())))
    assert doc["trace"]["format"] == "tracelab"
    assert (doc["trace"]["requests"], doc["trace"]["sessions"]) == (5, 2)
    assert (doc["trace"]["block_accesses"], doc["trace"]["distinct_blocks"]) == (19, 11)
    # Used once: s1's 4, 5, 6, 7, 8 and both of s2's: 7 of 11 blocks; 19 - 11 re-accesses.
    assert doc["once_only_block_share"] == pytest.approx(7 / 11)
    assert doc["reuse_access_share"] == pytest.approx(8 / 19)


def test_tracelab_shared_sample_reads(shared_traces: Path) -> None:
    trace = read_trace(shared_traces / "tracelab_sample" / "round_trace.jsonl")
    assert trace.format == "tracelab" and trace.num_requests == 19
    assert trace.requests["session_id"].n_unique() == 2
    # Every round after the first of its session reuses its whole cached prefix.
    assert any(n.startswith("2 of 19 rounds") for n in trace.notes)


TRACELAB_BAD = {
    "split": ({"newly_append_tokens": 7}, "field 'newly_append_tokens' must equal"),
    "negative": ({"output_tokens": -1}, "field 'output_tokens' must be a non-negative integer"),
    "bool_round": ({"round_index": True}, "field 'round_index' must be a non-negative integer"),
    "float_tokens": ({"prefix_tokens": 2.0}, "field 'prefix_tokens' must be a non-negative"),
    "session": ({"session_id": 5}, "field 'session_id' must be a non-empty string; got 5"),
    "no_events": ({"timing_events": []}, "field 'timing_events' must be a non-empty list"),
    "event_kind": ({"timing_events": [{"timestamp": "2026-06-01T00:00:00Z"}]}, "event_type"),
    "bad_time": (
        {"timing_events": [{"event_type": "text", "timestamp": "noon"}]},
        "timing_events[0].timestamp must be an ISO 8601 time",
    ),
    "model": ({"model": 4}, "field 'model' must be a string or null; got 4"),
}


@pytest.mark.parametrize("change, fragment", TRACELAB_BAD.values(), ids=list(TRACELAB_BAD))
def test_tracelab_bad_rounds(tmp_path: Path, change: dict, fragment: str) -> None:
    good = tracelab_round(S1, 0, 200, 0, 10, [("user_message", "2026-06-01T00:00:00Z")])
    path = write_jsonl(tmp_path / "r.jsonl", [good, {**good, "round_index": 1, **change}])
    message = error_of(path)
    assert "r.jsonl: line 2: " in message and fragment in message, message


def test_tracelab_duplicate_round_and_cli_exit_2(tmp_path: Path) -> None:
    good = tracelab_round(S1, 0, 200, 0, 10, [("user_message", "2026-06-01T00:00:00Z")])
    path = write_jsonl(tmp_path / "r.jsonl", [good, good])
    assert "line 2: field 'round_index' must be unique within a session" in error_of(path)
    line = cli_error("analyze", str(path))
    assert line.startswith("fcctl: error: ") and "r.jsonl: line 2: field 'round_index'" in line


# --- Dynamo agentic Mooncake -----------------------------------------------------------------


def dynamo_rows() -> list[dict]:
    return [
        # 1: session a starts at 1 s
        {
            "session_id": "a",
            "request_id": "a0",
            "timestamp": 1000,
            "input_length": 1024,
            "output_length": 10,
            "hash_ids": [1, 2],
        },
        # 2: session b at 1.5 s, shares block 1
        {
            "session_id": "b",
            "request_id": "b0",
            "timestamp": 1500,
            "input_length": 512,
            "output_length": 5,
            "hash_ids": [1],
        },
        # 3: a's next turn has only a delay: 1000 + 500 ms
        {
            "session_id": "a",
            "request_id": "a1",
            "delay": 500,
            "input_length": 1536,
            "output_length": 7,
            "hash_ids": [1, 2, 3],
        },
        # 4: waits for a1 (1500) and b0 (1500), then delay 100 + tool_wait_ms 400: 2000 ms
        {
            "session_id": "a",
            "request_id": "a2",
            "wait_for": ["a1", "b0"],
            "delay": 100,
            "tool_wait_ms": 400,
            "input_tokens": 2048,
            "output_tokens": 1,
            "hash_ids": [1, 2, 3, 4],
        },
        # 5: b's second row resets its prefix: no parent
        {
            "session_id": "b",
            "request_id": "b1",
            "created_time": 1200,
            "prefix_reset": True,
            "input_length": 100,
            "output_length": 0,
            "hash_ids": [9],
        },
        # 6: no session: a session of its own
        {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [7]},
    ]


def test_dynamo_hand_made_sessions_and_delays(tmp_path: Path) -> None:
    trace = read_trace(write_jsonl(tmp_path / "d.jsonl", dynamo_rows()))
    assert trace.format == "dynamo" and trace.order == "time" and trace.has_sessions
    assert trace.block_size_tokens == 512 and trace.requests.schema == pl.Schema(SCHEMA)
    # Lines in time order: 6 (0), 1 (1.0), 5 (1.2), 2 (1.5), 3 (1.5, after 2: file order), 4.
    assert column(trace, "timestamp_s") == [0.0, 1.0, 1.2, 1.5, 1.5, 2.0]
    assert column(trace, "session_id") == ["request_6", "a", "b", "b", "a", "a"]
    assert column(trace, "turn") == [0, 0, 1, 0, 1, 2]
    assert column(trace, "parent_request") == [None, None, None, None, 1, 4]
    assert column(trace, "input_tokens") == [10, 1024, 100, 512, 1536, 2048]
    assert column(trace, "hash_ids") == [[7], [1, 2], [9], [1], [1, 2, 3], [1, 2, 3, 4]]
    assert any(n.startswith("2 of 6 rows have no timestamp") for n in trace.notes)
    assert any(n.startswith("1 rows without session_id") for n in trace.notes)
    doc = analyze_json(str(tmp_path / "d.jsonl"))
    assert (doc["trace"]["block_accesses"], doc["trace"]["distinct_blocks"]) == (12, 6)
    assert doc["trace"]["sessions"] == 3 and doc["once_only_block_share"] == pytest.approx(3 / 6)


def test_dynamo_sniffed_apart_from_plain_mooncake(tmp_path: Path) -> None:
    plain = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [7]}
    # The first row has no session, a later one has: Dynamo, not Mooncake.
    rows = [plain, {**plain, "session_id": "s", "timestamp": 5}]
    assert read_trace(write_jsonl(tmp_path / "d.jsonl", rows)).format == "dynamo"
    assert read_trace(write_jsonl(tmp_path / "m.jsonl", [plain, plain])).format == "mooncake"
    assert read_trace(SAMPLES / "mooncake_conversation_2k.jsonl").format == "mooncake"


DYNAMO_BAD = {
    "first_without_time": (
        [{"session_id": "a", "delay": 5, "input_length": 1, "output_length": 1, "hash_ids": []}],
        "line 1: field 'timestamp' is missing, and the row has no wait_for",
    ),
    "unknown_wait": (
        [
            {
                "request_id": "x",
                "wait_for": ["zz"],
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "line 1: field 'wait_for' names request_id 'zz', which no row has",
    ),
    "cycle": (
        [
            {
                "request_id": "x",
                "wait_for": ["y"],
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            },
            {
                "request_id": "y",
                "wait_for": ["x"],
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            },
        ],
        "must not form a cycle",
    ),
    "self_wait": (
        [
            {
                "request_id": "x",
                "wait_for": ["x"],
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "field 'wait_for' names the row itself",
    ),
    "negative_delay": (
        [
            {
                "session_id": "a",
                "timestamp": 0,
                "delay": -1,
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "line 1: field 'delay' must be a finite number >= 0 (ms); got -1",
    ),
    "bool_time": (
        [
            {
                "session_id": "a",
                "timestamp": True,
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "field 'timestamp' must be a finite number >= 0 (ms); got True",
    ),
    "text_wait": (
        [
            {
                "session_id": "a",
                "timestamp": 0,
                "tool_wait_ms": "5",
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "field 'tool_wait_ms' must be a finite number >= 0 (ms); got '5'",
    ),
    "both_names": (
        [
            {
                "session_id": "a",
                "timestamp": 0,
                "input_length": 1,
                "input_tokens": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ],
        "fields 'input_length' and 'input_tokens' are the same field",
    ),
    "duplicate_id": (
        [
            {
                "session_id": "a",
                "request_id": "r",
                "timestamp": 0,
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [],
            }
        ]
        * 2,
        "line 2: field 'request_id' must be unique; got 'r' again (first at line 1)",
    ),
    "session_type": (
        [{"session_id": 3, "timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}],
        "field 'session_id' must be a string or null; got 3",
    ),
    "bad_block_id": (
        [
            {
                "session_id": "a",
                "timestamp": 0,
                "input_length": 1,
                "output_length": 1,
                "hash_ids": [1, True],
            }
        ],
        "hash_ids[1] must be an integer in [0, 2**64); got True",
    ),
    "missing_output": (
        [{"session_id": "a", "timestamp": 0, "input_length": 1, "hash_ids": []}],
        "missing field 'output_length'",
    ),
}


@pytest.mark.parametrize("rows, fragment", DYNAMO_BAD.values(), ids=list(DYNAMO_BAD))
def test_dynamo_bad_rows(tmp_path: Path, rows: list[dict], fragment: str) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    message = error_of(path, format="dynamo")
    assert message.startswith(f"{path}: ") and fragment in message, message


def test_dynamo_bad_row_through_the_cli(tmp_path: Path) -> None:
    rows = [{"session_id": "a", "delay": 5, "input_length": 1, "output_length": 1, "hash_ids": []}]
    line = cli_error("analyze", str(write_jsonl(tmp_path / "d.jsonl", rows)), "--format", "dynamo")
    assert "d.jsonl: line 1: field 'timestamp' is missing" in line


# --- Qwen coder / thinking (Bailian with type) ----------------------------------------------


def qwen_row(chat: int, parent: int, t: float, kind: object, ids: list[int]) -> dict:
    row = {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": t,
        "input_length": 16 * len(ids),
        "output_length": 3,
        "type": kind,
        "turn": 1 if parent == -1 else 2,
        "hash_ids": ids,
    }
    if kind is ...:
        del row["type"]
    return row


def test_qwen_types_are_kept(tmp_path: Path) -> None:
    rows = [
        qwen_row(1, -1, 0.0, "coder", [0, 1]),
        qwen_row(2, 1, 4.0, "coder", [0, 1, 2]),
        qwen_row(3, -1, 1.0, "thinking", [5]),
        qwen_row(4, -1, 2.0, ..., [6]),  # no type field: null
        qwen_row(5, -1, 3.0, None, [7]),  # null type
    ]
    trace = read_trace(write_jsonl(tmp_path / "q.jsonl", rows))
    assert trace.format == "bailian" and trace.requests.columns == [*COLUMNS, "type"]
    assert column(trace, "type") == ["coder", "thinking", None, None, "coder"]
    assert column(trace, "session_id") == ["1", "3", "4", "5", "1"]
    out = tmp_path / "q.parquet"
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "q.jsonl"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert column(read_trace(out), "type") == ["coder", "thinking", None, None, "coder"]


def test_bailian_without_type_field_has_no_type_column(tmp_path: Path) -> None:
    trace = read_trace(write_jsonl(tmp_path / "q.jsonl", [qwen_row(1, -1, 0.0, ..., [0])]))
    assert trace.requests.schema == pl.Schema(SCHEMA)


def test_qwen_bad_type(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "q.jsonl", [qwen_row(1, -1, 0.0, "coder", [0]), qwen_row(2, -1, 1.0, 7, [0])]
    )
    assert "q.jsonl: line 2: field 'type' must be a string or null; got 7" in error_of(path)
    assert "line 2: field 'type'" in cli_error("analyze", str(path))


# --- the generic reader ---------------------------------------------------------------------


def test_generic_csv(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG)
    trace = read_trace(path, columns=CSV_MAP)
    assert trace.format == "generic" and trace.order == "time"
    assert trace.has_sessions and trace.has_hashes and trace.block_size_tokens == 16
    assert column(trace, "timestamp_s") == [0.0, 0.5, 2.0]
    assert column(trace, "session_id") == ["s2", "s1", "s1"]
    assert column(trace, "turn") == [0, 0, 1]  # derived: position in the session, in time
    assert column(trace, "parent_request") == [None, None, 1]
    assert column(trace, "hash_ids") == [[9], [1, 2], [1, 2, 3]]
    assert column(trace, "type") == ["chat", "chat", "tool"]
    assert column(trace, "block_size_tokens") == [16, 16, 16]
    # The same through the CLI: --columns implies --format generic.
    doc = analyze_json(str(path), "--columns", CSV_MAP)
    assert (doc["trace"]["requests"], doc["trace"]["sessions"]) == (3, 2)
    assert (doc["trace"]["block_accesses"], doc["trace"]["distinct_blocks"]) == (6, 4)
    assert doc["once_only_block_share"] == pytest.approx(2 / 4)


def test_generic_jsonl_ms_and_mapping_dict(tmp_path: Path) -> None:
    rows = [
        {"user": 7, "t": 2500, "p": 10, "c": 1, "turn": 3},
        {"user": 7, "t": 1000, "p": 20, "c": 2, "turn": 2},
    ]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    mapping = {
        "session": "user",
        "timestamp": "t",
        "timestamp_unit": "ms",
        "input": "p",
        "output": "c",
        "turn": "turn",
    }
    trace = read_trace(path, columns=mapping)
    assert column(trace, "timestamp_s") == [0.0, 1.5]
    assert column(trace, "session_id") == ["7", "7"] and column(trace, "turn") == [2, 3]
    assert not trace.has_hashes and column(trace, "hash_ids") == [None, None]
    assert trace.block_size_tokens == 0 and trace.requests.schema == pl.Schema(SCHEMA)


def test_generic_parquet_datetimes_and_lists(tmp_path: Path) -> None:
    from datetime import datetime

    path = tmp_path / "log.parquet"
    pl.DataFrame(
        {
            "when": [datetime(2026, 6, 1, 0, 0, 2), datetime(2026, 6, 1, 0, 0, 0)],
            "n_in": [64, 128],
            "n_out": [1, 2],
            "blocks": [[1], [1, 2]],
        }
    ).write_parquet(path)
    columns = (
        "timestamp=when,timestamp_unit=iso,input=n_in,output=n_out,hashes=blocks,block_size=64"
    )
    trace = read_trace(path, columns=columns)
    assert column(trace, "timestamp_s") == [0.0, 2.0]
    assert column(trace, "hash_ids") == [[1, 2], [1]] and not trace.has_sessions


def test_generic_iso_text(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("t,i,o\n2026-06-01T00:00:01.5Z,1,1\n2026-06-01T02:00:00+02:00,1,1\n")
    trace = read_trace(path, columns="timestamp=t,timestamp_unit=iso,input=i,output=o")
    assert column(trace, "timestamp_s") == [0.0, 1.5]


MAPPING_BAD = {
    "unknown_key": ("sesion=sid,timestamp=ts,input=in,output=out", "unknown key 'sesion'"),
    "missing_key": ("session=sid,timestamp=ts", "missing required key(s) input, output"),
    "absent_column": (
        "session=nope,timestamp=ts,input=in,output=out",
        "session=nope names no column of the CSV header",
    ),
    "no_pairs": ("timestamp", "expected key=column pairs"),
    "twice": ("timestamp=ts,timestamp=in,input=in,output=out", "key 'timestamp' is given twice"),
    "no_block_size": ("timestamp=ts,input=in,output=out,hashes=h", "hashes= needs block_size="),
    "block_size_alone": ("timestamp=ts,input=in,output=out,block_size=4", "no hashes= given"),
    "bad_block_size": (
        "timestamp=ts,input=in,output=out,hashes=h,block_size=0",
        "block_size must be an integer >= 1; got '0'",
    ),
    "unit": ("timestamp=ts,input=in,output=out,timestamp_unit=h", "timestamp_unit must be one"),
    "parent_alone": ("timestamp=ts,input=in,output=out,parent=par", "parent= needs id="),
}


@pytest.mark.parametrize("mapping, fragment", MAPPING_BAD.values(), ids=list(MAPPING_BAD))
def test_generic_bad_mapping(tmp_path: Path, mapping: str, fragment: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG)
    message = error_of(path, columns=mapping)
    assert message.startswith(f"columns: {path}: ") and fragment in message, message
    line = cli_error("analyze", str(path), "--columns", mapping)
    assert line.startswith(f"fcctl: error: --columns: {path}: ") and fragment in line


def test_generic_absent_column_of_jsonl_and_missing_field(tmp_path: Path) -> None:
    row = {"t": 1, "i": 2, "o": 3}
    path = write_jsonl(tmp_path / "log.jsonl", [row, {"t": 1, "i": 2}])
    assert "session=s names no column of line 1" in error_of(
        path, columns="timestamp=t,input=i,output=o,session=s"
    )
    message = error_of(path, columns="timestamp=t,input=i,output=o")
    assert "log.jsonl: line 2: missing field 'o' (output=)" in message


def test_generic_columns_only_for_generic(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG)
    line = cli_error(
        "convert",
        str(path),
        "-o",
        str(tmp_path / "o.parquet"),
        "--format",
        "mooncake",
        "--columns",
        CSV_MAP,
    )
    assert "--columns: " in line and "only by the generic format; got format 'mooncake'" in line
    line = cli_error("analyze", str(path), "--format", "generic")
    assert "--columns: " in line and "needs a column mapping" in line
    assert not (tmp_path / "o.parquet").exists()


CSV_BAD = {
    "negative": (
        "a1,s1,1,-3,5,1,,x",
        "row 1: column 'in' (input=) must be a non-negative integer; got '-3'",
    ),
    "fraction": (
        "a1,s1,1,1.5,5,1,,x",
        "column 'in' (input=) must be a non-negative integer; got '1.5'",
    ),
    "empty": (
        "a1,s1,1,,5,1,,x",
        "column 'in' (input=) must be a non-negative integer; got an empty cell",
    ),
    "time": ("a1,s1,soon,1,5,1,,x", "column 'ts' (timestamp=) must be a finite number"),
    "nan_time": ("a1,s1,nan,1,5,1,,x", "column 'ts' (timestamp=) must be a finite number"),
    "hash_word": (
        "a1,s1,1,1,5,1 x,,x",
        "column 'h' (hashes=) must be block ids separated by spaces",
    ),
    "hash_bool": ('a1,s1,1,1,5,"[1, true]",,x', "h[1] must be an integer in [0, 2**64); got True"),
    "hash_json": ("a1,s1,1,1,5,[1,,x", "column 'h' (hashes=) must be a JSON array"),
    "no_session": ("a1,,1,1,5,1,,x", "column 'sid' (session=) must be set in every row"),
    "parent": (
        "a1,s1,1,1,5,1,zz,x",
        "column 'par' (parent=) names no request of the file; got 'zz'",
    ),
    "own_parent": ("a1,s1,1,1,5,1,a1,x", "column 'par' (parent=) names the request itself"),
}


@pytest.mark.parametrize("row, fragment", CSV_BAD.values(), ids=list(CSV_BAD))
def test_generic_bad_csv_values(tmp_path: Path, row: str, fragment: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG.splitlines()[0] + "\n" + row + "\n")
    message = error_of(path, columns=CSV_MAP)
    assert message.startswith(f"{path}: ") and fragment in message, message


def test_generic_duplicate_id_and_jsonl_types(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG + "a1,s1,13,1,1,1,,x\n")
    assert "row 4: column 'rid' (id=) must be unique; got 'a1' again" in error_of(
        path, columns=CSV_MAP
    )
    rows = [{"t": 1, "i": True, "o": 3}]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    message = error_of(path, columns="timestamp=t,input=i,output=o")
    assert "line 1: column 'i' (input=) must be a non-negative integer; got True" in message
    path = write_jsonl(tmp_path / "log2.jsonl", [{"t": "1", "i": 1, "o": 3}])
    assert "column 't' (timestamp=) must be a finite number" in error_of(
        path, columns="timestamp=t,input=i,output=o"
    )
    line = cli_error("analyze", str(path), "--columns", "timestamp=t,input=i,output=o")
    assert "log2.jsonl: line 1: column 't'" in line


def test_generic_convert_keeps_type(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text(CSV_LOG)
    out = tmp_path / "log.parquet"
    result = CliRunner().invoke(app, ["convert", str(path), "-o", str(out), "--columns", CSV_MAP])
    assert result.exit_code == 0, result.output
    back = read_trace(out)
    assert back.source.format == "generic" and column(back, "type") == ["chat", "chat", "tool"]
    assert traces_equal(read_trace(path, columns=CSV_MAP), back)


# --- hostile input, inherited from readers/_common.py ---------------------------------------


@pytest.mark.parametrize("fmt", ["tracelab", "dynamo", "generic"])
def test_long_lines_are_refused(tmp_path: Path, fmt: str) -> None:
    rows = {"tracelab": tracelab_rows(), "dynamo": dynamo_rows()}.get(
        fmt, [{"t": 1, "i": 1, "o": 1}]
    )
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[0], "pad": "x" * 5000}) + "\n")
    options = {"columns": "timestamp=t,input=i,output=o"} if fmt == "generic" else {}
    message = error_of(path, format=fmt, max_line_bytes=4096, **options)
    assert "long.jsonl: line 2: line is longer than the limit" in message


def test_gzip_and_fifo(tmp_path: Path) -> None:
    import gzip
    import os

    plain = write_jsonl(tmp_path / "r.jsonl", tracelab_rows())
    packed = tmp_path / "r.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(packed).requests.equals(read_trace(plain).requests)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    assert "is a FIFO" in error_of(fifo, columns="timestamp=t,input=i,output=o")


# --- the samples ----------------------------------------------------------------------------

PUBLISHED_SAMPLES = {
    "tracelab_rounds.jsonl": ("tracelab", [], 21, 3),
    "dynamo_agentic.jsonl": ("dynamo", [], 13, 5),
    "qwen_coder_sample.jsonl": ("bailian", [], 28, 12),
    "generic_log.csv": ("generic", ["--columns", GENERIC_SAMPLE_MAP], 11, 4),
}


@pytest.mark.parametrize("name", list(PUBLISHED_SAMPLES))
def test_samples_through_the_cli(name: str) -> None:
    fmt, extra, requests, sessions = PUBLISHED_SAMPLES[name]
    doc = analyze_json(str(SAMPLES / name), *extra)
    assert doc["trace"]["format"] == fmt
    assert (doc["trace"]["requests"], doc["trace"]["sessions"]) == (requests, sessions)
    assert doc["trace"]["sessions_inferred"] is False and doc["trace"]["block_accesses"] > 0
    assert 0 < doc["reuse_access_share"] < 1
    assert doc["verdict"]
    text = CliRunner().invoke(app, ["analyze", str(SAMPLES / name), *extra])
    assert text.exit_code == 0 and "Block reuse" in text.output


def test_samples_are_small_and_reproducible(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    script = tmp_path / "make_agent_samples.py"
    shutil.copy(SAMPLES / "make_agent_samples.py", script)
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path)
    for name in PUBLISHED_SAMPLES:
        assert (tmp_path / name).read_bytes() == (SAMPLES / name).read_bytes(), name
        assert (SAMPLES / name).stat().st_size < 32 * 1024
