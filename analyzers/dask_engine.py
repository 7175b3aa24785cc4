"""``fcctl analyze --engine dask``: the analysis of a dataset on a Dask cluster.

:func:`analyze_dask` gives the :class:`~fcctl.analyzers.analyze.AnalysisResult` of
:func:`~fcctl.analyzers.bounded.analyze_dataset` for the same input, budget and rate, with
the passes over the block ids run by Dask workers (``pip install 'fcctl[dask]'``).

**Input.** A dataset (:mod:`fcctl.analyzers.dataset`: a directory or glob of canonical Parquet
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
the whole dataset and plans the analysis with :func:`~fcctl.analyzers.bounded.plan_memory`,
exactly as the single-node path does.

**Exact plan** (the whole trace fits the budget and no sample rate is asked, or the trace has
no block hashes): the exact analysis runs here, in one ordered pass over the whole access
stream (:func:`~fcctl.analyzers.analyze.analyze_trace`), which yields every figure: the result
is the single-node one.

**Bounded plan**, on the workers:

* *Explode* (one task per part): each access becomes a row ``(position, block, bucket)``, 20
  bytes: ``position = rank x 2^31 + pos`` (int64), ``rank`` the request's analysis position
  (:attr:`DatasetPart.rank`) and ``pos`` the access's place in its ``hash_ids``, so positions
  sort as analysis order; ``block`` the block id; ``bucket = splitmix64(block) mod B``
  (:func:`fcctl.analyzers.shards.splitmix64`), ``B = P x`` :data:`BUCKETS_PER_PARTITION`. The
  same task keeps the SHARDS sample: the (position, block) of the accesses with
  ``splitmix64(block) < floor(rate x 2^64)`` (:func:`~fcctl.analyzers.shards.sample_mask`).
* *Bucket shuffle*: the rows are shuffled on ``bucket`` into ``P`` partitions (Dask's P2P
  shuffle), so every access of a block lands in one partition. Each partition's rows, sorted by
  position, are the analysis-order sub-stream of a set of whole buckets, and the exact
  kernel of the single-node bucket passes (:meth:`BlockTotals.add_bucket`:
  :func:`~fcctl.analyzers.stack.reuse_pass` and
  :func:`~fcctl.analyzers.sessions.distinct_blocks_per_session`) runs on it. The partial totals
  are summed here (:meth:`BlockTotals.add_totals`): counts, shares, reuse distances in requests
  and seconds, re-accesses per request and distinct blocks per session, exactly the single-node
  figures. The per-session figures come from this shuffle too: a (session, block) pair lives in
  its block's bucket, so no second shuffle on session is needed; turns, largest input and
  times come from the request table.
* *SHARDS*: the sampled accesses are gathered here, sorted by position and run through the
  exact kernel: the sampled stack distances of the single-node SHARDS pass.
* *Exact head*: capacities up to ``exact_below_blocks`` = K are counted exactly by one ordered
  pass over every access (:func:`~fcctl.analyzers.shards.exact_head`, memory O(K)), run on one
  worker while the shuffle runs on the others. With it the sampled figures are those of the
  single-node bounded analysis, bit for bit, and its measured error is the stated bound. Without
  it (``exact_head=False``, or a worker too small for K blocks) K is 0, every memory-tier point
  is sampled and the bound is the pure-SHARDS one (:data:`bounded.MEASURED_ERROR_NO_HEAD`).

``P`` is the number of shuffle partitions: at least twice the cluster's threads, and enough that
one partition's kernel fits a worker's share of memory (:func:`shuffle_partitions`). The result
says which engine ran: ``provenance.engine`` (cluster, scheduler, workers, versions) and a note;
``trace.sampling.block_passes`` is ``P``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numba import njit

from fcctl.analyzers.analyze import (
    AnalysisResult,
    DatasetSummary,
    Note,
    NoteCode,
    VerdictThresholds,
    check_geometry,
    check_schedule_args,
)
from fcctl.analyzers.bounded import (
    BYTES_PER_HEAD_BLOCK,
    BlockTotals,
    BoundedPasses,
    MemoryPlan,
    _analyze_bounded,
    analyze_dataset,
    check_budget,
    check_sample_rate,
    default_memory_budget,
    largest_capacity_blocks,
    plan_memory,
    refuse_schedule,
    seconds_values_limit,
)
from fcctl.analyzers.dataset import Dataset, is_dataset_spec, open_dataset
from fcctl.analyzers.memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES
from fcctl.analyzers.shards import (
    HASH_SPACE,
    SampledStack,
    exact_head,
    rate_threshold,
    sampled_stack,
    splitmix64,
)
from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.progress import Progress
from fcctl.common.version import fcctl_version, package_version
from fcctl.layout.geometry import KvGeometry

if TYPE_CHECKING:
    from distributed import Client, Future

#: Seconds to reach a ``--scheduler`` (and for it to have a worker) before giving up.
CONNECT_TIMEOUT_S = 5.0
#: A local cluster starts at most one worker per this much of the memory budget.
MIN_LOCAL_WORKER_BYTES = 1 << 30
#: A worker's memory outside the model: the interpreter, numba, polars, pandas, Dask.
WORKER_BASELINE_BYTES = 384 << 20
#: The share of a worker thread's memory (less the baseline) one shuffle partition may use:
#: the rest is Dask's (shuffle buffers, spilling starts at 60 %).
WORKER_MEMORY_SHARE = 0.5
#: Bytes per access of a partition's kernel: the shuffled row (position 8, block 8, bucket 4),
#: the sort order (8), the sorted ids (8), the kernel's dense ids, tree and block tables, and
#: the shuffle's copy of the row. Measured: about 110 (5 M accesses, 5 % distinct), + margin.
BYTES_PER_SHUFFLED_ACCESS = 128
#: Bytes per request of a partition's kernel: block counts, distances in requests and
#: re-accesses per request (int64 each), the timestamps (float64), the session index, slack.
BYTES_PER_WORKER_REQUEST = 48
#: Bytes per access of a part while it is exploded into shuffle rows: the ids (8), their hash
#: (8), the rows (24), the arrays they are made from and Arrow's column. Measured: 75 (a part
#: of 4.9 M accesses), with margin.
BYTES_PER_EXPLODED_ACCESS = 96
#: The share of a worker thread's memory (less the baseline) one part's explode may use.
EXPLODE_MEMORY_SHARE = 0.8
#: Buckets per shuffle partition: Dask hashes bucket numbers to partitions, and many buckets
#: per partition keep the partitions' sizes within a few per cent of each other.
BUCKETS_PER_PARTITION = 64


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


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the local cluster starts its worker processes, which inherit that.

    A Ctrl-C at the terminal goes to the whole process group: the workers leave it to this
    process, which closes the cluster, instead of dying half-started with tracebacks of their
    own. A Ctrl-C in this window (about a second) is lost; the next one stops the run.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def dask_setup(worker: object) -> None:
    """Dask's preload hook, run in each local worker process as it starts: ignore SIGINT.

    For a worker its nanny restarts later, which does not inherit :func:`_sigint_ignored`.
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
        with _sigint_ignored():
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                memory_limit=memory_budget_bytes // workers,
                silence_logs=logging.ERROR,
                # The scheduler's HTTP routes (health, metrics; no dashboard) on a free
                # loopback port, not on 8787 of every interface.
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                preload=[__name__],  # dask_setup: the workers ignore Ctrl-C
            )
        stack.enter_context(cluster)
        client = stack.enter_context(Client(cluster, set_as_default=False))
        yield client, _facts(client, "local", str(cluster.scheduler_address))


