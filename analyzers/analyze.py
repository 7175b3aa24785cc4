"""``analyze_trace``: every reuse, session and memory-tier metric of a trace, and the verdict.

One flatten of the access stream, one numba pass over it (:mod:`analyzers.stack`), then cheap
reductions. The JSON document (:meth:`AnalysisResult.to_json_dict`) is the contract of issue #2
§4 (``schema_version`` 1); ``kv.tp``, ``kv.dtype_bytes``, ``request_sizes``, ``notes``,
``histogram_buckets``, ``memory_tier[].ssd_reuse_share`` and
``verdict.reference_capacity_bytes`` are additions.
"""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import numpy as np
import polars as pl
from fcctl.analyzers.memory_tier import (
    DEFAULT_MEMORY_CAPACITIES_BYTES,
    MemoryTierPoint,
    hit_curve,
    memory_tier,
)
from fcctl.analyzers.reuse import HISTOGRAM_SCHEMA, Percentiles, ReuseMetrics, reuse_metrics
from fcctl.analyzers.schema import Trace
from fcctl.analyzers.sessions import SessionMetrics, session_metrics
from fcctl.analyzers.stack import LOG2_BUCKETS_DOC, flatten_accesses, reuse_pass
from fcctl.analyzers.verdict import Verdict, decide
from fcctl.layout.geometry import KvGeometry

from fcctl.common.errors import FcctlInputError

SCHEMA_VERSION = 1
NO_HASHES_NOTE = (
    "Reuse cannot be measured: this trace has no block hashes; only sizes "
    "and arrival rate are reported."
)


@dataclass(frozen=True)
class RequestSizes:
    """What can be measured without hashes: sizes and arrival rate."""

    input_tokens: Percentiles
    output_tokens: Percentiles
    kv_bytes: Percentiles  # input_tokens x bytes_per_token
    arrival_rate_per_s: float | None  # requests / duration_s; None for per-session clocks

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens.to_dict(),
            "output_tokens": self.output_tokens.to_dict(),
            "kv_bytes": self.kv_bytes.to_dict(),
            "arrival_rate_per_s": self.arrival_rate_per_s,
        }


@dataclass(frozen=True, eq=False)
class AnalysisResult:
    """All figures of one analysis. Tables are polars frames for ``--out``."""

    trace_path: str
    trace_format: str
    order: str  # Trace.order: "time", or "session" for per-session clocks
    num_requests: int
    num_sessions: int | None
    sessions_inferred: bool
    has_hashes: bool
    block_size_tokens: int
    block_accesses: int | None
    distinct_blocks: int | None
    duration_s: float | None
    model: str
    bytes_per_token: int
    kv_tp: int  # tensor-parallel ranks bytes_per_token is summed over
    kv_dtype_bytes: int  # bytes per KV element (2: bf16/fp16, 1: fp8)
    block_bytes: int | None
    reuse: ReuseMetrics | None
    sessions: SessionMetrics | None
    request_sizes: RequestSizes
    memory_tier: tuple[MemoryTierPoint, ...]
    verdict: Verdict
    notes: tuple[str, ...]
    requests_table: pl.DataFrame
    histograms: pl.DataFrame
    hit_curve_capacity_blocks: np.ndarray
    hit_curve_share: np.ndarray
    cdf_table: pl.DataFrame  # metric, value, cum_share: reuse-distance CDFs for charts
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """The §4 JSON document: plain numbers, None for anything unmeasurable, never NaN."""
        r = self.reuse
        empty = Percentiles().to_dict()
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "trace": {
                "path": self.trace_path,
                "format": self.trace_format,
                "requests": self.num_requests,
                "sessions": self.num_sessions,
                "sessions_inferred": self.sessions_inferred,
                "block_size_tokens": self.block_size_tokens,
                "block_accesses": self.block_accesses,
                "distinct_blocks": self.distinct_blocks,
                "duration_s": self.duration_s,
            },
            "kv": {
                "model": self.model,
                "bytes_per_token": self.bytes_per_token,
                "block_bytes": self.block_bytes,
                "tp": self.kv_tp,
                "dtype_bytes": self.kv_dtype_bytes,
            },
            "once_only_block_share": r.once_only_block_share if r else None,
            "reuse_access_share": r.reuse_access_share if r else None,
            "reuse_distance": {
                "requests": r.distance_requests.to_dict() if r else empty,
                "seconds": r.distance_seconds.to_dict() if r else empty,
                "stack_blocks": r.distance_stack_blocks.to_dict() if r else empty,
                "stack_bytes": r.distance_stack_bytes.to_dict() if r else empty,
            },
            "sessions": None
            if self.sessions is None
            else {
                "kv_bytes": self.sessions.kv_bytes.to_dict(),
                "turns": self.sessions.turns.to_dict(),
                "max_input_tokens": self.sessions.max_input_tokens.to_dict(),
            },
            "memory_tier": [p.to_dict() for p in self.memory_tier],
            "verdict": self.verdict.to_dict(),
            "request_sizes": self.request_sizes.to_dict(),
            "histogram_buckets": LOG2_BUCKETS_DOC,
            "notes": list(self.notes),
            "provenance": dict(self.provenance),
        }
        return _finite(doc)


