"""SHARDS error: sampled LRU hit curve and stack-distance percentiles against the exact ones.

For each trace: one exact pass (``analyzers.reuse.stack.reuse_pass``, what ``fcctl analyze`` runs),
then :func:`fcctl.analyzers.reuse.shards.sampled_stack` at each rate and fixed sample size, twice:
pure SHARDS (``exact_below_blocks=0``) and with the default exact head (capacities below
``ceil(1024 / rate)`` blocks counted exactly); and, per rate, as ``fcctl analyze`` samples
(``--as-analyze``: the head at least the largest default capacity,
:func:`fcctl.analyzers.reuse.bounded.head_blocks`, and the exact distinct-block count of its block
passes), the configuration whose errors ``analyze`` states as its bound
(``bounded.MEASURED_ERROR``). Capacities: analyze's defaults (16 GiB, 64 GiB,
256 GiB, 1 TiB) and a dense grid of 33 log-spaced capacities from 1 GiB to 4 TiB, in blocks of
the model's KV (llama-3.1-8b, bf16, tp 1: 8 MiB per 64-token block, 64 MiB per 512-token
block). Errors: mean and max |sampled - exact| hit share in percentage points over each grid;
relative error of the p50/p90/p99 stack distance.

    python benchmarks/shards_error.py                       # the shared traces
    python benchmarks/shards_error.py --trace t.parquet --rates 0.1,0.01
    python benchmarks/shards_error.py --markdown            # the table in docs/analyze.md
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import numpy as np

from fcctl.analyzers.reuse.bounded import head_blocks
from fcctl.analyzers.reuse.memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES
from fcctl.analyzers.reuse.shards import block_ids, sampled_stack, shards_error
from fcctl.analyzers.reuse.stack import flatten_accesses, reuse_pass
from fcctl.analyzers.traces.readers import read_trace
from fcctl.layout.geometry import model_geometry

SHARED = Path(os.environ.get("FCCTL_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = {
    "claude-code": SHARED / "traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz",
    "mooncake-conversation": SHARED / "traces/mooncake/conversation_trace.jsonl",
    "mooncake-synthetic": SHARED / "traces/mooncake/synthetic_trace.jsonl",
}
GiB = 1 << 30
DENSE_CAPACITIES_BYTES = tuple(int(x) for x in np.geomspace(GiB, 4096 * GiB, 33))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", action="append", help="trace file (default: the shared traces)")
    ap.add_argument("--rates", default="0.1,0.01,0.001")
    ap.add_argument("--sample-blocks", default="8192,65536", help="fixed-size SHARDS sizes")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument(
        "--as-analyze",
        action="store_true",
        help="only the fixed rates as fcctl analyze runs them (deep head, exact distinct)",
    )
    args = ap.parse_args()
    paths = {Path(t).name: Path(t) for t in args.trace} if args.trace else TRACES
    rates = [float(r) for r in args.rates.split(",")]
    sizes = [int(b) for b in args.sample_blocks.split(",") if b]
    configs: list[tuple[str, float | int, int | None]] = [
        (kind, value, head)
        for kind, values in (("rate", rates), ("size", sizes))
        for value in values
        for head in (0, None)
    ]
    configs += [("analyze", r, None) for r in rates]
    if args.as_analyze:
        configs = [c for c in configs if c[0] == "analyze"]
    geometry = model_geometry(args.model)
    header = (
        "| trace | accesses | sample | rate | exact head (blocks) | default caps mean / max (pp) | "
        "dense grid mean / max (pp) | p50 / p90 / p99 error | sampled s | exact s |"
    )
    print(header)
    print("|" + "---|" * 10)
    for name, path in paths.items():
        trace = read_trace(path)
        block_bytes = geometry.bytes_per_block(trace.block_size_tokens)
        start = time.perf_counter()
        acc = flatten_accesses(trace.requests)
        exact = reuse_pass(acc, trace.requests["timestamp_s"].to_numpy())
        exact_s = time.perf_counter() - start
        del acc
        ids = block_ids(trace.requests)
        n = int(ids.shape[0])
        default_caps = [c // block_bytes for c in DEFAULT_MEMORY_CAPACITIES_BYTES]
        dense_caps = [c // block_bytes for c in DENSE_CAPACITIES_BYTES]
        for kind, value, head in configs:
            start = time.perf_counter()
            if kind == "analyze":
                deep = head_blocks(float(value), max(default_caps))
                sampled = sampled_stack(ids, rate=float(value), exact_below_blocks=deep)
                sampled = sampled.with_distinct_blocks(exact.num_blocks)
                label = "as analyze"
            elif kind == "rate":
                sampled = sampled_stack(ids, rate=float(value), exact_below_blocks=head)
                label = "fixed rate"
            else:
                sampled = sampled_stack(ids, sample_blocks=int(value), exact_below_blocks=head)
                label = f"fixed size {int(value):,}"
            sampled_s = time.perf_counter() - start
            e_def = shards_error(exact.stack_count, n, sampled, default_caps)
            e_dense = shards_error(exact.stack_count, n, sampled, dense_caps)
            p = e_def.percentile_rel_error
            print(
                f"| {name} | {n:,} | {label} | {sampled.rate:.4g} | "
                f"{sampled.exact_below_blocks:,} | "
                f"{e_def.mean_abs_error_pp:.3f} / {e_def.max_abs_error_pp:.3f} | "
                f"{e_dense.mean_abs_error_pp:.3f} / {e_dense.max_abs_error_pp:.3f} | "
                f"{_pct(p[50])} / {_pct(p[90])} / {_pct(p[99])} | "
                f"{sampled_s:.1f} | {exact_s:.1f} |",
                flush=True,
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\npeak RSS {peak:.2f} GiB; model {args.model}, block bytes by trace block size")


if __name__ == "__main__":
    main()
