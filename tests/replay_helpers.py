"""Random and hand-made traces and a tiny node for the replay tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
from analyze_helpers import make_trace

from fcctl.analyzers.replay import PRESETS, Hardware, with_values
from fcctl.analyzers.traces.schema import Trace
from fcctl.layout.geometry import KvGeometry

BLOCK_TOKENS = 16
# 2 layers x 2 x 1 head x 128 x 2 bytes = 1 KiB per token; a block (16 tokens) is 16 KiB and
# one block at one layer 8 KiB, so runs and segments lie closer than the planner's 64 KiB gap.
TINY = KvGeometry("tiny", layers=2, kv_heads=1, head_dim=128)
BLOCK_BYTES = TINY.bytes_per_block(BLOCK_TOKENS)


def tiny_node(**blocks_or_values: Any) -> Hardware:
    """Two workers; capacities given in blocks (``gpu_kv``, ``host``, ``ssd``, ``staging``,
    ``bucket``) or as Hardware fields."""
    values: dict[str, Any] = {
        "gpus": 2,
        "gpu_kv_bytes": 12 * BLOCK_BYTES,
        "host_memory_bytes": 40 * BLOCK_BYTES,
        "ssd_bytes": 400 * BLOCK_BYTES,
        "staging_bytes": 16 * BLOCK_BYTES,
        "bucket_bytes": 8 * BLOCK_BYTES,
        "ssd_read_bytes_per_s": 20e6,
        "ssd_command_s": 2e-4,
        "host_to_gpu_bytes_per_s": 1e9,
        "window_streams": 1,
        "prefetch_timeout_base_s": 0.02,
        "prefetch_timeout_per_1k_tokens_s": 0.05,
        "prefetch_timeout_max_s": 0.2,
        "prefill_tokens_per_s": 20000.0,
        # Running requests' KV in a pool of its own, large enough for all: the GPU KV above
        # is the prefix cache alone, so the hand-computed cases stay about the tiers.
        "gpu_running_kv_bytes": 1 << 40,
    }
    for key in ("gpu_kv", "host", "ssd", "staging", "bucket"):
        if key in blocks_or_values:
            field = {
                "gpu_kv": "gpu_kv_bytes",
                "host": "host_memory_bytes",
                "ssd": "ssd_bytes",
                "staging": "staging_bytes",
                "bucket": "bucket_bytes",
            }[key]
            values[field] = blocks_or_values.pop(key) * BLOCK_BYTES
    values.update(blocks_or_values)
    return with_values(PRESETS["h100-8x"], values, "test")


def trace_of(
    hash_ids: Sequence[Sequence[int]],
    *,
    sessions: Sequence[str] | None = None,
    timestamps: Sequence[float] | None = None,
    output_tokens: Sequence[int] | None = None,
    order: str | None = None,
) -> Trace:
    """``analyze_helpers.make_trace`` with outputs; with ``sessions`` its clocks are per session
    (order "session") unless ``order`` says otherwise."""
    n = len(hash_ids)
    trace = make_trace(
        hash_ids,
        timestamps=timestamps,
        sessions=sessions,
        block_size_tokens=BLOCK_TOKENS,
        order=order or ("session" if sessions is not None else "time"),
    )
    outputs = pl.Series("output_tokens", list(output_tokens or [8] * n), dtype=pl.Int64)
    return replace(
        trace,
        requests=trace.requests.with_columns(outputs),
        has_sessions=sessions is not None,
        block_size_tokens=BLOCK_TOKENS,
    )


def random_session_trace(seed: int, sessions: int = 6, turns: int = 6) -> Trace:
    """Sessions whose prompts grow turn by turn (sometimes reset), a few sharing a prompt."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, float, list[int], int]] = []
    next_id = 1000
    for s in range(sessions):
        shared = [1, 2, 3] if rng.random() < 0.4 else []
        history = list(shared)
        t = 0.0
        for _ in range(int(rng.integers(1, turns + 1))):
            if rng.random() < 0.1:
                history = list(shared)  # a compaction: the prompt restarts
            grow = int(rng.integers(1, 9))
            history = history + list(range(next_id, next_id + grow))
            next_id += grow
            rows.append((f"s{s}", t, list(history), int(rng.integers(1, 600))))
            t += float(rng.exponential(0.05))
    return trace_of(
        [r[2] for r in rows],
        sessions=[r[0] for r in rows],
        timestamps=[r[1] for r in rows],
        output_tokens=[r[3] for r in rows],
    )


def random_time_trace(seed: int, requests: int = 40) -> Trace:
    """Requests without session ids: prefix chains over a few shared system prompts."""
    rng = np.random.default_rng(seed)
    chains: list[list[int]] = [[1, 2], [5, 6, 7], [9]]
    hashes = []
    next_id = 100
    for _ in range(requests):
        k = int(rng.integers(0, len(chains)))
        grow = int(rng.integers(1, 6))
        h = chains[k] + list(range(next_id, next_id + grow))
        next_id += grow
        if rng.random() < 0.5:
            chains[k] = h
        hashes.append(h)
    times = np.cumsum(rng.exponential(0.03, size=requests)).tolist()
    return trace_of(hashes, timestamps=times, output_tokens=rng.integers(1, 400, requests).tolist())
