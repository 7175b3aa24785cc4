"""The Dask engine's analysis (:func:`analyze_dask`): the parts read on the workers, the plan,
the exact analysis here or the bounded one on the cluster, and the result saying which engine
ran it."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import dask

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.layout.geometry import KvGeometry

from ...traces.dataset import Dataset, is_dataset_spec, open_dataset
from ..analyze import (
    AnalysisResult,
    DatasetSummary,
    Note,
    NoteCode,
    VerdictThresholds,
    check_geometry,
    check_schedule_args,
)
from ..bounded import (
    BYTES_PER_HEAD_BLOCK,
    MemoryPlan,
    analyze_bounded,
    analyze_dataset,
    check_budget,
    check_sample_rate,
    default_memory_budget,
    largest_capacity_blocks,
    plan_memory,
    refuse_schedule,
)
from ..memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES
from .cluster import ClusterFacts, dask_client
from .failures import Stage, cluster_failure
from .parts import map_files
from .room import HEAD_STREAM_BYTES, plan_shuffle, worker_room
from .shuffle import dask_passes

if TYPE_CHECKING:
    from distributed import Client

#: Dask's warning about a large graph (the per-request timestamps and the parts' analysis
#: positions travel in the graph, so that a lost worker's inputs can be recomputed) is off.
LARGE_GRAPH_WARNING = "64 GiB"


def _check_input(spec: str | Path) -> bool:
    """Refuse what is not canonical Parquet; True when ``spec`` is one file, not a dataset."""
    from ...traces.readers import detect_format

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
    stage = Stage()
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
            dataset = open_dataset(spec, progress, map_files=map_files(client))
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
                    parameter="memory_budget_bytes" if local else "scheduler",
                    stage=stage,
                )
    except BaseException as e:
        failed = cluster_failure(e, facts, stage, local=local)
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
    stage: Stage,
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
        passes=dask_passes(client, shuffle, stage),
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
