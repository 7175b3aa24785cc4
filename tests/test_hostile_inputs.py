"""Issue #20: hostile values in trace files end in one line and exit 2, never a traceback,
a wrong answer, or an allocation sized by the input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_readers_issue10 import (
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
