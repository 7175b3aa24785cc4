"""What one task may use on the Dask workers (:class:`WorkerRoom`, from their own settings),
and the block shuffle's plan sized to it (:func:`plan_shuffle`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask

from fcctl.common.errors import FcctlInputError

from ...traces.dataset import Dataset
from .cluster import ClusterFacts

if TYPE_CHECKING:
    from distributed import Client

#: A worker process's memory outside the tasks: the interpreter, numba, polars, pandas, Dask.
#: Measured: 0.5 GiB for a local worker as it starts, 0.67 GiB between tasks of a 1 B-access
#: run (what the allocator keeps; the per-access figures below count the rest).
WORKER_BASELINE_BYTES = 512 << 20
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
#: The exact head's ordered pass outside its table: a merge batch per file and its copies.
HEAD_STREAM_BYTES = 256 << 20


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
        "raise `memory_budget_bytes`"
        if parameter == "memory_budget_bytes"
        else "give the workers more memory"
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
