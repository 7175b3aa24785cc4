"""The replay's result: frozen dataclasses whose field names are the ``--json`` keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from fcctl.common.provenance import Provenance

SCHEMA_VERSION = 1
NOT_JSON = {"json": False}


@dataclass(frozen=True)
class TraceSummary:
    """The ``trace`` object, with ``fcctl analyze``'s keys."""

    path: str
    format: str
    requests: int
    sessions: int | None
    sessions_inferred: bool
    block_size_tokens: int
    block_accesses: int
    distinct_blocks: int
    duration_s: float | None  # the longest session's span for per-session clocks


@dataclass(frozen=True)
class KvSummary:
    """The ``kv`` object, with ``fcctl analyze``'s keys (bytes are node totals over tp)."""

    model: str
    bytes_per_token: int
    block_bytes: int
    tp: int
    dtype_bytes: int


@dataclass(frozen=True)
class TtftStats:
    mean: float | None
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class PrefetchStats:
    mean: float | None
    p99: float | None


@dataclass(frozen=True)
class PolicyResult:
    """One policy at one rate (definitions in docs/simulator.md)."""

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
    makespan_s: float
    details: Mapping[str, Any]
    table: pl.DataFrame | None = field(default=None, metadata=NOT_JSON, compare=False)


@dataclass(frozen=True)
class RateResult:
    rate: float
    policies: Mapping[str, PolicyResult]


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
    notes: tuple[str, ...]
    provenance: Provenance
