"""Flat session files vs the eviction-ordered baseline on this machine's disk, fio as the limit.

Runs ``iobench.run_iobench`` once on about 2 GiB per layout (16 sessions x 128 MiB of
llama-3.1-8b KV, 16-token pages, 4 turns each), with fio's sequential reference and both layouts
measured in the same run, alternating, ``--repeat`` times (medians). Prints:

* flat restore at concurrency 16 / fio best sequential direct read (goal >= 0.85);
* eviction read commands / flat read commands (goal >= 10);
* flat / eviction restore-time ratio at concurrency 1 and 16 (below 1: flat is faster).

Usage::

    python benchmarks/iobench_bench.py --repeat 3 [--dir DIR] [--threads N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fcctl.iobench.bench import IobenchConfig, run_iobench  # noqa: E402
from fcctl.reports.iobench_report import render_table  # noqa: E402

from fcctl.common.units import parse_int_list, parse_size  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1024, help="per session (1024 = 128 MiB)")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--threads", type=int, default=None, help="posix reader threads")
    ap.add_argument("--max-command", default=None, help="split flat commands, e.g. 4MiB")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--json", type=Path, default=None, help="also write the JSON document here")
    args = ap.parse_args(argv)

    concurrency = tuple(parse_int_list(args.concurrency, what="--concurrency"))
    config = IobenchConfig(
        directory=args.dir,
        sessions=args.sessions,
        tokens=args.tokens,
        turns=args.turns,
        model=args.model,
        concurrency=concurrency,
        repeat=args.repeat,
        engine_threads=args.threads,
        engine="posix",
        max_command_bytes=parse_size(args.max_command) if args.max_command else None,
        size_limit_bytes=64 * 2**30,
    )
    t0 = time.perf_counter()
    result = run_iobench(config, progress=True)
    elapsed = time.perf_counter() - t0
    render_table(result, width=120)

    hi, lo = max(concurrency), min(concurrency)
    flat_hi, flat_lo = result.run("flat", hi), result.run("flat", lo)
    ev_hi, ev_lo = result.run("eviction", hi), result.run("eviction", lo)
    best = result.fio.seq_read_bytes_per_s
    print()
    print(
        f"workload: {len(result.workload.sessions)} sessions, "
        f"{result.workload.bytes / 2**30:.2f} GiB per layout, repeat {args.repeat}, "
        f"{elapsed:.0f} s in all"
    )
    if best:
        ratio = flat_hi.restore_bytes_per_s / best
        print(
            f"flat restore at concurrency {hi} / fio best sequential read: "
            f"{flat_hi.restore_bytes_per_s / 1e9:.2f} / {best / 1e9:.2f} GB/s = {ratio:.2f} "
            f"(goal >= 0.85: {'met' if ratio >= 0.85 else 'NOT met'})"
        )
        peak = max(r["seq_read_bytes_per_s"] for r in result.fio.samples)
        print(
            f"  against fio's best round ({peak / 1e9:.2f} GB/s): "
            f"{flat_hi.restore_bytes_per_s / peak:.2f}"
        )
    else:
        print(f"fio did not run ({result.fio.reason}); no device reference")
    cmd_ratio = ev_lo.read_commands / flat_lo.read_commands
    print(
        f"eviction / flat read commands: {ev_lo.read_commands} / {flat_lo.read_commands} = "
        f"{cmd_ratio:.1f} (goal >= 10: {'met' if cmd_ratio >= 10 else 'NOT met'})"
    )
    for c, f, e in ((lo, flat_lo, ev_lo), (hi, flat_hi, ev_hi)):
        # Same bytes both sides, so the restore-time ratio is the inverse throughput ratio.
        print(
            f"flat / eviction restore time at concurrency {c}: "
            f"{e.restore_bytes_per_s / f.restore_bytes_per_s:.2f} "
            f"(flat {f.restore_bytes_per_s / 1e9:.2f} GB/s, eviction "
            f"{e.restore_bytes_per_s / 1e9:.2f} GB/s)"
        )
    replay = result.fio.replay_bytes_per_s
    if result.fio.available:
        print(
            f"fio replay of the exact read sequences: flat {replay['flat'] / 1e9:.2f} GB/s, "
            f"eviction {replay['eviction'] / 1e9:.2f} GB/s"
        )
    print(
        "samples (GB/s per repeat): "
        + "; ".join(
            f"{k} {', '.join(f'{v / 1e9:.2f}' for v in vs)}"
            for k, vs in result.provenance["restore_bytes_per_s_samples"].items()
        )
    )
    print(
        "fio best per repeat (GB/s): "
        + ", ".join(
            f"{r['seq_read_bytes_per_s'] / 1e9:.2f} ({r['best_job']})" for r in result.fio.samples
        )
    )
    if args.json:
        args.json.write_text(json.dumps(result.to_json_dict(), indent=2) + "\n")
    return 1 if result.mismatched_blocks else 0


if __name__ == "__main__":
    raise SystemExit(main())
