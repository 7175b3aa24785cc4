"""The client's think time (canonical ``think_time_s``): read, checked, kept, and paced by.

The Claude Code reader derives it as Dynamo 1.6.1 paces (``t`` difference minus the previous
request's ``api_time``, the whole difference without it, floored at 0); every path a table
travels keeps it (``fcctl convert`` Parquet, partitioned datasets, session sampling, session
amplification); the replay sends a turn at ``max(its scheduled time, previous response +
think time)`` where it is recorded (analyzers/replay/load.py, "Client pacing").
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from fcctl.analyzers.replay import ReplayConfig
from fcctl.analyzers.replay.amplify import amplify_workload
from fcctl.analyzers.replay.load import ThinkTime
from fcctl.analyzers.replay.run import simulate
from fcctl.analyzers.replay.workload import build_workload
from fcctl.analyzers.traces.dataset import read_source
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.readers._common import TraceFormatError
from fcctl.analyzers.traces.sampling import sample_trace
from fcctl.analyzers.traces.schema import Trace
from tests.replay_helpers import TINY, tiny_node

# One session as the trace records it: (t, api_time); the third request records no api_time.
_ROWS: list[tuple[float, float | None]] = [
    (0.0, 5.0),
    (20.0, 3.0),
    (40.0, None),
    (70.0, 1.0),
    (70.5, 1.0),
]
# By hand: 20 - 0 - 5, 40 - 20 - 3, 70 - 40 (no api_time), 70.5 - 70 - 1 < 0 -> 0.
_THINK = [None, 15.0, 17.0, 30.0, 0.0]


def _session(sid: str, rows: list[tuple[float, Any]], first_id: int = 0) -> dict[str, Any]:
    requests = []
    for i, (t, api) in enumerate(rows):
        request: dict[str, Any] = {
            "t": t,
            "in": (2 + i) * 64,
            "out": 4,
            "hash_ids": list(range(first_id, first_id + 2 + i)),
        }
        if api is not None:
            request["api_time"] = api
        requests.append(request)
    return {"id": sid, "block_size": 64, "hash_id_scope": "local", "requests": requests}


def _write(path: Path, *sessions: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return path


def _fcctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *args], capture_output=True, text=True, env=env
    )


def _one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_reader_derives_think_time_as_dynamo_paces(tmp_path: Path) -> None:
    trace = read_trace(_write(tmp_path / "cc.jsonl", _session("a", _ROWS)))
    assert trace.requests.schema["think_time_s"] == pl.Float64()
    assert trace.requests["think_time_s"].to_list() == _THINK


def test_reader_takes_a_subagents_requests_in_session_order(tmp_path: Path) -> None:
    """A subagent's request at marker t 10 + own t 2 = 12 lies between t 5 and t 30: its think
    time is 12 - 5 - api 1 = 6, and the next one's 30 - 12 - its api 4 = 14."""
    session = _session("a", [(0.0, 1.0), (5.0, 1.0), (30.0, 2.0)])
    nested = {"t": 2.0, "in": 64, "out": 1, "hash_ids": [0], "api_time": 4.0}
    session["requests"].insert(2, {"t": 10.0, "type": "subagent", "requests": [nested]})
    trace = read_trace(_write(tmp_path / "cc.jsonl", session))
    assert trace.requests["timestamp_s"].to_list() == [0.0, 5.0, 12.0, 30.0]
    assert trace.requests["think_time_s"].to_list() == [None, 4.0, 6.0, 14.0]


@pytest.mark.parametrize("bad", [-1.0, "3", True, [1]])
def test_a_bad_api_time_is_one_line_naming_file_place_field(tmp_path: Path, bad: Any) -> None:
    session = _session("a", _ROWS)
    session["requests"][1]["api_time"] = bad
    path = _write(tmp_path / "cc.jsonl", session)
    with pytest.raises(TraceFormatError, match=r"line 1, requests\[1\].*'api_time'"):
        read_trace(path)
    _one_line_error(_fcctl("analyze", str(path)), "cc.jsonl", "line 1", "requests[1]", "api_time")


