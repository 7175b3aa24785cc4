"""Cold, layer-wise restores of every session at concurrency K, every byte verified.

One *run* restores all sessions of one layout: K worker threads each take the next session and
read it layer by layer (one :class:`~layout.planner.ReadPlan` per layer, all turns), the way a
layer-wise prefill consumes it. Before a run every file of the layout is fsynced and dropped
from the page cache (the posix engine also reads with O_DIRECT).

* ``flat``: the session file's per-layer plans from the planner (default 64 KiB gap), so one
  command per (turn, layer) range, split at ``max_command_bytes`` when set.
* ``eviction``: one command per (block, layer) piece, as the tiered baseline reads them
  (``gap_bytes=0`` and ``max_command_bytes`` = the piece, so pieces are never merged).

Two checks. Inside the timed region the engine verifies each flat layer range against the
CRC-32 the session file stores (``verify`` on the engine; what a real restore pays), unless
verification is off. Into host buffers the check of layer ``l`` runs on a small thread pool
while layer ``l + 1`` is read (``overlap_checksums``; at most one check in flight per session,
as a real engine prefetches the next layer while the GPU works on the current one), and a
session's clock stops only after its last check: the check stays inside the timed region and
a mismatch still stops the run, naming the file, turn and layer. After the timed region every
byte read into a placement is checked against the block pattern (``iobench.pattern``), so the
figures are I/O (and checksum) figures, not numpy's; a mismatching piece counts in
``mismatched_blocks``.

Memory is bounded by a :class:`BufferPool` of reused destinations, not by the workload: a run
restores its sessions in waves of ``pool.slots`` sessions (one wave when all fit), each wave
timed on its own (buffers zeroed and caches dropped before its clock starts, the pattern
checked after it stops) and the run's wall time is the sum of its waves'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from fcctl.layout.alignment import PAGE_BYTES, align_up
from fcctl.layout.buffers import aligned_buffer
from fcctl.layout.engines import DeferredVerifyEngine, ReadEngine, ReadResult, Verification
from fcctl.layout.planner import ReadPlan, plan_reads
from fcctl.layout.session_file import SessionFile

from .config import RESTORE_BUFFER_BUDGET_BYTES
from .eviction import EvictionLayout
from .flat import FlatLayout
from .pattern import mismatched_pieces, piece_keys
from .workload import IoWorkload


@dataclass(frozen=True)
class ExpectedRun:
    """``keys`` are the pieces expected back to back from ``buffer_offset`` of a layer's buffer."""

    buffer_offset: int
    keys: np.ndarray


@dataclass(frozen=True)
class SessionRestore:
    """Everything one session's restore needs: a plan per layer and what each must return."""

    session: int
    plans: tuple[ReadPlan, ...]
    expected: tuple[tuple[ExpectedRun, ...], ...]  # per layer
    layer_base: tuple[int, ...]  # each layer's start in the session's buffer (page-aligned)
    buffer_bytes: int

    @property
    def read_commands(self) -> int:
        return sum(p.read_commands for p in self.plans)

    @property
    def bytes_requested(self) -> int:
        return sum(p.bytes_requested for p in self.plans)

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.plans)


def _session_restore(
    session: int, plans: Sequence[ReadPlan], expected: Sequence[Sequence[ExpectedRun]]
) -> SessionRestore:
    base, at = [], 0
    for plan in plans:
        base.append(at)
        at += align_up(plan.buffer_bytes)
    return SessionRestore(session, tuple(plans), tuple(tuple(e) for e in expected), tuple(base), at)


def _runs_from_placements(
    plan: ReadPlan, keys_of: Callable[[object], np.ndarray], piece_bytes: int
) -> list[ExpectedRun]:
    """Group placements that sit back to back in the buffer into one run of keys."""
    items = sorted(((at, keys_of(ext.tag)) for ext, at in plan.placements), key=lambda x: x[0])
    runs: list[ExpectedRun] = []
    start, chunks, end = None, [], None
    for at, keys in items:
        if start is not None and at == end:
            chunks.append(keys)
        else:
            if start is not None:
                runs.append(ExpectedRun(start, np.concatenate(chunks)))
            start, chunks = at, [keys]
        end = at + keys.size * piece_bytes
    if start is not None:
        runs.append(ExpectedRun(start, np.concatenate(chunks)))
    return runs


