"""The tiered-storage baseline: blocks written to bucket files in global LRU eviction order.

Model (Mooncake/LMCache-style "memory in front, SSD behind"):

* A block holds **all layers** of ``block_tokens`` tokens (``layers x piece_bytes``, layer-major
  inside the block); it is the unit the memory tier caches and evicts.
* Turns arrive in the workload's arrival order (sessions interleaved in time). A turn first
  touches its session's earlier blocks still in memory (LRU touch, in block order: the prefix
  is reused), then inserts its new blocks as most recently used.
* When the tier holds more than ``memory_tier_bytes`` the least recently used block leaves it
  and is appended to the current bucket file. A block is written once, when it first leaves
  memory; a later touch of an evicted block would read it from SSD and does not rewrite it (we
  do not model re-admission). At the end the blocks still in memory are flushed in LRU order.
* Bucket files have a fixed capacity (default 256 MiB): ``floor(bucket_bytes / block_bytes)``
  blocks; the last bucket holds only what is left (it is not padded).

So a bucket mixes sessions and one session's blocks scatter over buckets, which is what makes a
layer-wise restore of this layout cost one read per (block, layer) piece.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fcctl.iobench.pattern import fill_pieces, piece_keys
from fcctl.iobench.workload import Workload
from fcctl.layout.planner import Extent

from fcctl.common.errors import FcctlInputError

DEFAULT_BUCKET_BYTES = 256 * 2**20
# The memory tier holds this fraction of the workload by default: small enough that most
# blocks are evicted while sessions are still active, which is the regime the paper studies.
DEFAULT_MEMORY_TIER_FRACTION = 1 / 8


def simulate_eviction(workload: Workload, memory_tier_bytes: int) -> np.ndarray:
    """The order blocks reach SSD: an ``(n, 2)`` int64 array of ``(session, block)`` rows."""
    if memory_tier_bytes < 0:
        raise FcctlInputError(f"--memory-tier: must be >= 0; got {memory_tier_bytes!r}")
    capacity_blocks = memory_tier_bytes // workload.block_bytes
    tier: OrderedDict[tuple[int, int], None] = OrderedDict()
    stored: list[tuple[int, int]] = []
    next_block = [0] * len(workload.sessions)
    for session, turn in workload.arrivals:
        for block in range(next_block[session]):
            key = (session, block)
            if key in tier:
                tier.move_to_end(key)
        added = workload.sessions[session].turn_blocks[turn]
        for block in range(next_block[session], next_block[session] + added):
            tier[(session, block)] = None
        next_block[session] += added
        while len(tier) > capacity_blocks:
            stored.append(tier.popitem(last=False)[0])
    stored.extend(tier.keys())  # the final flush, least recently used first
    return np.array(stored, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class EvictionLayout:
    """Bucket files on disk and where each session's blocks landed."""

    directory: Path
    bucket_files: tuple[Path, ...]
    bucket_bytes: int
    block_bytes: int
    piece_bytes: int
    layers: int
    memory_tier_bytes: int
    # placement[s][b] = (bucket index, slot) of session s's block b.
    placement: tuple[np.ndarray, ...]
    bytes_written: int

    def piece_extents(self, session: int, layer: int) -> list[Extent]:
        """One extent per block of ``session`` at ``layer``, block order; tag ``(s, b, layer)``."""
        where = self.placement[session]
        return [
            Extent(
                str(self.bucket_files[bucket]),
                slot * self.block_bytes + layer * self.piece_bytes,
                self.piece_bytes,
                (session, block, layer),
            )
            for block, (bucket, slot) in enumerate(where.tolist())
        ]

    def sessions_per_bucket(self) -> list[int]:
        seen: list[set[int]] = [set() for _ in self.bucket_files]
        for s, where in enumerate(self.placement):
            for bucket in np.unique(where[:, 0]).tolist():
                seen[bucket].add(s)
        return [len(x) for x in seen]

    def buckets_per_session(self) -> list[int]:
        return [int(np.unique(where[:, 0]).size) for where in self.placement]


def eviction_bytes_needed(workload: Workload) -> int:
    return workload.bytes


def write_eviction_layout(
    workload: Workload,
    directory: Path,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    memory_tier_bytes: int | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> EvictionLayout:
    """Simulate the LRU tier and write its evictions into bucket files under ``directory``."""
    block_bytes = workload.block_bytes
    if bucket_bytes < block_bytes:
        raise FcctlInputError(
            f"--bucket-size: must hold at least one block of {block_bytes} bytes; "
            f"got {bucket_bytes!r}"
        )
    if memory_tier_bytes is None:
        memory_tier_bytes = int(workload.bytes * DEFAULT_MEMORY_TIER_FRACTION)
    order = simulate_eviction(workload, memory_tier_bytes)
    per_bucket = bucket_bytes // block_bytes
    layers = workload.geometry.layers
    layer_ids = np.arange(layers, dtype=np.uint64)
    placement = [np.zeros((s.blocks, 2), dtype=np.int64) for s in workload.sessions]
    files: list[Path] = []
    written = 0
    directory.mkdir(parents=True, exist_ok=True)
    for bucket, start in enumerate(range(0, len(order), per_bucket)):
        rows = order[start : start + per_bucket]
        path = directory / f"bucket-{bucket:05d}.bin"
        files.append(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            # Write in runs of blocks to bound memory; each block is its layers back to back.
            step = max(1, (32 * 2**20) // block_bytes)
            for run in range(0, len(rows), step):
                chunk = rows[run : run + step]
                buf = np.empty(len(chunk) * block_bytes, dtype=np.uint8)
                keys = piece_keys(chunk[:, 0:1], chunk[:, 1:2], layer_ids[None, :]).reshape(-1)
                fill_pieces(buf, keys, workload.piece_bytes)
                view = memoryview(buf)
                while view.nbytes:
                    view = view[os.write(fd, view) :]
                written += buf.nbytes
                if on_bytes is not None:
                    on_bytes(buf.nbytes)
            os.fsync(fd)
        finally:
            os.close(fd)
        for slot, (s, b) in enumerate(rows.tolist()):
            placement[s][b] = (bucket, slot)
    return EvictionLayout(
        directory=directory,
        bucket_files=tuple(files),
        bucket_bytes=bucket_bytes,
        block_bytes=block_bytes,
        piece_bytes=workload.piece_bytes,
        layers=layers,
        memory_tier_bytes=memory_tier_bytes,
        placement=tuple(placement),
        bytes_written=written,
    )
