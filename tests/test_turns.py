"""Sessions' turns by hand: whole pages, carried remainders, growth per request, arrival order."""

from __future__ import annotations

import polars as pl
import pytest

from fcctl.analyzers.kvmodel.turns import (
    SessionTurns,
    choose_sessions,
    even_turn_blocks,
    pages_from_tokens,
    synthetic_turns,
    token_growth,
    trace_turns,
)
from fcctl.common.errors import FcctlInputError
from tests.iobench_helpers import trace_frame

_frame = trace_frame


def test_pages_carry_the_unstored_remainder():
    # 40 -> 2 pages (8 left); 8+10 -> 1 (2 left); 2+0 -> 0; 2+40 -> 2 (10 left).
    assert pages_from_tokens([40, 10, 0, 40], 16) == [2, 1, 0, 2]
    assert pages_from_tokens([15, 1], 16) == [0, 1]
    assert pages_from_tokens([7.5, 8.5], 16) == [0, 1]  # scaled counts are fractional


def test_even_split_gives_the_first_turns_one_more_page():
    assert even_turn_blocks(10, 4) == (3, 3, 2, 2)
    assert even_turn_blocks(8, 4) == (2, 2, 2, 2)


def test_session_turns():
    s = SessionTurns(0, "a", (2, 1, 3))
    assert (s.blocks, s.turns) == (6, 3)
    assert [s.turn_first_block(t) for t in range(3)] == [0, 2, 3]


def test_synthetic_turns_round_robin_and_the_unstored_tail():
    t = synthetic_turns(block_tokens=16, sessions=2, tokens=16 * 5 + 3, turns=2)
    assert [s.turn_blocks for s in t.sessions] == [(3, 2), (3, 2)]
    assert [s.session_id for s in t.sessions] == ["synthetic-0000", "synthetic-0001"]
    assert t.arrivals == ((0, 0), (1, 0), (0, 1), (1, 1))
    assert t.blocks == 10 and t.source == "synthetic" and t.scale == 1.0
    assert len(t.notes) == 1 and t.notes[0].startswith("3 tokens per session")


def test_synthetic_turns_refuse_bad_counts():
    with pytest.raises(FcctlInputError, match="tokens: 3 turns need at least 48 tokens"):
        synthetic_turns(block_tokens=16, sessions=1, tokens=40, turns=3)
    with pytest.raises(FcctlInputError, match="sessions: must be an integer >= 1; got True"):
        synthetic_turns(block_tokens=16, sessions=True, tokens=64, turns=1)


def test_token_growth_per_request():
    g = token_growth(_frame())
    rows = g.filter(pl.col("session_id") == "a")
    # a: 40, 50, 30, 70 -> growth 40, 10, 0 (a shrinking prompt adds nothing), 40.
    assert rows["_new_tokens"].to_list() == [40, 10, 0, 40]
    assert rows["_requests"].to_list() == [4] * 4
    assert choose_sessions(g, 5) == ["a", "c"]  # b has one request
    assert choose_sessions(g, 1) == ["a"]
    only_b = token_growth(_frame().filter(pl.col("session_id") == "b"))
    assert choose_sessions(only_b, 3) == ["b"]  # no multi-request session: take any


def test_trace_turns_hand_computed():
    t = trace_turns(
        _frame(), block_tokens=16, sessions=2, bytes_per_token=1024, size_limit_bytes=2**30
    )
    assert [s.session_id for s in t.sessions] == ["a", "c"]
    # a: pages 2, 1, 0, 2 -> the empty turn is not stored; c: 16, 32 -> 1, 2.
    assert [s.turn_blocks for s in t.sessions] == [(2, 1, 2), (1, 2)]
    # Stored turns by time: a@0, c@1, a@10, c@15, a@30.
    assert t.arrivals == ((0, 0), (1, 0), (0, 1), (1, 1), (0, 2))
    assert t.scale == 1.0 and t.source == "trace"


def test_trace_turns_scale_down_to_the_size_limit():
    # 138 new tokens x 1024 bytes: 69 KiB fits at scale 0.5.
    t = trace_turns(
        _frame(), block_tokens=16, sessions=2, bytes_per_token=1024, size_limit_bytes=69 * 1024
    )
    assert t.scale == pytest.approx(0.5)
    assert [s.turn_blocks for s in t.sessions] == [(1, 1), (1,)]
    assert len(t.notes) == 2 and t.notes[1].startswith("down-scaled from --scale 1")


def test_trace_turns_refuse_what_cannot_make_a_page():
    with pytest.raises(FcctlInputError, match="no session fills a single page"):
        trace_turns(
            _frame(), block_tokens=16, sessions=2, bytes_per_token=1024, size_limit_bytes=1024
        )
    with pytest.raises(FcctlInputError, match="scale: must be > 0"):
        trace_turns(
            _frame(), block_tokens=16, sessions=2, bytes_per_token=1, size_limit_bytes=1, scale=0
        )
    no_ids = _frame().with_columns(pl.lit(None, dtype=pl.String).alias("session_id"))
    with pytest.raises(FcctlInputError, match="no session ids"):
        trace_turns(no_ids, block_tokens=16, sessions=2, bytes_per_token=1, size_limit_bytes=1)
