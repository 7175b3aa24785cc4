"""Benchmark ``fcctl analyze`` against libCacheSim's LRU on the same block stream.

Usage (whole Claude Code trace; figures recorded in docs/benchmarks.md)::

    python3 benchmarks/analyze_bench.py --runs 3

What runs, all in this one invocation:

1. preparation, timed and reported separately (not part of either side's figure):
   ``fcctl convert`` of the trace to canonical Parquet, and the block stream written once as a
   libCacheSim ``oracleGeneral`` binary file (24-byte records: u32 time, u64 object id,
   u32 size = 1, i64 next access = -1), ids are our dense block ids + 1, in analysis order;
2. ours: ``fcctl analyze trace.parquet --json --memory A,B,C`` in a subprocess: every metric
   and all three capacities; wall time and peak RSS from ``os.wait4`` (that child only);
3. libCacheSim: ``LRU(capacity_blocks).process_trace`` for the three capacities in a
   subprocess (obj_size 1, capacity in blocks): time of the three simulations, peak RSS;
4. the cross-check: our ``lru_hit_share`` against libCacheSim's ``1 - miss ratio`` at each
   capacity (they count the same accesses, so they should agree to ~1e-6).

Medians over ``--runs`` runs. Needs ``pip install libcachesim`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _common import REPO, lcs_worker, prepare, run_child

DEFAULT_TRACE = REPO.parent / "shared/traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--memory", default="16GiB,64GiB,256GiB", help="three capacities")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="keep prepared files here")
    ap.add_argument(
        "--raw-too",
        action="store_true",
        help="also time one `fcctl analyze` straight from the raw trace",
    )
    args = ap.parse_args()

    from fcctl.common.units import format_bytes, parse_size_list
    from fcctl.layout.geometry import model_geometry

    caps = parse_size_list(args.memory, what="--memory")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="analyze-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    parquet = work / "trace.parquet"
    stream = work / "stream.oracleGeneral"
    fcctl = [sys.executable, "-m", "fcctl"]

    print(f"trace: {args.trace}\nworkdir: {work}", flush=True)
    convert_s, stream_s, n_acc, n_blocks = prepare(args.trace, parquet, stream)
    print(
        f"prepared: convert to Parquet {convert_s:.1f} s; oracleGeneral stream of {n_acc:,} "
        f"accesses ({n_blocks:,} blocks, {format_bytes(stream.stat().st_size)}) {stream_s:.1f} s",
        flush=True,
    )

    block_bytes = model_geometry(args.model).bytes_per_block(64)
    ours_cmd = [
        *fcctl,
        "analyze",
        str(parquet),
        "--json",
        "--memory",
        args.memory,
        "--model",
        args.model,
    ]
    # A warm-up run compiles (and caches) the numba kernels, as any second use would find them.
    run_child(ours_cmd)
    ours, lcs_runs, doc, lcs_doc = [], [], None, None
    for i in range(args.runs):
        wall, rss, text = run_child(ours_cmd)
        doc = json.loads(text)
        ours.append((wall, rss))
        lwall, lrss, ltext = run_child(
            [sys.executable, __file__, "_lcs", str(stream), *[str(c // block_bytes) for c in caps]]
        )
        lcs_doc = json.loads(ltext)
        sim_s = sum(r["seconds"] for r in lcs_doc["runs"])
        lcs_runs.append((sim_s, lwall, lrss))
        print(
            f"run {i + 1}: fcctl analyze {wall:.2f} s, {rss:.2f} GiB; libCacheSim 3 x LRU "
            f"{sim_s:.2f} s simulate ({lwall:.2f} s process), {lrss:.2f} GiB",
            flush=True,
        )
    assert doc is not None and lcs_doc is not None
    if args.raw_too:
        wall, rss, _ = run_child(
            [
                *fcctl,
                "analyze",
                str(args.trace),
                "--json",
                "--memory",
                args.memory,
                "--model",
                args.model,
            ]
        )
        print(f"fcctl analyze from the raw trace (parse + analyze): {wall:.2f} s, {rss:.2f} GiB")

    med = statistics.median
    ours_s, ours_rss = med(w for w, _ in ours), max(r for _, r in ours)
    lcs_s, lcs_wall, lcs_rss = (
        med(x[0] for x in lcs_runs),
        med(x[1] for x in lcs_runs),
        max(x[2] for x in lcs_runs),
    )
    print(
        f"\nmedians of {args.runs} runs; {n_acc:,} block accesses; libcachesim {lcs_doc['version']}"
    )
    print(f"{'':34}{'wall s':>10}{'peak RSS GiB':>14}")
    print(f"{'fcctl analyze (all metrics, 3 caps)':34}{ours_s:>10.2f}{ours_rss:>14.2f}")
    print(f"{'libCacheSim LRU x3 (simulation)':34}{lcs_s:>10.2f}{lcs_rss:>14.2f}")
    print(f"{'libCacheSim LRU x3 (whole process)':34}{lcs_wall:>10.2f}")
    print(
        f"ratio ours / libCacheSim 3 runs: {ours_s / lcs_s:.2f} "
        f"({'goal met' if ours_s < lcs_s and ours_rss < 8 else 'GOAL MISSED'}: "
        "less time than the 3 runs, under 8 GiB)"
    )
    print("\ncross-check of LRU hit shares:")
    print(f"{'capacity':>12}{'blocks':>10}{'fcctl':>14}{'libCacheSim':>14}{'abs diff':>12}")
    worst = 0.0
    for p, r in zip(doc["memory_tier"], lcs_doc["runs"], strict=True):
        diff = abs(p["lru_hit_share"] - r["hit_share"])
        worst = max(worst, diff)
        print(
            f"{format_bytes(p['capacity_bytes']):>12}{p['capacity_blocks']:>10}"
            f"{p['lru_hit_share']:>14.8f}{r['hit_share']:>14.8f}{diff:>12.2e}"
        )
    print(f"largest difference {worst:.2e} ({'match' if worst < 1e-6 else 'MISMATCH'})")
    print(
        f"\nkey figures: once-only {doc['once_only_block_share']:.4f}, reuse "
        f"{doc['reuse_access_share']:.4f}, p50 session KV "
        f"{format_bytes(doc['sessions']['kv_bytes']['p50'])} ({args.model})"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_lcs":
        lcs_worker(sys.argv[2], [int(c) for c in sys.argv[3:]])
    else:
        main()
