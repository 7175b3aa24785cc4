"""Benchmark ``fcctl replay`` against libCacheSim's LRU and Dynamo's offline trace replay.

Usage (figures recorded in docs/benchmarks.md, "replay")::

    python3 benchmarks/replay_bench.py --runs 3 --dynamo-python /tmp/dynvenv/bin/python

What runs, all in this one invocation, every measured side in its own child process (wall time
and peak RSS from ``os.wait4``, :func:`_common.run_child`):

1. preparation, timed and reported separately: ``fcctl convert`` of the Claude Code trace to
   canonical Parquet (so the replay's figure is the replay, not the 461 MB JSON parse), and the
   block stream exported once as libCacheSim ``oracleGeneral`` records (analyze_bench's format,
   written in a child so this parent stays small);
2. ours: ``fcctl replay trace.parquet --rates R --json``: all four policies at one rate;
3. libCacheSim: ``LRU(capacity).process_trace`` on the same block stream at 3 capacities (the
   replay's GPU KV per worker, host memory, SSD, in blocks of the replay's geometry);
4. peer: fcctl's four policies against one run of Dynamo's offline replay with GPU, host and
   SSD tiers (``dynamo.replay.run_trace_replay(trace, trace_format="mooncake")``, PyPI
   ``ai-dynamo`` 1.6.1 in the interpreter ``--dynamo-python``) on the Mooncake conversation
   trace at its own rate, capacities derived from the same fcctl hardware preset; hit shares
   side by side (Dynamo counts reused input tokens, fcctl blocks: fcctl's token share is
   ``1 - recomputed_tokens / input tokens``).

Medians over ``--runs`` runs, the sides interleaved within each run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO, dynamo_command, dynamo_engine, lcs_command, prepare, run_child

TRACES = REPO.parent / "shared/traces"
CLAUDE = TRACES / "weka_kv_cache_tester/claude_code_traces.jsonl.gz"
MOONCAKE = TRACES / "mooncake/conversation_trace.jsonl"
POLICIES = ("memory-only", "tiered", "flat", "flat-fcfs")


def dynamo_settings(model: str, hardware: str, router_mode: str) -> dict[str, Any]:
    """Dynamo engine arguments with fcctl's capacities (per worker; SSD shared by the node)."""
    from fcctl.analyzers.replay import PRESETS
    from fcctl.layout.geometry import model_geometry

    hw = PRESETS[hardware]
    geom = model_geometry(model)
    block_tokens = 512  # the Mooncake traces' hash block
    block_bytes = geom.bytes_per_token * block_tokens
    engine = dynamo_engine(
        block_tokens=block_tokens,
        bytes_per_token=geom.bytes_per_token,
        gpu_blocks=hw.gpu_kv_bytes // block_bytes,
        host_blocks=hw.host_memory_bytes // hw.gpus // block_bytes,
        host_to_gpu_bytes_per_s=hw.host_to_gpu_effective_bytes_per_s,
        g3_blocks=hw.ssd_bytes // block_bytes,
        g3_bytes_per_s=hw.ssd_read_bytes_per_s,
    )
    return {
        "engine": engine,
        "num_workers": hw.gpus,
        "trace_block_size": block_tokens,
        "router_mode": router_mode,
    }


