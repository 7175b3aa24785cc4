"""What durability costs the store (issue #35, items 2-3), each beside its reference in one run.

* **Write**: ``FlatStore.write_turn`` to SSD (the turn's tag record appended and synced before
  the turn commits) against ``SessionFile.append_turn`` alone (the core's writer, the same
  bytes, no tag): seconds per turn and the ratio.
* **Whole turn in pieces**: one turn written as ``pieces`` extensions (``final=False``, as
  vLLM stores a request's blocks step by step) and sealed, against the same turn in one call.
* **Restart**: ``FlatStore.open`` recovering every session (records, checksums, tags) against
  opening and validating each session file with ``SessionFile.open`` (what recovery cannot do
  with less), and the turns recovered.

Run: ``python3 benchmarks/store_durability.py [--sessions 64] [--turns 4] [--turn-kib 512]
[--pieces 16] [--dir DIR]`` (default: a temporary directory on the system disk). Prints one
line per figure; the numbers go to docs/benchmarks.md with the command.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fcctl.layout import FlatStore, KvGeometry
from fcctl.layout.placement import Medium
from fcctl.layout.session_file import SessionFile

GEOMETRY = KvGeometry("bench", layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
BLOCK = 16


def _store(directory: Path, now: float) -> FlatStore:
    return FlatStore.open(
        directory, GEOMETRY, block_tokens=BLOCK, host_bytes=0, ssd_bytes=1 << 50, now_s=now
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-kib", type=int, default=512, help="KV bytes per turn per layer")
    ap.add_argument("--pieces", type=int, default=16)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    per_token = GEOMETRY.bytes_per_block_per_layer(BLOCK) // BLOCK
    tokens = max(BLOCK, (args.turn_kib << 10) // per_token // BLOCK * BLOCK)
    root = Path(tempfile.mkdtemp(prefix="fcctl-durability-", dir=args.dir))
    try:
        store = _store(root / "store", 0.0)
        kv = np.random.default_rng(0).integers(
            0, 256, (GEOMETRY.layers, store.layer_bytes_for(tokens)), dtype=np.uint8
        )
        print(
            f"turn: {tokens} tokens, {kv.nbytes / 2**20:.1f} MiB over {GEOMETRY.layers} layers; "
            f"{args.sessions} sessions x {args.turns} turns"
        )
        # Write, interleaved per turn so both see the same disk state.
        ours, plain = [], []
        files = [
            SessionFile.create(root / f"plain-{s}.fccio", GEOMETRY, block_tokens=BLOCK)
            for s in range(args.sessions)
        ]
        for turn in range(args.turns):
            for s in range(args.sessions):
                t0 = time.perf_counter()
                store.write_turn(
                    f"s{s}", turn, kv, tokens=tokens, medium=Medium.SSD, now_s=1.0, tag=b"k" * 64
                )
                t1 = time.perf_counter()
                files[s].append_turn(tokens, kv)
                t2 = time.perf_counter()
                ours.append(t1 - t0)
                plain.append(t2 - t1)
        for f in files:
            f.close()
        a, b = statistics.median(ours), statistics.median(plain)
        print(
            f"write: FlatStore.write_turn {a * 1e3:.1f} ms/turn, SessionFile.append_turn "
            f"{b * 1e3:.1f} ms/turn (medians of {len(ours)}); ratio {a / b:.2f}"
        )
        # A turn in pieces against one call.
        pieces = max(1, min(args.pieces, tokens // BLOCK))  # whole pages each
        piece_tokens = tokens // pieces // BLOCK * BLOCK
        piece = kv[:, : store.layer_bytes_for(piece_tokens)]
        whole = np.concatenate([piece] * pieces, axis=1)
        pieced, single = [], []
        for rep in range(8):
            t0 = time.perf_counter()
            for p in range(pieces):
                store.write_turn(
                    f"p{rep}",
                    0,
                    piece,
                    tokens=piece_tokens,
                    medium=Medium.SSD,
                    now_s=2.0,
                    final=p == pieces - 1,
                )
            t1 = time.perf_counter()
            store.write_turn(
                f"w{rep}",
                0,
                whole,
                tokens=piece_tokens * pieces,
                medium=Medium.SSD,
                now_s=2.0,
            )
            t2 = time.perf_counter()
            pieced.append(t1 - t0)
            single.append(t2 - t1)
        a, b = statistics.median(pieced), statistics.median(single)
        print(
            f"whole turn: {pieces} pieces {a * 1e3:.1f} ms, one call {b * 1e3:.1f} ms "
            f"(medians of 8); ratio {a / b:.2f}"
        )
        store.close()
        # Restart. The reference opens every file first (reading them into the page cache),
        # then both run warm: the comparison is of the work, not of the disk.
        paths = sorted((root / "store").glob("*.fccio"))

        def open_each() -> float:
            t0 = time.perf_counter()
            for path in paths:
                with SessionFile.open(path):
                    pass
            return time.perf_counter() - t0

        cold = open_each()
        t0 = time.perf_counter()
        again = _store(root / "store", 3.0)
        open_s = time.perf_counter() - t0
        recovered = again.recovery
        again.close()
        warm = open_each()
        print(
            f"restart: FlatStore.open {open_s:.3f} s ({len(recovered.sessions)} sessions, "
            f"{recovered.turns} turns, {recovered.ssd_bytes / 2**30:.2f} GiB), "
            f"SessionFile.open of each {warm:.3f} s warm ({cold:.3f} s cold); "
            f"ratio {open_s / warm:.2f}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
