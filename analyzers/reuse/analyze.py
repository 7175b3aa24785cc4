"""``analyze_trace``: every reuse, session and memory-tier metric of a trace, and the verdict.

One flatten of the access stream, one numba pass over it (:mod:`analyzers.reuse.stack`), then cheap
reductions. The result is an :class:`AnalysisResult`, a tree of frozen dataclasses whose field
names are the keys of the JSON document (``fcctl.common.jsonio.to_jsonable``): the contract of
issue #2 §4 (``schema_version`` 1); ``kv.tp``, ``kv.dtype_bytes``, ``request_sizes``,
``notes``, ``histogram_buckets``, ``memory_tier[].ssd_reuse_share``,
``verdict.reference_capacity_bytes`` and ``verdict.checks`` are additions. Fields marked
``metadata={"json": False}`` (the tables for ``--out``, structured notes) are not in the JSON.

``trace.schedule`` (issue #7) states the request order the figures were measured in and the
concurrency it assumes: a per-session-clock trace (Claude Code) is analysed sessions one after
another (``kind`` ``"sequential"``, a best case for the memory tier) unless a session-start
schedule is given (``rate_requests_per_s`` or ``concurrent_sessions``, built and applied with
:mod:`fcctl.analyzers.traces.schedule`, the library the replay simulator uses); a trace with one
clock
keeps its own order (``"trace"``) and refuses a schedule. ``sessions.max_context_bytes`` and
``trace.converted_from`` are additions of the same issue.

The analysis runs as named steps: the schedule (:func:`_apply_schedule`), the request columns
and sizes (:func:`request_figures`),
the block figures from one pass over the access stream (:func:`_block_figures`, traces with
hashes only), the notes (:func:`_notes`), the memory tier and the verdict (:func:`_verdict`),
and the per-request table (:func:`_requests_table`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np
import polars as pl

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import Provenance, collect_provenance, utc_now
from fcctl.layout.geometry import KvGeometry

from ..summary import KvSummary, TraceSummary
from ..traces.fingerprint import trace_fingerprint
from ..traces.schedule import (
    SessionSchedule,
    check_rate,
    interleave,
    schedule_by_concurrency,
    schedule_by_rate,
    session_durations_s,
)
from ..traces.schema import Order, Trace
from .memory_tier import (
    DEFAULT_MEMORY_CAPACITIES_BYTES,
    MemoryTierPoint,
    hit_curve,
    memory_tier,
)
from .metrics import (
    HISTOGRAM_SCHEMA,
    Percentiles,
    ReuseDistances,
    ReuseMetrics,
    reuse_metrics,
)
from .sessions import SessionMetrics, session_metrics
from .stack import (
    DEFAULT_CHUNK_ACCESSES,
    LOG2_BUCKETS_DOC,
    flatten_accesses,
    reuse_pass,
)
from .verdict import (
    FLAT_SESSION_KV_P90_BYTES,
    REALISTIC_MEMORY_BYTES,
    OrderKind,
    Verdict,
    decide,
)

SCHEMA_VERSION = 1
NO_HASHES_NOTE = (
    "Reuse cannot be measured: this trace has no block hashes; only sizes "
    "and arrival rate are reported."
)
_NOT_JSON = {"json": False}


class NoteCode(enum.StrEnum):
    """What a note is about, so that a renderer can pick notes without reading their text."""

    TRACE = "trace"  # the reader's own note about the file
    PER_SESSION_CLOCKS = "per_session_clocks"
    SEQUENTIAL_SESSIONS = "sequential_sessions"
    SAMPLED = "sampled"  # issue #10: figures estimated from a SHARDS sample
    NO_INFERRED_SESSIONS = "no_inferred_sessions"  # bounded analysis without session ids
    SCHEDULED_SESSIONS = "scheduled_sessions"
    NO_HASHES = "no_hashes"
    INFERRED_SESSIONS = "inferred_sessions"
    SHARED_PREFIX = "shared_prefix"
    ENGINE = "engine"  # issue #10: the engine that ran the passes (Dask), when not this process


@dataclass(frozen=True)
class Note:
    code: NoteCode
    text: str


ScheduleKind = Literal["trace", "sequential", "rate", "concurrency"]


@dataclass(frozen=True)
class ScheduleSummary:
    """The JSON ``trace.schedule`` object: the request order and the concurrency it assumes.

    ``kind``: ``"trace"`` (one clock for all requests: the trace's own order), ``"sequential"``
    (per-session clocks, sessions one after another: a best case for the memory tier),
    ``"rate"`` (Poisson session starts giving ``rate_requests_per_s``, drawn with ``seed``) or
    ``"concurrency"`` (``concurrent_sessions`` slots). ``mean_concurrent_sessions``: total
    session time (first to last request of each session) over the span of all of them; 1 for
    ``"sequential"``; None without sessions or when every session is a single instant.
    """

    kind: ScheduleKind
    best_case_for_memory_tier: bool
    mean_concurrent_sessions: float | None
    rate_requests_per_s: float | None = None
    session_rate_per_s: float | None = None
    concurrent_sessions: int | None = None
    seed: int | None = None

    def describe(self) -> str:
        """The order as a clause for the summary and the verdict."""
        mean = self.mean_concurrent_sessions
        at_once = "" if mean is None else f"{mean:.3g} sessions at once on average"
        if self.kind == "rate":
            return (
                f"sessions started at {self.rate_requests_per_s:g} requests/s "
                f"(Poisson, seed {self.seed}{', ' + at_once if at_once else ''})"
            )
        if self.kind == "concurrency":
            return (
                f"{self.concurrent_sessions} sessions running at once at most"
                f"{' (' + at_once + ')' if at_once else ''}"
            )
        if self.kind == "sequential":
            return "sessions one after another (1 session at a time: best case for memory)"
        return "the trace's own order" + (f" ({at_once})" if at_once else "")


@dataclass(frozen=True)
class ConvertedFrom:
    """The JSON ``trace.converted_from`` object: the trace a canonical Parquet was made from
    (``trace.path`` and ``trace.format`` are then the Parquet file and ``"parquet"``)."""

    path: str
    format: str


@dataclass(frozen=True, kw_only=True)
class AnalysisTraceSummary(TraceSummary):
    """The JSON ``trace`` object of ``fcctl analyze``: the keys every trace summary has
    (:class:`fcctl.analyzers.summary.TraceSummary`, ``path``: the file read) and how the trace
    was analysed; ``fingerprint`` comes last (:meth:`to_json_dict`)."""

    order: Order = field(metadata=_NOT_JSON)  # Trace.order: "time", or "session"
    has_hashes: bool = field(metadata=_NOT_JSON)
    schedule: ScheduleSummary
    converted_from: ConvertedFrom | None = None
    # Issue #10: whether any figure is estimated from a sample, the rate, and how (null when
    # every figure is exact); the dataset's files when a directory or glob was read.
    sampled: bool = False
    sample_rate: float | None = None
    sampling: Sampling | None = None
    dataset: DatasetSummary | None = None

    def to_json_dict(self) -> dict[str, object]:
        """The document's keys in its order: ``fingerprint`` (issue #16.5) after the others."""
        keys = [f.name for f in fields(self) if f.metadata.get("json", True)]
        keys.remove("fingerprint")
        return {k: getattr(self, k) for k in [*keys, "fingerprint"]}


@dataclass(frozen=True)
class ErrorBound:
    """The error measured for a sampling rate (docs/analyze.md), stated as the figures' bound.

    ``hit_share_mean_abs_pp`` / ``hit_share_max_abs_pp``: mean and max absolute error of the
    LRU hit curve over capacities, percentage points; ``stack_percentile_rel``: the largest
    relative error of the stack-distance p50/p90/p99; ``measured_on``: the traces and the
    rate of the measurement (the largest error over them is stated). None where the rate was
    not measured.
    """

    hit_share_mean_abs_pp: float | None
    hit_share_max_abs_pp: float | None
    stack_percentile_rel: float | None
    measured_on: str


@dataclass(frozen=True)
class Sampling:
    """The JSON ``trace.sampling`` object: how the sampled figures were estimated.

    ``method``: ``"shards-fixed-rate"`` (SHARDS, Waldspurger et al., FAST'15: the accesses to
    blocks whose splitmix64 hash is under ``rate`` x 2^64, distances scaled by 1 / rate).
    ``exact_below_blocks``: LRU capacities of at most this many blocks are counted exactly (a
    bounded-depth pass over every access), so ``memory_tier`` points at or below it are exact
    (their ``sampled`` is false). ``sampled_figures`` / ``exact_figures`` name the JSON keys
    estimated from the sample and those computed exactly. ``memory_budget_bytes`` is the
    budget the rate was chosen for; ``block_passes`` how many hash-partitioned exact passes
    the block figures took.
    """

    method: str
    rate: float
    exact_below_blocks: int
    sampled_accesses: int
    sampled_blocks: int
    memory_budget_bytes: int
    block_passes: int
    sampled_figures: tuple[str, ...]
    exact_figures: tuple[str, ...]
    error_bound: ErrorBound


@dataclass(frozen=True)
class DatasetSummary:
    """The JSON ``trace.dataset`` object: a directory or glob of Parquet files read as one.

    ``mode``: ``"partitioned"`` (one dataset's parts, ordered by their global request_index)
    or ``"assembled"`` (separately converted traces, ordered as docs/scale.md says).
    """

    mode: str
    files: int
    traces: int


@dataclass(frozen=True)
class AnalysisKvSummary(KvSummary):
    """The JSON ``kv`` object of ``fcctl analyze``: the geometry every document states
    (:class:`fcctl.analyzers.summary.KvSummary`), one rank's share and the shape in words."""

    # One rank's share of bytes_per_token (what one GPU stores and restores); bytes_per_token
    # is the node total over the tp ranks (an MLA latent once), what a shared tier holds.
    bytes_per_token_per_rank: int
    description: str  # the model and its KV shape in words (KvGeometry.describe())


@dataclass(frozen=True)
class RequestSizes:
    """What can be measured without hashes: sizes and arrival rate."""

    input_tokens: Percentiles
    output_tokens: Percentiles
    kv_bytes: Percentiles  # input_tokens x bytes_per_token
    arrival_rate_per_s: float | None  # requests / duration_s; None for per-session clocks


@dataclass(frozen=True, eq=False)
class AnalysisTables:
    """The tables behind ``--out`` (Parquet files and charts); not part of the JSON."""

    requests: pl.DataFrame  # one row per request
    histograms: pl.DataFrame  # metric, bucket_lo, bucket_hi, count (log2 buckets)
    hit_curve_capacity_blocks: np.ndarray
    hit_curve_share: np.ndarray
    cdf: pl.DataFrame  # metric, value, cum_share: reuse-distance CDFs for charts


@dataclass(frozen=True, eq=False, kw_only=True)
class AnalysisResult:
    """All figures of one analysis; field names are the JSON document's keys, in its order."""

    schema_version: int = SCHEMA_VERSION
    trace: AnalysisTraceSummary
    kv: AnalysisKvSummary
    once_only_block_share: float | None
    reuse_access_share: float | None
    reuse_distance: ReuseDistances
    sessions: SessionMetrics | None
    memory_tier: tuple[MemoryTierPoint, ...]
    verdict: Verdict
    request_sizes: RequestSizes
    histogram_buckets: str = LOG2_BUCKETS_DOC
    notes: tuple[str, ...] = field(init=False)  # the texts of note_details
    provenance: Provenance
    note_details: tuple[Note, ...] = field(metadata=_NOT_JSON)
    reuse: ReuseMetrics | None = field(metadata=_NOT_JSON)
    tables: AnalysisTables = field(metadata=_NOT_JSON)

    def __post_init__(self) -> None:
        # One source for the notes: the JSON texts are derived from the structured ones.
        object.__setattr__(self, "notes", tuple(n.text for n in self.note_details))


CDF_SCHEMA = {"metric": pl.String(), "value": pl.Float64(), "cum_share": pl.Float64()}


def _counts_cdf(counts: np.ndarray, points: int = 256) -> tuple[np.ndarray, np.ndarray]:
    # Exact CDF of a counted integer distance, sampled at log-spaced values (chart resolution).
    cum = np.cumsum(counts)
    total = cum[-1] if cum.shape[0] else 0
    if total == 0:
        return np.zeros(0), np.zeros(0)
    # Up to the largest distance seen, not the array's size (the number of distinct blocks):
    # a chart axis running decades past the data hides where the CDF actually reaches 1.
    top = int(np.flatnonzero(counts)[-1])
    values = np.unique(
        np.concatenate([[0, top], np.geomspace(1, top or 1, points)]).astype(np.int64)
    )
    # With only distance 0 seen (an immediate repeat), geomspace(1, 1) still yields 1: past top,
    # and past the array when the trace has one distinct block.
    values = values[values <= top]
    return values.astype(np.float64), cum[values] / total


def cdf_frame(metric: str, values: np.ndarray, cum_share: np.ndarray) -> pl.DataFrame:
    """One metric's CDF rows (:data:`CDF_SCHEMA`)."""
    return pl.DataFrame(
        {"metric": [metric] * values.shape[0], "value": values, "cum_share": cum_share},
        schema=CDF_SCHEMA,
    )


def counts_cdf_frame(metric: str, counts: np.ndarray, scale: float = 1.0) -> pl.DataFrame:
    """The CDF rows of a counted integer distance, values times ``scale``."""
    v, c = _counts_cdf(counts)
    return cdf_frame(metric, v * scale, c)


def seconds_cdf_frame(histograms: pl.DataFrame) -> pl.DataFrame:
    """The seconds CDF from the histogram: exact at the log2 bucket edges (not counted per
    value)."""
    sec = histograms.filter(pl.col("metric") == "seconds")
    if not sec.height:
        return pl.DataFrame(schema=CDF_SCHEMA)
    counts = sec["count"].to_numpy()
    return cdf_frame("seconds", sec["bucket_hi"].to_numpy(), np.cumsum(counts) / counts.sum())


def _cdf_table(
    stack_count: np.ndarray, request_count: np.ndarray, histograms: pl.DataFrame, block_bytes: int
) -> pl.DataFrame:
    return pl.concat(
        [
            counts_cdf_frame("stack_bytes", stack_count, block_bytes),
            counts_cdf_frame("stack_blocks", stack_count),
            counts_cdf_frame("requests", request_count),
            seconds_cdf_frame(histograms),
        ]
    )


# --- the steps ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RequestFigures:
    """The request columns as arrays, and what they measure without hashes."""

    timestamp_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    duration_s: float | None
    sizes: RequestSizes


def request_figures(trace: Trace, bytes_per_token: int) -> RequestFigures:
    """The per-request figures of ``trace``: timestamps, token counts, duration, sizes."""
    req = trace.requests
    ts = req.get_column("timestamp_s").to_numpy().astype(np.float64, copy=False)
    input_tokens = req.get_column("input_tokens").to_numpy()
    output_tokens = req.get_column("output_tokens").to_numpy()
    duration = float(ts.max() - ts.min())
    if trace.order == "session":
        # Per-session clocks: max - min over all rows would mix sessions; take each
        # session's own span and report the longest, as the note says.
        spans = (
            req.select("session_id", "timestamp_s")
            .group_by("session_id")
            .agg((pl.col("timestamp_s").max() - pl.col("timestamp_s").min()).alias("span"))
        )
        longest = spans["span"].max()
        # timestamp_s is a numeric column with at least one row, so its max is a number.
        assert isinstance(longest, (int, float))
        duration = float(longest)
    rate = req.height / duration if (duration and trace.order == "time") else None
    sizes = RequestSizes(
        Percentiles.of(input_tokens),
        Percentiles.of(output_tokens),
        Percentiles.of(input_tokens.astype(np.float64) * bytes_per_token),
        rate,
    )
    return RequestFigures(ts, input_tokens, output_tokens, duration, sizes)


@dataclass(frozen=True, eq=False)
class BlockFigures:
    """Everything measured from the access stream (traces with block hashes)."""

    block_accesses: int
    distinct_blocks: int
    blocks_per_request: np.ndarray
    reused_per_request: np.ndarray
    stack_count: np.ndarray
    reuse: ReuseMetrics
    sessions: SessionMetrics | None
    hit_curve_capacity_blocks: np.ndarray
    hit_curve_share: np.ndarray
    cdf: pl.DataFrame


def _block_figures(
    trace: Trace,
    timestamp_s: np.ndarray,
    *,
    block_bytes: int,
    bytes_per_token: int,
    progress: Progress,
    chunk_accesses: int,
) -> BlockFigures:
    """Flatten the accesses, walk them once, and reduce: reuse, sessions, hit curve, CDFs."""
    with progress.task("flattening block accesses"):
        acc = flatten_accesses(trace.requests)
    with progress.task("LRU stack distances", acc.num_accesses) as task:
        rp = reuse_pass(acc, timestamp_s, on_progress=task.update, chunk_accesses=chunk_accesses)
    reuse = reuse_metrics(rp, block_bytes)
    curve_caps, curve_share = hit_curve(rp.stack_count, rp.num_accesses)
    cdf = _cdf_table(rp.stack_count, rp.request_count, reuse.histograms, block_bytes)
    stack_count, reused_per_request = rp.stack_count, rp.reused_per_request
    del rp  # its per-block arrays are not needed for the sessions: keep the peak down
    sessions = None
    if trace.has_sessions or acc.num_accesses:
        with progress.task("sessions"):
            sessions = session_metrics(
                acc,
                trace.requests,
                has_sessions=trace.has_sessions,
                block_size_tokens=int(trace.block_size_tokens),
                bytes_per_token=bytes_per_token,
            )
    return BlockFigures(
        block_accesses=acc.num_accesses,
        distinct_blocks=acc.num_blocks,
        blocks_per_request=np.diff(acc.request_offsets),
        reused_per_request=reused_per_request,
        stack_count=stack_count,
        reuse=reuse,
        sessions=sessions,
        hit_curve_capacity_blocks=curve_caps,
        hit_curve_share=curve_share,
        cdf=cdf,
    )


def _notes(
    trace: Trace, blocks: BlockFigures | None, schedule: ScheduleSummary
) -> tuple[Note, ...]:
    """The reader's notes, then what the reader of the figures should know about them.

    ``trace`` is the trace as analysed (after a schedule, if any).
    """
    notes = [Note(NoteCode.TRACE, text) for text in trace.notes]
    if schedule.kind in ("rate", "concurrency"):
        notes.append(
            Note(
                NoteCode.SCHEDULED_SESSIONS,
                "The trace has per-session clocks; its sessions were started on one shared "
                f"clock: {schedule.describe()}. duration_s and the arrival rate are the "
                "schedule's, and the reuse and memory-tier figures hold for that concurrency.",
            )
        )
    elif trace.order == "session":
        notes.append(
            Note(
                NoteCode.PER_SESSION_CLOCKS,
                "Timestamps restart in every session: duration_s is the longest session's "
                "span and there is no overall arrival rate.",
            )
        )
        if trace.has_hashes:
            notes.append(
                Note(
                    NoteCode.SEQUENTIAL_SESSIONS,
                    "Sessions are analysed one after another (there is no common clock to "
                    "interleave them), so the memory-tier hit shares are a best case: "
                    "concurrent sessions would compete for the same memory.",
                )
            )
    if blocks is None:
        notes.append(Note(NoteCode.NO_HASHES, NO_HASHES_NOTE))
        return tuple(notes)
    sessions = blocks.sessions
    if sessions is not None and sessions.inferred:
        notes.append(
            Note(
                NoteCode.INFERRED_SESSIONS,
                "Sessions were inferred from prefix chains (the trace has no session ids).",
            )
        )
        n_req = trace.requests.height
        most_turns = sessions.table["turns"].max()
        biggest = most_turns if isinstance(most_turns, int) else 0
        if n_req >= 10 and biggest > n_req // 2:
            notes.append(
                Note(
                    NoteCode.SHARED_PREFIX,
                    f"One inferred session holds {biggest} of {n_req} requests: prefix chains "
                    "probably run through a shared system prompt, so inferred session sizes "
                    "are an upper bound.",
                )
            )
    return tuple(notes)


def _verdict(
    points: tuple[MemoryTierPoint, ...],
    blocks: BlockFigures | None,
    sizes: RequestSizes,
    schedule: ScheduleSummary,
    thresholds: VerdictThresholds,
) -> Verdict:
    reuse = blocks.reuse if blocks else None
    sessions = blocks.sessions if blocks else None
    order: OrderKind = {"trace": "trace", "sequential": "sequential"}.get(  # type: ignore[assignment]
        schedule.kind, "scheduled"
    )
    return decide(
        memory_tier=points,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        session_kv_p90_bytes=sessions.kv_bytes.p90 if sessions else None,
        sessions_inferred=bool(sessions and sessions.inferred),
        request_kv_p90_bytes=sizes.kv_bytes.p90,
        reuse_p50_requests=reuse.distance_requests.p50 if reuse else None,
        reuse_p50_seconds=reuse.distance_seconds.p50 if reuse else None,
        flat_session_kv_bytes=thresholds.flat_session_kv_bytes,
        reference_capacity_bytes=thresholds.reference_capacity_bytes,
        order=order,
        order_description=schedule.describe(),
    )


@dataclass(frozen=True)
class VerdictThresholds:
    """The verdict's tunable thresholds (bytes); defaults are :mod:`analyzers.reuse.verdict`'s."""

    flat_session_kv_bytes: int = FLAT_SESSION_KV_P90_BYTES
    reference_capacity_bytes: int = REALISTIC_MEMORY_BYTES

    def __post_init__(self) -> None:
        for name in ("flat_session_kv_bytes", "reference_capacity_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FcctlInputError(
                    f"{name}: must be a whole number of bytes >= 1; got {value!r}",
                    parameter=name,
                )


def check_schedule_args(rate_requests_per_s: float | None, concurrent_sessions: int | None) -> None:
    """Refuse a rate that is not a finite number > 0, a count < 1, or both at once.

    Messages start with the parameter (``rate_requests_per_s``, ``concurrent_sessions``), which
    the CLI shows as its flag.
    """
    if rate_requests_per_s is not None and concurrent_sessions is not None:
        raise FcctlInputError(
            "rate_requests_per_s: give a session-start rate or concurrent_sessions, not both; "
            f"got {rate_requests_per_s!r} and {concurrent_sessions!r}",
            parameter="rate_requests_per_s",
        )
    if rate_requests_per_s is not None:
        check_rate(rate_requests_per_s, "rate_requests_per_s")
    if concurrent_sessions is not None:
        c = concurrent_sessions
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise FcctlInputError(
                f"concurrent_sessions: must be a whole number >= 1; got {c!r}",
                parameter="concurrent_sessions",
            )


def _apply_schedule(
    trace: Trace,
    *,
    rate_requests_per_s: float | None,
    concurrent_sessions: int | None,
    seed: int,
) -> tuple[Trace, SessionSchedule | None, np.ndarray | None]:
    """``trace`` interleaved by the requested session-start schedule (or as it is).

    Returns the trace to analyse, the schedule (None when none was asked for) and the
    sessions' own durations (seconds, in trace order) that the schedule was laid out with.
    """
    check_schedule_args(rate_requests_per_s, concurrent_sessions)
    if rate_requests_per_s is None and concurrent_sessions is None:
        return trace, None, None
    parameter = "rate_requests_per_s" if rate_requests_per_s is not None else "concurrent_sessions"
    if trace.order != "session":
        # One clock already says how requests interleave; re-timing it would change only the
        # seconds, never the order the memory-tier figures come from. Refuse, do not pretend.
        raise FcctlInputError(
            f"{parameter}: only traces with per-session clocks (Claude Code) are scheduled; "
            f"{trace.path} has one clock for all requests, so it is analysed in its own order "
            "at its own arrival rate; drop the flag",
            parameter=parameter,
        )
    if rate_requests_per_s is not None:
        schedule = schedule_by_rate(trace.requests, rate_requests_per_s, seed=seed)
    else:
        schedule = schedule_by_concurrency(trace.requests, int(concurrent_sessions or 1))
    durations = session_durations_s(trace.requests)
    return interleave(trace, schedule), schedule, durations


def summarize_schedule(
    original_order: Order,
    schedule: SessionSchedule | None,
    durations_s: np.ndarray | None,
    sessions: SessionMetrics | None,
) -> ScheduleSummary:
    """The JSON ``trace.schedule`` summary: the order analysed and the concurrency it assumes."""
    if schedule is not None and durations_s is not None:
        return ScheduleSummary(
            kind=schedule.kind,
            best_case_for_memory_tier=False,
            mean_concurrent_sessions=schedule.mean_concurrent_sessions(durations_s),
            rate_requests_per_s=schedule.rate_requests_per_s,
            session_rate_per_s=schedule.session_rate_per_s,
            concurrent_sessions=schedule.concurrent_sessions,
            seed=schedule.seed if schedule.kind == "rate" else None,
        )
    if original_order == "session":
        return ScheduleSummary("sequential", True, 1.0)
    mean = None
    if sessions is not None and sessions.count:
        first = sessions.table["first_timestamp_s"].to_numpy()
        last = sessions.table["last_timestamp_s"].to_numpy()
        span = float(last.max() - first.min())
        mean = float((last - first).sum()) / span if span > 0 else None
    return ScheduleSummary("trace", False, mean)


def _requests_table(
    requests: RequestFigures, blocks: BlockFigures | None, bytes_per_token: int
) -> pl.DataFrame:
    """One row per request: its session, sizes, and (with hashes) blocks and reused blocks."""
    n_req = requests.timestamp_s.shape[0]
    sessions = blocks.sessions if blocks else None
    input_tokens = requests.input_tokens.astype(np.int64)
    no_blocks = np.zeros(n_req, dtype=np.int64)
    table = pl.DataFrame(
        {
            "request_index": np.arange(n_req, dtype=np.int64),
            "session_index": (
                sessions.session_of_request.astype(np.int64)
                if sessions
                else np.full(n_req, -1, dtype=np.int64)
            ),
            "timestamp_s": requests.timestamp_s,
            "input_tokens": input_tokens,
            "output_tokens": requests.output_tokens.astype(np.int64),
            "kv_bytes": input_tokens * bytes_per_token,
            "blocks": blocks.blocks_per_request if blocks else no_blocks,
            "reused_blocks": blocks.reused_per_request if blocks else no_blocks,
        }
    )
    if blocks is None:
        # Unknown, not zero: a trace without hashes says nothing about blocks.
        table = table.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("blocks"),
            pl.lit(None, dtype=pl.Int64).alias("reused_blocks"),
        )
    if sessions is not None:
        ids = sessions.table["session_id"].to_numpy()[sessions.session_of_request]
        table = table.with_columns(pl.Series("session_id", ids))
    return table