def mooncake_input_tokens(path: Path) -> int:
    with path.open() as f:
        return sum(json.loads(line)["input_length"] for line in f if line.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=CLAUDE)
    ap.add_argument("--rate", type=float, default=0.5)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--hardware", default="h200-8x")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="keep prepared files here")
    ap.add_argument("--dynamo-python", default=None, help="interpreter with ai-dynamo 1.6.1")
    ap.add_argument("--dynamo-router", default="round_robin", choices=["round_robin", "kv_router"])
    ap.add_argument("--mooncake", type=Path, default=MOONCAKE)
    args = ap.parse_args()

    from fcctl.analyzers.replay import PRESETS
    from fcctl.common.units import format_bytes
    from fcctl.layout.geometry import model_geometry

    work = args.workdir or Path(tempfile.mkdtemp(prefix="replay-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    parquet, stream = work / "trace.parquet", work / "stream.oracleGeneral"
    fcctl = [sys.executable, "-m", "fcctl"]
    print(f"trace: {args.trace}\nworkdir: {work}", flush=True)
    convert_s, stream_s, n_acc, n_blocks = prepare(args.trace, parquet, stream, reuse_parquet=True)
    print(
        f"prepared: convert to Parquet {convert_s:.1f} s; oracleGeneral stream of {n_acc:,} "
        f"accesses ({n_blocks:,} blocks) {stream_s:.1f} s",
        flush=True,
    )

    hw = PRESETS[args.hardware]
    block_bytes = model_geometry(args.model).bytes_per_block(64)
    caps = [hw.gpu_kv_bytes, hw.host_memory_bytes, hw.ssd_bytes]
    caps_blocks = [c // block_bytes for c in caps]
    hw_flags = ["--model", args.model, "--hardware", args.hardware]
    ours_cmd = [*fcctl, "replay", str(parquet), "--rates", f"{args.rate:g}", "--json", *hw_flags]
    natural = None
    mc_cmd: list[str] = []
    dyn_cmd: list[str] = []
    if args.dynamo_python:
        probe = json.loads(
            run_child(
                [
                    *fcctl,
                    "replay",
                    str(args.mooncake),
                    "--json",
                    "--policies",
                    "memory-only",
                    "--rates",
                    "1",
                    *hw_flags,
                ]
            )[2]
        )
        natural = probe["load"]["natural_rate_per_s"]
        mc_cmd = [
            *fcctl,
            "replay",
            str(args.mooncake),
            "--rates",
            f"{natural:.10g}",
            "--json",
            *hw_flags,
        ]
        settings = dynamo_settings(args.model, args.hardware, args.dynamo_router)
        dyn_cmd = dynamo_command(args.dynamo_python, args.mooncake, settings)
        print(f"Dynamo settings: {json.dumps(settings)}", flush=True)

    run_child(ours_cmd)  # warm-up: compiles (and caches) the numba kernels
    ours, lcs, mc, dyn = [], [], [], []
    doc = lcs_doc = mc_doc = dyn_doc = None
    for i in range(args.runs):
        wall, rss, text = run_child(ours_cmd)
        doc = json.loads(text)
        ours.append((wall, rss))
        lwall, lrss, ltext = run_child(lcs_command(stream, caps_blocks))
        lcs_doc = json.loads(ltext)
        sim_s = sum(r["seconds"] for r in lcs_doc["runs"])
        lcs.append((sim_s, lwall, lrss))
        line = (
            f"run {i + 1}: fcctl replay (4 policies) {wall:.2f} s, {rss:.2f} GiB; "
            f"libCacheSim 3 x LRU {sim_s:.2f} s ({lwall:.2f} s process), {lrss:.2f} GiB"
        )
        if dyn_cmd:
            mwall, mrss, mtext = run_child(mc_cmd)
            mc_doc = json.loads(mtext)
            mc.append((mwall, mrss))
            dwall, drss, dtext = run_child(dyn_cmd)
            dyn_doc = json.loads(dtext)
            dyn.append((dwall, drss, dyn_doc["seconds"]))
            line += (
                f"; Mooncake: fcctl (4 policies) {mwall:.2f} s, {mrss:.2f} GiB, "
                f"Dynamo (1 run) {dwall:.2f} s, {drss:.2f} GiB"
            )
        print(line, flush=True)
    assert doc is not None and lcs_doc is not None
    med = statistics.median
    ours_s, ours_rss = med(w for w, _ in ours), max(r for _, r in ours)
    lcs_s, lcs_wall, lcs_rss = (
        med(x[0] for x in lcs),
        med(x[1] for x in lcs),
        max(x[2] for x in lcs),
    )
    ratios = [o[0] / x[0] for o, x in zip(ours, lcs, strict=True)]
    print(
        f"\nmedians of {args.runs} runs; {n_acc:,} block accesses, {doc['trace']['requests']:,} "
        f"requests, rate {args.rate:g}; libcachesim {lcs_doc['version']}"
    )
    print(f"{'':44}{'wall s':>10}{'peak RSS GiB':>14}")
    print(f"{'fcctl replay, 4 policies (from Parquet)':44}{ours_s:>10.2f}{ours_rss:>14.2f}")
    print(f"{'libCacheSim LRU x3 (simulation)':44}{lcs_s:>10.2f}{lcs_rss:>14.2f}")
    print(f"{'libCacheSim LRU x3 (whole process)':44}{lcs_wall:>10.2f}")
    ratio = ours_s / lcs_s
    per_run = ", ".join(f"{r:.2f}" for r in ratios)
    print(
        f"ratio ours / libCacheSim 3 runs: {ratio:.2f} (per run {per_run}; "
        f"{'goal met' if ratio <= 2 and ours_rss < 8 else 'GOAL MISSED'}: at most 2x, under 8 GiB)"
    )
    print(
        "LRU capacities: "
        + ", ".join(
            f"{format_bytes(c)} = {b:,} blocks: hit {r['hit_share']:.4f}"
            for c, b, r in zip(caps, caps_blocks, lcs_doc["runs"], strict=True)
        )
    )
    print(
        f"replay at {args.rate:g} req/s, ideal {doc['ideal_hit_share']:.4f}: "
        + ", ".join(f"{k} {doc['rates'][0]['policies'][k]['gpu_hit_share']:.4f}" for k in POLICIES)
    )
    if not dyn_cmd:
        return
    assert mc_doc is not None and dyn_doc is not None
    mc_s, mc_rss = med(w for w, _ in mc), max(r for _, r in mc)
    dyn_s, dyn_rss, dyn_inner = (
        med(x[0] for x in dyn),
        max(x[1] for x in dyn),
        med(x[2] for x in dyn),
    )
    s = dyn_doc["summary"]
    tokens = mooncake_input_tokens(args.mooncake)
    print(
        f"\nMooncake conversation trace at its own rate {natural:.4f} req/s, "
        f"{mc_doc['trace']['requests']:,} requests ({args.model}, {args.hardware})"
    )
    print(f"{'':44}{'wall s':>10}{'peak RSS GiB':>14}")
    print(f"{'fcctl replay, 4 policies (from JSONL)':44}{mc_s:>10.2f}{mc_rss:>14.2f}")
    print(f"{'Dynamo run_trace_replay, 1 run, G1+G2+G3':44}{dyn_s:>10.2f}{dyn_rss:>14.2f}")
    print(f"{'  of it inside run_trace_replay':44}{dyn_inner:>10.2f}")
    print(
        f"ratio fcctl 4 policies / Dynamo 1 run: {mc_s / dyn_s:.3f} "
        f"({'goal met' if mc_s < dyn_s else 'GOAL MISSED'}: less time)"
    )
    g3 = s.get("g3_offload") or {}
    print(
        f"Dynamo: reused input tokens {s['prefix_cache_reused_ratio']:.4f}, mean TTFT "
        f"{s['mean_ttft_ms'] / 1e3:.2f} s, p99 {s['p99_ttft_ms'] / 1e3:.2f} s, G3 reads "
        f"{g3.get('read', {}).get('completed_jobs')} jobs "
        f"{g3.get('read', {}).get('completed_bytes', 0) / 1e9:.0f} GB, cancelled "
        f"{g3.get('read', {}).get('cancelled_jobs')}"
    )
    print(f"fcctl (ideal {mc_doc['ideal_hit_share']:.4f} of blocks):")
    for k in POLICIES:
        p = mc_doc["rates"][0]["policies"][k]
        print(
            f"  {k:12} blocks {p['gpu_hit_share']:.4f}  tokens "
            f"{1 - p['recomputed_tokens'] / tokens:.4f}  TTFT mean {p['ttft_s']['mean']:.2f} s "
            f"p99 {p['ttft_s']['p99']:.2f} s  cancelled {p['cancelled_prefetches']}"
        )


if __name__ == "__main__":
    main()
