"""The replay's result: frozen dataclasses whose field names are the ``--json`` keys.

The ``trace`` and ``kv`` objects are the shared :class:`~fcctl.analyzers.summary.TraceSummary`
and :class:`~fcctl.analyzers.summary.KvSummary` (``fcctl analyze`` extends both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from fcctl.common.jsonio import from_document
from fcctl.common.provenance import Provenance

from ..summary import KvSummary, TraceSummary
from .decision import Decision
from .operating import (
    AchievedRate,
    MeanMax,
    QueueDepth,
    Staging,
    Utilisation,
)
from .sampling import SessionSampling
from .verdict import Verdict

#: 2: operating point per policy, decision per rate, window TTFT; 3: ``gpu_hit_share_served`` and
#: ``ideal_hit_share_served`` per policy (an older document is refused, naming its version).
SCHEMA_VERSION = 3
NOT_JSON = {"json": False}


@dataclass(frozen=True)
class Percentiles:
    """Mean, median and p99 (seconds) of the ``requests`` counted; None when there are none."""

    mean: float | None
    p50: float | None
    p99: float | None
    requests: int


@dataclass(frozen=True)
class TtftStats:
    """TTFT of the requests arriving in the steady-state window ``window_s`` [start, end]
    (docs/simulator.md): all of them, those that read from SSD, those that did not."""

    mean: float | None
    p50: float | None
    p99: float | None
    ssd: Percentiles
    no_ssd: Percentiles
    window_s: tuple[float, float]
    requests: int


@dataclass(frozen=True)
class PrefetchStats:
    """Prefetch time of the requests that read from SSD (arrival to loads done), and its two
    parts: waiting (staging, window or SSD queue) and reading."""

    mean: float | None
    wait_mean: float | None
    read_mean: float | None
    p99: float | None


@dataclass(frozen=True)
class RejectedRequests:
    """Requests never run, by reason: ``kv_exceeds_gpu_pool`` (prompt + output KV larger than
    one worker's GPU pool), ``exceeds_max_context`` (longer than the model's context)."""

    count: int
    reasons: Mapping[str, int]


@dataclass(frozen=True)
class PolicyResult:
    """One policy at one rate (definitions in docs/simulator.md).

    The shares are shares of block accesses (docs/simulator.md, "Shares over what was
    served"): ``*_served`` over the requests that ran, the ones the decision compares;
    ``gpu_hit_share`` and ``ideal_hit_share`` over all the trace's requests, a rejected
    request's accesses counted as misses. Equal when ``rejected_requests.count`` is 0."""

    gpu_hit_share_served: float | None
    ideal_hit_share_served: float | None
    gpu_hit_share: float | None
    ideal_hit_share: float | None
    ttft_s: TtftStats
    ssd_read_bytes: int
    read_amplification: float | None
    prefetch_s: PrefetchStats
    cancelled_prefetches: int
    recomputed_tokens: int
    peak_host_memory_bytes: int
    peak_staging_bytes: int
    peak_ssd_bytes: int
    requests: int
    block_accesses: int
    delivered_blocks: int
    delivered_from: Mapping[str, int]
    ssd_read_commands: int
    ssd_delivered_bytes: int
    ssd_write_bytes: int
    drive_writes_per_day: float | None
    makespan_s: float
    offered_rate: float | None
    achieved_rate: AchievedRate
    saturated: bool
    saturated_by: str | None
    concurrency: int | None
    utilisation: Utilisation
    staging: Staging
    sessions_active: MeanMax
    queue_depth: QueueDepth
    rejected_requests: RejectedRequests
    details: Mapping[str, Any]
    table: pl.DataFrame | None = field(default=None, metadata=NOT_JSON, compare=False)


@dataclass(frozen=True)
class RateResult:
    """One load point: every policy, and the decision between them (analyzers/replay/decision)."""

    rate: float | None  # offered requests/s; None in concurrency mode
    policies: Mapping[str, PolicyResult]
    decision: Decision
    concurrency: int | None = None  # sessions kept active; None in rate mode
    #: The node's KV sizes at this point (gpu_kv_bytes, host_memory_bytes, staging_bytes).
    sizes: Mapping[str, int] = field(default_factory=dict)
    #: Copies of every trace session replayed at this point (docs/simulator.md, "Session
    #: amplification"): the run's ``amplify`` times ``ceil(concurrency / sessions)`` where the
    #: concurrency exceeds the (amplified) sessions; 1: the trace as it is.
    amplify: int = 1


@dataclass(frozen=True)
class PlacementSettings:
    short_reply_tokens: int
    agent_context_tokens: int


@dataclass(frozen=True)
class ReplayResult:
    """The whole run; ``fcctl.common.jsonio.dumps(result)`` is the ``--json`` document."""

    schema_version: int
    trace: TraceSummary
    kv: KvSummary
    hardware: Mapping[str, Any]
    workers: int
    placement: PlacementSettings
    load: Mapping[str, Any]
    ideal_hit_share: float | None
    rates: tuple[RateResult, ...]
    #: The user's own operating point (``--rate``), also in ``rates``; None when not given.
    operating_point: RateResult | None
    divergence_rate: float | None
    divergence_concurrency: int | None
    #: Per size point: {sizes, rate, concurrency}, the lowest load whose decision names a layout.
    divergence: tuple[Mapping[str, Any], ...]
    decision_margins: Mapping[str, float]
    notes: tuple[str, ...]
    provenance: Provenance
    #: Which sessions the figures come from (``--sample-sessions``); None: the whole trace.
    sampling: SessionSampling | None = None
    #: The run's one decision (analyzers/replay/verdict.py); None in documents made before it.
    decision: Verdict | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReplayResult:
        """The result whose ``--json`` document is ``doc`` (no per-request tables)."""
        return from_document(cls, doc, schema_version=SCHEMA_VERSION, what="replay")