# --- the tasks (run on the workers) -----------------------------------------------------------


def _part_blocks(path: Path, rows: int, accesses: int) -> tuple[np.ndarray, np.ndarray]:
    """One part's (block count per row, block ids), checked against what was opened."""
    column = pq.read_table(path, columns=["hash_ids"]).column(0)
    lens = pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64)
    ids = np.concatenate(
        [c.flatten().to_numpy(zero_copy_only=False) for c in column.chunks]
        or [np.zeros(0, dtype=np.uint64)]
    ).astype(np.uint64, copy=False)
    if lens.shape[0] != rows or ids.shape[0] != accesses or int(lens.sum()) != accesses:
        raise FcctlInputError(
            f"{path}: holds {lens.shape[0]:,} rows and {ids.shape[0]:,} block accesses, but "
            f"{rows:,} and {accesses:,} when the dataset was opened: it changed during the "
            "analysis"
        )
    return lens, ids


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


def _explode_part(
    path: Path, rank: np.ndarray, accesses: int, buckets: int, threshold: int
) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    """One part's accesses as shuffle rows, and its SHARDS sample (module docstring).

    Rows: ``position`` (int64), ``block`` (uint64), ``bucket`` (uint32): 20 bytes an access.
    The sample: the kept accesses' (position, block id).
    """
    import pandas as pd

    lens, ids = _part_blocks(path, rank.shape[0], accesses)
    if rank.shape[0] and (int(rank[-1]) >> 32 or int(lens.max()) >> POSITION_BITS):
        raise FcctlInputError(
            f"{path}: a request at analysis position {int(rank[-1]):,} or one of "
            f"{int(lens.max()):,} blocks is past what the Dask engine encodes (2^32 requests, "
            f"2^{POSITION_BITS} blocks a request); use --engine local"
        )
    position = _positions(rank.astype(np.int64), lens, ids.shape[0])
    h = splitmix64(ids)
    kept = h < np.uint64(threshold)
    rows = pd.DataFrame(
        {"position": position, "block": ids, "bucket": (h % np.uint64(buckets)).astype(np.uint32)}
    )
    return rows, (position[kept], ids[kept])


