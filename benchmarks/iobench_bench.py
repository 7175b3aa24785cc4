"""Flat session files vs the eviction-ordered baseline on this machine's disk, fio as the limit.

Runs ``iobench.run_iobench`` once on about 2 GiB per layout (16 sessions x 128 MiB of
llama-3.1-8b KV, 16-token pages, 4 turns each), with fio's sequential reference and both layouts
measured in the same run, alternating, ``--repeat`` times (medians). Prints:

* flat restore at concurrency 16 / fio best sequential direct read (goal >= 0.85);
* eviction read commands / flat read commands (goal >= 10);
* flat / eviction restore-time ratio at concurrency 1 and 16 (below 1: flat is faster).

Usage::

    python benchmarks/iobench_bench.py --repeat 3 [--dir DIR] [--threads N] [--json FILE]
        [--layout flat] [--no-verify-checksums]

Flat layer checksums are verified inside the timed region unless ``--no-verify-checksums``
(run it both ways to see what verification costs on this disk).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fcctl.common.jsonio import write_json_file  # noqa: E402
from fcctl.common.units import parse_int_list, parse_size  # noqa: E402
from fcctl.iobench.config import IobenchConfig  # noqa: E402
from fcctl.iobench.run import run_iobench  # noqa: E402
from fcctl.layout.geometry import model_geometry  # noqa: E402
from fcctl.reports.iobench_report import print_summary  # noqa: E402


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
    ap.add_argument("--layout", default="both", help="flat, eviction or both")
    ap.add_argument(
        "--no-verify-checksums",
        dest="verify_checksums",
        action="store_false",
        help="restore flat files without checking their layer checksums",
    )
    args = ap.parse_args(argv)

    concurrency = tuple(parse_int_list(args.concurrency, what="--concurrency"))
    config = IobenchConfig(
        directory=args.dir,
        sessions=args.sessions,
        tokens=args.tokens,
        turns=args.turns,
        geometry=model_geometry(args.model),
        concurrency=concurrency,
        repeat=args.repeat,
        engine_threads=args.threads,
        engine="posix",
        max_command_bytes=parse_size(args.max_command) if args.max_command else None,
        size_limit_bytes=64 * 2**30,
        layout=args.layout,
        verify_checksums=args.verify_checksums,
    )
    t0 = time.perf_counter()
    result = run_iobench(config, progress=True)
    elapsed = time.perf_counter() - t0
    print_summary(result, width=120)

    # The headline ratios are the result's own comparisons (the JSON's "comparisons"), so
    # this script, the table and the JSON cannot disagree.
    comp = result.comparisons
    hi = max(concurrency)
    flat_hi = result.run("flat", hi)
    fio = result.fio
    print()
    print(
        f"workload: {result.workload.sessions} sessions, "
        f"{result.workload.bytes / 2**30:.2f} GiB per layout, repeat {args.repeat}, "
        f"{elapsed:.0f} s in all"
    )
    checks = result.checksums
    print(
        "flat layer checksums in the timed region: "
        + ("on" if checks.verified else f"off ({checks.off_reason or 'flat not run'})")
    )
    if comp.flat_over_fio_seq is not None and flat_hi is not None and fio.seq_read_bytes_per_s:
        ratio = comp.flat_over_fio_seq.ratio or 0.0
        print(
            f"flat restore at concurrency {comp.flat_over_fio_seq.concurrency} / fio best "
            f"sequential read: {flat_hi.restore_bytes_per_s / 1e9:.2f} / "
            f"{fio.seq_read_bytes_per_s / 1e9:.2f} GB/s = {ratio:.2f} "
            f"(goal >= 0.85: {'met' if ratio >= 0.85 else 'NOT met'})"
        )
        peak = max(r.seq_read_bytes_per_s for r in fio.rounds)
        print(
            f"  against fio's best round ({peak / 1e9:.2f} GB/s): "
            f"{flat_hi.restore_bytes_per_s / peak:.2f}"
        )
    else:
        print(f"fio did not run ({fio.reason}); no device reference")
    commands = comp.eviction_over_flat_read_commands
    if commands is not None and commands.ratio is not None:
        c = commands.concurrency
        ev, fl = result.run("eviction", c), result.run("flat", c)
        if ev is None or fl is None:  # the comparison exists only when both ran
            raise RuntimeError(f"comparison at concurrency {c} without both layouts' runs")
        print(
            f"eviction / flat read commands: {ev.read_commands} / {fl.read_commands} = "
            f"{commands.ratio:.1f} (goal >= 10: {'met' if commands.ratio >= 10 else 'NOT met'})"
        )
    times = comp.flat_over_eviction_restore_time
    for r in (times[0], times[-1]) if len(times) > 1 else times:
        f, e = result.run("flat", r.concurrency), result.run("eviction", r.concurrency)
        if f is None or e is None:
            raise RuntimeError(f"comparison at concurrency {r.concurrency} without both runs")
        ratio_text = "-" if r.ratio is None else f"{r.ratio:.2f}"
        print(
            f"flat / eviction restore time at concurrency {r.concurrency}: {ratio_text} "
            f"(flat {f.restore_bytes_per_s / 1e9:.2f} GB/s, eviction "
            f"{e.restore_bytes_per_s / 1e9:.2f} GB/s)"
        )
    replay = fio.replay_bytes_per_s
    if fio.available and replay["flat"] is not None and replay["eviction"] is not None:
        print(
            f"fio replay of the exact read sequences: flat {replay['flat'] / 1e9:.2f} GB/s, "
            f"eviction {replay['eviction'] / 1e9:.2f} GB/s"
        )
    print(
        "samples (GB/s per repeat): "
        + "; ".join(
            f"{name}@{r.concurrency} {', '.join(f'{v / 1e9:.2f}' for v in r.samples_bytes_per_s)}"
            for name, runs in result.layouts.items()
            for r in runs
        )
    )
    print(
        "fio best per repeat (GB/s): "
        + ", ".join(f"{r.seq_read_bytes_per_s / 1e9:.2f} ({r.best_job})" for r in fio.rounds)
    )
    if args.json:
        write_json_file(result, args.json)
    return 1 if result.mismatched_blocks else 0


if __name__ == "__main__":
    raise SystemExit(main())
