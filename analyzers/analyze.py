"""``analyze_trace``: every reuse, session and memory-tier metric of a trace, and the verdict.

One flatten of the access stream, one numba pass over it (:mod:`analyzers.stack`), then cheap
reductions. The result is an :class:`AnalysisResult`, a tree of frozen dataclasses whose field
names are the keys of the JSON document (``fcctl.common.jsonio.to_jsonable``): the contract of
issue #2 §4 (``schema_version`` 1); ``kv.tp``, ``kv.dtype_bytes``, ``request_sizes``,
``notes``, ``histogram_buckets``, ``memory_tier[].ssd_reuse_share``,
``verdict.reference_capacity_bytes`` and ``verdict.checks`` are additions. Fields marked
``metadata={"json": False}`` (the tables for ``--out``, structured notes) are not in the JSON.

The analysis runs as named steps: the request columns and sizes (:func:`_request_figures`),
the block figures from one pass over the access stream (:func:`_block_figures`, traces with
hashes only), the notes (:func:`_notes`), the memory tier and the verdict (:func:`_verdict`),
and the per-request table (:func:`_requests_table`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from fcctl.analyzers.memory_tier import (
    DEFAULT_MEMORY_CAPACITIES_BYTES,
    MemoryTierPoint,
    hit_curve,
    memory_tier,
)
from fcctl.analyzers.reuse import (
    HISTOGRAM_SCHEMA,
    Percentiles,
    ReuseDistances,
    ReuseMetrics,
    reuse_metrics,
)
from fcctl.analyzers.schema import Order, Trace
from fcctl.analyzers.sessions import SessionMetrics, session_metrics
from fcctl.analyzers.stack import (
    DEFAULT_CHUNK_ACCESSES,
    LOG2_BUCKETS_DOC,
    flatten_accesses,
    reuse_pass,
)
from fcctl.analyzers.verdict import Verdict, decide
from fcctl.layout.geometry import KvGeometry

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import Provenance, collect_provenance, utc_now

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
    NO_HASHES = "no_hashes"
    INFERRED_SESSIONS = "inferred_sessions"
    SHARED_PREFIX = "shared_prefix"


@dataclass(frozen=True)
class Note:
    code: NoteCode
    text: str


@dataclass(frozen=True)
class TraceSummary:
    """The JSON ``trace`` object: what was analysed."""

    path: str
    format: str
    requests: int
    sessions: int | None
    sessions_inferred: bool
    block_size_tokens: int
    block_accesses: int | None
    distinct_blocks: int | None
    duration_s: float | None  # longest session's span when order == "session"
    order: Order = field(metadata=_NOT_JSON)  # Trace.order: "time", or "session"
    has_hashes: bool = field(metadata=_NOT_JSON)


@dataclass(frozen=True)
class KvSummary:
    """The JSON ``kv`` object: the KV geometry the byte figures are in."""

    model: str
    bytes_per_token: int
    block_bytes: int | None
    tp: int  # tensor-parallel ranks bytes_per_token is summed over
    dtype_bytes: int  # bytes per KV element (2: bf16/fp16, 1: fp8)


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
    trace: TraceSummary
    kv: KvSummary
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
    return values.astype(np.float64), cum[values] / total


def _cdf_table(
    stack_count: np.ndarray, request_count: np.ndarray, histograms: pl.DataFrame, block_bytes: int
) -> pl.DataFrame:
    frames = []
    for metric, counts, scale in (
        ("stack_bytes", stack_count, block_bytes),
        ("stack_blocks", stack_count, 1),
        ("requests", request_count, 1),
    ):
        v, c = _counts_cdf(counts)
        frames.append(
            pl.DataFrame(
                {"metric": [metric] * v.shape[0], "value": v * scale, "cum_share": c},
                schema=CDF_SCHEMA,
            )
        )
    sec = histograms.filter(pl.col("metric") == "seconds")
    if sec.height:
        # Seconds are not counted exactly per value: the CDF is exact at the log2 bucket edges.
        counts = sec["count"].to_numpy()
        frames.append(
            pl.DataFrame(
                {
                    "metric": ["seconds"] * sec.height,
                    "value": sec["bucket_hi"].to_numpy(),
                    "cum_share": np.cumsum(counts) / counts.sum(),
                },
                schema=CDF_SCHEMA,
            )
        )
    return pl.concat(frames)


# --- the steps ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _RequestFigures:
    """The request columns as arrays, and what they measure without hashes."""

    timestamp_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    duration_s: float | None
    sizes: RequestSizes


def _request_figures(trace: Trace, bytes_per_token: int) -> _RequestFigures:
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
        duration = float(spans["span"].max())
    rate = req.height / duration if (duration and trace.order == "time") else None
    sizes = RequestSizes(
        Percentiles.of(input_tokens),
        Percentiles.of(output_tokens),
        Percentiles.of(input_tokens.astype(np.float64) * bytes_per_token),
        rate,
    )
    return _RequestFigures(ts, input_tokens, output_tokens, duration, sizes)


@dataclass(frozen=True, eq=False)
class _BlockFigures:
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
) -> _BlockFigures:
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
    return _BlockFigures(
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


def _notes(trace: Trace, blocks: _BlockFigures | None) -> tuple[Note, ...]:
    """The reader's notes, then what the reader of the figures should know about them."""
    notes = [Note(NoteCode.TRACE, text) for text in trace.notes]
    if trace.order == "session":
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
        biggest = int(sessions.table["turns"].max() or 0)
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
    points: tuple[MemoryTierPoint, ...], blocks: _BlockFigures | None, sizes: RequestSizes
) -> Verdict:
    reuse = blocks.reuse if blocks else None
    sessions = blocks.sessions if blocks else None
    return decide(
        memory_tier=points,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        session_kv_p90_bytes=sessions.kv_bytes.p90 if sessions else None,
        sessions_inferred=bool(sessions and sessions.inferred),
        request_kv_p90_bytes=sizes.kv_bytes.p90,
        reuse_p50_requests=reuse.distance_requests.p50 if reuse else None,
        reuse_p50_seconds=reuse.distance_seconds.p50 if reuse else None,
    )


