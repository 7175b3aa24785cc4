"""Readers: hand-computed tiny traces for every format, detection, ordering, round trips."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from fcctl.analyzers.traces.canonical import read_canonical, traces_equal, write_canonical
from fcctl.analyzers.traces.readers import FORMATS, detect_format, read_trace
from fcctl.analyzers.traces.readers.claude_code import LOCAL_ID_BITS, namespace_base
from fcctl.analyzers.traces.schema import SCHEMA, SourceTrace
from tests.conftest import SAMPLES
from tests.readers_helpers import canonical_frame


def write_jsonl(path: Path, rows: list[object], *, gz: bool = False) -> Path:
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def column(trace, name: str) -> list:
    return trace.requests[name].to_list()


def test_registry_names_and_protocol() -> None:
    assert set(FORMATS) == {
        "mooncake",
        "claude-code",
        "bailian",
        "azure",
        "parquet",
        "tracelab",
        "dynamo",
        "flatcake",
        "generic",
    }
    for name, reader in FORMATS.items():
        assert reader.name == name
        assert callable(reader.sniff) and callable(reader.read)


# --- Mooncake -----------------------------------------------------------------------------


def test_mooncake_tiny_stable_time_order(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 2000, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [0, 3]},
        {"timestamp": 1000, "input_length": 10, "output_length": 0, "hash_ids": [4]},
    ]
    trace = read_trace(write_jsonl(tmp_path / "m.jsonl", rows))
    assert trace.format == "mooncake" and trace.order == "time"
    assert trace.requests.schema == pl.Schema(SCHEMA)
    # Stable sort by time: line 2, line 3 (tie kept in file order), then line 1.
    assert column(trace, "request_index") == [0, 1, 2]
    assert column(trace, "timestamp_s") == [1.0, 1.0, 2.0]
    assert column(trace, "input_tokens") == [600, 10, 1100]
    assert column(trace, "output_tokens") == [3, 0, 7]
    assert column(trace, "hash_ids") == [[0, 3], [4], [0, 1, 2]]
    assert column(trace, "block_size_tokens") == [512, 512, 512]
    assert column(trace, "session_id") == [None] * 3
    assert column(trace, "parent_request") == [None] * 3
    assert not trace.has_sessions and trace.has_hashes and trace.block_size_tokens == 512


def test_mooncake_large_hash_ids_kept_exactly(tmp_path: Path) -> None:
    big = 2**64 - 1
    rows = [{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [big, 2**63]}]
    trace = read_trace(write_jsonl(tmp_path / "m.jsonl", rows))
    assert column(trace, "hash_ids") == [[big, 2**63]]


def test_gzip_detected_by_magic_not_extension(tmp_path: Path) -> None:
    rows = [{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [9]}]
    plain = read_trace(write_jsonl(tmp_path / "plain.jsonl", rows))
    hidden = read_trace(write_jsonl(tmp_path / "looks_plain.txt", rows, gz=True))
    assert hidden.format == "mooncake"
    assert hidden.requests.equals(plain.requests)


# --- Claude Code --------------------------------------------------------------------------


def claude_session(session_id: str, requests: list[dict], block_size: int = 64) -> dict:
    return {
        "id": session_id,
        "models": ["m"],
        "block_size": block_size,
        "hash_id_scope": "local",
        "requests": requests,
    }


def req(t: float, n_in: int, n_out: int, ids: list[int]) -> dict:
    return {"t": t, "type": "n", "in": n_in, "out": n_out, "hash_ids": ids}


TINY_CLAUDE = [
    claude_session(
        "trace_a",
        [
            req(0.0, 128, 10, [1, 2]),
            {
                "t": 5.0,
                "type": "subagent",
                "agent_id": "x",
                # Own t is relative to the marker: absolute 6.0, 10.0 and 15.0.
                "requests": [req(1.0, 64, 1, [7]), req(5.0, 70, 2, [7]), req(10.0, 65, 3, [8])],
            },
            req(10.0, 200, 20, [1, 2, 3]),
        ],
    ),
    claude_session("trace_b", [req(0.5, 64, 4, [1]), req(0.25, 0, 5, [])]),
]


def check_tiny_claude(trace) -> None:
    base_a, base_b = namespace_base(0), namespace_base(1)
    assert trace.format == "claude-code" and trace.order == "session"
    assert trace.has_sessions and trace.block_size_tokens == 64
    assert column(trace, "session_id") == ["trace_a"] * 5 + ["trace_b"] * 2
    # Within a session by absolute time; the subagent's t=10.0 request ties with the parent's
    # t=10.0 one and comes first because it is listed first (stable).
    assert column(trace, "timestamp_s") == [0.0, 6.0, 10.0, 10.0, 15.0, 0.25, 0.5]
    assert column(trace, "input_tokens") == [128, 64, 70, 200, 65, 0, 64]
    assert column(trace, "output_tokens") == [10, 1, 2, 20, 3, 5, 4]
    assert column(trace, "turn") == [0, 1, 2, 3, 4, 0, 1]
    assert column(trace, "parent_request") == [None, 0, 1, 2, 3, None, 5]
    assert column(trace, "hash_ids") == [
        [base_a | 1, base_a | 2],
        [base_a | 7],
        [base_a | 7],
        [base_a | 1, base_a | 2, base_a | 3],
        [base_a | 8],
        [],
        [base_b | 1],
    ]
    assert column(trace, "block_size_tokens") == [64] * 7


def test_claude_code_subagent_offsets_order_and_namespacing(tmp_path: Path) -> None:
    check_tiny_claude(read_trace(write_jsonl(tmp_path / "cc.jsonl", TINY_CLAUDE)))


def test_claude_code_gzip_and_directory_agree(tmp_path: Path) -> None:
    check_tiny_claude(read_trace(write_jsonl(tmp_path / "cc.jsonl.gz", TINY_CLAUDE, gz=True)))
    directory = tmp_path / "traces"
    directory.mkdir()
    # Written out of name order; the reader takes them sorted by name. Others are ignored.
    (directory / "trace_0002.json").write_text(json.dumps(TINY_CLAUDE[1]))
    (directory / "trace_0001.json").write_text(json.dumps(TINY_CLAUDE[0], indent=2))
    (directory / "notes.txt").write_text("not a trace")
    trace = read_trace(directory)
    check_tiny_claude(trace)
    assert detect_format(directory) == "claude-code"


def test_namespace_scheme_never_collides() -> None:
    assert namespace_base(0) == 1 << 40 and LOCAL_ID_BITS == 40
    top_local = (1 << LOCAL_ID_BITS) - 1
    assert namespace_base(0) | top_local < namespace_base(1)


def test_claude_code_sample_matches_plain_reference() -> None:
    """The bundled sample against a plain-Python reading of the same rules."""
    path = SAMPLES / "claude_code_sample.jsonl.gz"
    expected = []
    with gzip.open(path, "rt") as f:
        for ordinal, line in enumerate(f):
            session = json.loads(line)
            rows = []
            for r in session["requests"]:
                subs = r["requests"] if r["type"] == "subagent" else [r]
                offset = r["t"] if r["type"] == "subagent" else 0.0
                for s in subs:
                    ids = [((ordinal + 1) << 40) | h for h in s["hash_ids"]]
                    rows.append((offset + s["t"], session["id"], s["in"], s["out"], ids))
            expected += sorted(rows, key=lambda row: row[0])  # sorted() is stable
    trace = read_trace(path)
    got = list(
        zip(
            column(trace, "timestamp_s"),
            column(trace, "session_id"),
            column(trace, "input_tokens"),
            column(trace, "output_tokens"),
            column(trace, "hash_ids"),
            strict=True,
        )
    )
    assert got == [tuple(row) for row in expected]
    assert trace.requests["session_id"].n_unique() == 5
    assert trace.requests.height == 264


# --- Bailian ------------------------------------------------------------------------------


def bailian(chat: int, parent: int, t: float, turn: int, ids: list[int]) -> dict:
    return {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": t,
        "input_length": 16 * len(ids),
        "output_length": 3,
        "type": "text",
        "turn": turn,
        "hash_ids": ids,
    }


def test_bailian_sessions_parents_and_time_order(tmp_path: Path) -> None:
    rows = [
        bailian(11, 10, 5.0, 2, [0, 1, 2]),  # line 1: continues chat 10
        bailian(10, -1, 0.0, 1, [0, 1]),  # line 2: root
        bailian(20, -1, 1.0, 1, [0, 5]),  # line 3: another root
        bailian(31, 30, 2.0, 2, [9]),  # line 4: parent 30 is not in the file
        bailian(12, 11, 7.5, 3, [0, 1, 2, 3]),  # line 5: grandchild of 10
    ]
    trace = read_trace(write_jsonl(tmp_path / "qwen.jsonl", rows))
    assert trace.format == "bailian" and trace.order == "time" and trace.has_sessions
    assert column(trace, "timestamp_s") == [0.0, 1.0, 2.0, 5.0, 7.5]
    assert column(trace, "session_id") == ["10", "20", "30", "10", "10"]
    assert column(trace, "turn") == [1, 1, 2, 2, 3]
    # Parents point at the new request indices after the time sort.
    assert column(trace, "parent_request") == [None, None, None, 0, 3]
    assert column(trace, "hash_ids") == [[0, 1], [0, 5], [9], [0, 1, 2], [0, 1, 2, 3]]
    assert column(trace, "block_size_tokens") == [16] * 5


def test_bailian_synthetic_sample() -> None:
    trace = read_trace(SAMPLES / "bailian_synthetic.jsonl")
    assert trace.format == "bailian"
    frame = trace.requests
    assert frame["session_id"].n_unique() == 40
    # Every non-root request extends its parent's blocks (the generator resends context).
    parents = frame.filter(pl.col("parent_request").is_not_null())
    assert parents.height > 0
    for child_ids, parent_index in zip(
        parents["hash_ids"].to_list(), parents["parent_request"].to_list(), strict=True
    ):
        parent_ids = frame["hash_ids"][parent_index].to_list()
        assert child_ids[: len(parent_ids)] == parent_ids


# --- Azure --------------------------------------------------------------------------------


def test_azure_tiny(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:16:46.6805900,10,0\n"
        "2023-11-16 18:15:47.0000000,396,109\n"
    )
    trace = read_trace(path)
    assert trace.format == "azure" and not trace.has_hashes and trace.block_size_tokens == 0
    assert column(trace, "timestamp_s") == pytest.approx([0.0, 0.31941, 60.0], abs=1e-9)
    assert column(trace, "input_tokens") == [374, 396, 10]
    assert column(trace, "output_tokens") == [44, 109, 0]
    assert column(trace, "hash_ids") == [None] * 3
    assert any("earliest TIMESTAMP" in note for note in trace.notes)


def test_azure_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_bytes(
        b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        b"2023-11-16 18:15:46.5,374,44\r\n2023-11-16 18:15:47.0,1,2\r\n"
    )
    trace = read_trace(path)
    assert column(trace, "timestamp_s") == [0.0, 0.5]
    assert column(trace, "output_tokens") == [44, 2]


@pytest.mark.parametrize("gz", [False, True])
def test_lines_longer_than_the_read_chunk(gz: bool, tmp_path: Path, monkeypatch) -> None:
    import fcctl.analyzers.traces.readers._common as common

    path = write_jsonl(tmp_path / "cc.jsonl", TINY_CLAUDE, gz=gz)
    whole = read_trace(path)
    monkeypatch.setattr(common, "CHUNK_BYTES", 7)  # every line spans many reads
    check_tiny_claude(read_trace(path))
    assert read_trace(path).requests.equals(whole.requests)


def test_progress_gives_the_same_trace() -> None:
    # delay 0 and a forced terminal: the display really runs while the file is read.
    from rich.console import Console

    from fcctl.common.progress import Progress

    path = SAMPLES / "claude_code_sample.jsonl.gz"
    console = Console(file=io.StringIO(), force_terminal=True)
    with Progress(enabled=True, delay_s=0, console=console) as progress:
        assert progress.active
        shown = read_trace(path, progress=progress)
    assert shown.requests.equals(read_trace(path).requests)
    assert read_trace(path, progress=True).requests.equals(shown.requests)


# --- detection and canonical Parquet ------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "fmt"),
    [
        ("mooncake_conversation_2k.jsonl", "mooncake"),
        ("claude_code_sample.jsonl.gz", "claude-code"),
        ("azure_conv_1k.csv", "azure"),
        ("bailian_synthetic.jsonl", "bailian"),
    ],
)
def test_detect_and_round_trip_samples(sample: str, fmt: str, tmp_path: Path) -> None:
    path = SAMPLES / sample
    assert detect_format(path) == fmt
    trace = read_trace(path)
    assert trace.requests["request_index"].to_list() == list(range(trace.num_requests))
    out = tmp_path / "t.parquet"
    write_canonical(trace, out)
    assert detect_format(out) == "parquet"
    back = read_canonical(out)
    assert traces_equal(trace, back)
    # The file read and the trace it was converted from, separately.
    assert back.format == "parquet" and back.path == str(out)
    assert back.converted_from == SourceTrace(path=str(path), format=fmt)
    assert back.source == trace.source == SourceTrace(str(path), fmt)


def test_format_override(tmp_path: Path) -> None:
    # A Bailian file also carries Mooncake's fields; --format mooncake reads it as such.
    path = write_jsonl(tmp_path / "q.jsonl", [bailian(1, -1, 2.0, 1, [4, 5])])
    trace = read_trace(path, format="mooncake")
    assert trace.format == "mooncake"
    assert column(trace, "timestamp_s") == [0.002]  # Mooncake timestamps are milliseconds
    assert column(trace, "session_id") == [None]


def test_parquet_without_metadata_is_time_ordered_and_renumbered(tmp_path: Path) -> None:
    path = tmp_path / "plain.parquet"
    canonical_frame().write_parquet(path)
    trace = read_trace(path)
    assert trace.format == "parquet" and trace.order == "time"
    assert trace.requests.schema == pl.Schema(SCHEMA)
    assert column(trace, "request_index") == [0, 1, 2]
    assert column(trace, "timestamp_s") == [1.0, 5.0, 7.0]
    assert column(trace, "parent_request") == [None, None, 1]  # old 10 is now index 1
    assert column(trace, "hash_ids") == [[3], [1], [1, 2]]
    assert trace.has_sessions and trace.has_hashes and trace.block_size_tokens == 16


def test_write_canonical_is_atomic_and_leaves_no_temp(tmp_path: Path) -> None:
    trace = read_trace(SAMPLES / "azure_conv_1k.csv")
    out = tmp_path / "a.parquet"
    write_canonical(trace, out)
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]
    meta = pl.read_parquet_metadata(out)
    info = json.loads(meta["fcctl.trace"])
    assert info["format"] == "azure" and info["has_hashes"] is False


def test_hash_ids_column_is_one_zero_copy_chunk() -> None:
    trace = read_trace(SAMPLES / "claude_code_sample.jsonl.gz")
    hashes = trace.requests["hash_ids"]
    assert hashes.n_chunks() == 1
    flat = hashes.explode().to_numpy()
    assert flat.dtype == np.uint64 and len(flat) == int(hashes.list.len().sum())


# --- the real shared traces ---------------------------------------------------------------


@pytest.mark.shared
def test_shared_mooncake_and_azure(shared_traces: Path) -> None:
    conv = read_trace(shared_traces / "mooncake" / "conversation_trace.jsonl")
    assert conv.num_requests == 12_031
    assert conv.requests["timestamp_s"].max() == pytest.approx(3536.999)
    synth = read_trace(shared_traces / "mooncake" / "synthetic_trace.jsonl")
    assert synth.num_requests == 3_993
    # README: len(hash_ids) == ceil(input_length / 512) on every row.
    for trace in (conv, synth):
        frame = trace.requests
        assert (frame["hash_ids"].list.len() == (frame["input_tokens"] + 511) // 512).all()
    azure = shared_traces / "azure_llm_2023"
    assert read_trace(azure / "AzureLLMInferenceTrace_conv.csv").num_requests == 19_366
    assert read_trace(azure / "AzureLLMInferenceTrace_code.csv").num_requests == 8_819


@pytest.mark.shared
@pytest.mark.slow
def test_shared_claude_code_full(shared_traces: Path) -> None:
    trace = read_trace(shared_traces / "weka_kv_cache_tester" / "claude_code_traces.jsonl.gz")
    frame = trace.requests
    assert frame["session_id"].n_unique() == 710
    assert frame.height == 48_658 + 676
    assert int(frame["hash_ids"].list.len().sum()) == 94_310_647
    # hash_ids cover full 64-token blocks only.
    assert (frame["hash_ids"].list.len() == frame["input_tokens"] // 64).all()
