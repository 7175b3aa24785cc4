"""The trace fingerprint (analyzers/traces/fingerprint.py): the same requests give the same
value from any format; any change to a canonical column changes it; every command states it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
from typer.testing import CliRunner

from fcctl.analyzers.traces.fingerprint import request_fingerprint, trace_fingerprint
from fcctl.analyzers.traces.readers import read_trace
from fcctl.cli import app
from tests.conftest import SAMPLES

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"


def test_the_definition_by_hand() -> None:
    req = pl.DataFrame(
        {
            "timestamp_s": [0.5, 1.0],
            "input_tokens": [32, 16],
            "output_tokens": [4, 2],
            "session_id": ["a", None],
            "hash_ids": [[1, 2], None],
        },
        schema_overrides={"hash_ids": pl.List(pl.UInt64)},
    )
    h = hashlib.sha256(b"fcctl-trace-v1\n")
    h.update(np.array([2, 2], "<i8").tobytes())
    h.update(np.array([0.5, 1.0], "<f8").tobytes())
    h.update(np.array([32, 16], "<i8").tobytes())
    h.update(np.array([4, 2], "<i8").tobytes())
    h.update(b"a\x1f" + b"\x1e")
    h.update(np.array([2], "<i8").tobytes() + np.array([1, 2], "<u8").tobytes())
    h.update(np.array([-1], "<i8").tobytes())
    assert request_fingerprint(req) == "sha256:" + h.hexdigest()


def test_same_requests_any_format_and_any_change_shows(tmp_path: Path) -> None:
    trace = read_trace(MOONCAKE)
    fp = trace_fingerprint(trace)
    assert fp is not None and fp.startswith("sha256:")
    out = tmp_path / "m.parquet"
    r = CliRunner().invoke(app, ["convert", str(MOONCAKE), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert trace_fingerprint(read_trace(out)) == fp
    req = trace.requests
    for col, expr in (
        ("output_tokens", pl.col("output_tokens") + (pl.int_range(pl.len()) == 7).cast(pl.Int64)),
        ("timestamp_s", pl.col("timestamp_s") + (pl.int_range(pl.len()) == 3) * 1e-6),
    ):
        changed = dataclasses.replace(trace, requests=req.with_columns(expr.alias(col)))
        assert trace_fingerprint(changed) != fp, col


def test_every_command_states_the_fingerprint() -> None:
    runner = CliRunner()
    fp = trace_fingerprint(read_trace(MOONCAKE))
    a = json.loads(runner.invoke(app, ["analyze", str(MOONCAKE), "--json"]).stdout)
    r = json.loads(
        runner.invoke(
            app, ["replay", str(MOONCAKE), "--rates", "1", "--policies", "flat", "--json"]
        ).stdout
    )
    assert a["trace"]["fingerprint"] == r["trace"]["fingerprint"] == fp
