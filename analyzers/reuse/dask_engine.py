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
  second hash; :mod:`~fcctl.analyzers.reuse.dask.shuffle`) and drops that column: 16 bytes an
  access on the workers' disks. Every access of a block lands in one partition, so each
  partition's rows, sorted by position, are the analysis-order sub-stream of a set of whole
  blocks (a bucket of the single-node passes), and the exact kernel of the single-node bucket passes
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
:mod:`~fcctl.analyzers.reuse.dask.cluster`). ``P``, the number of shuffle partitions, is at
least twice the cluster's threads and enough that one partition's unpack and kernel fit
(:func:`plan_shuffle`); the pieces are cut to fit too. A cluster too small for the widest
request or for the per-request arrays is refused before any work, with the memory limit a
worker would need.

**Failures.** Nothing is scattered: the per-request arrays are a node of the graph and each
piece's analysis positions its task's argument, so when a worker dies the scheduler runs its
tasks again elsewhere (``distributed.scheduler.allowed-failures``, 3 by default) and the P2P
shuffle restarts. A failure past that (``KilledWorker``, cancelled futures, a lost
connection, a failed shuffle) is a :class:`~fcctl.common.errors.RunFailed` (exit 1) of one
line naming the stage and what to do
(:func:`~fcctl.analyzers.reuse.dask.failures.cluster_failure`); the local cluster is closed and
its logs are silenced, so that line is all that is printed.

The result says which engine ran: ``provenance.engine`` (cluster, scheduler, workers,
versions) and a note; ``trace.sampling.block_passes`` is ``P``.

**Modules.** The engine is the package :mod:`fcctl.analyzers.reuse.dask`: ``cluster`` (start
or connect, the scheduler check, the workers' signals), ``parts`` (reading the parts on the
workers), ``room`` (the workers' memory and the shuffle's plan), ``shuffle`` (the block shuffle
and the block passes), ``failures`` (a failure of the cluster as one line) and ``analysis``
(:func:`analyze_dask`, the assembly of the result). This module names their public names.
"""

from __future__ import annotations

from .dask.analysis import LARGE_GRAPH_WARNING, analyze_dask
from .dask.cluster import (
    CONNECT_TIMEOUT_S,
    LOCAL_P2P_COMM_BUFFER_BYTES,
    LOCAL_P2P_STORAGE_BUFFER_BYTES,
    MIN_LOCAL_WORKER_BYTES,
    ClusterFacts,
    dask_client,
    dask_setup,
    local_workers,
)
from .dask.parts import Piece, plan_pieces
from .dask.room import (
    BYTES_PER_EXPLODED_ACCESS,
    BYTES_PER_SHUFFLED_ACCESS,
    BYTES_PER_WORKER_REQUEST,
    HEAD_STREAM_BYTES,
    MAX_PIECE_ACCESSES,
    TASK_MEMORY_SHARE,
    WORKER_BASELINE_BYTES,
    ShufflePlan,
    WorkerRoom,
    plan_shuffle,
    worker_room,
)
from .dask.shuffle import POSITION_BITS

__all__ = [
    "BYTES_PER_EXPLODED_ACCESS",
    "BYTES_PER_SHUFFLED_ACCESS",
    "BYTES_PER_WORKER_REQUEST",
    "CONNECT_TIMEOUT_S",
    "HEAD_STREAM_BYTES",
    "LARGE_GRAPH_WARNING",
    "LOCAL_P2P_COMM_BUFFER_BYTES",
    "LOCAL_P2P_STORAGE_BUFFER_BYTES",
    "MAX_PIECE_ACCESSES",
    "MIN_LOCAL_WORKER_BYTES",
    "POSITION_BITS",
    "TASK_MEMORY_SHARE",
    "WORKER_BASELINE_BYTES",
    "ClusterFacts",
    "Piece",
    "ShufflePlan",
    "WorkerRoom",
    "analyze_dask",
    "dask_client",
    "dask_setup",
    "local_workers",
    "plan_pieces",
    "plan_shuffle",
    "worker_room",
]
