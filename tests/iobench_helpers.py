"""Small workloads for the iobench tests: a 4 KiB piece per (block, layer), a few MiB in all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer

from fcctl.commands.iobench import register
from fcctl.iobench.run import RunHooks
from fcctl.iobench.workload import IoWorkload, synthetic_io_workload
from fcctl.layout.geometry import KvGeometry
from tests.conftest import REPO

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


def tiny_workload(
    sessions: int = 6, blocks: int = 40, turns: int = 4, layers: int = 4
) -> IoWorkload:
    geometry = KvGeometry("tiny", layers=layers, kv_heads=1, head_dim=64)
    return synthetic_io_workload(
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


def app_with_hooks(hooks: RunHooks) -> typer.Typer:
    """An app whose iobench runs with ``hooks`` (register's documented parameter)."""
    hooked = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @hooked.callback()
    def _root() -> None:  # a group, so "iobench" stays a subcommand
        pass

    register(hooked, hooks=hooks)
    return hooked


def small_iobench_args(tmp_path: Path) -> list[str]:
    cfg = tiny_model_config(tmp_path / "tiny.json")
    return [
        "iobench",
        "--model-config",
        str(cfg),
        "--sessions",
        "4",
        "--tokens",
        "320",
        "--turns",
        "4",
        "--bucket-size",
        "64KiB",
        "--concurrency",
        "1,2",
    ]


def start_iobench(tmp_path, bench, *args):
    """A real `python -m fcctl iobench --no-fio` process on a 32-layer tiny model, under bench."""
    cfg = tiny_model_config(tmp_path / "tiny.json", layers=32)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fcctl",
            "iobench",
            "--model-config",
            str(cfg),
            "--no-fio",
            *args,
            "--dir",
            str(bench),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
