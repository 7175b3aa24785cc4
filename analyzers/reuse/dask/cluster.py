"""The Dask engine's cluster: a local one started for the run, or a running scheduler reached
(within :data:`CONNECT_TIMEOUT_S`, its workers checked for the same fcctl version); the local
workers ignore Ctrl-C, and their P2P buffers are sized to them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask

from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.signals import deferred_interrupts, sigint_ignored
from fcctl.common.version import fcctl_version, package_version

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

#: Where the local cluster's unawaited errors go (:func:`quiet_loop`): debug, not stderr.
LOG = logging.getLogger("fcctl.dask")

#: Seconds to reach a ``--scheduler`` (and for it to have a worker) before giving up.
CONNECT_TIMEOUT_S = 5.0
#: A local cluster starts at most one worker per this much of the memory budget.
MIN_LOCAL_WORKER_BYTES = 1 << 30
#: The P2P shuffle's buffers on each worker of a local cluster: outgoing shards
#: (``distributed.p2p.comm.buffer``, a sixteenth of the worker's memory limit, at most 256 MiB;
#: Dask's default, 1 GiB, is a third of a 3 GiB worker) and shards before they are written to
#: disk (``distributed.p2p.storage.buffer``, a 32nd, at most Dask's default 100 MiB).
LOCAL_P2P_COMM_BUFFER_BYTES = 256 << 20
LOCAL_P2P_STORAGE_BUFFER_BYTES = 100 << 20


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


def local_workers(budget_bytes: int, min_worker_bytes: int = MIN_LOCAL_WORKER_BYTES) -> int:
    """Workers of a local cluster: one per CPU, at most one per ``min_worker_bytes`` of the
    budget (:data:`MIN_LOCAL_WORKER_BYTES`, or more for work that needs more)."""
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
    return max(1, min(cpus, budget_bytes // max(min_worker_bytes, MIN_LOCAL_WORKER_BYTES)))


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
            # By reference to fcctl.common.version, which every fcctl has: a worker of another
            # version answers with its version.
            theirs = client.run(fcctl_version)
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
    scheduler: str | None, *, memory_budget_bytes: int, min_worker_bytes: int = 0
) -> Iterator[tuple[Client, ClusterFacts]]:
    """A client of the ``scheduler``'s cluster, or of a local one started (and closed) here:
    one worker per CPU, at most one per ``min_worker_bytes`` (at least
    :data:`MIN_LOCAL_WORKER_BYTES`) of ``memory_budget_bytes``, which they share.

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
    from distributed import Client

    workers = local_workers(memory_budget_bytes, min_worker_bytes)
    with contextlib.ExitStack() as stack:
        # A SIGTERM or SIGHUP while the cluster starts takes effect once it has started and is
        # the stack's to close: cut short, its constructor left a half-made cluster that
        # distributed's exit hook then failed to close, with tracebacks (issue #36, item 9).
        with deferred_interrupts():
            with (
                sigint_ignored(),
                # The nannies pass this process's configuration to the workers they start.
                dask.config.set(_local_p2p_buffers(memory_budget_bytes // workers)),
            ):
                cluster = _start_local_cluster(workers, memory_budget_bytes)
            stack.enter_context(cluster)
            quiet_loop(cluster.loop)
            client = stack.enter_context(Client(cluster, set_as_default=False))
        yield client, _facts(client, "local", str(cluster.scheduler_address))


def _start_local_cluster(workers: int, memory_budget_bytes: int) -> LocalCluster:
    from distributed import LocalCluster

    try:
        return LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=memory_budget_bytes // workers,
            # Dask's own log lines (a worker restarted, a task failed) are not shown: a
            # failure is reported once, as fcctl's one line.
            silence_logs=logging.CRITICAL,
            # The scheduler's HTTP routes (health, metrics; no dashboard) on a free loopback
            # port, not on 8787 of every interface.
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            preload=[__name__],  # dask_setup: the workers ignore Ctrl-C
        )
    except (OSError, TimeoutError, RuntimeError) as e:
        raise RunFailed(
            f"could not start a local Dask cluster of {workers} worker(s) "
            f"({type(e).__name__}: {short_message(e)}): a worker process died or did not "
            "start; check that this machine may start processes and listen on 127.0.0.1, "
            "and has memory free"
        ) from None


def quiet_loop(loop: Any) -> None:
    """Route the errors nobody awaited on a local cluster's event loop (``loop``: its tornado
    IOLoop) to the ``fcctl.dask`` logger at debug level, not to stderr.

    Closing a cluster whose workers are still registering or busy (an interrupted run) leaves
    the scheduler's connection handlers failing (``KeyError: 'tcp://127.0.0.1:PORT'`` for a
    worker already removed) in tasks no one awaits; asyncio printed each as "Task exception
    was never retrieved" with a traceback after fcctl's one line. Like ``silence_logs``, this
    keeps the cluster's own noise out of the command's output: what matters to the run reaches
    it through the futures, as one line (:mod:`.failures`).
    """
    asyncio_loop = getattr(loop, "asyncio_loop", None)
    if asyncio_loop is None:
        return

    def handle(_: object, context: dict[str, Any]) -> None:
        LOG.debug("Dask event loop: %s", context.get("message"), exc_info=context.get("exception"))

    asyncio_loop.set_exception_handler(handle)


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


def short_message(e: BaseException, limit: int = 160) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    return " ".join(str(e).split())[:limit] or type(e).__name__