def _finite(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python numbers, recursively."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj


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


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class _Steps:
    """A rich progress bar on stderr (or nothing): one task per stage, accesses for the pass."""

    def __init__(self, enabled: bool) -> None:
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(stderr=True)
            if not console.is_terminal:
                # Piped or logged stderr gets no bar (rich would still leave a blank line).
                return
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )

    @contextmanager
    def run(self) -> Iterator[_Steps]:
        if self._progress is None:
            yield self
            return
        with self._progress:
            yield self

    @contextmanager
    def step(self, description: str, total: int = 1) -> Iterator[Any]:
        if self._progress is None:
            yield lambda done: None
            return
        task = self._progress.add_task(description, total=max(total, 1))
        yield lambda done: self._progress.update(task, completed=done)
        self._progress.update(task, completed=max(total, 1))


def analyze_trace(
    trace: Trace,
    *,
    geometry: KvGeometry,
    memory_capacities_bytes: Sequence[int] | None = None,
    progress: bool = False,
) -> AnalysisResult:
    """Measure reuse, sessions and the memory tier of ``trace`` (rows in analysis order)."""
    started = _now()
    # Ascending and without repeats, so tables and the JSON read as a curve whatever the flag order.
    caps = sorted(set(memory_capacities_bytes or DEFAULT_MEMORY_CAPACITIES_BYTES))
    req = trace.requests
    n_req = req.height
    if n_req == 0:
        # e.g. a Parquet table with no rows: every figure would be empty; say so instead.
        raise FcctlInputError(f"{trace.path}: the trace holds no requests; nothing to analyze")
    block_tokens = int(trace.block_size_tokens)
    bytes_per_token = geometry.bytes_per_token
    block_bytes = geometry.bytes_per_block(block_tokens) if block_tokens > 0 else None
    ts = req.get_column("timestamp_s").to_numpy().astype(np.float64, copy=False)
    input_tokens = req.get_column("input_tokens").to_numpy()
    output_tokens = req.get_column("output_tokens").to_numpy()
    notes = list(trace.notes)
    duration = float(ts.max() - ts.min()) if n_req else None
    if trace.order == "session" and n_req:
        # Per-session clocks: max - min over all rows would mix sessions; take each
        # session's own span and report the longest, as the note below says.
        spans = (
            req.select("session_id", "timestamp_s")
            .group_by("session_id")
            .agg((pl.col("timestamp_s").max() - pl.col("timestamp_s").min()).alias("span"))
        )
        duration = float(spans["span"].max())
    if trace.order == "session":
        notes.append(
            "Timestamps restart in every session: duration_s is the longest session's "
            "span and there is no overall arrival rate."
        )
        if trace.has_hashes:
            notes.append(
                "Sessions are analysed one after another (there is no common clock to "
                "interleave them), so the memory-tier hit shares are a best case: concurrent "
                "sessions would compete for the same memory."
            )
    rate = n_req / duration if (duration and trace.order == "time") else None
    sizes = RequestSizes(
        Percentiles.of(input_tokens),
        Percentiles.of(output_tokens),
        Percentiles.of(input_tokens.astype(np.float64) * bytes_per_token),
        rate,
    )

    steps = _Steps(progress)
    reuse: ReuseMetrics | None = None
    sessions: SessionMetrics | None = None
    stack_count = None
    reused_per_request = np.zeros(n_req, dtype=np.int64)
    blocks_per_request = np.zeros(n_req, dtype=np.int64)
    block_accesses: int | None = None
    distinct: int | None = None
    curve_caps = np.zeros(0, dtype=np.int64)
    curve_share = np.zeros(0, dtype=np.float64)
    cdf = pl.DataFrame(schema=CDF_SCHEMA)
    with steps.run():
        if trace.has_hashes:
            with steps.step("flattening block accesses"):
                acc = flatten_accesses(req)
            block_accesses, distinct = acc.num_accesses, acc.num_blocks
            blocks_per_request = np.diff(acc.request_offsets)
            with steps.step("LRU stack distances", acc.num_accesses) as tick:
                rp = reuse_pass(acc, ts, on_progress=tick)
            reuse = reuse_metrics(rp, block_bytes or 0)
            stack_count = rp.stack_count
            reused_per_request = rp.reused_per_request
            curve_caps, curve_share = hit_curve(rp.stack_count, rp.num_accesses)
            cdf = _cdf_table(rp.stack_count, rp.request_count, reuse.histograms, block_bytes or 0)
            del rp
            if trace.has_sessions or acc.num_accesses:
                with steps.step("sessions"):
                    sessions = session_metrics(
                        acc,
                        req,
                        has_sessions=trace.has_sessions,
                        block_size_tokens=block_tokens,
                        bytes_per_token=bytes_per_token,
                    )
            del acc
        else:
            notes.append(NO_HASHES_NOTE)
    if sessions is not None and sessions.inferred:
        notes.append("Sessions were inferred from prefix chains (the trace has no session ids).")
        biggest = int(sessions.table["turns"].max() or 0)
        if n_req >= 10 and biggest > n_req // 2:
            notes.append(
                f"One inferred session holds {biggest} of {n_req} requests: prefix chains "
                "probably run through a shared system prompt, so inferred session sizes are an "
                "upper bound."
            )

    points = memory_tier(
        stack_count,
        block_accesses=block_accesses or 0,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        block_bytes=block_bytes if trace.has_hashes else None,
        capacities_bytes=caps,
    )
    verdict = decide(
        memory_tier=points,
        reuse_access_share=reuse.reuse_access_share if reuse else None,
        session_kv_p90_bytes=sessions.kv_bytes.p90 if sessions else None,
        sessions_inferred=bool(sessions and sessions.inferred),
        request_kv_p90_bytes=sizes.kv_bytes.p90,
        reuse_p50_requests=reuse.distance_requests.p50 if reuse else None,
        reuse_p50_seconds=reuse.distance_seconds.p50 if reuse else None,
    )
    requests_table = pl.DataFrame(
        {
            "request_index": np.arange(n_req, dtype=np.int64),
            "session_index": (
                sessions.session_of_request.astype(np.int64)
                if sessions
                else np.full(n_req, -1, dtype=np.int64)
            ),
            "timestamp_s": ts,
            "input_tokens": input_tokens.astype(np.int64),
            "output_tokens": output_tokens.astype(np.int64),
            "kv_bytes": input_tokens.astype(np.int64) * bytes_per_token,
            "blocks": blocks_per_request,
            "reused_blocks": reused_per_request,
        }
    )
    if not trace.has_hashes:
        # Unknown, not zero: a trace without hashes says nothing about blocks.
        requests_table = requests_table.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("blocks"),
            pl.lit(None, dtype=pl.Int64).alias("reused_blocks"),
        )
    if sessions is not None:
        requests_table = requests_table.with_columns(
            pl.Series(
                "session_id", sessions.table["session_id"].to_numpy()[sessions.session_of_request]
            )
        )
    provenance = {
        "fcctl_version": _version("fcctl"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "polars": pl.__version__,
        "numba": _version("numba"),
        "host": platform.node(),
        "platform": platform.platform(),
        "argv": list(sys.argv),
        "started_utc": started,
        "finished_utc": _now(),
    }
    return AnalysisResult(
        trace_path=trace.path,
        trace_format=trace.format,
        order=trace.order,
        num_requests=n_req,
        num_sessions=sessions.count if sessions else None,
        sessions_inferred=bool(sessions and sessions.inferred),
        has_hashes=trace.has_hashes,
        block_size_tokens=block_tokens,
        block_accesses=block_accesses,
        distinct_blocks=distinct,
        duration_s=duration,
        model=geometry.name,
        bytes_per_token=bytes_per_token,
        kv_tp=geometry.tp,
        kv_dtype_bytes=geometry.dtype_bytes,
        block_bytes=block_bytes,
        reuse=reuse,
        sessions=sessions,
        request_sizes=sizes,
        memory_tier=points,
        verdict=verdict,
        notes=tuple(notes),
        requests_table=requests_table,
        histograms=reuse.histograms if reuse else pl.DataFrame(schema=HISTOGRAM_SCHEMA),
        hit_curve_capacity_blocks=curve_caps,
        hit_curve_share=curve_share,
        cdf_table=cdf,
        provenance=provenance,
    )
