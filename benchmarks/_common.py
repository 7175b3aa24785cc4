"""Helpers the benchmark scripts share: child-process timing, the oracleGeneral block stream,
libCacheSim's LRU run in a child, Dynamo's offline replay run in a child.

Run as ``python3 benchmarks/_common.py _lcs STREAM CAP...`` (libCacheSim child),
``python3 benchmarks/_common.py _stream TRACE.parquet DEST`` (write the stream in a child, so the
parent stays small: a child's ``ru_maxrss`` starts from its forking parent's peak) or
``DYNAMO_PYTHON benchmarks/_common.py _dynamo TRACE SETTINGS_JSON`` (one Dynamo replay, in the
interpreter that has ``ai-dynamo`` 1.6.1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30


def run_child(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS GiB, stdout) of one child process, measured on that child only."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
    return wall, usage.ru_maxrss / 2**20, text  # ru_maxrss is KiB on Linux


def write_oracle_general(parquet: Path, dest: Path) -> tuple[int, int]:
    """Write the access stream as oracleGeneral records; return (accesses, distinct blocks)."""
    import numpy as np

    from fcctl.analyzers.reuse.stack import flatten_accesses
    from fcctl.analyzers.traces.readers import read_trace

    acc = flatten_accesses(read_trace(parquet).requests)
    rec = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    chunk = 8_000_000
    with dest.open("wb") as f:
        for s in range(0, acc.num_accesses, chunk):
            e = min(acc.num_accesses, s + chunk)
            a = np.zeros(e - s, dtype=rec)
            a["t"] = np.arange(s, e, dtype=np.uint32)
            a["id"] = acc.block[s:e].astype(np.uint64) + 1
            a["size"] = 1
            a["next"] = -1
            a.tofile(f)
    return acc.num_accesses, acc.num_blocks


def lcs_worker(stream: str, capacities_blocks: list[int]) -> None:
    """Child mode: LRU at each capacity over the stream; print JSON of times and hit shares."""
    import libcachesim as lcs

    out = []
    for c in capacities_blocks:
        reader = lcs.TraceReader(
            stream, lcs.TraceType.ORACLE_GENERAL_TRACE, lcs.ReaderInitParam(ignore_obj_size=False)
        )
        cache = lcs.LRU(c)
        start = time.perf_counter()
        miss_ratio, _ = cache.process_trace(reader)
        out.append(
            {
                "capacity_blocks": c,
                "seconds": time.perf_counter() - start,
                "hit_share": 1.0 - miss_ratio,
            }
        )
    print(json.dumps({"version": getattr(lcs, "__version__", "?"), "runs": out}))


def export_stream(parquet: Path, dest: Path) -> tuple[int, int]:
    """:func:`write_oracle_general` in a child process; (accesses, distinct blocks)."""
    _, _, text = run_child([sys.executable, __file__, "_stream", str(parquet), str(dest)])
    doc = json.loads(text)
    return int(doc["accesses"]), int(doc["blocks"])


def prepare(
    trace: Path, parquet: Path, stream: Path, *, reuse_parquet: bool = False
) -> tuple[float, float, int, int]:
    """The preparation both sides' figures exclude, timed: ``fcctl convert`` of ``trace`` to
    ``parquet`` (kept when ``reuse_parquet`` and it exists), then the oracleGeneral stream.

    Returns (convert seconds, stream seconds, accesses, distinct blocks).
    """
    t = time.perf_counter()
    if not (reuse_parquet and parquet.exists()):
        subprocess.run(
            [sys.executable, "-m", "fcctl", "convert", str(trace), "-o", str(parquet), "--force"],
            check=True,
            cwd=REPO,
            stderr=subprocess.DEVNULL,
        )
    convert_s = time.perf_counter() - t
    t = time.perf_counter()
    n_acc, n_blocks = export_stream(parquet, stream)
    return convert_s, time.perf_counter() - t, n_acc, n_blocks


def lcs_command(stream: Path, capacities_blocks: list[int]) -> list[str]:
    """The command that runs :func:`lcs_worker` in a child."""
    return [sys.executable, __file__, "_lcs", str(stream), *[str(c) for c in capacities_blocks]]


def dynamo_worker(trace: str, settings_json: str) -> None:
    """Child mode (Dynamo's interpreter): one offline replay; print its summary as JSON.

    ``settings``: ``engine`` (engine arguments), ``num_workers``, ``trace_block_size``,
    ``router_mode`` and optionally ``arrival_speedup_ratio`` (default 1), ``trace_format``
    (default ``mooncake``; ``weka`` needs ``execution_model``, the target model's name) and
    ``per_request`` (a list of per-request fields to print beside the summary).
    """
    from dynamo.replay import run_trace_replay

    s = json.loads(settings_json)
    start = time.perf_counter()
    report = run_trace_replay(
        trace,
        trace_format=s.get("trace_format", "mooncake"),
        extra_engine_args={"engine": s["engine"], "num_gpu_blocks_is_explicit": True},
        num_workers=s["num_workers"],
        trace_block_size=s["trace_block_size"],
        router_mode=s["router_mode"],
        arrival_speedup_ratio=s.get("arrival_speedup_ratio", 1.0),
        **({"execution_model": s["execution_model"]} if "execution_model" in s else {}),
        capture_per_request=bool(s.get("per_request")),
    )
    seconds = time.perf_counter() - start
    summary = dict(report.summary)
    doc: dict[str, Any] = {"seconds": seconds, "summary": summary}
    if s.get("per_request"):
        doc["per_request"] = [{k: r.get(k) for k in s["per_request"]} for r in report.per_request]
    print(json.dumps(doc, default=str))


def dynamo_engine(
    *,
    block_tokens: int,
    bytes_per_token: int,
    gpu_blocks: int,
    host_blocks: int | None = None,
    host_to_gpu_bytes_per_s: float = 0.0,
    g3_blocks: int | None = None,
    g3_bytes_per_s: float = 0.0,
) -> dict[str, Any]:
    """Dynamo mocker engine arguments: GPU blocks per worker, optionally a host tier per worker
    (``native_host_offload``) and a node-shared disk tier (``g3_offload``, ``cluster_shared``)."""
    engine: dict[str, Any] = {
        "num_gpu_blocks": gpu_blocks,
        "block_size": block_tokens,
        "kv_cache_bytes_per_token": bytes_per_token,
        "enable_prefix_caching": True,
    }
    if host_blocks:
        gbps = host_to_gpu_bytes_per_s / 1e9
        engine["native_host_offload"] = {
            "num_host_blocks": host_blocks,
            "kv_layout_id": "fcctl-bench",
            "h2d_bandwidth_gbps": gbps,
            "d2h_bandwidth_gbps": gbps,
        }
    if g3_blocks:
        engine["g3_offload"] = {
            "num_g3_blocks": g3_blocks,
            "scope": "cluster_shared",
            "shared_read_bandwidth_gbps": g3_bytes_per_s / 1e9,
            "shared_write_bandwidth_gbps": g3_bytes_per_s / 1e9,
        }
    return engine


def dynamo_command(python: str, trace: Path, settings: dict[str, Any]) -> list[str]:
    """The command that runs :func:`dynamo_worker` in ``python`` (Dynamo's interpreter)."""
    return [python, __file__, "_dynamo", str(trace), json.dumps(settings)]


if __name__ == "__main__":
    if sys.argv[1] == "_lcs":
        lcs_worker(sys.argv[2], [int(c) for c in sys.argv[3:]])
    elif sys.argv[1] == "_stream":
        n_acc, n_blocks = write_oracle_general(Path(sys.argv[2]), Path(sys.argv[3]))
        print(json.dumps({"accesses": n_acc, "blocks": n_blocks}))
    elif sys.argv[1] == "_dynamo":
        dynamo_worker(sys.argv[2], sys.argv[3])