def _partition_totals(
    rows: Any,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    num_requests: int,
    num_sessions: int,
    max_seconds_values: int,
) -> BlockTotals:
    """The exact block totals of one shuffle partition (whole buckets), in analysis order."""
    position = rows["position"].to_numpy(dtype=np.int64)
    # The rows arrive as runs already in order (one per part and shuffle shard): timsort.
    order = np.argsort(position, kind="stable")
    ids = np.ascontiguousarray(rows["block"].to_numpy(dtype=np.uint64)[order])
    lens = np.bincount(position >> POSITION_BITS, minlength=num_requests).astype(np.int64)
    del rows, position, order
    totals = BlockTotals(num_requests, num_sessions, max_seconds_values=max_seconds_values)
    totals.add_bucket(ids, lens, timestamp_s, session)
    return totals


def _head_pass(dataset: Dataset, depth: int) -> np.ndarray:
    """The exact head (:func:`~fcctl.analyzers.shards.exact_head`) over the ordered stream."""
    return exact_head(lambda: (ids for _, ids in dataset.iter_blocks()), depth)


# --- the passes (run from here) ---------------------------------------------------------------


def shuffle_partitions(
    dataset: Dataset, facts: ClusterFacts, budget_bytes: int, parameter: str
) -> int:
    """``P``: at least 2 per thread, and enough that a partition's kernel fits a thread's share.

    A thread's memory is (the smallest worker's limit, or the budget when unlimited, less
    :data:`WORKER_BASELINE_BYTES`) over the worker's threads. A partition's kernel may use
    :data:`WORKER_MEMORY_SHARE` of it: :data:`BYTES_PER_WORKER_REQUEST` a request of the
    dataset and :data:`BYTES_PER_SHUFFLED_ACCESS` an access of the partition. Exploding a part
    takes :data:`BYTES_PER_EXPLODED_ACCESS` an access of the part, up to
    :data:`EXPLODE_MEMORY_SHARE` of it. Workers too small for either are refused (``parameter``
    names what to raise).
    """
    memory = facts.worker_memory_limit_bytes or budget_bytes
    thread = (memory - WORKER_BASELINE_BYTES) * max(facts.workers, 1) / max(facts.threads, 1)
    more = (
        "raise --memory-budget" if parameter == "memory_budget" else "give the workers more memory"
    )
    biggest = max(dataset.parts, key=lambda p: p.block_accesses)
    if biggest.block_accesses * BYTES_PER_EXPLODED_ACCESS > thread * EXPLODE_MEMORY_SHARE:
        raise FcctlInputError(
            f"{parameter}: a Dask worker thread has about {max(thread, 0):,.0f} bytes, and "
            f"exploding part {biggest.path} ({biggest.block_accesses:,} block accesses) needs "
            f"about {biggest.block_accesses * BYTES_PER_EXPLODED_ACCESS:,}; {more}, or cut the "
            "dataset into smaller parts",
            parameter=parameter,
        )
    room = thread * WORKER_MEMORY_SHARE - dataset.num_requests * BYTES_PER_WORKER_REQUEST
    if room < BYTES_PER_SHUFFLED_ACCESS << 16:
        raise FcctlInputError(
            f"{parameter}: a Dask worker thread has about {max(thread, 0):,.0f} bytes, but a "
            f"shuffle partition's per-request arrays alone take "
            f"{dataset.num_requests * BYTES_PER_WORKER_REQUEST:,} ({dataset.num_requests:,} "
            f"requests); {more}",
            parameter=parameter,
        )
    need = math.ceil(dataset.block_accesses * BYTES_PER_SHUFFLED_ACCESS / room)
    return max(2 * max(facts.threads, 1), need)