def _converted_from(trace: Trace) -> ConvertedFrom | None:
    """The trace a canonical Parquet was converted from (``Trace.converted_from``), if any."""
    source = trace.converted_from
    return None if source is None else ConvertedFrom(source.path, source.format)


def check_geometry(geometry: KvGeometry) -> None:
    """Refuse a geometry whose KV per token is not one number (sliding-window layers).

    Every byte figure here is blocks x block bytes; a windowed layer holds at most its window
    of a context, so counting it per block would count it as global, silently too large.
    """
    if getattr(geometry, "is_windowed", False):
        raise FcctlInputError(
            f"model: {geometry.name!r} has {geometry.windowed_layers} of {geometry.layers} "
            f"layers with a {geometry.window_tokens}-token window (sliding-window or chunked "
            "attention); analyze sizes KV per block and cannot count those layers at their "
            "window yet, so it refuses the model rather than count them as global",
            parameter="model",
        )


def analyze_trace(
    trace: Trace,
    *,
    geometry: KvGeometry,
    memory_capacities_bytes: Sequence[int] | None = None,
    progress: Progress | None = None,
    chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
    rate_requests_per_s: float | None = None,
    concurrent_sessions: int | None = None,
    seed: int = 0,
    thresholds: VerdictThresholds | None = None,
) -> AnalysisResult:
    """Measure reuse, sessions and the memory tier of ``trace`` (rows in analysis order).

    ``progress`` gets one line per stage (nothing when None or disabled). ``chunk_accesses``
    is the kernel's chunk size (:func:`~fcctl.analyzers.reuse.stack.reuse_pass`); every value gives
    the same figures, and tests use small ones to put chunk boundaries everywhere.

    ``rate_requests_per_s`` (requests/s, Poisson session starts drawn with ``seed``) or
    ``concurrent_sessions`` (at most that many sessions at once) interleave the sessions of a
    per-session-clock trace before the analysis (:mod:`fcctl.analyzers.traces.schedule`); a trace
    with one clock refuses them. ``thresholds`` are the verdict's (defaults: 1 GiB, 256 GiB).
    """
    started = utc_now()
    check_geometry(geometry)
    if trace.requests.height == 0:
        # e.g. a Parquet table with no rows: every figure would be empty; say so instead.
        raise FcctlInputError(f"{trace.path}: the trace holds no requests; nothing to analyze")
    original_order = trace.order
    trace, schedule, durations = _apply_schedule(
        trace,
        rate_requests_per_s=rate_requests_per_s,
        concurrent_sessions=concurrent_sessions,
        seed=seed,
    )
    # Ascending and without repeats, so tables and the JSON read as a curve whatever the flag order.
    caps = sorted(set(memory_capacities_bytes or DEFAULT_MEMORY_CAPACITIES_BYTES))
    block_tokens = int(trace.block_size_tokens)
    block_bytes = geometry.bytes_per_block(block_tokens) if block_tokens > 0 else None
    requests = request_figures(trace, geometry.bytes_per_token)
    blocks = None
    if trace.has_hashes:
        blocks = _block_figures(
            trace,
            requests.timestamp_s,
            block_bytes=block_bytes or 0,
            bytes_per_token=geometry.bytes_per_token,
            progress=progress or Progress(enabled=False),
            chunk_accesses=chunk_accesses,
        )
    reuse = blocks.reuse if blocks else None
    sessions = blocks.sessions if blocks else None
    points = memory_tier(
        blocks.stack_count if blocks else None,
        block_accesses=blocks.block_accesses if blocks else 0,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        block_bytes=block_bytes if trace.has_hashes else None,
        capacities_bytes=caps,
    )
    schedule_summary = summarize_schedule(original_order, schedule, durations, sessions)
    return assemble_result(
        trace,
        geometry=geometry,
        requests=requests,
        blocks=blocks,
        points=points,
        schedule_summary=schedule_summary,
        thresholds=thresholds or VerdictThresholds(),
        started=started,
    )


