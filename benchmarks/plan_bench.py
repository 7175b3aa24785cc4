"""Benchmark ``fcctl plan`` on a whole trace (issue #33 item 8): wall time, peak memory, steps.

Usage (figures recorded in docs/benchmarks.md, "plan on whole traces")::

    python3 benchmarks/plan_bench.py TRACE [--out DIR] [-- more plan flags]

Runs ``fcctl plan TRACE -o DIR --force [flags]`` in a subprocess and prints one JSON document:

* ``wall_s``: the whole command (every step, the trace read included);
* ``peak_tree_rss_bytes``: the command's process tree (the CLI, its fork server and worker
  processes) sampled from ``/proc`` every 0.2 s, summed at each sample. The workers map one
  shared copy of the workload (``/dev/shm``), which every worker's RSS counts again, so this is
  an upper bound of the memory the plan holds; ``peak_process_rss_bytes`` is the largest single
  process's own peak (``VmHWM``);
* ``steps``: each step's seconds as ``plan.json`` records them (the same the terminal prints);
* ``decision``: ``plan.json``'s ``decision.best`` and the replay's notes on its load sweep and
  replicas, so the figure carries its operating point;
* ``target``: the issue's goals (600 s, 8 GiB) and the ratios against them (below 1: met).

The reference is the goal itself (no other tool makes a plan), measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30
GOAL_S = 600.0
GOAL_BYTES = 8 * GiB


def _sampler() -> type:
    """recommend_bench.TreeSampler (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "recommend_bench", REPO / "benchmarks/recommend_bench.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TreeSampler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--out", type=Path, help="the plan directory [a temporary one]")
    ap.add_argument("extra", nargs="*", help="more plan flags (after --)")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"plan_bench: trace not found: {args.trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "plan"
        cmd = [sys.executable, "-m", "fcctl.cli", "plan", str(args.trace), "-o", str(out)]
        cmd += ["--force", *args.extra]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        sampler = _sampler()(proc.pid)
        sampler.start()
        stdout, _ = proc.communicate()
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        if proc.returncode != 0:
            print(f"plan_bench: fcctl plan exited {proc.returncode}", file=sys.stderr)
            return 1
        plan = json.loads((out / "plan.json").read_text())
        replay = json.loads((out / "replay.json").read_text())
    tree = sampler.peak_tree_kib * 1024
    doc = {
        "command": " ".join(["fcctl", *cmd[3:]]).replace(str(out), str(args.out or "DIR")),
        "wall_s": round(wall, 1),
        "peak_tree_rss_bytes": tree,
        "peak_process_rss_bytes": sampler.peak_process_kib * 1024,
        "processes": sampler.max_processes,
        "steps": {s["name"]: round(s["seconds"], 1) for s in plan["steps"]},
        "decision": plan["decision"]["best"],
        "first_line": stdout.splitlines()[0] if stdout else "",
        "sweep": [
            n
            for n in replay["notes"]
            if n.startswith(("concurrency auto", "rates auto", "replicas"))
        ],
        "target": {
            "wall_s": GOAL_S,
            "peak_bytes": GOAL_BYTES,
            "wall_ratio": round(wall / GOAL_S, 3),
            "peak_ratio": round(tree / GOAL_BYTES, 3),
        },
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
