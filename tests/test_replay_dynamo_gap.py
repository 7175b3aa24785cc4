"""Why fcctl's GPU-only hit share sits under Dynamo 1.6.1's on the Claude Code sessions.

benchmarks/dynamo_claude_code.py measured it (docs/simulator.md, "Dynamo 1.6.1 on the Claude
Code sessions"): on the same served requests units, block size, eviction order and rejected
requests agree, and with the requests of different sessions kept from overlapping (think times
x100) the two agree within 0.2 pp. The gap appears only where requests overlap, through two
things these cases compute by hand:

* which blocks a running request holds: fcctl returned a request's prompt blocks to the LRU
  at its first token, where vLLM, SGLang and Dynamo's mocker keep them referenced until its
  last token. The engines' rule is the right one (a decode reads its prompt's KV at every
  step), and the simulator now follows it: these cases check it by hand;
* how long a request runs (fcctl's time model keeps requests about four times longer than
  Dynamo's mocker) then decides how long the blocks it references stay pinned.

A third rule is computed here too: when a session's next turn is sent. Dynamo sends it at
max(the recorded send time, previous end + the recorded think time): like a real client it
never thinks less than recorded after a slow response. fcctl sent it at max(previous send +
the recorded send-to-send gap, previous end) until the canonical table kept the client's
think time (``think_time_s``); where the trace records one it now paces by the client's rule
too, and keeps the old one where none is recorded. Measured on the 100 sessions, the client's
rule lowers fcctl's GPU-only share (docs/simulator.md), so pacing is not why fcctl sat under
Dynamo.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from fcctl.analyzers.replay import ReplayConfig
from fcctl.analyzers.replay.reference import ReferenceStore
from fcctl.analyzers.replay.run import simulate
from fcctl.analyzers.replay.store import FastStore
from fcctl.analyzers.replay.workload import build_workload
from tests.replay_helpers import BLOCK_TOKENS, TINY, tiny_node, trace_of


def _run(hbm_bytes_per_s: float):  # type: ignore[no-untyped-def]
    # One worker, a 16-block GPU pool shared by running requests and cached prefixes (the
    # presets' model), prefill 20,000 tokens/s.
    hw = tiny_node(gpus=1, gpu_kv=16, gpu_running_kv_bytes=None, hbm_bytes_per_s=hbm_bytes_per_s)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    a = [0, 1, 2, 3]
    rows = [
        a,  # A's first turn: 4 blocks, cached at its first token
        [100, 101, 102, 103],  # B: 4 prompt blocks, then a decode holding 6 output blocks
        [200, 201, 202, 203, 204, 205],  # C: 6 prompt blocks + 1 output block = 7 blocks
        [*a, 999],  # A's next turn: its 4-block prefix, if it survived
    ]
    trace = trace_of(
        rows,
        timestamps=[0.0, 1.0, 2.0, 3.0],
        output_tokens=[1, 6 * BLOCK_TOKENS, 1, 1],
    )
    # At 0.1 requests/s the four arrive at 0, 13.3, 26.7 and 40 s.
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", 0.1)
    assert p.table is not None and p.rejected_requests.count == 0
    return p.table.sort("request_index")


def test_a_decoding_request_holds_its_prompt_so_the_next_waits() -> None:
    """By hand, when C is ready (pool 16 blocks):

    * B has finished (fast decode): cached A 4 + B 4 = 8 blocks, 8 free; C takes 7 of the
      free ones, nothing is evicted, and A's next turn finds its 4 blocks.
    * B is still decoding (slow decode): B holds its 4 prompt blocks and 6 output blocks
      (the engines' rule: referenced until its last token), A's 4 are cached: 14 of 16. C needs
      7, and only A's 4 could be evicted: 10 + 7 > 16, so C waits for B, as vLLM's scheduler
      keeps a request waiting while free plus evictable blocks fall short. When B ends its
      blocks become evictable and C fits beside A 4 + B 4 (15 of 16): A's next turn finds 4.

    Before the rule (B's prompt blocks evictable at its first token) C started at once beside
    B, evicted A's 4 and one of B's, and A's next turn found 0.
    """
    fast = _run(1e15)
    b, c = fast.row(1, named=True), fast.row(2, named=True)
    assert b["end_s"] <= c["start_s"]  # B done before C starts
    assert fast["gpu_blocks"].to_list() == [0, 0, 0, 4]

    slow = _run(1e4)  # a decode step reads ~5 KiB of KV at 10 kB/s: B decodes ~10 minutes
    b, c = slow.row(1, named=True), slow.row(2, named=True)
    assert c["ready_s"] < b["end_s"]  # C was ready while B decoded ...
    assert c["start_s"] == b["end_s"]  # ... and started when B's blocks were released
    assert slow["gpu_blocks"].to_list() == [0, 0, 0, 4]


def _decoding_run():  # type: ignore[no-untyped-def]
    hw = tiny_node(gpus=1, gpu_kv=13, gpu_running_kv_bytes=None, hbm_bytes_per_s=1e4)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    a = [0, 1, 2, 3]
    rows = [
        a,  # A: 4 prompt blocks, 16 output tokens (1 block), a decode of minutes
        [100, 101, 102, 103],  # B: 4 blocks, done at once, while A decodes
        [200, 201, 202, 203, 204, 205, 206],  # C: 7 prompt + 1 output = 8 blocks
        [*a, 999],  # A's next turn, after A's decode ended
    ]
    trace = trace_of(rows, timestamps=[0.0, 1.0, 2.0, 60.0], output_tokens=[BLOCK_TOKENS, 1, 1, 1])
    # At 0.01 requests/s they arrive at 0, 6.7, 13.3 and 400 s; A decodes until about 110 s.
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", 0.01)
    assert p.table is not None
    return p.table.sort("request_index")


def test_a_decoding_request_keeps_its_prompt_blocks() -> None:
    """By hand, with the engines' rule (a running request's blocks are referenced until its
    last token), a 13-block pool:

    * when C starts, A is decoding and holds its 4 prompt + 1 output blocks; B's 4 are cached
      and unreferenced; 4 free. C needs 8: B's 4 are evicted, and A's cannot be.
    * A ends, its blocks become evictable, and A's next turn finds all 4.

    fcctl today makes A's prompt blocks evictable at A's first token: when C starts they are
    older than B's, so they go first and A's next turn finds 0.
    """
    t = _decoding_run()
    a, c, a2 = t.row(0, named=True), t.row(2, named=True), t.row(3, named=True)
    assert c["start_s"] < a["end_s"] < a2["arrival_s"]  # the case's premise
    assert a2["gpu_blocks"] == 4


@pytest.mark.parametrize("store_cls", [FastStore, ReferenceStore])
def test_referenced_blocks_stay_and_are_released_tail_first(store_cls: type) -> None:
    """By hand, one worker, a 6-block cache. Blocks 0-2 are a running request's (referenced
    twice: a second request shares 0-1), 10-12 cached and unreferenced.

    * Trimming to 4 keeps all referenced blocks (3) and evicts the oldest two of 10-12.
    * Releasing the first request frees only block 2 (0-1 stay referenced by the second).
    * Releasing the second makes 0, 1 the most recent, 0 (the head) before 1: a trim to 1
      keeps block 0 alone.
    """
    store = store_cls(num_blocks=16, max_request_blocks=8, workers=1, gpu_blocks=6, host_blocks=0)
    store.gpu_insert(np.array([10, 11, 12]), 0, 6)
    store.gpu_pin(np.array([0, 1, 2]), 0, 6)
    store.gpu_pin(np.array([0, 1]), 0, 6)
    assert store.gpu_pinned(0) == 3
    store.gpu_trim(0, 4)
    assert store.gpu_prefix(np.array([0, 1, 2]), 0) == 3  # referenced: never evicted
    assert store.gpu_prefix(np.array([10, 11, 12]), 0) == 1  # the tail 11, 12 went first
    store.gpu_unpin(np.array([0, 1, 2]), 0, 6)
    assert store.gpu_pinned(0) == 2
    store.gpu_unpin(np.array([0, 1]), 0, 6)
    assert store.gpu_pinned(0) == 0
    store.gpu_trim(0, 1)
    assert store.gpu_prefix(np.array([0]), 0) == 1
    assert store.gpu_prefix(np.array([1]), 0) == 0
    assert store.gpu_prefix(np.array([2]), 0) == 0 and store.gpu_prefix(np.array([10]), 0) == 0


# The pacing case: two sessions as the Claude Code trace records them. Each request has its
# send time t, its server time api_time and the client's think time before the next send, so
# t(next) = t + api_time + think_time. A: t = 0 (api 1 s, think 50 s), then t = 51. B: t = 0
# (api 1 s, think 119 s), then t = 120, a 9-block prompt that with its output block fills the
# whole 10-block pool.
_A0, _A1 = [0, 1, 2, 3], [0, 1, 2, 3, 999]
_B0, _B1 = [100], [100, *range(200, 208)]
_THINK_A, _THINK_B = 50.0, 119.0


def _paced_run(t_a1: float, t_b1: float, *, think: bool = False):  # type: ignore[no-untyped-def]
    # One worker, a 10-block shared pool, a slow decode (KV read at 10 kB/s): A's first turn
    # (16 output tokens) runs about 110 s, much longer than the 1 s the trace recorded.
    # ``think``: the table keeps each turn's client think time, as the Claude Code reader does.
    hw = tiny_node(gpus=1, gpu_kv=10, gpu_running_kv_bytes=None, hbm_bytes_per_s=1e4)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True)
    trace = trace_of(
        [_A0, _A1, _B0, _B1],
        sessions=["A", "A", "B", "B"],
        timestamps=[0.0, t_a1, 0.0, t_b1],
        output_tokens=[BLOCK_TOKENS, 1, 1, 1],
    )
    if think:
        column = pl.Series("think_time_s", [None, _THINK_A, None, _THINK_B], dtype=pl.Float64)
        trace = replace(trace, requests=trace.requests.with_columns(column))
    p = simulate(build_workload(trace, TINY, 1), config, "memory-only", None, concurrency=2)
    assert p.table is not None and p.rejected_requests.count == 0
    return p.table.sort("request_index")


def test_pacing_decides_whether_a_slow_sessions_prefix_survives() -> None:
    """By hand, both sessions start at 0; A's first turn ends at E (about 110 s), B's at e
    (a few s).

    * fcctl's rule, next arrival = max(previous arrival + t difference, previous end): A's
      next turn at max(0 + 51, E) = E, before B's big turn at max(0 + 120, e) = 120. It finds
      its 4 blocks (nothing evicted them yet); B's turn then evicts A's blocks, too late to
      matter.
    * Dynamo's rule, max(recorded send time, previous end + recorded think time), here a real
      client's (previous end + think): B's turn at max(120, e + 119) = e + 119, A's at
      max(51, E + 50) = E + 50, after B's. B's 10 blocks fill the pool and evict all of
      A's: A's next turn finds 0.

    fcctl is run on a table without think times (its old rule, still the rule where a trace
    records none), then fed Dynamo's rule's arrivals as the trace's times (each then falls
    after the previous turn's end, so the max() keeps them as given): its store gives the hand
    counts both times, so the two counts differ by pacing alone. Then on the recorded schedule
    with the client's think times kept (``think_time_s``): fcctl's own rule gives Dynamo's
    arrivals and Dynamo's count.
    """
    fcctl_rule = _paced_run(51.0, 120.0)
    end_a0, end_b0 = fcctl_rule["end_s"][0], fcctl_rule["end_s"][2]
    assert 51.0 < end_a0 < 120.0 and end_b0 < 51.0  # the case's premise: A ran long, B short
    assert fcctl_rule["arrival_s"].to_list() == [0.0, end_a0, 0.0, 120.0]
    assert fcctl_rule["gpu_blocks"].to_list() == [0, 4, 0, 1]

    t_a1, t_b1 = max(51.0, end_a0 + _THINK_A), max(120.0, end_b0 + _THINK_B)  # Dynamo's rule
    assert end_a0 < t_b1 < t_a1  # B's big turn comes between A's turns
    dynamo_rule = _paced_run(t_a1, t_b1)
    assert dynamo_rule["end_s"][0] == end_a0 and dynamo_rule["end_s"][2] == end_b0
    assert dynamo_rule["arrival_s"].to_list() == [0.0, t_a1, 0.0, t_b1]
    assert dynamo_rule["gpu_blocks"].to_list() == [0, 0, 0, 1]

    client_rule = _paced_run(51.0, 120.0, think=True)
    assert client_rule["end_s"][0] == end_a0 and client_rule["end_s"][2] == end_b0
    assert client_rule["arrival_s"].to_list() == [0.0, t_a1, 0.0, t_b1]
    assert client_rule["gpu_blocks"].to_list() == [0, 0, 0, 1]


_DYNAMO_PYTHON = Path(os.environ.get("FCCTL_DYNAMO_PYTHON", "/tmp/dynvenv/bin/python"))


@pytest.mark.slow
@pytest.mark.skipif(not _DYNAMO_PYTHON.exists(), reason="Dynamo 1.6.1's venv is absent")
def test_dynamo_paces_by_the_recorded_schedule_and_think_time(tmp_path: Path) -> None:
    """Dynamo 1.6.1's own rule, which the pacing case above states: a turn goes at
    max(session start + t, previous end + t difference - previous api_time), the whole
    difference where api_time is absent. One session, one worker; Dynamo's mocker serves each
    turn in well under a second (llama-3.1-8b, a few hundred tokens), so by hand:

    * t 20 after api 5 at t 0: max(20, e0 + 15) = 20;
    * t 40 after api 3 at t 20: max(40, e1 + 17) = 40;
    * t 70 after a turn without api_time at t 40: max(70, e2 + 30) = e2 + 30 (> 70);
    * t 100 after api 1 at t 70: max(100, e3 + 29) = 100 (e3 is about 70.1).
    """
    rows = [(0.0, 5.0), (20.0, 3.0), (40.0, None), (70.0, 1.0), (100.0, 1.0)]
    requests = []
    for i, (t, api) in enumerate(rows):
        request: dict[str, Any] = {
            "t": t,
            "type": "n",
            "model": "claude-opus-4-5-20251101",
            "in": (4 + i) * 64,
            "out": 10,
            "hash_ids": list(range(4 + i)),
            "input_types": ["text"],
            "output_types": ["text"],
            "stop": "end_turn",
        }
        if api is not None:
            request["api_time"] = api
        requests.append(request)
    session = {
        "id": "trace_0001",
        "models": ["claude-opus-4-5-20251101"],
        "block_size": 64,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": requests,
    }
    trace = tmp_path / "pacing.jsonl"
    trace.write_text(json.dumps(session) + "\n")
    settings = {
        "engine": {
            "num_gpu_blocks": 1024,
            "block_size": 64,
            "kv_cache_bytes_per_token": 131_072,
            "enable_prefix_caching": True,
        },
        "num_workers": 1,
        "router_mode": "round_robin",
        "trace_block_size": 64,
        "trace_format": "weka",
        "execution_model": "llama-3.1-8b",
        "per_request": ["arrival_time_ms", "terminal_time_ms"],
    }
    common = Path(__file__).resolve().parents[1] / "benchmarks" / "_common.py"
    out = subprocess.run(
        [str(_DYNAMO_PYTHON), str(common), "_dynamo", str(trace), json.dumps(settings)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    done = json.loads(out.stdout)["per_request"]
    arrival = [r["arrival_time_ms"] / 1e3 for r in done]
    end = [r["terminal_time_ms"] / 1e3 for r in done]
    assert all(e - a < 1.0 for a, e in zip(arrival, end, strict=True))  # the premise
    assert arrival[:3] == pytest.approx([0.0, 20.0, 40.0], abs=1e-6)
    assert arrival[3] == pytest.approx(end[2] + 30.0, abs=1e-6) and arrival[3] > 70.0
    assert arrival[4] == pytest.approx(100.0, abs=1e-6)
