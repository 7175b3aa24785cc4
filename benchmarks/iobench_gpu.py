"""The kvikio path of iobench on a GPU machine, beside the posix engine on the same disk.

Runs the default workload (16 sessions x 128 MiB of llama-3.1-8b KV, 2 GiB per layout) once per
engine: ``kvikio`` restoring into CuPy GPU arrays (GDS when the cuFile driver really does it,
KvikIO compat mode otherwise; the result says which), then ``posix`` into host memory. Prints
one summary line per layout and concurrency and writes each JSON document to ``--out``.

    python benchmarks/iobench_gpu.py --out DIR [--engines kvikio,posix] [--sessions 16]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fcctl.common.jsonio import to_jsonable, write_json_file
from fcctl.common.units import parse_int_list
from fcctl.iobench.config import IobenchConfig
from fcctl.iobench.run import run_iobench
from fcctl.layout.engines import probe_engine


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--engines", default="kvikio,posix")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--concurrency", default="1,4,16")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for engine in args.engines.split(","):
        ok, why = probe_engine(engine)
        print(f"probe {engine}: {'ok' if ok else 'NOT usable'}: {why}", flush=True)
        if not ok:
            status = 1
            continue
        config = IobenchConfig(
            engine=engine,
            engine_threads=args.threads,
            sessions=args.sessions,
            tokens=args.tokens,
            concurrency=tuple(parse_int_list(args.concurrency, what="--concurrency")),
        )
        t0 = time.perf_counter()
        result = run_iobench(config, progress=False)
        doc = to_jsonable(result)
        write_json_file(result, args.out / f"iobench-{engine}.json")
        print(
            f"{engine}: {time.perf_counter() - t0:.0f} s; engine {doc['engine']}; "
            f"buffers {doc['provenance']['settings']['restore_buffers']}; "
            f"notes {doc['provenance']['engine_notes']}; fio {doc['fio']}",
            flush=True,
        )
        for layout, runs in doc["layouts"].items():
            for r in runs:
                print(
                    f"  {layout:8s} c{r['concurrency']:<3d} {r['read_commands']:6d} cmds "
                    f"{r['restore_bytes_per_s'] / 1e9:6.2f} GB/s p50 {r['restore_s']['p50']:.3f} s "
                    f"p99 {r['restore_s']['p99']:.3f} s verified {r['verified_bytes']} "
                    f"bad {r['mismatched_blocks']}",
                    flush=True,
                )
        status |= 1 if result.mismatched_blocks else 0
    return status


if __name__ == "__main__":
    raise SystemExit(main())
