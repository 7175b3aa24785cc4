"""Where one simulation's time goes: the figures of docs/benchmarks.md, issue #19.

Usage::

    python3 benchmarks/simulation_profile.py [--trace PATH] [--policy flat] [--rate 1.0]
        [--profile]

Reads the trace (default the whole Claude Code trace), builds the workload once, as the
recommender does, and times a few simulations of ``--policy`` at ``--rate`` (the placement's
default thresholds); ``--profile`` runs one more under cProfile and prints the 40 heaviest
calls (cumulative, then own time). The first simulation of a process also pays numba's
compilation when its cache is cold.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared/traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz"


def main() -> int:
    from fcctl.analyzers.replay import RunSpec, load_hardware, simulate, simulation_workload
    from fcctl.analyzers.traces.readers import read_trace
    from fcctl.layout.geometry import model_geometry

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--policy", default="flat")
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = read_trace(args.trace, None)
    t1 = time.perf_counter()
    geometry, node = model_geometry("llama-3.1-8b"), load_hardware(None)
    w = simulation_workload(trace, geometry, node)
    del trace
    t2 = time.perf_counter()
    print(
        f"read {t1 - t0:.2f} s; workload {t2 - t1:.2f} s ({w.requests:,} requests, "
        f"{w.block_accesses:,} accesses)"
    )
    spec = RunSpec(geometry=geometry, hardware=node)
    for _ in range(args.repeat):
        t = time.perf_counter()
        simulate(w, spec, args.policy, args.rate, release=True)
        print(f"{args.policy} at {args.rate:g} req/s: {time.perf_counter() - t:.2f} s")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        simulate(w, spec, args.policy, args.rate, release=True)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