def assemble_result(
    trace: Trace,
    *,
    geometry: KvGeometry,
    requests: RequestFigures,
    blocks: BlockFigures | None,
    points: tuple[MemoryTierPoint, ...],
    schedule_summary: ScheduleSummary,
    thresholds: VerdictThresholds,
    started: str,
    sampling: Sampling | None = None,
    dataset: DatasetSummary | None = None,
    extra_notes: Sequence[Note] = (),
) -> AnalysisResult:
    """The :class:`AnalysisResult` of measured figures (the exact and the bounded analyses)."""
    block_tokens = int(trace.block_size_tokens)
    block_bytes = geometry.bytes_per_block(block_tokens) if block_tokens > 0 else None
    reuse = blocks.reuse if blocks else None
    sessions = blocks.sessions if blocks else None
    return AnalysisResult(
        trace=AnalysisTraceSummary(
            path=trace.path,
            format=trace.format,
            requests=trace.requests.height,
            sessions=sessions.count if sessions else None,
            sessions_inferred=bool(sessions and sessions.inferred),
            block_size_tokens=block_tokens,
            block_accesses=blocks.block_accesses if blocks else None,
            distinct_blocks=blocks.distinct_blocks if blocks else None,
            duration_s=requests.duration_s,
            order=trace.order,
            has_hashes=trace.has_hashes,
            schedule=schedule_summary,
            converted_from=_converted_from(trace),
            sampled=sampling is not None,
            sample_rate=sampling.rate if sampling is not None else None,
            sampling=sampling,
            dataset=dataset,
            fingerprint=trace_fingerprint(trace),
        ),
        kv=AnalysisKvSummary(
            model=geometry.name,
            bytes_per_token=geometry.bytes_per_token,
            block_bytes=block_bytes,
            tp=geometry.tp,
            dtype_bytes=geometry.dtype_bytes,
            bytes_per_token_per_rank=geometry.bytes_per_token_per_rank,
            description=geometry.describe(),
        ),
        once_only_block_share=reuse.once_only_block_share if reuse else None,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        reuse_distance=reuse.distances() if reuse else ReuseDistances(),
        sessions=sessions,
        memory_tier=points,
        verdict=_verdict(points, blocks, requests.sizes, schedule_summary, thresholds),
        request_sizes=requests.sizes,
        note_details=_notes(trace, blocks, schedule_summary) + tuple(extra_notes),
        reuse=reuse,
        tables=AnalysisTables(
            requests=_requests_table(requests, blocks, geometry.bytes_per_token),
            histograms=reuse.histograms if reuse else pl.DataFrame(schema=HISTOGRAM_SCHEMA),
            hit_curve_capacity_blocks=(
                blocks.hit_curve_capacity_blocks if blocks else np.zeros(0, dtype=np.int64)
            ),
            hit_curve_share=blocks.hit_curve_share if blocks else np.zeros(0, dtype=np.float64),
            cdf=blocks.cdf if blocks else pl.DataFrame(schema=CDF_SCHEMA),
        ),
        provenance=collect_provenance(started),
    )
