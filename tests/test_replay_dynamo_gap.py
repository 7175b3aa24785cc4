"""Why fcctl's GPU-only hit share sits under Dynamo 1.6.1's on the Claude Code sessions.

benchmarks/dynamo_claude_code.py measured it (docs/simulator.md, "Dynamo 1.6.1 on the Claude
Code sessions"): on the same served requests the gap is no definition. Both simulators keep
running requests' KV in the worker's one GPU pool beside the cached prefixes (vLLM's block
pool; fcctl §2.1), so the prefix cache is what the running requests leave. fcctl's time model
keeps a request running about four times longer (decodes share iterations with long prefill
chunks), so more of each pool is held by running requests and less reuse survives; with the
overlap taken away (think times x100, or a fast prefill) fcctl matches or passes Dynamo.

The hand-computed case below is that mechanism alone: the same arrivals, the same pool, only
how long one request decodes differs, and a session's cached prefix survives or not.
"""

from __future__ import annotations

from fcctl.analyzers.replay import ReplayConfig
from fcctl.analyzers.replay.run import simulate
from fcctl.analyzers.replay.workload import build_workload
from tests.replay_helpers import BLOCK_TOKENS, TINY, tiny_node, trace_of


def _run(hbm_bytes_per_s: float):  # type: ignore[no-untyped-def]
    # One worker, a 16-block GPU pool shared by running requests and cached prefixes (the
    # presets' model, as Dynamo's vLLM pool), prefill 20,000 tokens/s.
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


def test_how_long_a_request_runs_decides_whether_a_prefix_survives() -> None:
    """By hand, when C starts (pool 16 blocks):

    * B has finished (fast decode): cached A 4 + B 4 = 8 blocks, 8 free; C takes 7 of the
      free ones, nothing is evicted, and A's next turn finds its 4 blocks.
    * B is still decoding (slow decode): B's 6 output blocks are held, A 4 + B 4 cached,
      2 free; C needs 7, so 5 cached blocks go, least recently used first: A's 4 (older than
      B's), then one of B's. A's next turn finds 0.

    The same trace, pool and eviction rule; only the time B runs differs. So a time model that
    keeps requests running longer (fcctl's, against Dynamo's mocker) gives a lower hit share
    without any difference in what a hit is.
    """
    fast = _run(1e15)
    b, c = fast.row(1, named=True), fast.row(2, named=True)
    assert b["end_s"] <= c["start_s"]  # B done before C starts
    assert fast["gpu_blocks"].to_list() == [0, 0, 0, 4]

    slow = _run(1e4)  # a decode step reads ~5 KiB of KV at 10 kB/s: B decodes ~10 minutes
    b, c = slow.row(1, named=True), slow.row(2, named=True)
    assert c["start_s"] < b["end_s"]  # B still decoding when C starts
    assert c["start_s"] < slow["arrival_s"][3]  # A looks its prefix up after C evicted it
    assert slow["gpu_blocks"].to_list() == [0, 0, 0, 0]
