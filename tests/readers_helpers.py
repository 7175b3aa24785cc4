"""Helpers the reader tests share: hand-made trace files, the one-line errors a reader and the
CLI give, and the column mappings of the CSV logs and the bundled generic sample."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.readers import TraceFormatError, read_trace
from fcctl.cli import app


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


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


def tracelab_round(
    session: str, index: int, total: int, prefix: int, output: int, events: list[tuple[str, str]]
) -> dict:
    return {
        "provider": session.split(":")[0],
        "session_id": session,
        "round_index": index,
        "model": "m",
        "input_tokens_total": total,
        "prefix_tokens": prefix,
        "newly_append_tokens": total - prefix,
        "output_tokens": output,
        "timing_events": [{"event_type": k, "timestamp": t} for k, t in events],
    }


CSV_LOG = """rid,sid,ts,in,out,h,par,kind
a1,s1,10.5,100,5,1 2,,chat
b1,s2,10.0,50,1,[9],,chat
a2,s1,12,200,7,"[1, 2, 3]",a1,tool
"""
CSV_MAP = (
    "id=rid,session=sid,timestamp=ts,input=in,output=out,hashes=h,block_size=16,parent=par,"
    "type=kind"
)
GENERIC_SAMPLE_MAP = (
    "session=session,timestamp=ts_ms,timestamp_unit=ms,input=prompt_tokens,"
    "output=completion_tokens,hashes=block_hashes,block_size=64,id=request_id,parent=parent_id,"
    "type=kind"
)


def canonical_frame(**overrides) -> pl.DataFrame:
    data = {
        "request_index": [10, 11, 12],
        "session_id": ["s", "s", None],
        "turn": [0, 1, None],
        "parent_request": [None, 10, None],
        "timestamp_s": [5.0, 7.0, 1.0],
        "input_tokens": [1, 2, 3],
        "output_tokens": [4, 5, 6],
        "block_size_tokens": [16, 16, 16],
        "hash_ids": [[1], [1, 2], [3]],
    }
    data.update(overrides)
    return pl.DataFrame(data)
