"""Peak memory and time of session amplification on a whole trace (issue #33, item 3).

    /usr/bin/time -v python3 benchmarks/amplify_memory.py TRACE [--amplify 8] [--model M]

Reads the trace, builds its simulation workload (the reference: what a replay holds without
amplification), then amplifies it K-fold. Prints each stage's peak RSS (VmHWM) and time, the
ratio of the amplified stage's peak to the workload's, and :func:`amplified_bytes`' estimate
beside the measured growth (the estimate also counts one simulation, which this does not run).
"""

from __future__ import annotations

import argparse
import time

from fcctl import api
from fcctl.analyzers.replay import PRESETS, simulation_workload
from fcctl.analyzers.replay.amplify import amplified_bytes, amplify_workload


def vm_hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace")
    parser.add_argument("--amplify", type=int, default=8)
    parser.add_argument("--model", default="llama-3.1-8b")
    args = parser.parse_args()
    t0 = time.perf_counter()
    trace = api.read_trace(args.trace)
    w = simulation_workload(trace, api.geometry(args.model), PRESETS["h200-8x"])
    del trace
    t1 = time.perf_counter()
    base_peak = vm_hwm_bytes()
    a = amplify_workload(w, args.amplify)
    t2 = time.perf_counter()
    peak = vm_hwm_bytes()
    gib = 1 << 30
    print(f"trace {args.trace}: {w.requests:,} requests, {w.block_accesses:,} accesses")
    print(f"workload: {t1 - t0:.1f} s, peak {base_peak / gib:.2f} GiB")
    print(
        f"amplified {args.amplify}x: {a.sessions:,} sessions, {a.block_accesses:,} accesses, "
        f"{a.num_blocks:,} distinct blocks; {t2 - t1:.1f} s, peak {peak / gib:.2f} GiB "
        f"({peak / base_peak:.2f}x the workload's peak); growth {(peak - base_peak) / gib:.2f} "
        f"GiB; estimate with one simulation {amplified_bytes(w, args.amplify) / gib:.2f} GiB"
    )


if __name__ == "__main__":
    main()