def _map_files(client: Client) -> Callable[..., Iterable[Any]]:
    """``open_dataset``'s ``map_files``: one task per file on the workers, results in order.

    The first failed read (in file order) raises its own error, as the reads one after
    another would; the other tasks are cancelled then (and on Ctrl-C).
    """

    def map_files(read: Callable[[Path], Any], files: Sequence[Path]) -> Iterator[Any]:
        futures = client.map(read, list(files), pure=False)
        try:
            for f in futures:
                yield f.result()
        finally:
            for f in futures:
                f.cancel()

    return map_files


def _dask_passes(client: Client) -> BoundedPasses:
    """The bounded analysis's passes (:data:`bounded.BoundedPasses`) on the cluster."""

    def passes(
        dataset: Dataset,
        plan: MemoryPlan,
        timestamp_s: np.ndarray,
        session: np.ndarray | None,
        n_sessions: int,
        progress: Progress,
    ) -> tuple[SampledStack, BlockTotals]:
        from distributed import KilledWorker, as_completed

        assert plan.sample_rate is not None
        threshold = rate_threshold(plan.sample_rate)
        limit = seconds_values_limit(plan.budget_bytes)
        n_req = dataset.num_requests
        totals = BlockTotals(n_req, n_sessions, max_seconds_values=limit)
        pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        head_count = np.zeros(0, dtype=np.int64)
        futures: list[Future] = []
        try:
            head = None
            if plan.exact_below_blocks > 0:
                # The parts' ranks travel to the worker; the request table stays here.
                light = dataclasses.replace(dataset, requests=dataset.requests.clear())
                head = client.submit(
                    _head_pass, client.scatter(light), plan.exact_below_blocks, pure=False
                )
                futures.append(head)
            partial, samples = _graph(
                client, dataset, plan, threshold, timestamp_s, session, n_sessions, limit
            )
            # One graph: each part is read once, for both the shuffle and the sample.
            computed = client.compute(partial + samples)
            futures.extend(computed)
            role = {f.key: i for i, f in enumerate(computed)}
            label = (
                f"Dask: {plan.block_passes} block partitions, SHARDS sample at "
                f"{plan.sample_rate:g}" + (", exact head" if head is not None else "")
            )
            with progress.task(label, len(futures)) as task:
                for done, f in enumerate(as_completed(futures, loop=client.loop), start=1):
                    value = f.result()
                    if head is not None and f.key == head.key:
                        head_count = value
                    elif role[f.key] < len(partial):
                        totals.add_totals(value)
                    else:
                        pieces[role[f.key]] = value
                    del value
                    task.update(done)
        except KilledWorker as e:
            raise RunFailed(
                f"a Dask worker died running {getattr(e, 'task', 'a task')!r} (out of memory?): "
                "give the workers more memory (--memory-budget for a local cluster) or cut the "
                "dataset into smaller parts"
            ) from None
        finally:
            for f in futures:
                f.cancel()
        sampled = _sample_stack(
            [pieces[k] for k in sorted(pieces)],
            threshold=threshold,
            accesses=dataset.block_accesses,
            exact_below_blocks=plan.exact_below_blocks,
            head_count=head_count,
        )
        return sampled, totals

    return passes


