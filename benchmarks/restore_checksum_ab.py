"""Flat restore with layer checksums, in one process: overlapped, inside each read, off (and an
older core, if given), alternating on the same files.

Separate ``iobench_bench.py`` runs minutes apart on a shared machine measure the neighbours as
much as the change; this one writes 2 GiB of llama-3.1-8b session files once (16 sessions x
128 MiB, 4 turns) and restores them cold with each setting in turn, ``--rounds`` times, the
order reversed every other round, and prints medians (GB/s) per concurrency with the load.

Usage::

    python benchmarks/restore_checksum_ab.py [--rounds 5] [--dir DIR]
        [--old-layout DIR]   # e.g. git archive d347972 layout | tar -x -C /tmp/old-core;
                             # then --old-layout /tmp/old-core/layout
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fcctl.iobench.flat import write_flat_layout  # noqa: E402
from fcctl.iobench.restore import allocate_pool, flat_restores, run_restore  # noqa: E402
from fcctl.iobench.workload import synthetic_io_workload  # noqa: E402
from fcctl.layout.engines import PosixEngine, drop_file_cache  # noqa: E402
from fcctl.layout.geometry import model_geometry  # noqa: E402


def _old_engine(layout_dir: Path) -> Callable[[], Any]:
    """The posix engine of another copy of the core, imported under another name (the core
    uses relative imports only, so a copy imports itself)."""
    link_dir = Path(tempfile.mkdtemp(prefix="old-core-"))
    (link_dir / "layout_old").symlink_to(layout_dir.resolve())
    sys.path.insert(0, str(link_dir))
    engines = importlib.import_module("layout_old.engines")
    return lambda: engines.PosixEngine(threads=8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--old-layout", type=Path, default=None, help="an older copy of layout/")
    ap.add_argument("--concurrency", default="1,4,16")
    args = ap.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]

    # (engine factory, overlap_checksums, checksums expected verified)
    modes: dict[str, tuple[Callable[[], Any], bool, bool]] = {}
    if args.old_layout is not None:
        modes["old core: checks inside each read"] = (_old_engine(args.old_layout), True, True)
    modes["checks inside each read"] = (lambda: PosixEngine(threads=8), False, True)
    modes["check of layer l during read of l+1"] = (lambda: PosixEngine(threads=8), True, True)
    modes["checksums off"] = (lambda: PosixEngine(threads=8, verify=False), True, False)

    wl = synthetic_io_workload(
        model_geometry("llama-3.1-8b"), block_tokens=16, sessions=16, tokens=1024, turns=4
    )
    root = Path(tempfile.mkdtemp(prefix="restore-ab-", dir=args.dir))
    try:
        written = write_flat_layout(wl, root / "flat")
        restores = flat_restores(wl, written)
        pool = allocate_pool(restores, concurrency=max(levels))

        def drop() -> None:
            for f in written.session_files:
                drop_file_cache(f)

        got: dict[tuple[str, int], list[float]] = {(m, c): [] for m in modes for c in levels}
        loads = [os.getloadavg()[0]]
        for r in range(args.rounds):
            order = list(modes.items()) if r % 2 == 0 else list(modes.items())[::-1]
            for c in levels:
                for name, (make, overlap, verified) in order:
                    engine = make()
                    try:
                        run = run_restore(
                            "flat",
                            restores,
                            pool,
                            engine,
                            concurrency=c,
                            piece_bytes=wl.piece_bytes,
                            drop_cache=drop,
                            overlap_checksums=overlap,
                        )
                    finally:
                        engine.close()
                    if run.mismatched_blocks or run.checksums_verified != verified:
                        print(f"{name}: unexpected result {run}", file=sys.stderr)
                        return 1
                    got[(name, c)].append(run.restore_bytes_per_s / 1e9)
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"{wl.bytes / 2**30:.2f} GiB, {args.rounds} rounds, medians in GB/s (samples)")
    print("1-min load average at the start and after each round:", *(f"{x:.1f}" for x in loads))
    for name in modes:
        cells = "  ".join(
            f"c{c} {statistics.median(got[(name, c)]):.2f} "
            f"({', '.join(f'{x:.2f}' for x in got[(name, c)])})"
            for c in levels
        )
        print(f"{name:38s} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
