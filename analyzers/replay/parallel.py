"""Independent simulations on one workload: in this process, in worker processes, or on Dask.

A replay's load and size points and the recommender's grid are many simulations of one
:class:`~fcctl.analyzers.replay.workload.Workload`, each independent and deterministic (its own
:class:`~fcctl.analyzers.replay.engine.Simulation`, seeded), so where one runs changes nothing
in its result. A :class:`Runner` runs a batch of :class:`SimTask` and reports each result as it
finishes; :func:`open_runner` picks one from an :class:`Execution`:

* ``engine="local"``, ``jobs=1``: one after another in this process.
* ``engine="local"``, ``jobs=N``: N worker processes sharing one copy of the workload (the
  workload, not the trace, so no worker rebuilds it or holds the trace's block hashes): its
  large arrays are files in memory (``/dev/shm``) without a name, which every worker maps
  (:class:`_SharedWorkload`). The workers come from a fork server
  (:func:`start_worker_server`), started while this process is still small; the server and
  the workers end with this process, even when it is killed with SIGKILL
  (:mod:`fcctl.common.lifeline`).
* ``engine="dask"``: the workload is scattered once to every worker of the cluster
  (``broadcast``: one copy per worker, about 4 bytes a block access plus the per-request
  arrays, less than the trace's hash lists) and each simulation is a task on it. A worker
  that dies loses only its copy and its task, which the scheduler runs again on another
  (``distributed.scheduler.allowed-failures``); a run the cluster cannot finish (every copy
  lost, a task's workers dead past the retries, the scheduler gone) raises
  :class:`~fcctl.common.errors.RunFailed`, one line (exit 1), as ``fcctl analyze --engine
  dask`` does. Without ``scheduler`` a local cluster is started for the run and closed on
  every way out (:func:`fcctl.analyzers.reuse.dask_engine.dask_client`).

**Worker counts** (:func:`default_jobs`): the CPUs this process may run on, at most one per
:func:`worker_bytes` (what a worker process holding the workload peaks at while it simulates)
within the memory budget (default 30 % of this machine's memory), at least one; a workload
under :data:`PARALLEL_MIN_ACCESSES` block accesses runs here (its simulations are quicker than
a worker's start).

**Progress.** Every runner reports a simulation's requests as it goes (the engine calls back
every 1,024 requests): in this process directly, from worker processes over a queue, from Dask
workers as events of a topic of the run; :class:`SimulationDisplay` draws one line per
simulation in flight beside the overall line, each with the time left.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import TYPE_CHECKING, Any, Protocol

from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.lifeline import exit_with_parent
from fcctl.common.progress import Progress, Task
from fcctl.common.signals import starting_children, worker_ignores_sigint

if TYPE_CHECKING:
    from .result import PolicyResult
    from .spec import RunSpec
    from .workload import Workload

ENGINES: tuple[str, ...] = ("local", "dask")
#: A simulation worker's peak memory: a base (interpreter, numpy, polars, numba) plus bytes per
#: block access of the workload it holds (its dense block ids, the store's per-block arrays,
#: the per-request logs). Measured: a worker of the whole Claude Code trace (94.3 M accesses,
#: 49 K requests) peaks at 1.0 GiB (VmHWM, docs/benchmarks.md, issue #19); this says 1.5 GB.
WORKER_BASE_BYTES = 512 << 20
WORKER_BYTES_PER_ACCESS = 10
WORKER_BYTES_PER_REQUEST = 1024
#: Below this many block accesses a simulation takes well under a second, less than a worker
#: process takes to start (about a second: the interpreter, numpy, polars, the numba cache),
#: so the default runs them here.
PARALLEL_MIN_ACCESSES = 1_000_000
#: Seconds between looks at the progress queue while waiting for results.
POLL_S = 0.25


@dataclass(frozen=True)
class SimTask:
    """One simulation: ``policy`` at a rate (requests/s) or a concurrency, with ``spec``'s
    settings (:class:`~fcctl.analyzers.replay.spec.RunSpec`: the node's sizes, the placement)."""

    spec: RunSpec
    policy: str
    rate: float | None
    concurrency: int | None = None

    @property
    def label(self) -> str:
        at = f"{self.rate:.3g} req/s" if self.rate is not None else f"{self.concurrency} sessions"
        return f"{self.policy} at {at}"


#: Runs one task on a workload: :func:`fcctl.analyzers.replay.run.run_task` (passed in, so this
#: module does not import the simulator; a module-level function, or a ``functools.partial``
#: of one, pickles by reference).
TaskFn = Callable[["Workload", SimTask, "Callable[[int], None] | None"], "PolicyResult"]
Done = Callable[[int, "PolicyResult"], None]
Advance = Callable[[int, int], None]


@dataclass(frozen=True)
class Execution:
    """Where simulations run: ``engine`` (local or dask), ``jobs`` (local worker processes;
    None: :func:`default_jobs`), ``scheduler`` (a Dask scheduler's address; None: a local
    cluster), ``memory_budget_bytes`` (what the run may use; None: 30 % of the machine's)."""

    engine: str = "local"
    jobs: int | None = 1
    scheduler: str | None = None
    memory_budget_bytes: int | None = None


def check_execution(execution: Execution) -> None:
    """Refuse an unknown engine, bad jobs, a scheduler without dask, dask when not installed."""
    from ..reuse.bounded import check_engine

    check_engine(execution.engine, execution.scheduler)
    jobs = execution.jobs
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise FcctlInputError(f"jobs: must be an integer >= 1; got {jobs!r}", parameter="jobs")
    if execution.engine == "dask" and jobs not in (None, 1):
        raise FcctlInputError(
            f"jobs: local worker processes; with engine dask the cluster's workers run the "
            f"simulations (a local cluster: one per CPU within the memory budget); got {jobs!r}",
            parameter="jobs",
        )


def worker_bytes(w: Workload) -> int:
    """A simulation worker's peak memory holding ``w`` (module docstring), bytes."""
    return (
        WORKER_BASE_BYTES
        + w.block_accesses * WORKER_BYTES_PER_ACCESS
        + w.requests * WORKER_BYTES_PER_REQUEST
    )


def cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def budget_bytes(memory_budget_bytes: int | None) -> int:
    from ..reuse.bounded import default_memory_budget

    return default_memory_budget() if memory_budget_bytes is None else memory_budget_bytes


def default_jobs(w: Workload, memory_budget_bytes: int | None = None) -> int:
    """Worker processes: the CPUs available, at most one per :func:`worker_bytes` within the
    memory budget (default 30 % of the machine's), at least one; one (this process) for a
    workload under :data:`PARALLEL_MIN_ACCESSES` block accesses."""
    if w.block_accesses < PARALLEL_MIN_ACCESSES:
        return 1
    room = budget_bytes(memory_budget_bytes) // worker_bytes(w)
    return max(1, min(cpus(), room))


class Runner(Protocol):
    """Runs batches of tasks on one workload; ``close`` stops its workers."""

    #: ``provenance.engine`` of a result: what ran the simulations.
    facts: dict[str, Any]

    def run(self, tasks: Sequence[SimTask], done: Done, advance: Advance | None = None) -> None:
        """Run every task; ``done(i, result)`` as task ``i`` finishes (any order),
        ``advance(i, requests)`` as it goes."""
        ...

    def close(self, *, abort: bool = False) -> None: ...


class SerialRunner:
    """Every task in this process, in order."""

    def __init__(self, workload: Workload, fn: TaskFn) -> None:
        self._workload = workload
        self._fn = fn
        self.facts: dict[str, Any] = {"name": "local", "jobs": 1}

    def run(self, tasks: Sequence[SimTask], done: Done, advance: Advance | None = None) -> None:
        for i, task in enumerate(tasks):
            step = None if advance is None else _bind(advance, i)
            done(i, self._fn(self._workload, task, step))

    def close(self, *, abort: bool = False) -> None:
        del abort


def _bind(advance: Advance, i: int) -> Callable[[int], None]:
    def step(n: int) -> None:
        advance(i, n)

    return step


# One per worker process: the workload and the function that runs a task on it.
_WORKER: tuple[Workload, TaskFn, Any] | None = None


#: Arrays of at least this many bytes go to the workers as shared files, not through pipes.
SHARED_ARRAY_BYTES = 1 << 20


class _SharedWorkload:
    """The workload for worker processes: its large arrays written once as ``.npy`` data to
    files in memory (``/dev/shm`` where it exists) that have no name, each passed to every
    worker as a file descriptor when it starts (multiprocessing duplicates it into the worker),
    which maps it copy-on-write; the rest pickled. Pickled whole instead, a 94 M-access workload
    costs each worker 0.4 GB through a pipe and the parent several copies (measured: 10 s of
    system time for two workers on the whole Claude Code trace, docs/benchmarks.md); mapped,
    the pages are one copy in memory, shared.

    Nameless (``O_TMPFILE``, or a name removed as soon as the file is open), the files are
    nothing anyone could leave behind: a parent killed with SIGKILL, which runs no cleanup,
    once left its ``fcctl-workload-*`` directory in ``/dev/shm`` (issue #36, item 10). The
    memory is freed when the last descriptor and mapping of it close: the parent's when the
    runner closes (:meth:`close`), a worker's when it exits."""

    def __init__(self, workload: Workload, min_bytes: int | None = None) -> None:
        import dataclasses

        import numpy as np

        least = SHARED_ARRAY_BYTES if min_bytes is None else min_bytes
        self.fds: dict[str, int] = {}
        small: dict[str, Any] = {}
        try:
            for f in dataclasses.fields(workload):
                value = getattr(workload, f.name)
                if isinstance(value, np.ndarray) and value.nbytes >= least:
                    fd = self.fds[f.name] = _unnamed_file()
                    with os.fdopen(os.dup(fd), "wb") as out:
                        np.save(out, value, allow_pickle=False)
                    small[f.name] = value[:0]
        except BaseException:
            self.close()
            raise
        self.rest = dataclasses.replace(workload, **small)

    def load(self) -> Workload:
        import dataclasses

        import numpy as np

        arrays = {
            name: np.load(_descriptor_path(fd), mmap_mode="c") for name, fd in self.fds.items()
        }
        return dataclasses.replace(self.rest, **arrays)

    def close(self) -> None:
        """Close this process's descriptors (mappings made by :meth:`load` stay valid)."""
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled as a worker starts: each descriptor is duplicated into that worker (by its
        # start method: sent over the fork server's socket, or inherited by a spawned child).
        from multiprocessing.reduction import DupFd

        return {"fds": {name: DupFd(fd) for name, fd in self.fds.items()}, "rest": self.rest}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.rest = state["rest"]
        self.fds = {name: dup.detach() for name, dup in state["fds"].items()}


def _unnamed_file() -> int:
    """A read-write descriptor of a new file in memory (``/dev/shm``, else the temporary
    directory) that has no name: made without one (``O_TMPFILE``) where the file system can,
    else named and the name removed at once."""
    import tempfile

    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
    unnamed = getattr(os, "O_TMPFILE", 0)
    if unnamed:
        with contextlib.suppress(OSError):  # a file system without unnamed files
            return os.open(where, unnamed | os.O_RDWR, 0o600)
    fd, path = tempfile.mkstemp(prefix="fcctl-workload-", suffix=".npy", dir=where)
    os.unlink(path)
    return fd


def _descriptor_path(fd: int) -> str:
    """A path that opens what descriptor ``fd`` of this process holds, even without a name."""
    proc = "/proc/self/fd"
    return f"{proc if os.path.isdir(proc) else '/dev/fd'}/{fd}"


def _init_worker(shared: _SharedWorkload, fn: TaskFn, updates: Any, owner: int) -> None:
    global _WORKER
    # The parent owns the workers and stops them on Ctrl-C (which reaches the whole process
    # group) and on SIGTERM (see ProcessRunner.close); killed with SIGKILL, it can stop nothing,
    # so each worker ends with it by itself.
    exit_with_parent(owner)
    worker_ignores_sigint()
    workload = shared.load()
    shared.close()  # mapped: the descriptors are not needed any more
    _WORKER = (workload, fn, updates)


def _worker_run(i: int, task: SimTask) -> PolicyResult:
    assert _WORKER is not None, "worker not initialised"
    workload, fn, updates = _WORKER

    def step(n: int) -> None:
        with contextlib.suppress(Exception):  # progress is best effort
            updates.put_nowait((i, n))

    return fn(workload, task, step)


#: Imported once by the fork server, so no worker imports them again. Not polars: it starts
#: threads when imported (jemalloc's, its spill cleaner), and a process that forks must have
#: none; numpy's BLAS threads are fork-safe (OpenBLAS re-creates them after ``fork``). The
#: last ties the server to this process (it ends when this one does, even by SIGKILL).
SERVER_PRELOAD: tuple[str, ...] = ("numpy", "numba", "fcctl.common.forkserver_lifeline")


def worker_context() -> multiprocessing.context.BaseContext:
    """Where worker processes come from: ``forkserver`` where the platform has it, else
    ``spawn``. Started from this process, each worker would be a ``fork`` + ``exec`` of it,
    and once it holds a large trace the ``fork`` alone copies its page tables: measured 0.56 s
    a worker with the whole Claude Code trace loaded (docs/benchmarks.md, "fcctl replay").
    Forked from the small server instead, a worker starts in milliseconds with numpy and
    numba already imported."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(SERVER_PRELOAD))
    return ctx


def start_worker_server(execution: Execution | None = None) -> None:
    """Start the processes the local workers come from (the fork server and multiprocessing's
    resource tracker) now, before a trace is read, so that neither is forked from a process
    holding it; a no-op where they run already, for the Dask engine and for ``jobs=1``. The
    server starts with interrupts blocked (:func:`starting_children`), as its workers then do;
    it ends when this process does."""
    if execution is not None and (execution.engine != "local" or execution.jobs == 1):
        return
    # multiprocessing starts its resource tracker with the first worker, and unblocks SIGINT
    # when it does: started first, it leaves the mask of starting_children alone.
    resource_tracker.ensure_running()
    ctx = worker_context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        with starting_children():
            forkserver.ensure_running()


class ProcessRunner:
    """Tasks in ``jobs`` worker processes, each given the workload once."""

    def __init__(self, workload: Workload, fn: TaskFn, jobs: int) -> None:
        start_worker_server()
        ctx = worker_context()
        self._jobs = jobs
        self._shared = _SharedWorkload(workload)
        self._updates = ctx.Queue()
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(self._shared, fn, self._updates, os.getpid()),
        )
        self._batch = 0
        self.facts: dict[str, Any] = {"name": "local", "jobs": jobs}

    def run(self, tasks: Sequence[SimTask], done: Done, advance: Advance | None = None) -> None:
        assert self._pool is not None, "the runner is closed"
        # Task numbers are unique over the runner's life: a late update of an earlier batch
        # is told apart from this one's.
        base = self._batch
        self._batch += len(tasks)
        # Workers start in submit, with interrupts held until they have (see starting_children:
        # no traceback from a worker cut off while it starts, none from one hit by Ctrl-C).
        with starting_children():
            futures = {
                self._pool.submit(_worker_run, base + i, task): i for i, task in enumerate(tasks)
            }
        pending: set[Future[Any]] = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                self._drain(base, len(tasks), advance)
                for f in finished:
                    done(futures[f], f.result())
        except BrokenProcessPool:
            raise RunFailed(
                f"a simulation worker process died (out of memory? {self._jobs} workers each "
                "hold the workload); run with fewer --jobs"
            ) from None

    def _drain(self, base: int, n: int, advance: Advance | None) -> None:
        while True:
            try:
                i, requests = self._updates.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if advance is not None and base <= i < base + n:
                advance(i - base, requests)

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers: after their tasks, or (``abort``: an error or an interrupt in the
        parent) at once, tasks in flight dropped, so none outlives the run."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if abort:
            # The executor offers no way to stop busy workers before Python 3.14
            # (terminate_workers); its process table is the only list of them.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            for process in processes:
                with contextlib.suppress(OSError, ValueError):
                    process.terminate()
            for process in processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
                    process.join()
        # With no worker left the executor's own thread ends at once; waited for, so it is not
        # still closing its pipes when the interpreter's exit hook writes to them.
        pool.shutdown(wait=True, cancel_futures=True)
        self._updates.close()
        self._updates.join_thread()
        self._shared.close()


def _dask_run(fn: TaskFn, workload: Workload, topic: str, i: int, task: SimTask) -> PolicyResult:
    """A task on a Dask worker: the simulation, its progress sent as events of ``topic``."""
    from distributed import get_worker

    worker = get_worker()

    def step(n: int) -> None:
        with contextlib.suppress(Exception):  # progress is best effort
            worker.log_event(topic, (i, n))

    return fn(workload, task, step)


class DaskRunner:
    """Tasks on a Dask cluster, the workload scattered once to every worker."""

    def __init__(self, client: Any, cluster_facts: Any, workload: Workload, fn: TaskFn) -> None:
        import dataclasses

        self._client = client
        self._fn = fn
        self._topic = f"fcctl-simulation-progress-{uuid.uuid4().hex}"
        self._updates: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._batch = 0
        self.facts: dict[str, Any] = dataclasses.asdict(cluster_facts)
        # One copy per worker (broadcast): the tasks find it where they run; hash=False: the
        # key does not hash the arrays (hashing 100s of MB costs seconds).
        self._workload = client.scatter(workload, broadcast=True, hash=False)
        client.subscribe_topic(self._topic, self._on_event)

    def _on_event(self, event: Any) -> None:
        _, message = event
        self._updates.put(tuple(message))

    def run(self, tasks: Sequence[SimTask], done: Done, advance: Advance | None = None) -> None:
        base = self._batch
        self._batch += len(tasks)
        finished: queue.SimpleQueue[Any] = queue.SimpleQueue()
        futures = {}
        for i, task in enumerate(tasks):
            future = self._client.submit(
                _dask_run,
                self._fn,
                self._workload,
                self._topic,
                base + i,
                task,
                pure=False,
                key=f"simulation-{uuid.uuid4().hex}",
            )
            futures[future] = i
            future.add_done_callback(finished.put)
        left = len(futures)
        while left:
            try:
                future = finished.get(timeout=POLL_S)
            except queue.Empty:
                future = None
            while True:
                try:
                    i, requests = self._updates.get_nowait()
                except queue.Empty:
                    break
                if advance is not None and base <= i < base + len(tasks):
                    advance(i - base, requests)
            if future is not None:
                left -= 1
                done(futures[future], future.result())

    def close(self, *, abort: bool = False) -> None:
        del abort
        with contextlib.suppress(Exception):
            self._client.unsubscribe_topic(self._topic)
        with contextlib.suppress(Exception):
            self._client.cancel([self._workload], force=True)


@contextlib.contextmanager
def open_runner(workload: Workload, fn: TaskFn, execution: Execution) -> Iterator[Runner]:
    """The :class:`Runner` of ``execution`` on ``workload``, closed on every way out; a
    failure of the Dask cluster is one line (:class:`~fcctl.common.errors.RunFailed`)."""
    check_execution(execution)
    if execution.engine == "dask":
        dask_runner = _dask_runner(workload, fn, execution)
        del workload  # the workers hold it: this frame does not need to
        with dask_runner as runner:
            yield runner
        return
    jobs = execution.jobs or default_jobs(workload, execution.memory_budget_bytes)
    local: SerialRunner | ProcessRunner = (
        SerialRunner(workload, fn) if jobs == 1 else ProcessRunner(workload, fn, jobs)
    )
    del workload  # held by the runner (or, until its workers start, by their initializer)
    try:
        yield local
    except BaseException:
        local.close(abort=True)
        raise
    local.close()


@contextlib.contextmanager
def _dask_runner(workload: Workload, fn: TaskFn, execution: Execution) -> Iterator[DaskRunner]:
    from ..reuse.dask.failures import Stage, cluster_failure
    from ..reuse.dask_engine import dask_client

    need = worker_bytes(workload)
    budget = budget_bytes(execution.memory_budget_bytes)
    local = execution.scheduler is None
    stage = Stage()
    facts = None
    try:
        with dask_client(
            execution.scheduler, memory_budget_bytes=budget, min_worker_bytes=need
        ) as (client, facts):
            limit = facts.worker_memory_limit_bytes
            if limit is not None and limit < need:
                where = "memory_budget" if local else "scheduler"
                raise FcctlInputError(
                    f"{where}: a simulation worker holding this workload peaks at about "
                    f"{need / 2**30:.2f} GiB, over the workers' memory limit of "
                    f"{limit / 2**30:.2f} GiB; give the workers more memory"
                    + (" (a larger --memory-budget where the command has one)" if local else ""),
                    parameter=where,
                )
            stage.name = "scattering the workload to the workers"
            runner = DaskRunner(client, facts, workload, fn)
            del workload  # scattered: the workers hold their copies
            try:
                stage.name = "the simulations"
                yield runner
            finally:
                runner.close()
    except BaseException as e:
        todo = (
            "give each worker more memory (a larger --memory-budget where the command has "
            "one) or run on a cluster with more (--scheduler)"
            if local
            else "give the workers more memory, or add workers"
        )
        failed = cluster_failure(e, facts, stage, local=local, todo=todo)
        if failed is None:
            raise
        raise failed from None


class SimulationDisplay:
    """The overall line and one line per simulation in flight, each with the time left.

    ``overall`` counts simulations (``per_simulation=1``) or requests
    (``per_simulation=requests``): :meth:`advance` moves it by the requests a simulation ran
    since its last report, :meth:`done` by what is left of its share.
    """

    def __init__(self, progress: Progress, overall: Task, requests: int, per_simulation: float):
        self._progress = progress
        self._overall = overall
        self._requests = max(1, requests)
        self._per = per_simulation
        self._lines: dict[int, tuple[contextlib.ExitStack, Task]] = {}
        self._seen: dict[int, int] = {}
        self._labels: Sequence[str] = ()

    def start(self, tasks: Sequence[SimTask]) -> None:
        """A new batch: its labels; the lines of the previous batch are gone."""
        self.finish()
        self._labels = [t.label for t in tasks]
        self._seen = {}

    def advance(self, i: int, requests: int) -> None:
        before = self._seen.get(i, 0)
        if requests <= before:
            return
        self._seen[i] = requests
        self._overall.advance((requests - before) * self._per / self._requests)
        if self._progress.active:
            if i not in self._lines:
                stack = contextlib.ExitStack()
                line = stack.enter_context(
                    self._progress.task(
                        f"  {self._labels[i]}", total=self._requests, unit="requests"
                    )
                )
                self._lines[i] = (stack, line)
            self._lines[i][1].update(requests)

    def done(self, i: int) -> None:
        before = self._seen.pop(i, 0)
        self._overall.advance(
            (self._requests - min(before, self._requests)) * self._per / self._requests
        )
        self._seen[i] = self._requests
        line = self._lines.pop(i, None)
        if line is not None:
            line[0].close()

    def finish(self) -> None:
        for stack, _ in self._lines.values():
            stack.close()
        self._lines = {}
