"""Small workloads for the iobench tests: a 4 KiB piece per (block, layer), a few MiB in all."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fcctl.iobench.workload import Workload, synthetic_workload
from fcctl.layout.geometry import KvGeometry

# 2 (K and V) x 1 head x 64 dims x 2 bytes x 16 tokens = 4096 bytes per block per layer.
TINY = KvGeometry("tiny", layers=4, kv_heads=1, head_dim=64)


def trace_frame():
    """A canonical trace table by hand. Rows in file order: a0, b0, c0, a1, c1, a2, a3."""
    import polars as pl

    return pl.DataFrame(
        {
            "session_id": ["a", "b", "c", "a", "c", "a", "a"],
            "timestamp_s": [0.0, 5.0, 1.0, 10.0, 15.0, 20.0, 30.0],
            "input_tokens": [40, 64, 16, 50, 48, 30, 70],
            "output_tokens": [1] * 7,
        }
    )


def tiny_workload(sessions: int = 6, blocks: int = 40, turns: int = 4, layers: int = 4) -> Workload:
    geometry = KvGeometry("tiny", layers=layers, kv_heads=1, head_dim=64)
    return synthetic_workload(
        geometry, block_tokens=16, sessions=sessions, tokens=16 * blocks, turns=turns
    )


def tiny_model_config(path: Path, layers: int = 4) -> Path:
    """A Hugging Face-style config.json giving the TINY geometry (for the CLI)."""
    path.write_text(
        json.dumps(
            {
                "num_hidden_layers": layers,
                "num_attention_heads": 1,
                "num_key_value_heads": 1,
                "hidden_size": 64,
                "torch_dtype": "bfloat16",
                "model_type": "tiny",
            }
        )
    )
    return path


def wait_for_restores(bench: Path, timeout_s: float = 60) -> None:
    """Wait until a run under ``bench`` reaches its restores: its fio/ subdirectory is made
    after both layouts are written, right before the restore runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not any(bench.glob("*/fio")):
        time.sleep(0.05)
    assert any(bench.glob("*/fio")), "the benchmark never reached the restore runs"