def test_parquet_round_trip_and_dataset_keep_think_time(tmp_path: Path) -> None:
    source = _write(tmp_path / "cc.jsonl", _session("a", _ROWS), _session("b", _ROWS[:3]))
    want = read_trace(source).requests["think_time_s"].to_list()
    out = tmp_path / "cc.parquet"
    assert _fcctl("convert", str(source), "-o", str(out)).returncode == 0
    assert pl.read_parquet(out)["think_time_s"].to_list() == want
    assert read_source(out).requests["think_time_s"].to_list() == want
    parts = tmp_path / "parts"
    done = _fcctl(
        "convert", str(source), "-o", str(parts), "--partition-by", "session-hash",
        "--partitions", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert read_source(parts).requests["think_time_s"].to_list() == want


def test_parquet_without_the_column_reads_and_paces_as_before(tmp_path: Path) -> None:
    """A file written before the column existed: no column, so no think time in the replay."""
    out = tmp_path / "cc.parquet"
    source = _write(tmp_path / "cc.jsonl", _session("a", _ROWS))
    assert _fcctl("convert", str(source), "-o", str(out)).returncode == 0
    pl.read_parquet(out).drop("think_time_s").write_parquet(tmp_path / "old.parquet")
    old = read_source(tmp_path / "old.parquet")
    assert "think_time_s" not in old.requests.columns
    assert build_workload(old, TINY, 1).think_time_s is None


@pytest.mark.parametrize(
    ("values", "dtype", "row", "message"),
    [
        ([None, -1.0], pl.Float64, 1, "finite number of seconds >= 0"),
        ([None, math.nan], pl.Float64, 1, "got nan"),
        ([math.inf, 2.0], pl.Float64, 0, "got inf"),
        (["a", "b"], pl.String, None, "must be Float64"),
    ],
)
def test_parquet_bad_think_time_is_one_line(
    tmp_path: Path, values: list[Any], dtype: Any, row: int | None, message: str
) -> None:
    source = _write(tmp_path / "cc.jsonl", _session("a", _ROWS[:2]))
    good = tmp_path / "good.parquet"
    assert _fcctl("convert", str(source), "-o", str(good)).returncode == 0
    frame = pl.read_parquet(good).with_columns(pl.Series("think_time_s", values, dtype=dtype))
    bad = tmp_path / "bad.parquet"
    # Keep fcctl's metadata, so the file is read as the canonical table it claims to be.
    table = frame.to_arrow().replace_schema_metadata(pq.read_metadata(good).metadata)
    pq.write_table(table, bad)
    needles = ["bad.parquet", "think_time_s", message] + ([f"row {row}"] if row is not None else [])
    _one_line_error(_fcctl("analyze", str(bad)), *needles)


def test_sampling_and_amplification_keep_think_time(tmp_path: Path) -> None:
    sessions = [_session(f"s{k}", _ROWS) for k in range(12)]
    trace = read_trace(_write(tmp_path / "cc.jsonl", *sessions))
    sample, _ = sample_trace(trace, 0.5)
    assert 0 < sample.requests.height < trace.requests.height
    assert sample.requests["think_time_s"].to_list() == _THINK * (sample.requests.height // 5)
    w = build_workload(trace, TINY, 2)
    assert w.think_time_s is not None
    amplified = amplify_workload(w, 3, seed=1)
    assert amplified.think_time_s is not None
    # Request r's copy j is request r * 3 + j: each copy keeps its request's think time.
    np.testing.assert_array_equal(amplified.think_time_s, np.repeat(w.think_time_s, 3))
    for r in range(amplified.requests):
        assert np.isnan(amplified.think_time_s[r]) == (amplified.prev_request[r] < 0)


@pytest.mark.parametrize(
    ("mode", "arrival", "scheduled"),
    [
        # previous: scheduled 10, arrived 12, response at 40; gap 20, think 15.
        (ThinkTime(), 55.0, 30.0),  # max(10 + 20, 40 + 15)
        (ThinkTime("none"), 40.0, 10.0),  # max(10 + 0, 40 + 0)
        (ThinkTime("capped", 5.0), 45.0, 15.0),  # max(10 + 5, 40 + 5)
        (ThinkTime("scale", 0.1), 41.5, 12.0),  # max(10 + 2, 40 + 1.5)
    ],
)
def test_next_arrival_by_hand(mode: ThinkTime, arrival: float, scheduled: float) -> None:
    assert mode.next_arrival(10.0, 12.0, 20.0, 15.0, 40.0) == pytest.approx((arrival, scheduled))


def test_next_arrival_without_think_time_keeps_the_old_rule() -> None:
    # max(previous arrival 12 + gap 20, response 40) = 40; max(12 + 20, response 25) = 32.
    assert ThinkTime().next_arrival(10.0, 12.0, 20.0, math.nan, 40.0) == (40.0, 30.0)
    assert ThinkTime().next_arrival(10.0, 12.0, 20.0, math.nan, 25.0) == (32.0, 30.0)
    # With a think time and a fast response the recorded schedule holds: max(30, 25 + 15).
    assert ThinkTime().next_arrival(10.0, 12.0, 20.0, 15.0, 25.0) == (40.0, 30.0)
    assert ThinkTime().next_arrival(10.0, 12.0, 20.0, 5.0, 22.0) == (30.0, 30.0)


def _replayed(trace: Trace) -> tuple[list[float], list[float]]:
    """Each request's arrival and end, one worker, one session at a time. A slow decode (KV
    read at 1 MB/s, turns run about 0.4-1.2 s) so the later turns of :data:`_ROWS` end too late
    for their recorded send: the third's 40.8 + 30 > 70."""
    hw = tiny_node(gpus=1, gpu_kv=64, gpu_running_kv_bytes=None, hbm_bytes_per_s=1e6)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    run = simulate(build_workload(trace, TINY, 1), config, "memory-only", None, concurrency=1)
    assert run.table is not None
    table = run.table.sort("request_index")
    return table["arrival_s"].to_list(), table["end_s"].to_list()


def test_replay_sends_each_turn_as_the_client_does(tmp_path: Path) -> None:
    """The reader's session through the replay: every later turn arrives at max(session start +
    its t, previous end + its think time), the previous end being the replay's own."""
    trace = read_trace(_write(tmp_path / "cc.jsonl", _session("a", _ROWS)))
    arrival, end = _replayed(trace)
    assert arrival[0] == 0.0
    late = 0
    for q in range(1, len(_ROWS)):
        think = _THINK[q]
        assert think is not None
        assert arrival[q] == pytest.approx(max(_ROWS[q][0], end[q - 1] + think))
        late += end[q - 1] + think > _ROWS[q][0]
    assert 0 < late < len(_ROWS) - 1  # both branches of the max() were taken


def test_replay_without_think_time_keeps_the_old_rule(tmp_path: Path) -> None:
    trace = read_trace(_write(tmp_path / "cc.jsonl", _session("a", _ROWS)))
    arrival, end = _replayed(replace(trace, requests=trace.requests.drop("think_time_s")))
    for q in range(1, len(_ROWS)):
        gap = _ROWS[q][0] - _ROWS[q - 1][0]
        assert arrival[q] == pytest.approx(max(arrival[q - 1] + gap, end[q - 1]))
    assert arrival[3] == 70.0  # the client's rule sends it after 40.8 + 30
