from __future__ import annotations

import polars as pl
import pytest

from fcctl.common.errors import FcctlInputError
from fcctl.iobench.workload import synthetic_io_workload, trace_io_workload
from tests.conftest import SAMPLES
from tests.iobench_helpers import TINY, trace_frame

_frame = trace_frame


def test_synthetic_splits_pages_evenly_and_arrives_round_robin():
    wl = synthetic_io_workload(TINY, block_tokens=16, sessions=3, tokens=16 * 10 + 5, turns=4)
    assert [s.turn_blocks for s in wl.sessions] == [(3, 3, 2, 2)] * 3
    assert wl.arrivals[:4] == ((0, 0), (1, 0), (2, 0), (0, 1))
    assert wl.piece_bytes == 4096 and wl.block_bytes == 4 * 4096
    assert wl.bytes == 3 * 10 * 4 * 4096
    assert any("do not fill a page" in n for n in wl.notes)


def test_synthetic_over_the_size_limit_is_refused():
    with pytest.raises(FcctlInputError, match=r"^size_limit_bytes: "):
        synthetic_io_workload(
            TINY, block_tokens=16, sessions=2, tokens=1600, turns=2, size_limit_bytes=1000
        )
    with pytest.raises(FcctlInputError, match=r"^tokens: "):
        synthetic_io_workload(TINY, block_tokens=16, sessions=2, tokens=20, turns=2)


def test_trace_growth_clamp_carry_and_time_order():
    wl = trace_io_workload(_frame(), TINY, block_tokens=16, sessions=2, size_limit_bytes=2**30)
    # Multi-turn sessions a and c, in order of first appearance; b has one request.
    assert [s.session_id for s in wl.sessions] == ["a", "c"]
    # a: growth 40, 10, 0 (50 -> 30 clamps), 40 -> pages 2, 1 (8+10), 0, 2 (2+40).
    assert wl.sessions[0].turn_blocks == (2, 1, 2)
    # c: growth 16, 32 -> pages 1, 2.
    assert wl.sessions[1].turn_blocks == (1, 2)
    # Timestamps 0 (a), 1 (c), 10 (a), 15 (c), 30 (a).
    assert wl.arrivals == ((0, 0), (1, 0), (0, 1), (1, 1), (0, 2))
    assert wl.scale == 1.0


def test_trace_is_down_scaled_to_fit_the_size_limit():
    # 138 new tokens x 1024 bytes per token per rank; a limit of 69 KiB forces scale 0.5.
    wl = trace_io_workload(_frame(), TINY, block_tokens=16, sessions=2, size_limit_bytes=69 * 1024)
    assert wl.scale == pytest.approx(0.5)
    assert wl.bytes <= 69 * 1024
    # a: 20, 5, 0, 20 -> pages 1, 0, 0, 1; c: 8, 16 -> pages 0, 1.
    assert [s.turn_blocks for s in wl.sessions] == [(1, 1), (1,)]
    assert any("down-scaled" in n for n in wl.notes)


def test_trace_without_sessions_is_an_input_error():
    frame = _frame().with_columns(pl.lit(None, dtype=pl.String).alias("session_id"))
    with pytest.raises(FcctlInputError, match="no session ids"):
        trace_io_workload(frame, TINY, block_tokens=16, sessions=2, size_limit_bytes=2**30)


def test_real_claude_code_sample_keeps_its_turn_structure():
    from fcctl.analyzers.traces.readers import read_trace

    trace = read_trace(SAMPLES / "claude_code_sample.jsonl.gz")
    wl = trace_io_workload(
        trace.requests, TINY, block_tokens=16, sessions=3, size_limit_bytes=4 * 2**20
    )
    assert 1 <= len(wl.sessions) <= 3
    assert wl.bytes <= 4 * 2**20
    assert max(s.turns for s in wl.sessions) > 1
    assert sorted(wl.arrivals) == sorted((s.index, t) for s in wl.sessions for t in range(s.turns))