def _requests_table(
    requests: _RequestFigures, blocks: _BlockFigures | None, bytes_per_token: int
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


def analyze_trace(
    trace: Trace,
    *,
    geometry: KvGeometry,
    memory_capacities_bytes: Sequence[int] | None = None,
    progress: Progress | None = None,
    chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
) -> AnalysisResult:
    """Measure reuse, sessions and the memory tier of ``trace`` (rows in analysis order).

    ``progress`` gets one line per stage (nothing when None or disabled). ``chunk_accesses``
    is the kernel's chunk size (:func:`~fcctl.analyzers.stack.reuse_pass`); every value gives
    the same figures, and tests use small ones to put chunk boundaries everywhere.
    """
    started = utc_now()
    if trace.requests.height == 0:
        # e.g. a Parquet table with no rows: every figure would be empty; say so instead.
        raise FcctlInputError(f"{trace.path}: the trace holds no requests; nothing to analyze")
    # Ascending and without repeats, so tables and the JSON read as a curve whatever the flag order.
    caps = sorted(set(memory_capacities_bytes or DEFAULT_MEMORY_CAPACITIES_BYTES))
    block_tokens = int(trace.block_size_tokens)
    block_bytes = geometry.bytes_per_block(block_tokens) if block_tokens > 0 else None
    requests = _request_figures(trace, geometry.bytes_per_token)
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
    return AnalysisResult(
        trace=TraceSummary(
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
        ),
        kv=KvSummary(
            model=geometry.name,
            bytes_per_token=geometry.bytes_per_token,
            block_bytes=block_bytes,
            tp=geometry.tp,
            dtype_bytes=geometry.dtype_bytes,
        ),
        once_only_block_share=reuse.once_only_block_share if reuse else None,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        reuse_distance=reuse.distances() if reuse else ReuseDistances(),
        sessions=sessions,
        memory_tier=points,
        verdict=_verdict(points, blocks, requests.sizes),
        request_sizes=requests.sizes,
        note_details=_notes(trace, blocks),
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
