"""``fcctl analyze --engine dask``: the analysis of a dataset on a Dask cluster.

:func:`analyze_dask` gives the :class:`~fcctl.analyzers.reuse.analyze.AnalysisResult` of
:func:`~fcctl.analyzers.reuse.bounded.analyze_dataset` for the same input, budget and rate, with
the passes over the block ids run by Dask workers (``pip install 'fcctl[dask]'``).

**Input.** A dataset (:mod:`fcctl.analyzers.traces.dataset`: a directory or glob of canonical
Parquet
parts) or one canonical Parquet file, on a filesystem that this process and every worker see
under the same path (local disk for a local cluster; NFS, Lustre or a mounted bucket for a real
one). Other traces are refused (convert them first); URLs (``s3://``) are refused too, since the
dataset's files are listed and read as paths.

**Cluster.** ``scheduler=None`` starts a :class:`distributed.LocalCluster` on loopback: one
single-threaded worker process per CPU (at most one per :data:`MIN_LOCAL_WORKER_BYTES` of the
budget), each limited to ``budget / workers``, closed on every way out. ``scheduler=ADDRESS``
connects to a running scheduler (:data:`CONNECT_TIMEOUT_S`), whose workers must run the same
fcctl version.

**Pass 0, on the workers.** Every part is read and checked by a worker
(``open_dataset(map_files=...)``: the same per-file read, the same messages); the request
table (about 100 bytes a request) comes back to this process, which checks the rules about
the whole dataset and plans the analysis with :func:`~fcctl.analyzers.reuse.bounded.plan_memory`,
exactly as the single-node path does.

**Exact plan** (the whole trace fits the budget and no sample rate is asked, or the trace has
no block hashes): the exact analysis runs here, in one ordered pass over the whole access
stream (:func:`~fcctl.analyzers.reuse.analyze.analyze_trace`), which yields every figure: the result
is the single-node one.

**Bounded plan**, on the workers:

* *Explode* (one task per *piece*: a row range of a part holding at most
  :data:`MAX_PIECE_ACCESSES` accesses, fewer on small workers, :func:`plan_pieces`; the part is
  read in batches up to the range's end, so no task holds a whole large part): each access
  becomes a row ``(position, block, partition)``, 17 or 18 bytes: ``position = rank x 2^31 +
  pos`` (int64, the frame's index), ``rank`` the request's analysis position
  (:attr:`DatasetPart.rank`) and ``pos`` the access's place in its ``hash_ids``, so positions
  sort as analysis order; ``block`` the block id; ``partition = splitmix64(block) mod P``
  (:func:`fcctl.analyzers.reuse.shards.splitmix64`; int8, or int16 past 126 partitions). The same
  task keeps the SHARDS sample: the (position, block) of the accesses with ``splitmix64(block)
  < floor(rate x 2^64)`` (:func:`~fcctl.analyzers.reuse.shards.sample_mask`).
* *Block shuffle*: Dask's P2P shuffle moves each row to partition ``partition`` as it is (no
  second hash; :func:`_shuffle_rows`) and drops that column: 16 bytes an access on the
  workers' disks. Every access of a block lands in one partition, so each partition's rows,
  sorted by position, are the analysis-order sub-stream of a set of whole blocks (a bucket of
  the single-node passes), and the exact kernel of the single-node bucket passes
  (:meth:`BlockTotals.add_bucket`: :func:`~fcctl.analyzers.reuse.stack.reuse_pass` and
  :func:`~fcctl.analyzers.reuse.sessions.distinct_blocks_per_session`) runs on it. The partial
  totals
  are summed here (:meth:`BlockTotals.add_totals`): counts, shares, reuse distances in requests
  and seconds, re-accesses per request and distinct blocks per session, exactly the single-node
  figures. The per-session figures come from this shuffle too: a (session, block) pair lives in
  its block's partition, so no second shuffle on session is needed; turns, largest input and
  times come from the request table.
* *SHARDS*: the sampled accesses are gathered here, sorted by position and run through the
  exact kernel: the sampled stack distances of the single-node SHARDS pass.
* *Exact head*: capacities up to ``exact_below_blocks`` = K are counted exactly by one ordered
  pass over every access (:func:`~fcctl.analyzers.reuse.shards.exact_head`, memory O(K)), run on one
  worker while the shuffle runs on the others. With it the sampled figures are those of the
  single-node bounded analysis, bit for bit, and its measured error is the stated bound. Without
  it (``exact_head=False``, or a worker too small for K blocks) K is 0, every memory-tier point
  is sampled and the bound is the pure-SHARDS one (:data:`bounded.MEASURED_ERROR_NO_HEAD`).

**Memory.** Every task's estimated peak fits :data:`TASK_MEMORY_SHARE` of a worker thread's
room (:class:`WorkerRoom`): the worker's memory limit up to where Dask pauses it (80 % by
default; the nanny kills it at 95 %), less :data:`WORKER_BASELINE_BYTES` and the P2P shuffle's
buffers (the workers' own settings; a local cluster's are sized to its workers,
:func:`_local_p2p_buffers`). ``P``, the number of shuffle partitions, is at least twice the
cluster's threads and enough that one partition's unpack and kernel fit
(:func:`plan_shuffle`); the pieces are cut to fit too. A cluster too small for the widest
request or for the per-request arrays is refused before any work, with the memory limit a
worker would need.

**Failures.** Nothing is scattered: the per-request arrays are a node of the graph and each
piece's analysis positions its task's argument, so when a worker dies the scheduler runs its
tasks again elsewhere (``distributed.scheduler.allowed-failures``, 3 by default) and the P2P
shuffle restarts. A failure past that (``KilledWorker``, cancelled futures, a lost
connection, a failed shuffle) is a :class:`~fcctl.common.errors.RunFailed` (exit 1) of one
line naming the stage and what to do (:func:`_cluster_failure`); the local cluster is closed
and its logs are silenced, so that line is all that is printed.

The result says which engine ran: ``provenance.engine`` (cluster, scheduler, workers,
versions) and a note; ``trace.sampling.block_passes`` is ``P``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numba import njit

from fcctl.analyzers.reuse.analyze import (
    AnalysisResult,
    DatasetSummary,
    Note,
    NoteCode,
    VerdictThresholds,
    check_geometry,
    check_schedule_args,
)
from fcctl.analyzers.reuse.bounded import (
    BYTES_PER_HEAD_BLOCK,
    BlockTotals,
    BoundedPasses,
    MemoryPlan,
    analyze_bounded,
    analyze_dataset,
    check_budget,
    check_sample_rate,
    default_memory_budget,
    largest_capacity_blocks,
    plan_memory,
    refuse_schedule,
    seconds_values_limit,
)
from fcctl.analyzers.reuse.memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES
from fcctl.analyzers.reuse.shards import (
    HASH_SPACE,
    ROW_ACCESSES,
    SampledStack,
    exact_head,
    rate_threshold,
    splitmix64,
    stack_count_of_rows,
)
from fcctl.analyzers.traces.dataset import Dataset, is_dataset_spec, open_dataset
from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.progress import Progress
from fcctl.common.signals import sigint_ignored
from fcctl.common.version import fcctl_version, package_version
from fcctl.layout.geometry import KvGeometry

if TYPE_CHECKING:
    from distributed import Client, Future

#: Seconds to reach a ``--scheduler`` (and for it to have a worker) before giving up.
CONNECT_TIMEOUT_S = 5.0
#: A local cluster starts at most one worker per this much of the memory budget.
MIN_LOCAL_WORKER_BYTES = 1 << 30
#: A worker process's memory outside the tasks: the interpreter, numba, polars, pandas, Dask.
#: Measured: 0.5 GiB for a local worker as it starts, 0.67 GiB between tasks of a 1 B-access
#: run (what the allocator keeps; the per-access figures below count the rest).
WORKER_BASELINE_BYTES = 512 << 20
#: The P2P shuffle's buffers on each worker of a local cluster: outgoing shards
#: (``distributed.p2p.comm.buffer``, a sixteenth of the worker's memory limit, at most 256 MiB;
#: Dask's default, 1 GiB, is a third of a 3 GiB worker) and shards before they are written to
#: disk (``distributed.p2p.storage.buffer``, a 32nd, at most Dask's default 100 MiB).
LOCAL_P2P_COMM_BUFFER_BYTES = 256 << 20
LOCAL_P2P_STORAGE_BUFFER_BYTES = 100 << 20
#: The share of a worker thread's room (:attr:`WorkerRoom.thread_bytes`) one task's estimated
#: peak may take: the margin (1 / 0.6 = 1.7x) covers the estimates' error, and data Dask holds
#: for the next tasks (a partition fetched from another worker, the next one unpacked).
TASK_MEMORY_SHARE = 0.6
#: Bytes per access of a piece while it is exploded and sent by the shuffle: the Arrow batch
#: and ids (16), positions and hash (16), the rows (18), and the P2P transfer's copies of the
#: rows (the merge with the destination worker, the Arrow table, its sort by worker).
#: Measured: about 115 above the worker's baseline (pieces of 4 Mi accesses), + margin.
BYTES_PER_EXPLODED_ACCESS = 160
#: Most accesses in one explode piece: the task granularity of the shuffle's input (a
#: part is read in row ranges of about this many accesses).
MAX_PIECE_ACCESSES = 1 << 22
#: Bytes per access of a shuffle partition while it is unpacked and its kernel runs: the
#: unpacked rows (position index 8, block 8), the P2P unpack's Arrow copies, the sort order
#: and sorted ids (16), the kernel's dense ids and tree (8), its block tables and runs of
#: distances in seconds. Measured: about 145 above the baseline at the peak of a worker of the
#: 1 B-access run (13 M-access partitions, 2.5 % distinct blocks), + margin.
BYTES_PER_SHUFFLED_ACCESS = 160
#: Bytes per request of a partition's kernel: block counts, distances in requests and
#: re-accesses per request (int64 each), the timestamps (float64), the session index, the
#: totals sent back, slack.
BYTES_PER_WORKER_REQUEST = 64
#: Dask's warning about a large graph (the per-request timestamps and the parts' analysis
#: positions travel in the graph, so that a lost worker's inputs can be recomputed) is off.
LARGE_GRAPH_WARNING = "64 GiB"


@dataclass(frozen=True)
class ClusterFacts:
    """The cluster a run used: the JSON ``provenance.engine`` object.

    ``cluster``: ``"local"`` (started for the run on loopback) or ``"connected"`` (the running
    scheduler ``--scheduler`` names).
    ``worker_memory_limit_bytes``: the smallest worker's limit (None: unlimited).
    """

    name: str
    cluster: str
    scheduler: str
    workers: int
    threads: int
    worker_memory_limit_bytes: int | None
    dask_version: str | None
    distributed_version: str | None

    def describe(self) -> str:
        started = " started for this run" if self.cluster == "local" else ""
        return (
            f"Dask cluster at {self.scheduler}{started} ({self.workers} worker(s), "
            f"{self.threads} thread(s); dask {self.dask_version})"
        )


# --- the cluster ----------------------------------------------------------------------------


def local_workers(budget_bytes: int) -> int:
    """Workers of a local cluster: one per CPU, at most one per MIN_LOCAL_WORKER_BYTES."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    if budget_bytes < MIN_LOCAL_WORKER_BYTES:
        raise FcctlInputError(
            f"memory_budget: {budget_bytes:,} bytes is too small for a local Dask worker, "
            f"which needs at least {MIN_LOCAL_WORKER_BYTES:,}; raise --memory-budget",
            parameter="memory_budget",
        )
    return max(1, min(cpus, budget_bytes // MIN_LOCAL_WORKER_BYTES))


def _worker_fcctl_version() -> str:
    return fcctl_version()


def _facts(client: Client, cluster: str, address: str) -> ClusterFacts:
    info = client.scheduler_info()
    workers = info.get("workers", {})
    limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
    return ClusterFacts(
        name="dask",
        cluster=cluster,
        scheduler=address,
        workers=len(workers),
        threads=sum(int(w.get("nthreads") or 1) for w in workers.values()),
        worker_memory_limit_bytes=min(limits) if limits and min(limits) > 0 else None,
        dask_version=package_version("dask"),
        distributed_version=package_version("distributed"),
    )


def _probe(scheduler: str, timeout_s: float) -> None:
    """Ask the scheduler at ``scheduler`` who it is; TimeoutError unless it answers (the
    connect, the handshake and the reply together) within ``timeout_s`` seconds."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    async def ask() -> None:
        comm = None
        try:
            comm = await connect(
                scheduler,
                timeout=timeout_s,
                **Security().get_connection_args("client"),
            )
            await comm.write({"op": "identity", "reply": True})
            await comm.read()
        finally:
            if comm is not None:
                comm.abort()

    async def bounded() -> None:
        try:
            await asyncio.wait_for(ask(), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"no answer within {timeout_s:g} s") from None

    asyncio.run(bounded())


def _connect(scheduler: str) -> Client:
    """A client of the scheduler at ``scheduler`` with at least one worker, or exit 2."""
    from distributed import Client

    if not scheduler.strip() or any(c.isspace() for c in scheduler):
        raise FcctlInputError(
            f"scheduler: must be a Dask scheduler address like tcp://10.0.0.5:8786; "
            f"got {scheduler!r}",
            parameter="scheduler",
        )
    try:
        # Client's own timeout covers the TCP connect, not a peer that accepts and then never
        # answers (its start waits on that reply for ever): asked first, within the bound.
        _probe(scheduler, CONNECT_TIMEOUT_S)
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except Exception as e:  # OSError, TimeoutError, ValueError: unreachable or malformed
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise FcctlInputError(
            f"scheduler: cannot reach a Dask scheduler at {scheduler!r} within "
            f"{CONNECT_TIMEOUT_S:g} s ({reason}); start one (`dask scheduler`, then "
            "`dask worker ADDRESS` on each node) or leave --scheduler out for a local cluster",
            parameter="scheduler",
        ) from None
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except Exception:
            raise FcctlInputError(
                f"scheduler: the Dask scheduler at {scheduler!r} has no workers after "
                f"{CONNECT_TIMEOUT_S:g} s; start some with `dask worker {scheduler}`",
                parameter="scheduler",
            ) from None
        ours = fcctl_version()
        try:
            theirs = client.run(_worker_fcctl_version)
        except Exception as e:
            raise FcctlInputError(
                f"scheduler: the workers of {scheduler!r} cannot run fcctl "
                f"({type(e).__name__}: {' '.join(str(e).split())[:120]}); install fcctl "
                f"{ours} with the dask extra on every worker (pip install 'fcctl[dask]')",
                parameter="scheduler",
            ) from None
        odd = {w: v for w, v in theirs.items() if v != ours}
        if odd:
            worker, version = next(iter(odd.items()))
            raise FcctlInputError(
                f"scheduler: worker {worker} runs fcctl {version} but this is fcctl {ours}; "
                "every worker must run the same version",
                parameter="scheduler",
            )
    except BaseException:
        client.close()
        raise
    return client


def dask_setup(worker: object) -> None:
    """Dask's preload hook, run in each local worker process as it starts: ignore SIGINT.

    For a worker its nanny restarts later, which does not inherit
    :func:`~fcctl.common.signals.sigint_ignored`.
    """
    del worker
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def dask_client(
    scheduler: str | None, *, memory_budget_bytes: int
) -> Iterator[tuple[Client, ClusterFacts]]:
    """A client of the ``scheduler``'s cluster, or of a local one started (and closed) here.

    The local cluster is closed however the block ends (an error, Ctrl-C): no process of it
    outlives the call.
    """
    if scheduler is not None:
        client = _connect(scheduler)
        try:
            yield client, _facts(client, "connected", scheduler)
        finally:
            client.close()
        return
    from distributed import Client, LocalCluster

    workers = local_workers(memory_budget_bytes)
    with contextlib.ExitStack() as stack:
        with (
            sigint_ignored(),
            # The nannies pass this process's configuration to the workers they start.
            dask.config.set(_local_p2p_buffers(memory_budget_bytes // workers)),
        ):
            try:
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    memory_limit=memory_budget_bytes // workers,
                    # Dask's own log lines (a worker restarted, a task failed) are not shown:
                    # a failure is reported once, as fcctl's one line.
                    silence_logs=logging.CRITICAL,
                    # The scheduler's HTTP routes (health, metrics; no dashboard) on a free
                    # loopback port, not on 8787 of every interface.
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    preload=[__name__],  # dask_setup: the workers ignore Ctrl-C
                )
            except (OSError, TimeoutError, RuntimeError) as e:
                raise RunFailed(
                    f"could not start a local Dask cluster of {workers} worker(s) "
                    f"({type(e).__name__}: {_short(e)}): a worker process died or did not "
                    "start; check that this machine may start processes and listen on "
                    "127.0.0.1, and has memory free"
                ) from None
        stack.enter_context(cluster)
        client = stack.enter_context(Client(cluster, set_as_default=False))
        yield client, _facts(client, "local", str(cluster.scheduler_address))


def _local_p2p_buffers(worker_limit_bytes: int) -> dict[str, int]:
    """The P2P buffers of a local cluster's workers (:data:`LOCAL_P2P_COMM_BUFFER_BYTES`)."""
    return {
        "distributed.p2p.comm.buffer": max(
            min(worker_limit_bytes // 16, LOCAL_P2P_COMM_BUFFER_BYTES), 16 << 20
        ),
        "distributed.p2p.storage.buffer": max(
            min(worker_limit_bytes // 32, LOCAL_P2P_STORAGE_BUFFER_BYTES), 8 << 20
        ),
    }


def _short(e: BaseException, limit: int = 160) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    return " ".join(str(e).split())[:limit] or type(e).__name__


# --- the tasks (run on the workers) -----------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Rows ``start:stop`` of one part, holding ``accesses`` block accesses: one explode task."""

    part: int  # index into Dataset.parts
    start: int
    stop: int
    accesses: int


def plan_pieces(dataset: Dataset, max_accesses: int) -> list[Piece]:
    """Every part cut into row ranges of at most ``max_accesses`` accesses (or one row).

    The block counts come from the request table (``n_blocks`` at each row's analysis
    position), so the cut needs no read of the block ids.
    """
    n_blocks = dataset.requests["n_blocks"].to_numpy().astype(np.int64)
    pieces: list[Piece] = []
    for i, part in enumerate(dataset.parts):
        ends = np.cumsum(n_blocks[part.rank])
        start = 0
        while start < part.rows:
            base = int(ends[start - 1]) if start else 0
            stop = int(np.searchsorted(ends, base + max_accesses, side="right"))
            stop = min(max(stop, start + 1), part.rows)
            pieces.append(Piece(i, start, stop, int(ends[stop - 1]) - base))
            start = stop
    return pieces


def _piece_blocks(
    path: Path, rows: int, start: int, stop: int, accesses: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of a part: (block count per row, block ids), checked.

    The file is read in batches from its first row and stops after ``stop``: only a batch's
    ids are decoded at a time, whatever the part's size.
    """
    changed = (
        f"{path}: differs from when the dataset was opened (rows {start:,} to {stop:,} should "
        f"hold {accesses:,} block accesses of {rows:,} rows): it changed during the analysis"
    )
    try:
        f = pq.ParquetFile(path)
    except OSError as e:
        raise FcctlInputError(f"{path}: cannot be read ({_short(e)}) during the analysis") from None
    with f:
        if f.metadata.num_rows != rows:
            raise FcctlInputError(changed)
        batch = max(1, (stop - start + 3) // 4)
        lens: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        row = 0
        for b in f.iter_batches(batch_size=batch, columns=["hash_ids"]):
            lo, hi = max(start - row, 0), min(stop - row, b.num_rows)
            row += b.num_rows
            if hi <= lo:
                if row >= stop:
                    break
                continue
            column = b.column(0).slice(lo, hi - lo)
            lens.append(pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64))
            ids.append(
                column.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
            )
            del column, b
            if row >= stop:
                break
    lens_all = np.concatenate(lens) if lens else np.zeros(0, dtype=np.int64)
    del lens
    ids_all = np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint64)
    del ids
    if lens_all.shape[0] != stop - start or ids_all.shape[0] != accesses:
        raise FcctlInputError(changed)
    return lens_all, ids_all


#: ``position = rank * 2**POSITION_BITS + pos``: an access's place in the analysis order as
#: one int64 (requests < 2**32, a request's blocks < 2**31), sorted as the pair would be.
POSITION_BITS = 31


@njit(cache=True)
def _positions(rank: np.ndarray, lens: np.ndarray, total: int) -> np.ndarray:  # pragma: no cover
    """Every access's ``position`` (:data:`POSITION_BITS`), one row of ``lens`` after another."""
    out = np.empty(total, dtype=np.int64)
    i = 0
    for r in range(lens.shape[0]):
        base = rank[r] << POSITION_BITS
        for j in range(lens[r]):
            out[i] = base | j
            i += 1
    return out


def _partition_dtype(partitions: int) -> np.dtype:
    """The dtype of partition numbers: Dask's own for its P2P shuffle's partition column."""
    return np.min_scalar_type(-partitions - 1)


def _rows_meta(partitions: int) -> Any:
    """The shuffle rows' (empty) frame: index ``position`` int64; ``block``, ``partition``."""
    import pandas as pd

    return pd.DataFrame(
        {
            "block": np.zeros(0, np.uint64),
            "partition": np.zeros(0, _partition_dtype(partitions)),
        },
        index=pd.Index(np.zeros(0, np.int64), name="position"),
    )


def _shuffle_rows(rows: Any, partitions: int) -> Any:
    """``rows`` shuffled by P2P so that partition ``p`` holds the rows whose ``partition`` is p.

    The shuffle is Dask's P2P ``Shuffle`` on the partition numbers as they are (the public
    ``DataFrame.shuffle`` hashes the column first, a third of the shuffle's time for nothing);
    the ``partition`` column is dropped on the way, so the rows land as (position, block).
    """
    try:
        from dask.dataframe.dask_expr._collection import new_collection
        from dask.dataframe.dask_expr._shuffle import Shuffle
    except ImportError:  # pragma: no cover - another dask: its public shuffle, by hash
        shuffled = rows.shuffle(on="partition", npartitions=partitions, shuffle_method="p2p")
        return shuffled.drop(columns="partition")
    return new_collection(Shuffle(rows.expr, "partition", partitions, False, "p2p", None))


def _explode_piece(
    path: str,
    rows: int,
    start: int,
    stop: int,
    rank: np.ndarray,
    accesses: int,
    partitions: int,
    threshold: int,
) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    """One piece's accesses as shuffle rows, and its SHARDS sample (module docstring).

    Rows: index ``position`` (int64), ``block`` (uint64), ``partition`` (``splitmix64(block)
    mod P``, int8 or int16): 17 or 18 bytes an access, and the index is what the P2P shuffle
    carries anyway. The sample: the kept accesses' (position, block id). ``rank``: the rows'
    analysis positions (a task argument, so a lost worker's input is in the graph and the task
    can run again elsewhere).
    """
    import pandas as pd

    lens, ids = _piece_blocks(Path(path), rows, start, stop, accesses)
    if rank.shape[0] and (int(rank[-1]) >> 32 or int(lens.max()) >> POSITION_BITS):
        raise FcctlInputError(
            f"{path}: a request at analysis position {int(rank[-1]):,} or one of "
            f"{int(lens.max()):,} blocks is past what the Dask engine encodes (2^32 requests, "
            f"2^{POSITION_BITS} blocks a request); use --engine local"
        )
    position = _positions(np.ascontiguousarray(rank, dtype=np.int64), lens, ids.shape[0])
    del lens
    h = splitmix64(ids)
    kept = h < np.uint64(threshold)
    sample = (position[kept], ids[kept])
    del kept
    h %= np.uint64(partitions)
    partition = h.astype(_partition_dtype(partitions))
    del h
    frame = pd.DataFrame(
        {"block": ids, "partition": partition},
        index=pd.Index(position, name="position", copy=False),
        copy=False,
    )
    return frame, sample


def _partition_totals(
    rows: Any,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    num_requests: int,
    num_sessions: int,
    max_seconds_values: int,
) -> BlockTotals:
    """The exact block totals of one shuffle partition (whole blocks), in analysis order."""
    position = rows.index.to_numpy(dtype=np.int64)
    # The rows arrive as runs already in order (one per piece and shuffle shard): timsort.
    order = np.argsort(position, kind="stable")
    ids = rows["block"].to_numpy(dtype=np.uint64)[order]
    del order
    lens = np.bincount(position >> POSITION_BITS, minlength=num_requests).astype(np.int64)
    del rows, position
    totals = BlockTotals(num_requests, num_sessions, max_seconds_values=max_seconds_values)
    totals.add_bucket(ids, lens, timestamp_s, session)
    return totals


def _head_pass(dataset: Dataset, depth: int) -> np.ndarray:
    """The exact head (:func:`~fcctl.analyzers.reuse.shards.exact_head`) over the ordered stream."""
    return exact_head(lambda: (ids for _, ids in dataset.iter_blocks()), depth)


def _worker_memory_settings() -> dict[str, float]:
    """This worker's Dask settings that bound what its tasks may use (run on the workers)."""
    from dask.utils import parse_bytes

    def fraction(key: str, default: float) -> float:
        value = dask.config.get(f"distributed.worker.memory.{key}", default)
        return float(value) if value not in (None, False) else 1.0

    return {
        "pause": fraction("pause", 0.8),
        "terminate": fraction("terminate", 0.95),
        "comm_buffer": float(parse_bytes(dask.config.get("distributed.p2p.comm.buffer"))),
        "storage_buffer": float(parse_bytes(dask.config.get("distributed.p2p.storage.buffer"))),
    }


# --- the passes (run from here) ---------------------------------------------------------------


#: The exact head's ordered pass outside its table: a merge batch per file and its copies.
HEAD_STREAM_BYTES = 256 << 20


@dataclass(frozen=True)
class WorkerRoom:
    """What one task may use on the cluster's smallest worker (:func:`worker_room`).

    ``limit_bytes``: its memory limit (the budget when the workers are unlimited); ``pause``:
    the fraction of it where Dask pauses the worker (the nanny kills it at ``terminate``);
    ``p2p_bytes``: the P2P shuffle's comm and disk buffers; ``threads``: its threads.
    """

    limit_bytes: int
    pause: float
    terminate: float
    p2p_bytes: int
    threads: int

    @property
    def thread_bytes(self) -> int:
        """A thread's share of the worker below the pause, less the process and P2P buffers."""
        free = self.limit_bytes * self.pause - WORKER_BASELINE_BYTES - self.p2p_bytes
        return max(int(free / max(self.threads, 1)), 0)

    @property
    def task_bytes(self) -> int:
        """The most one task's estimated peak may be: :data:`TASK_MEMORY_SHARE` of a thread's."""
        return int(self.thread_bytes * TASK_MEMORY_SHARE)

    def describe(self) -> str:
        return (
            f"{self.task_bytes:,} bytes for one task: {TASK_MEMORY_SHARE:.0%} of what a worker "
            f"thread has below {self.pause:.0%} of its {self.limit_bytes / 2**30:.2f} GiB "
            f"memory limit, where Dask pauses it, after {WORKER_BASELINE_BYTES >> 20} MiB for "
            f"the process and {self.p2p_bytes >> 20} MiB for the P2P shuffle's buffers"
        )


def worker_room(client: Client, facts: ClusterFacts, budget_bytes: int) -> WorkerRoom:
    """The :class:`WorkerRoom` of the cluster's workers, from their own Dask settings."""
    settings = list(client.run(_worker_memory_settings).values())
    workers = max(facts.workers, 1)
    return WorkerRoom(
        limit_bytes=facts.worker_memory_limit_bytes or budget_bytes,
        pause=min(s["pause"] for s in settings) if settings else 0.8,
        terminate=min(s["terminate"] for s in settings) if settings else 0.95,
        p2p_bytes=int(max((s["comm_buffer"] + s["storage_buffer"] for s in settings), default=0)),
        threads=max(1, math.ceil(facts.threads / workers)),
    )


@dataclass(frozen=True)
class ShufflePlan:
    """``partitions`` (P) of the block shuffle; explode pieces of ``piece_accesses`` at most."""

    partitions: int
    piece_accesses: int


def plan_shuffle(
    dataset: Dataset, room: WorkerRoom, cluster_threads: int, parameter: str
) -> ShufflePlan:
    """P and the explode pieces' size, each task's estimate within ``room.task_bytes``.

    A piece of ``a`` accesses takes about :data:`BYTES_PER_EXPLODED_ACCESS` x ``a`` while it is
    exploded and sent; a partition of ``n`` accesses :data:`BYTES_PER_SHUFFLED_ACCESS` x ``n``
    plus :data:`BYTES_PER_WORKER_REQUEST` a request of the dataset while it is unpacked and
    its kernel runs. P is at least 2 per thread of the cluster. A worker too small for the
    largest request's piece or the per-request arrays is refused up front (``parameter`` names
    what to raise), with what it would need.
    """
    task = room.task_bytes
    more = (
        "raise --memory-budget" if parameter == "memory_budget" else "give the workers more memory"
    )
    piece = min(MAX_PIECE_ACCESSES, task // BYTES_PER_EXPLODED_ACCESS)
    widest_or_none = dataset.requests["n_blocks"].max()
    widest = widest_or_none if isinstance(widest_or_none, int) else 0
    if widest * BYTES_PER_EXPLODED_ACCESS > task or piece < 1:
        need = max(widest, 1) * BYTES_PER_EXPLODED_ACCESS
        raise FcctlInputError(
            f"{parameter}: a Dask worker has {room.describe()}; exploding the widest request "
            f"({widest:,} block accesses) needs about {need:,} (so a memory limit of about "
            f"{_gib_up(_limit_for(room, need))} GiB a worker); {more}",
            parameter=parameter,
        )
    per_request = dataset.num_requests * BYTES_PER_WORKER_REQUEST
    kernel = task - per_request
    if kernel < BYTES_PER_SHUFFLED_ACCESS << 16:
        need = per_request + (BYTES_PER_SHUFFLED_ACCESS << 16)
        raise FcctlInputError(
            f"{parameter}: a Dask worker has {room.describe()}, but a shuffle partition's "
            f"per-request arrays alone take {per_request:,} ({dataset.num_requests:,} requests "
            f"x {BYTES_PER_WORKER_REQUEST}; a memory limit of about "
            f"{_gib_up(_limit_for(room, need))} GiB a worker would do); {more}",
            parameter=parameter,
        )
    need = math.ceil(dataset.block_accesses * BYTES_PER_SHUFFLED_ACCESS / kernel)
    return ShufflePlan(max(2 * max(cluster_threads, 1), need), int(piece))


def _gib_up(n: int) -> str:
    """``n`` bytes in GiB, rounded up to the hundredth: a limit that is enough."""
    return f"{math.ceil(n / 2**30 * 100) / 100:.2f}"


def _limit_for(room: WorkerRoom, task_bytes: int) -> int:
    """The worker memory limit whose :attr:`WorkerRoom.task_bytes` is ``task_bytes``."""
    thread = task_bytes / TASK_MEMORY_SHARE
    return math.ceil(
        (thread * room.threads + WORKER_BASELINE_BYTES + room.p2p_bytes) / max(room.pause, 0.01)
    )


def _map_files(client: Client) -> Callable[..., Iterable[Any]]:
    """``open_dataset``'s ``map_files``: one task per file on the workers, results in order.

    The first failed read (in file order) raises its own error, as the reads one after
    another would; the other tasks are cancelled then (and on Ctrl-C). Each result is
    released on the worker once it is here.
    """

    def map_files(read: Callable[[Path], Any], files: Sequence[Path]) -> Iterator[Any]:
        futures: list[Future[Any] | None] = [*client.map(read, list(files), pure=False)]
        try:
            for i in range(len(futures)):
                f, futures[i] = futures[i], None
                assert f is not None  # each slot is emptied once, in order
                yield f.result()
                del f
        finally:
            client.cancel([f for f in futures if f is not None])

    return map_files


def _dask_passes(client: Client, shuffle: ShufflePlan, stage: _Stage) -> BoundedPasses:
    """The bounded analysis's passes (:data:`bounded.BoundedPasses`) on the cluster."""

    def passes(
        dataset: Dataset,
        plan: MemoryPlan,
        timestamp_s: np.ndarray,
        session: np.ndarray | None,
        n_sessions: int,
        progress: Progress,
    ) -> tuple[SampledStack, BlockTotals]:
        from distributed import as_completed

        assert plan.sample_rate is not None
        threshold = rate_threshold(plan.sample_rate)
        limit = seconds_values_limit(plan.budget_bytes)
        n_req = dataset.num_requests
        totals = BlockTotals(n_req, n_sessions, max_seconds_values=limit)
        samples: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        head_count = np.zeros(0, dtype=np.int64)
        # Each future is dropped once its result is here, so that the worker frees it.
        pending: dict[Any, Future] = {}
        role: dict[Any, tuple[str, int]] = {}
        try:
            stage.name = "the block shuffle"
            if plan.exact_below_blocks > 0:
                # The parts' ranks travel in the task; the request table stays here.
                light = dataclasses.replace(dataset, requests=dataset.requests.clear())
                head = client.submit(_head_pass, light, plan.exact_below_blocks, pure=False)
                pending[head.key], role[head.key] = head, ("head", 0)
                del light
            partial, sampled = _graph(
                dataset, plan, shuffle, threshold, timestamp_s, session, n_sessions, limit
            )
            # One graph: each piece is read once, for both the shuffle and the sample.
            computed = client.compute(partial + sampled)
            for i, f in enumerate(computed):
                pending[f.key] = f
                role[f.key] = ("totals", i) if i < len(partial) else ("sample", i)
            del computed, partial, sampled
            label = (
                f"Dask: {plan.block_passes} block partitions, SHARDS sample at "
                f"{plan.sample_rate:g}" + (", exact head" if plan.exact_below_blocks else "")
            )
            with progress.task(label, len(pending)) as task:
                done = 0
                for f in as_completed(list(pending.values()), loop=client.loop):
                    kind, i = role[f.key]
                    stage.task = f.key
                    value = f.result()
                    del pending[f.key], f
                    if kind == "head":
                        head_count = value
                    elif kind == "totals":
                        totals.add_totals(value)
                    else:
                        samples[i] = value
                    del value
                    done += 1
                    task.update(done)
        finally:
            client.cancel(list(pending.values()))
            pending.clear()
        stage.name, stage.task = "the SHARDS sample (here)", None
        sampled_stack = _sample_stack(
            samples,
            threshold=threshold,
            accesses=dataset.block_accesses,
            exact_below_blocks=plan.exact_below_blocks,
            head_count=head_count,
        )
        return sampled_stack, totals

    return passes


def _graph(
    dataset: Dataset,
    plan: MemoryPlan,
    shuffle: ShufflePlan,
    threshold: int,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    n_sessions: int,
    max_seconds_values: int,
) -> tuple[list[Any], list[Any]]:
    """The Dask graph: (per shuffle partition, its block totals; per piece, its sample).

    Nothing is scattered: the per-request arrays are one node of the graph and each piece's
    analysis positions are its task's argument, so the scheduler can run any task again on
    another worker (up to ``distributed.scheduler.allowed-failures`` times) when one dies.
    """
    import dask.dataframe as dd

    partitions = plan.block_passes
    parts = dataset.parts
    exploded = [
        dask.delayed(_explode_piece, nout=2, pure=False)(
            str(parts[p.part].path),
            parts[p.part].rows,
            p.start,
            p.stop,
            parts[p.part].rank[p.start : p.stop].copy(),
            p.accesses,
            partitions,
            threshold,
        )
        for p in plan_pieces(dataset, shuffle.piece_accesses)
    ]
    rows = dd.from_delayed([e[0] for e in exploded], meta=_rows_meta(partitions), verify_meta=False)
    shuffled = _shuffle_rows(rows, partitions)
    shared = dask.delayed(timestamp_s, name=f"timestamps-{dask.base.tokenize(timestamp_s)}")
    sessions = (
        None
        if session is None
        else dask.delayed(session, name=f"sessions-{dask.base.tokenize(session)}")
    )
    partial = [
        dask.delayed(_partition_totals, pure=False)(
            part, shared, sessions, dataset.num_requests, n_sessions, max_seconds_values
        )
        for part in shuffled.to_delayed()
    ]
    return partial, [e[1] for e in exploded]


def _sample_stack(
    pieces: dict[int, tuple[np.ndarray, np.ndarray]],
    *,
    threshold: int,
    accesses: int,
    exact_below_blocks: int,
    head_count: np.ndarray,
) -> SampledStack:
    """The SHARDS result of the gathered sample: sorted to analysis order, the exact kernel.

    ``pieces`` is emptied as it is read (the gathered sample is not held twice).
    """
    total = sum(p[0].shape[0] for p in pieces.values())
    position = np.empty(total, dtype=np.int64)
    ids = np.empty(total, dtype=np.uint64)
    at = 0
    for k in sorted(pieces):
        pos, kept = pieces.pop(k)
        position[at : at + pos.shape[0]] = pos
        ids[at : at + pos.shape[0]] = kept
        at += pos.shape[0]
        del pos, kept
    order = np.argsort(position, kind="stable")
    del position
    ids = ids[order]
    del order
    # The sampled stream's stack distances, by the exact kernel of ``sampled_stack`` at rate 1
    # (fed views of the sorted ids: that call would copy them first).
    rows = [ids[s : s + ROW_ACCESSES] for s in range(0, ids.shape[0], ROW_ACCESSES)]
    del ids
    stack_count, sampled_accesses, sampled_blocks = stack_count_of_rows(rows)
    del rows
    return SampledStack(
        method="fixed-rate",
        rate=threshold / HASH_SPACE,
        threshold=threshold,
        accesses=accesses,
        sampled_accesses=sampled_accesses,
        sampled_blocks=sampled_blocks,
        stack_count=stack_count,
        exact_below_blocks=exact_below_blocks,
        head_count=head_count,
    )


# --- failures of the cluster ------------------------------------------------------------------


@dataclass
class _Stage:
    """Where a run is, for the message of a failure: a stage and the task last waited on."""

    name: str = "starting the cluster"
    task: Any = None


#: Stages by the name of a task's key (:func:`dask.utils.key_split`).
_TASK_STAGES = (
    ("explode_piece", "the block shuffle (exploding a piece of a part)"),
    ("shuffle", "the block shuffle"),
    ("p2p", "the block shuffle"),
    ("from-delayed", "the block shuffle"),
    ("assign", "the block shuffle"),
    ("partition_totals", "a shuffle partition's exact kernel"),
    ("head_pass", "the exact head (one ordered pass on a worker)"),
    ("read", "reading and checking the parts"),
)


def _stage_of(key: Any, default: str) -> str:
    from dask.utils import key_split

    if key is None:
        return default
    name = key_split(key)
    return next((stage for prefix, stage in _TASK_STAGES if prefix in name), default)


def _cluster_failure(
    e: BaseException, facts: ClusterFacts | None, stage: _Stage, *, local: bool
) -> RunFailed | None:
    """The one-line :class:`RunFailed` for a failure of the cluster, or None for anything else.

    Cluster failures: a worker killed or lost (``KilledWorker``), futures cancelled (the data
    they needed is gone), a lost connection (``CommClosedError`` and other ``OSError``), a
    timeout, a failed P2P shuffle, a ``MemoryError``. Input errors raised by the tasks (a
    part changed) and fcctl's own errors are not: they keep their exit status.
    """
    from distributed import KilledWorker

    if isinstance(e, FcctlInputError | RunFailed | KeyboardInterrupt | SystemExit):
        return None
    limit = facts.worker_memory_limit_bytes if facts is not None else None
    memory = f"worker memory limit {limit / 2**30:.2f} GiB" if limit else "worker memory"
    todo = (
        "raise --memory-budget, or run on more workers (--scheduler)"
        if local
        else "give the workers more memory, or add workers"
    )
    if isinstance(e, KilledWorker):
        where = _stage_of(getattr(e, "task", None), stage.name)
        times = int(getattr(e, "allowed_failures", 0)) + 1
        return RunFailed(
            f"a Dask worker died during {where} (task {getattr(e, 'task', '?')!s}: the workers "
            f"running it died {times} time(s); out of memory at the {memory}?); {todo}"
        )
    text = _short(e)
    if isinstance(e, MemoryError):
        return RunFailed(f"out of memory during {stage.name} ({memory}); {todo}")
    if isinstance(e, CancelledError | asyncio.CancelledError):
        where = _stage_of(getattr(e, "key", None) or stage.task, stage.name)
        reason = getattr(e, "reason", None) or text
        return RunFailed(
            f"the Dask cluster cancelled a task during {where} ({reason}): a worker died or "
            f"left and what it held was lost ({memory}?); {todo}"
        )
    if isinstance(e, OSError | TimeoutError | EOFError):
        return RunFailed(
            f"lost the Dask cluster during {stage.name} ({type(e).__name__}: {text}); a worker "
            f"or the scheduler died or cannot be reached; {todo}"
        )
    if isinstance(e, RuntimeError) and ("P2P" in text or type(e).__module__.startswith("distri")):
        return RunFailed(
            f"the Dask cluster failed during {stage.name} ({text}): a worker probably died "
            f"({memory}?); {todo}"
        )
    return None


# --- the analysis -----------------------------------------------------------------------------


def _check_input(spec: str | Path) -> bool:
    """Refuse what is not canonical Parquet; True when ``spec`` is one file, not a dataset."""
    from fcctl.analyzers.traces.readers import detect_format

    text = str(spec)
    # "s3://b/k" reaches here as "s3:/b/k" when it went through a Path (the CLI's argument).
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", text):
        raise FcctlInputError(
            f"engine: {text} is a URL; the Dask engine reads datasets on a filesystem that "
            "this machine and every worker mount under the same path (object storage: mount "
            "the bucket); URLs are not supported",
            parameter="engine",
        )
    if is_dataset_spec(spec):
        return False
    fmt = detect_format(spec)
    if fmt != "parquet":
        raise FcctlInputError(
            f"engine: dask reads canonical Parquet (a dataset directory or glob, or one "
            f".parquet file), and {text} is a {fmt} trace; convert it first: fcctl convert "
            f"{text} -o DIR --partition-by session-hash (or day)",
            parameter="engine",
        )
    return True


def analyze_dask(
    spec: str | Path,
    *,
    geometry: KvGeometry,
    scheduler: str | None = None,
    memory_budget_bytes: int | None = None,
    sample_rate: float | None = None,
    memory_capacities_bytes: Sequence[int] | None = None,
    progress: Progress | None = None,
    thresholds: VerdictThresholds | None = None,
    exact_head: bool = True,
    rate_requests_per_s: float | None = None,
    concurrent_sessions: int | None = None,
    seed: int = 0,
) -> AnalysisResult:
    """Analyse the dataset (or canonical Parquet file) ``spec`` on a Dask cluster.

    The figures, plan and rate are those of :func:`~fcctl.analyzers.reuse.bounded.analyze_dataset`
    with the same ``memory_budget_bytes`` (default :func:`default_memory_budget`: what this
    process may use; a local cluster's workers get as much again) and ``sample_rate``; see the
    module docstring for where each pass runs. ``scheduler``: a running scheduler's address
    (default: a local cluster for the call). ``exact_head=False`` skips the ordered pass of the
    exact head (pure SHARDS, with its larger stated error). A session schedule
    (``rate_requests_per_s``, ``concurrent_sessions``, ``seed``) needs the exact plan, as there.
    """
    progress = progress or Progress(enabled=False)
    check_geometry(geometry)
    budget = check_budget(
        default_memory_budget() if memory_budget_bytes is None else memory_budget_bytes
    )
    if sample_rate is not None:
        sample_rate = check_sample_rate(sample_rate)
    thresholds = thresholds or VerdictThresholds()
    check_schedule_args(rate_requests_per_s, concurrent_sessions)
    one_file = _check_input(spec)
    if scheduler is not None:
        # The workers' working directory is not this one.
        spec = os.path.abspath(spec) if not Path(spec).is_absolute() else spec
    stage = _Stage()
    facts: ClusterFacts | None = None
    local = scheduler is None
    try:
        with (
            dask.config.set(
                {"distributed.admin.large-graph-warning-threshold": LARGE_GRAPH_WARNING}
            ),
            dask_client(scheduler, memory_budget_bytes=budget) as (client, facts),
        ):
            stage.name = "reading and checking the parts"
            dataset = open_dataset(spec, progress, map_files=_map_files(client))
            plan = plan_memory(
                dataset.num_requests,
                dataset.block_accesses,
                budget,
                sample_rate=sample_rate,
                exact_capacity_blocks=largest_capacity_blocks(
                    dataset, geometry, memory_capacities_bytes
                ),
            )
            if plan.exact or not dataset.has_hashes:
                stage.name = "the exact analysis (here)"
                result = analyze_dataset(
                    dataset,
                    geometry=geometry,
                    memory_budget_bytes=budget,
                    sample_rate=sample_rate,
                    memory_capacities_bytes=memory_capacities_bytes,
                    progress=progress,
                    thresholds=thresholds,
                    rate_requests_per_s=rate_requests_per_s,
                    concurrent_sessions=concurrent_sessions,
                    seed=seed,
                )
                how = (
                    "the parts were read and checked on the workers, and the exact analysis ran "
                    "here in one ordered pass over every access (the trace fits the memory budget)"
                )
            else:
                refuse_schedule(plan, rate_requests_per_s, concurrent_sessions)
                result, how = _bounded(
                    client,
                    facts,
                    dataset,
                    plan,
                    geometry=geometry,
                    capacities=memory_capacities_bytes,
                    progress=progress,
                    thresholds=thresholds,
                    exact_head=exact_head,
                    parameter="memory_budget" if local else "scheduler",
                    stage=stage,
                )
    except BaseException as e:
        failed = _cluster_failure(e, facts, stage, local=local)
        if failed is None:
            raise
        raise failed from None
    assert facts is not None
    return _with_engine(result, facts, how, one_file=one_file)


def _bounded(
    client: Client,
    facts: ClusterFacts,
    dataset: Dataset,
    plan: MemoryPlan,
    *,
    geometry: KvGeometry,
    capacities: Sequence[int] | None,
    progress: Progress,
    thresholds: VerdictThresholds,
    exact_head: bool,
    parameter: str,
    stage: _Stage,
) -> tuple[AnalysisResult, str]:
    room = worker_room(client, facts, plan.budget_bytes)
    shuffle = plan_shuffle(dataset, room, facts.threads, parameter)
    head = plan.exact_below_blocks if exact_head else 0
    if head * BYTES_PER_HEAD_BLOCK + HEAD_STREAM_BYTES > room.task_bytes:
        head = 0
    plan = dataclasses.replace(plan, block_passes=shuffle.partitions, exact_below_blocks=head)
    result = analyze_bounded(
        dataset,
        plan,
        geometry=geometry,
        capacities=sorted(set(capacities or DEFAULT_MEMORY_CAPACITIES_BYTES)),
        progress=progress,
        thresholds=thresholds,
        summary=DatasetSummary(dataset.mode, len(dataset.parts), dataset.units),
        passes=_dask_passes(client, shuffle, stage),
    )
    how = (
        f"every block access was shuffled into {shuffle.partitions} partitions by the "
        "splitmix64 hash of its block for the exact figures, the SHARDS sample was gathered "
        "from the workers, and "
        + (
            f"capacities up to {head:,} blocks were counted exactly in one ordered pass on a worker"
            if head
            else "no exact head was counted (pure SHARDS: every memory-tier point is sampled)"
        )
    )
    return result, how


def _with_engine(
    result: AnalysisResult, facts: ClusterFacts, how: str, *, one_file: bool
) -> AnalysisResult:
    """``result`` saying which engine ran it (provenance.engine and a note)."""
    trace = result.trace
    if one_file:
        # One Parquet file reads as the single-node path reads it: a trace, not a dataset.
        trace = dataclasses.replace(trace, format="parquet", dataset=None)
    provenance = dataclasses.replace(
        result.provenance,
        extra={**result.provenance.extra, "engine": dataclasses.asdict(facts)},
    )
    note = Note(NoteCode.ENGINE, f"Computed on a {facts.describe()}: {how}.")
    return dataclasses.replace(
        result, trace=trace, provenance=provenance, note_details=(*result.note_details, note)
    )