def flat_restores(
    workload: IoWorkload,
    layout: FlatLayout,
    *,
    gap_bytes: int = 64 * 1024,
    max_command_bytes: int | None = None,
    align: int = PAGE_BYTES,
) -> list[SessionRestore]:
    out = []
    for spec, path in zip(workload.sessions, layout.session_files, strict=True):
        with SessionFile.open(path) as sf:
            plans = sf.restore_plans(
                gap_bytes=gap_bytes, max_command_bytes=max_command_bytes, align=align
            )
            first_block = [rec.token_start // workload.block_tokens for rec in sf.turns]
            blocks = [rec.blocks for rec in sf.turns]

        def keys_of(
            tag: object,
            _s: int = spec.index,
            _first: list[int] = first_block,
            _n: list[int] = blocks,
        ) -> np.ndarray:
            # SessionFile.layer_extents tags each extent (turn, layer).
            turn, layer = cast(tuple[int, int], tag)
            ids = np.arange(_first[turn], _first[turn] + _n[turn], dtype=np.uint64)
            return piece_keys(_s, ids, layer)

        expected = [_runs_from_placements(p, keys_of, workload.piece_bytes) for p in plans]
        out.append(_session_restore(spec.index, plans, expected))
    return out


def eviction_restores(
    workload: IoWorkload, layout: EvictionLayout, *, align: int = PAGE_BYTES
) -> list[SessionRestore]:
    out = []
    piece = workload.piece_bytes
    # Never merge two pieces: each (block, layer) is its own read, as the baseline issues them.
    step = piece if piece % align == 0 else None
    for spec in workload.sessions:
        plans = [
            plan_reads(
                layout.piece_extents(spec.index, layer),
                gap_bytes=0,
                max_command_bytes=step,
                align=align,
            )
            for layer in range(workload.geometry.layers)
        ]

        def keys_of(tag: object) -> np.ndarray:
            # EvictionLayout.piece_extents tags each extent (session, block, layer).
            s, b, layer = cast(tuple[int, int, int], tag)
            return piece_keys(s, np.uint64(b), layer).reshape(1)

        expected = [_runs_from_placements(p, keys_of, piece) for p in plans]
        out.append(_session_restore(spec.index, plans, expected))
    return out


# Memory is bounded by the pool (max(highest concurrency x largest session, the budget)),
# not by the workload.


@dataclass(frozen=True)
class BufferPool:
    """``len(buffers)`` page-aligned, pre-faulted destinations of ``slot_bytes`` each.

    One session's restore goes into one buffer; a run of more sessions than buffers restores
    them in waves (``iobench.restore.run_restore``).
    """

    buffers: tuple[Any, ...]
    slot_bytes: int

    @property
    def slots(self) -> int:
        return len(self.buffers)

    @property
    def nbytes(self) -> int:
        return self.slots * self.slot_bytes


def pool_slots(
    slot_bytes: int,
    sessions: int,
    concurrency: int,
    budget_bytes: int = RESTORE_BUFFER_BUDGET_BYTES,
) -> int:
    """Buffers a pool needs: at least ``concurrency`` (every worker busy), more while they fit
    ``budget_bytes`` (fewer waves), never more than ``sessions``."""
    fit = budget_bytes // max(slot_bytes, 1)
    return max(1, min(sessions, max(concurrency, fit)))


def allocate_pool(
    restores: Sequence[SessionRestore],
    *,
    concurrency: int,
    gpu: bool = False,
    budget_bytes: int = RESTORE_BUFFER_BUDGET_BYTES,
) -> BufferPool:
    """Destinations for restoring ``restores`` (of every layout) at up to ``concurrency``.

    Host buffers come from the core's :func:`~fcctl.layout.buffers.aligned_buffer` (page-aligned
    for O_DIRECT) and are pre-faulted here, before any clock starts. ``gpu=True`` allocates CuPy
    device arrays instead (the kvikio engine then reads into GPU memory, as a restore into a KV
    cache would); they are copied to the host for the pattern check, after the timed region.
    """
    slot = max((r.buffer_bytes for r in restores), default=0)
    sessions = max((r.session for r in restores), default=-1) + 1
    n = pool_slots(slot, sessions, concurrency, budget_bytes)
    if gpu:
        import cupy

        return BufferPool(
            tuple(cupy.zeros(max(slot, 1), dtype=cupy.uint8)[:slot] for _ in range(n)), slot
        )
    bufs = []
    for _ in range(n):
        buf = aligned_buffer(slot)
        buf.fill(0)  # touch every page now: page faults must not land in a timed read
        bufs.append(buf)
    return BufferPool(tuple(bufs), slot)


@dataclass(frozen=True)
class RunResult:
    layout: str
    concurrency: int
    read_commands: int
    bytes_requested: int
    bytes_read: int
    wall_s: float
    restore_s: tuple[float, ...]  # per session, in session order
    verified_bytes: int
    mismatched_blocks: int
    mismatch_examples: tuple[str, ...] = ()
    o_direct: bool = False
    gds: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Bytes whose layer checksum the engine checked inside the timed region; whether every
    # read of the run was checked that way (false with verification off, for GPU destinations
    # the engine cannot check, and for pieces without a stored checksum: the eviction layout).
    checksum_verified_bytes: int = 0
    checksums_verified: bool = False
    waves: int = 1  # groups of sessions restored one after another into the reused buffers

    @property
    def read_amplification(self) -> float:
        return self.bytes_read / self.bytes_requested if self.bytes_requested else 1.0

    @property
    def restore_bytes_per_s(self) -> float:
        return self.bytes_requested / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def restore_p50_s(self) -> float:
        return float(np.percentile(self.restore_s, 50)) if self.restore_s else 0.0

    @property
    def restore_p99_s(self) -> float:
        return float(np.percentile(self.restore_s, 99)) if self.restore_s else 0.0


def verify(
    restore: SessionRestore, buf: np.ndarray, piece_bytes: int
) -> tuple[int, int, list[str]]:
    """``(verified_bytes, mismatched_pieces, examples)`` for one restored session buffer."""
    verified = mismatched = 0
    examples: list[str] = []
    for layer, runs in enumerate(restore.expected):
        base = restore.layer_base[layer]
        for run in runs:
            start = base + run.buffer_offset
            nbytes = run.keys.size * piece_bytes
            bad = mismatched_pieces(buf[start : start + nbytes], run.keys, piece_bytes)
            verified += nbytes
            mismatched += int(bad.size)
            if bad.size and len(examples) < 3:
                examples.append(
                    f"session {restore.session} layer {layer}: buffer offset "
                    f"{run.buffer_offset + int(bad[0]) * piece_bytes} holds wrong bytes"
                )
    return verified, mismatched, examples


def overlapping_engine(
    engine: ReadEngine, pool: BufferPool, overlap_checksums: bool
) -> DeferredVerifyEngine | None:
    """``engine`` when it can check a layer apart from its read (and the buffers are host
    memory, which the checker reads), so checks overlap the next layer's read; else None."""
    if (
        overlap_checksums
        and isinstance(engine, DeferredVerifyEngine)
        and engine.verify
        and all(isinstance(b, np.ndarray) for b in pool.buffers)
    ):
        return engine
    return None


def restore_overlapped(
    deferred: DeferredVerifyEngine,
    checkers: ThreadPoolExecutor,
    r: SessionRestore,
    buf: Any,
    out: list[ReadResult],
) -> None:
    """Read ``r`` layer by layer into ``buf``; check layer ``l`` on ``checkers`` while layer
    ``l + 1`` is read. Each layer's result, with its check, goes to ``out`` in order."""
    pending: tuple[ReadResult, Future[Verification]] | None = None
    try:
        for layer, plan in enumerate(r.plans):
            dst = buf[r.layer_base[layer] : r.layer_base[layer] + plan.buffer_bytes]
            got = deferred.read(plan, dst, verify=False)
            if pending is not None:
                out.append(pending[0].with_verification(pending[1].result()))
            pending = (got, checkers.submit(deferred.verify_read, plan, dst))
        if pending is not None:
            out.append(pending[0].with_verification(pending[1].result()))
            pending = None
    finally:
        if pending is not None:  # a read failed: let its layer's check finish, unreported
            pending[1].exception()


def run_restore(
    layout_name: str,
    restores: Sequence[SessionRestore],
    pool: BufferPool,
    engine: ReadEngine,
    *,
    concurrency: int,
    piece_bytes: int,
    drop_cache: Callable[[], None] | None = None,
    overlap_checksums: bool = True,
) -> RunResult:
    """One cold run: per wave of ``pool.slots`` sessions, drop caches, time the concurrent
    restores, then check every byte against the pattern (after that wave's clock stopped).

    The run's wall time is the sum of its waves' wall times; with as many buffers as sessions
    (the usual case up to the pool's budget) there is one wave.

    ``overlap_checksums``: where the engine verifies, can check apart from the read
    (:class:`~fcctl.layout.engines.DeferredVerifyEngine`) and the buffers are host memory, check
    layer ``l``'s checksums while layer ``l + 1`` is read; ``False`` checks inside each read.
    Either way the same bytes are checked inside the session's timed region, and the result is
    the same but for the times.
    """
    seconds = [0.0] * len(restores)
    results: list[list[ReadResult]] = [[] for _ in restores]
    wall = 0.0
    verified = mismatched = 0
    examples: list[str] = []
    deferred = overlapping_engine(engine, pool, overlap_checksums)
    pool_exec = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="restore")
    # One check in flight per session at most, so as many checkers as sessions in flight.
    checkers = (
        ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="restore-verify")
        if deferred is not None
        else None
    )

    try:
        for start in range(0, len(restores), pool.slots):
            wave = range(start, min(len(restores), start + pool.slots))
            for buf in pool.buffers:
                buf.fill(0)  # a stale byte from an earlier session must not pass verification
            if drop_cache is not None:
                drop_cache()

            def one(i: int, buf: Any) -> None:
                r = restores[i]
                t0 = time.perf_counter()
                if deferred is not None and checkers is not None:
                    restore_overlapped(deferred, checkers, r, buf, results[i])
                else:
                    for layer, plan in enumerate(r.plans):
                        base = r.layer_base[layer]
                        results[i].append(engine.read(plan, buf[base : base + plan.buffer_bytes]))
                seconds[i] = time.perf_counter() - t0

            t0 = time.perf_counter()
            futures = [pool_exec.submit(one, i, pool.buffers[i - start]) for i in wave]
            for f in futures:
                f.result()
            wall += time.perf_counter() - t0
            for i in wave:
                buf = pool.buffers[i - start]
                host = buf if isinstance(buf, np.ndarray) else buf.get()  # CuPy: copy back
                v, m, ex = verify(restores[i], host, piece_bytes)
                verified += v
                mismatched += m
                examples.extend(ex[: max(0, 3 - len(examples))])
    except BaseException:
        # Ctrl-C or a failed read: start no further session, then let the caller clean up.
        pool_exec.shutdown(wait=True, cancel_futures=True)
        if checkers is not None:
            checkers.shutdown(wait=True, cancel_futures=True)
        raise
    pool_exec.shutdown(wait=True)
    if checkers is not None:
        checkers.shutdown(wait=True)

    flat_results = [x for rs in results for x in rs]
    return RunResult(
        layout=layout_name,
        concurrency=concurrency,
        read_commands=sum(r.read_commands for r in restores),
        bytes_requested=sum(r.bytes_requested for r in restores),
        bytes_read=sum(r.bytes_read for r in restores),
        wall_s=wall,
        restore_s=tuple(seconds),
        verified_bytes=verified,
        mismatched_blocks=mismatched,
        mismatch_examples=tuple(examples),
        o_direct=bool(flat_results) and all(x.o_direct for x in flat_results),
        gds=next((x.gds for x in flat_results), None),
        notes=tuple(dict.fromkeys(x.note for x in flat_results if x.note)),
        checksum_verified_bytes=sum(x.verified_bytes for x in flat_results),
        checksums_verified=bool(flat_results) and all(x.verified for x in flat_results),
        waves=-(-len(restores) // pool.slots) if restores else 0,
    )
