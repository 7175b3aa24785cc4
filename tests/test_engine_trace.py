"""The recorded trace (``layout/adapters/trace.py``) as engines write it: several writers on one
``FLATCAKE_TRACE`` (two ranks as two real processes, then a restart) keep every record in the
JSON Lines file and in Parquet parts of their own; a path that cannot take records is one clear
error when the recorder is made; :class:`OpenRequests` counts a request once however often the
engine asks about it. Needs no engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fcctl.layout.adapters.trace import (
    TRACE_ENV,
    OpenRequests,
    TraceRecorder,
    TraceTargetError,
    key_id,
)
from tests import engine_helpers

pq = pytest.importorskip("pyarrow.parquet")

# One rank: its requests are sessions "r{rank}-{i}", each of 4 blocks, flushed every 64.
WRITER = """
import sys
from fcctl.layout.adapters.trace import TraceRecorder
rank, n = int(sys.argv[1]), int(sys.argv[2])
rec = TraceRecorder.from_environment(None, engine="test")
rec.flush_records = 64
for i in range(n):
    rec.record(timestamp_s=i * 0.01, session_id=f"r{rank}-{i}", session_source="test",
               keys=[f"{rank}-{i}-{b}" for b in range(4)], block_size_tokens=16)
rec.close()
"""


def _ranks(trace: Path, ranks: list[int], n: int) -> None:
    env = {**os.environ, TRACE_ENV: str(trace)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(r), str(n)], env=env) for r in ranks
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * len(ranks)


def test_two_ranks_and_a_restart_keep_every_record(tmp_path: Path) -> None:
    trace = tmp_path / "capture.jsonl"
    _ranks(trace, [0, 1], 300)  # two ranks at once
    _ranks(trace, [0], 100)  # rank 0 restarted on the same path
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(rows) == 700
    sessions = {r["session_id"] for r in rows}
    assert sessions == {f"r{r}-{i}" for r in (0, 1) for i in range(300)}  # restart reuses ids
    assert sum(r["session_id"].startswith("r0-") for r in rows) == 400
    # Parquet parts: one set per writer, none overwritten, none left half-written.
    parts = sorted(tmp_path.glob("capture.jsonl.part-*.parquet"))
    assert not list(tmp_path.glob("*.tmp"))
    writers = {p.name.split(".part-")[1].rsplit("-", 1)[0] for p in parts}
    assert len(writers) == 3
    tables = [pq.read_table(p) for p in parts]
    assert sum(t.num_rows for t in tables) == 700
    ids = {h for t in tables for hs in t.column("hash_ids").to_pylist() for h in hs}
    assert key_id("1-299-3") in ids and key_id("0-99-0") in ids
    # fcctl reads the whole capture: 700 requests of 4 blocks; the restarted rank's 100
    # requests repeat rank 0's first 100 sessions' blocks.
    engine_helpers.check_trace(trace, requests=700, block_accesses=2800, distinct_blocks=2400)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("dir", "a trace is a JSON Lines file, not a directory"),
        ("missing/t.jsonl", "the folder"),
        ("locked/t.jsonl", "cannot append to the trace (permission denied)"),
    ],
)
def test_a_path_that_cannot_take_records_fails_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, message: str
) -> None:
    (tmp_path / "dir").mkdir()
    target = tmp_path / where
    if where.startswith("locked"):
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        if os.geteuid() == 0:  # root writes anywhere it may chmod; sysfs refuses even root
            target = Path("/sys/flatcake-trace.jsonl")
    with pytest.raises(TraceTargetError, match=r"^trace: ") as caught:
        TraceRecorder(target, engine="test")
    assert message in str(caught.value) and repr(str(target)) in str(caught.value)
    monkeypatch.setenv(TRACE_ENV, str(target))
    with pytest.raises(TraceTargetError, match=r"^\$FLATCAKE_TRACE: "):
        TraceRecorder.from_environment(None, engine="test")
    assert not (tmp_path / "missing").exists()  # nothing made on the way to the error
    assert target.is_dir() or not target.exists()


def test_a_good_path_is_created_at_construction(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    rec = TraceRecorder(target, engine="test")
    assert target.is_file() and target.stat().st_size == 0
    rec.close()


def test_open_requests_count_a_request_once() -> None:
    requests = OpenRequests(limit=2)
    chain = ["a", "b", "c"]
    assert requests.is_new(chain)
    assert not requests.is_new(chain)  # asked again before it was served
    assert not requests.is_new(chain[1:])  # a retrieve of the part not yet in the GPU
    requests.close(chain[1:])  # loaded
    assert requests.is_new(chain)  # the same prompt again: a new request
    assert requests.is_new([*chain, "d"])  # the next turn extends it: new
    assert not requests.is_new(["a", "b"])  # part of the open next turn
    assert requests.is_new(["x"]) and requests.is_new(["y"])  # the oldest forgotten (limit)
    assert requests.is_new([*chain, "d"])
    assert not requests.is_new([])
