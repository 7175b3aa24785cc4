"""Tiny hand-built traces for the analyze tests (no reader involved)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
import pytest

from fcctl.analyzers.traces.schema import SCHEMA, Trace
from fcctl.layout.geometry import KvGeometry

# 1 layer x MLA latent 5 x 2 bytes = 10 bytes per token: easy arithmetic.
TEN_BYTES_PER_TOKEN = KvGeometry("ten", layers=1, kv_heads=0, head_dim=0, latent_dim=5)


def make_trace(
    hash_ids: Sequence[Sequence[int] | None],
    *,
    timestamps: Sequence[float] | None = None,
    sessions: Sequence[str | None] | None = None,
    input_tokens: Sequence[int] | None = None,
    block_size_tokens: int = 4,
    order: str = "time",
) -> Trace:
    n = len(hash_ids)
    has_hashes = any(h is not None for h in hash_ids)
    df = pl.DataFrame(
        {
            "request_index": list(range(n)),
            "session_id": list(sessions) if sessions is not None else [None] * n,
            "turn": [None] * n,
            "parent_request": [None] * n,
            "timestamp_s": list(timestamps)
            if timestamps is not None
            else [float(i) for i in range(n)],
            "input_tokens": list(input_tokens)
            if input_tokens is not None
            else [len(h or []) * block_size_tokens for h in hash_ids],
            "output_tokens": [1] * n,
            "block_size_tokens": [block_size_tokens] * n,
            "hash_ids": [None if h is None else list(h) for h in hash_ids],
        },
        schema=SCHEMA,
    )
    return Trace(
        path="<memory>",
        format="test",
        requests=df,
        order=order,  # type: ignore[arg-type]
        has_hashes=has_hashes,
        has_sessions=sessions is not None,
        block_size_tokens=block_size_tokens if has_hashes else 0,
    )


# The worked example used across test_reuse / test_memory_tier / test_sessions:
#   r0 t=0  session a  [1, 2, 3]      input 12
#   r1 t=10 session a  [1, 2, 4]      input 12
#   r2 t=30 session b  [5]            input 4
#   r3 t=35 session a  [1, 2, 4, 6]   input 16
#   r4 t=36 session b  [3]            input 4
# Access stream (position: block): 0:1 1:2 2:3 3:1 4:2 5:4 6:5 7:1 8:2 9:4 10:6 11:3
EXAMPLE_HASHES = [[1, 2, 3], [1, 2, 4], [5], [1, 2, 4, 6], [3]]
EXAMPLE_TS = [0.0, 10.0, 30.0, 35.0, 36.0]
EXAMPLE_SESSIONS = ["a", "a", "b", "a", "b"]
EXAMPLE_INPUTS = [12, 12, 4, 16, 4]


def example_trace(with_sessions: bool = True) -> Trace:
    return make_trace(
        EXAMPLE_HASHES,
        timestamps=EXAMPLE_TS,
        sessions=EXAMPLE_SESSIONS if with_sessions else None,
        input_tokens=EXAMPLE_INPUTS,
    )


def one_line_exit_2(result: Any) -> str:
    """The single ``fcctl: error:`` line of a CliRunner result that exited 2 (asserted)."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = result.stderr.strip()
    assert err.startswith("fcctl: error: ") and "\n" not in err and "Traceback" not in err
    return err


def approx_equal(got: Any, want: Any, where: str = "$") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k in want:
            approx_equal(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            approx_equal(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9), where
    else:
        assert got == want, where
