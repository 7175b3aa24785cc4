"""Benchmark ``fcctl recommend-thresholds``: the default run on the whole Claude Code trace.

Usage (figures recorded in docs/benchmarks.md)::

    python3 benchmarks/recommend_bench.py [--trace PATH] [--jobs 2] [--engine dask] [-- flags]

Runs ``fcctl recommend-thresholds TRACE --json --engine E [--jobs J]`` in a subprocess
(default grid, rates 0.1,0.25,0.5,1.0, h200-8x) and reports:

* wall time (s) of the whole command: trace read, workload, every simulation, the document;
* peak RSS: the command's process tree (the CLI and its worker processes) sampled from
  ``/proc`` every 0.2 s, summed over the tree at each sample (``peak_tree_rss_bytes``), and
  the largest single process's own peak (``VmHWM`` of each, ``peak_process_rss_bytes``);
* what the run did: grid size, simulations run and reused (from the JSON document), the pick.

The goal (issue #9): under 10 minutes on 2 cores, under 8 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared/traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz"
GiB = 1 << 30


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


class TreeSampler(threading.Thread):
    """Peak summed RSS of a process tree, and the largest process's VmHWM, from /proc."""

    def __init__(self, pid: int, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.period_s = pid, period_s
        self.peak_tree_kib = 0
        self.peak_process_kib = 0
        self.max_processes = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids = _tree(self.pid)
            self.max_processes = max(self.max_processes, len(pids))
            self.peak_tree_kib = max(self.peak_tree_kib, sum(_status_kib(p, "VmRSS") for p in pids))
            for p in pids:
                self.peak_process_kib = max(self.peak_process_kib, _status_kib(p, "VmHWM"))
            self.stop.wait(self.period_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, help="worker processes [the command's default]")
    ap.add_argument(
        "--engine",
        choices=("local", "dask"),
        default="local",
        help="dask: a local Dask cluster started by the command",
    )
    ap.add_argument("--save", type=Path, help="also write the JSON document here")
    ap.add_argument("extra", nargs="*", help="more recommend-thresholds flags (after --)")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    cmd = [
        sys.executable,
        "-m",
        "fcctl.cli",
        "recommend-thresholds",
        str(args.trace),
        "--json",
        "--engine",
        args.engine,
        *jobs,
        *args.extra,
    ]
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, cwd=REPO)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        out.seek(0)
        text = out.read().decode()
    if rc != 0:
        print(f"recommend-thresholds exited {rc}", file=sys.stderr)
        return 1
    doc = json.loads(text)
    if args.save is not None:
        args.save.write_text(text)
    rec = doc["recommendation"]
    rates = sorted({g["rate"] for g in doc["grid"]})
    pairs = len(doc["grid"]) // max(1, len(rates))
    summary = {
        "command": " ".join(["fcctl", *cmd[3:]]),
        "cpus": len(os.sched_getaffinity(0)),
        "wall_s": round(wall, 1),
        "peak_tree_rss_bytes": sampler.peak_tree_kib * 1024,
        "peak_process_rss_bytes": sampler.peak_process_kib * 1024,
        "processes": sampler.max_processes,
        "grid_pairs": pairs,
        "rates": rates,
        "recommendation": rec,
        "engine": doc["provenance"].get("engine"),
    }
    print(json.dumps(summary, indent=2))
    print(
        f"wall {wall:.1f} s on {summary['cpus']} CPUs ({args.engine}, jobs {args.jobs}); peak "
        "RSS of the "
        f"process tree {sampler.peak_tree_kib / 2**20:.2f} GiB, largest process "
        f"{sampler.peak_process_kib / 2**20:.2f} GiB; goal < 600 s and < 8 GiB",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