def _graph(
    client: Client,
    dataset: Dataset,
    plan: MemoryPlan,
    threshold: int,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    n_sessions: int,
    max_seconds_values: int,
) -> tuple[list[Any], list[Any]]:
    """The Dask graph: (per shuffle partition, its block totals; per part, its sample)."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    buckets = plan.block_passes * BUCKETS_PER_PARTITION
    ranks = client.scatter([p.rank for p in dataset.parts])
    shared = client.scatter([timestamp_s, session], broadcast=True)
    exploded = [
        dask.delayed(_explode_part, nout=2, pure=False)(
            p.path, rank, p.block_accesses, buckets, threshold
        )
        for p, rank in zip(dataset.parts, ranks, strict=True)
    ]
    meta = pd.DataFrame(
        {
            "position": np.zeros(0, np.int64),
            "block": np.zeros(0, np.uint64),
            "bucket": np.zeros(0, np.uint32),
        }
    )
    rows = dd.from_delayed([e[0] for e in exploded], meta=meta, verify_meta=False)
    shuffled = rows.shuffle(on="bucket", npartitions=plan.block_passes, shuffle_method="p2p")
    partial = [
        dask.delayed(_partition_totals, pure=False)(
            part, shared[0], shared[1], dataset.num_requests, n_sessions, max_seconds_values
        )
        for part in shuffled.to_delayed()
    ]
    return partial, [e[1] for e in exploded]


def _sample_stack(
    pieces: list[tuple[np.ndarray, np.ndarray]],
    *,
    threshold: int,
    accesses: int,
    exact_below_blocks: int,
    head_count: np.ndarray,
) -> SampledStack:
    """The SHARDS result of the gathered sample: sorted to analysis order, the exact kernel."""
    position = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    ids = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.uint64)
    ids = ids[np.argsort(position, kind="stable")]
    del position
    # Rate 1 of the sampled stream: its stack distances, by the exact kernel.
    own = sampled_stack(ids, rate=1.0)
    return SampledStack(
        method="fixed-rate",
        rate=threshold / HASH_SPACE,
        threshold=threshold,
        accesses=accesses,
        sampled_accesses=own.accesses,
        sampled_blocks=own.sampled_blocks,
        stack_count=own.stack_count,
        exact_below_blocks=exact_below_blocks,
        head_count=head_count,
    )


# --- the analysis -----------------------------------------------------------------------------


def _check_input(spec: str | Path) -> bool:
    """Refuse what is not canonical Parquet; True when ``spec`` is one file, not a dataset."""
    from fcctl.analyzers.readers import detect_format

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

    The figures, plan and rate are those of :func:`~fcctl.analyzers.bounded.analyze_dataset`
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
    with dask_client(scheduler, memory_budget_bytes=budget) as (client, facts):
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
                parameter="scheduler" if scheduler is not None else "memory_budget",
            )
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
) -> tuple[AnalysisResult, str]:
    partitions = shuffle_partitions(dataset, facts, plan.budget_bytes, parameter)
    head = plan.exact_below_blocks if exact_head else 0
    worker_memory = facts.worker_memory_limit_bytes
    if worker_memory is not None and head * BYTES_PER_HEAD_BLOCK > WORKER_MEMORY_SHARE * (
        worker_memory - WORKER_BASELINE_BYTES
    ):
        head = 0
    plan = dataclasses.replace(plan, block_passes=partitions, exact_below_blocks=head)
    result = _analyze_bounded(
        dataset,
        plan,
        geometry=geometry,
        capacities=sorted(set(capacities or DEFAULT_MEMORY_CAPACITIES_BYTES)),
        progress=progress,
        thresholds=thresholds,
        summary=DatasetSummary(dataset.mode, len(dataset.parts), dataset.units),
        passes=_dask_passes(client),
    )
    how = (
        f"every block access was shuffled by splitmix64 bucket into {partitions} partitions "
        "for the exact figures, the SHARDS sample was gathered from the workers, and "
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
