"""A failure of the Dask cluster as one line: the stage the run was in, what died, what to do."""

from __future__ import annotations

import asyncio
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

from fcctl.common.errors import FcctlInputError, RunFailed

from .cluster import ClusterFacts, short_message


@dataclass
class Stage:
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


def cluster_failure(
    e: BaseException,
    facts: ClusterFacts | None,
    stage: Stage,
    *,
    local: bool,
    todo: str | None = None,
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
    todo = todo or (
        "raise `memory_budget_bytes`, or run on more workers (`scheduler`)"
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
    text = short_message(e)
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
