"""The tiered baseline on disk: bucket files written in the order the tiered model gives.

The model (host-memory LRU tier, eviction order, fixed-size buckets recycled first-in
first-out) is :mod:`fcctl.analyzers.kvmodel.tiered`; this module only writes its buckets. Inside a
bucket each block is its layers back to back (``layers x piece_bytes``, layer-major), so a
layer-wise restore of this layout costs one read per (block, layer) piece.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fcctl.analyzers.kvmodel.tiered import DEFAULT_BUCKET_BYTES, BucketPlacement, place_in_buckets
from fcctl.layout.planner import Extent

from .pattern import fill_pieces, piece_keys
from .workload import IoWorkload

# Blocks are written in runs of about this many bytes, to bound the buffer whatever the bucket.
_WRITE_RUN_BYTES = 32 * 2**20


@dataclass(frozen=True)
class EvictionLayout:
    """Bucket files on disk and the model's placement of every session's blocks in them."""

    directory: Path
    bucket_files: tuple[Path, ...]
    buckets: BucketPlacement
    piece_bytes: int
    layers: int
    bytes_written: int

    @property
    def block_bytes(self) -> int:
        return self.buckets.block_bytes

    @property
    def memory_tier_bytes(self) -> int:
        return self.buckets.memory_tier_bytes

    def piece_extents(self, session: int, layer: int) -> list[Extent]:
        """One extent per block of ``session`` at ``layer``, block order; tag ``(s, b, layer)``."""
        where = self.buckets.placement[session]
        return [
            Extent(
                str(self.bucket_files[bucket]),
                slot * self.block_bytes + layer * self.piece_bytes,
                self.piece_bytes,
                (session, block, layer),
            )
            for block, (bucket, slot) in enumerate(where.tolist())
        ]


def eviction_bytes_needed(workload: IoWorkload) -> int:
    """Bytes the buckets take: exactly the workload's KV bytes (no headers, no padding)."""
    return workload.bytes


def _write_bucket(
    path: Path, rows: np.ndarray, workload: IoWorkload, on_bytes: Callable[[int], None] | None
) -> int:
    """Write the blocks ``rows`` (``(session, block)``) into a new file ``path``, fsynced."""
    block_bytes = workload.block_bytes
    layer_ids = np.arange(workload.geometry.layers, dtype=np.uint64)
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        step = max(1, _WRITE_RUN_BYTES // block_bytes)
        # One buffer for every run of this bucket (the last run uses its start).
        run_buf = np.empty(min(step, max(len(rows), 1)) * block_bytes, dtype=np.uint8)
        for run in range(0, len(rows), step):
            chunk = rows[run : run + step]
            buf = run_buf[: len(chunk) * block_bytes]
            keys = piece_keys(chunk[:, 0:1], chunk[:, 1:2], layer_ids[None, :]).reshape(-1)
            fill_pieces(buf, keys, workload.piece_bytes)
            view = buf.data  # memoryview(buf), typed: numpy's stubs lack ndarray.__buffer__
            while view.nbytes:
                view = view[os.write(fd, view) :]
            written += buf.nbytes
            if on_bytes is not None:
                on_bytes(buf.nbytes)
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def write_eviction_layout(
    workload: IoWorkload,
    directory: Path,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    memory_tier_bytes: int | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> EvictionLayout:
    """Run the tiered model over ``workload`` and write its buckets under ``directory``."""
    buckets = place_in_buckets(
        workload.schedule,
        block_bytes=workload.block_bytes,
        bucket_bytes=bucket_bytes,
        memory_tier_bytes=memory_tier_bytes,
    )
    directory.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    written = 0
    for bucket in range(buckets.buckets):
        path = directory / f"bucket-{bucket:05d}.bin"
        files.append(path)
        written += _write_bucket(path, buckets.bucket_rows(bucket), workload, on_bytes)
    return EvictionLayout(
        directory=directory,
        bucket_files=tuple(files),
        buckets=buckets,
        piece_bytes=workload.piece_bytes,
        layers=workload.geometry.layers,
        bytes_written=written,
    )
