"""What a workload costs before anything is allocated: bytes on disk and bytes of memory.

A run's memory is the restore buffer pool (``iobench.restore.BufferPool``: bounded by the
highest concurrency and a budget, not by the workload), the writers' buffers (bounded too) and
the plans and expected-content tables, which grow with the pieces and commands the restores
issue. The per-item figures below are about twice what ``tracemalloc`` measured for the restore
plans (eviction 489 bytes per piece, flat 800 per (turn, layer) range, on a 20-session,
8-layer workload), so the estimate errs high.

:func:`check_synthetic_size` runs on the flags alone, before the schedule is built, so
``--sessions 100000000`` is refused at once with what it would need instead of allocating a
hundred million sessions first; :func:`check_fits_machine` refuses any workload whose estimate
exceeds this machine's memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fcctl.common.errors import FcctlInputError
from fcctl.common.units import format_bytes
from fcctl.layout.alignment import PAGE_BYTES
from fcctl.layout.geometry import KvGeometry
from fcctl.layout.session_format import DATA_START, file_bytes

from .config import IobenchConfig
from .restore import pool_slots
from .workload import IoWorkload

# Bytes of Python objects per item, about twice the measured figures (module docstring).
SESSION_BYTES = 2_000  # schedule entry, restore object, per-session lists
TURN_LAYER_BYTES = 1_500  # flat: extent, placement, read command, expected run per (turn, layer)
PIECE_BYTES = 1_200  # eviction: extent, command, placement, expected key per (block, layer)
# The interpreter with numpy, polars and the core imported.
BASE_BYTES = 200 * 2**20
# The writers' buffers: the eviction writer's run buffer and the open session files' scratch.
WRITE_BUFFER_BYTES = 64 * 2**20
# fio iologs take about this many bytes per read command (the free-space check counts them).
IOLOG_BYTES_PER_COMMAND = 80


@dataclass(frozen=True)
class WorkloadSize:
    """``kv_bytes`` per layout; ``disk_bytes`` everything the run writes; ``memory_bytes`` the
    estimated peak memory of the run (an upper bound)."""

    kv_bytes: int
    disk_bytes: int
    memory_bytes: int

    def describe(self) -> str:
        return (
            f"{self.kv_bytes} bytes ({format_bytes(self.kv_bytes)}) of KV per layout, "
            f"{format_bytes(self.disk_bytes)} on disk and about "
            f"{format_bytes(self.memory_bytes)} of memory"
        )


def estimate(
    *,
    sessions: int,
    turns: int,
    largest_session_bytes: int,
    largest_session_turns: int,
    kv_bytes: int,
    flat_file_bytes: int,
    layers: int,
    pieces: int,
    config: IobenchConfig,
) -> WorkloadSize:
    """The estimate from counts: ``turns`` (session, turn) pairs in all, ``pieces`` = blocks x
    layers, ``kv_bytes`` per layout. Python integers: absurd counts stay exact."""
    layouts = config.layouts
    disk = 0
    memory = BASE_BYTES + WRITE_BUFFER_BYTES + SESSION_BYTES * sessions
    if "flat" in layouts:
        disk += flat_file_bytes
        memory += TURN_LAYER_BYTES * turns * layers
    if "eviction" in layouts:
        disk += kv_bytes
        memory += PIECE_BYTES * pieces
    # fio iologs: at most one command per piece per layout (as iobench.run.bytes_needed).
    disk += IOLOG_BYTES_PER_COMMAND * pieces * len(layouts)
    # One pool slot holds the largest session, each (turn, layer) range padded to the page.
    slot = largest_session_bytes + layers * largest_session_turns * PAGE_BYTES
    concurrency = min(max(config.concurrency), max(sessions, 1))
    memory += pool_slots(slot, sessions, concurrency, config.restore_buffer_budget_bytes) * slot
    return WorkloadSize(kv_bytes, disk, memory)


def synthetic_size(geometry: KvGeometry, config: IobenchConfig) -> WorkloadSize:
    """The size of the synthetic workload ``config`` describes, from the flags alone."""
    pages = config.tokens // config.block_tokens
    # The turns split the pages evenly (analyzers.kvmodel.turns.even_turn_blocks): ``extra`` turns
    # of
    # ``q + 1`` pages, the rest of ``q``. Counted, not listed: --turns may be absurd too.
    q, extra = divmod(pages, config.turns)

    def segment(blocks: int) -> int:
        return file_bytes(geometry, config.block_tokens, (blocks,)) - DATA_START

    flat_per_session = DATA_START + extra * segment(q + 1) + (config.turns - extra) * segment(q)
    block_bytes = geometry.layers * geometry.bytes_per_block_per_layer(config.block_tokens)
    session_bytes = pages * block_bytes
    return estimate(
        sessions=config.sessions,
        turns=config.sessions * config.turns,
        largest_session_bytes=session_bytes,
        largest_session_turns=config.turns,
        kv_bytes=config.sessions * session_bytes,
        flat_file_bytes=config.sessions * flat_per_session,
        layers=geometry.layers,
        pieces=config.sessions * pages * geometry.layers,
        config=config,
    )


def workload_size(workload: IoWorkload, config: IobenchConfig) -> WorkloadSize:
    """The size of a built workload (a trace's, after scaling)."""
    from .flat import flat_bytes_needed

    sessions = workload.sessions
    largest = max(sessions, key=lambda s: s.blocks, default=None)
    return estimate(
        sessions=len(sessions),
        turns=sum(s.turns for s in sessions),
        largest_session_bytes=0 if largest is None else largest.blocks * workload.block_bytes,
        largest_session_turns=max((s.turns for s in sessions), default=0),
        kv_bytes=workload.bytes,
        flat_file_bytes=flat_bytes_needed(workload) if "flat" in config.layouts else 0,
        layers=workload.geometry.layers,
        pieces=workload.blocks * workload.geometry.layers,
        config=config,
    )


def check_synthetic_size(geometry: KvGeometry, config: IobenchConfig) -> None:
    """Refuse a synthetic workload over ``--size-limit``, naming the flag values that fit."""
    if min(config.sessions, config.tokens, config.turns, config.block_tokens) < 1:
        return  # the schedule's own checks name the flag
    pages = config.tokens // config.block_tokens
    if pages < config.turns:
        return  # likewise ("--tokens: 4 turns need at least ...")
    size = synthetic_size(geometry, config)
    limit = config.size_limit_bytes
    if size.kv_bytes > limit:
        session_bytes = size.kv_bytes // config.sessions
        block_bytes = session_bytes // pages
        fits_sessions = limit // session_bytes
        fits_pages = limit // config.sessions // block_bytes
        options = []
        if fits_sessions >= 1:
            options.append(f"`sessions` to at most {fits_sessions}")
        if fits_pages >= config.turns:
            options.append(f"`tokens` to at most {fits_pages * config.block_tokens}")
        lower = f"lower {', or '.join(options)}, or " if options else ""
        raise FcctlInputError(
            f"size_limit_bytes: the synthetic workload needs {size.describe()} "
            f"({config.sessions} sessions x {pages} pages x {block_bytes} bytes); "
            f"{lower}raise `size_limit_bytes` to at least {size.kv_bytes}; "
            f"got {limit!r}",
            parameter="size_limit_bytes",
        )
    check_fits_machine(size)


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo (what can be allocated without swapping), else the
    physical memory; None when neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def check_fits_machine(size: WorkloadSize) -> None:
    """Refuse a workload whose memory estimate exceeds this machine's available memory."""
    have = available_memory_bytes()
    if have is not None and size.memory_bytes > have:
        raise FcctlInputError(
            f"sessions: the workload is too large for this machine: it needs "
            f"{size.describe()}, and {format_bytes(have)} of memory is available; "
            f"lower `sessions`, `tokens` or `size_limit_bytes`; got {size.memory_bytes} bytes "
            "of memory needed",
            parameter="sessions",
        )
