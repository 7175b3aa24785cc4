"""Analysis of a dataset in bounded memory: exact partitioned passes, sampled stack distances.

``fcctl analyze --memory-budget BYTES`` plans the analysis of a dataset
(:mod:`fcctl.analyzers.traces.dataset`) against the budget (:func:`plan_memory`):

* **Exact, in memory**, when the whole trace fits: :meth:`Dataset.load_trace` and
  :func:`~fcctl.analyzers.reuse.analyze.analyze_trace`, the figures of the single file.
* **Bounded** otherwise (or when ``--sample-rate`` asks for a sample):

  - *The figures that partition by block are exact.* The block ids are split into ``P``
    hash buckets (``splitmix64(id) mod P``, :func:`fcctl.analyzers.reuse.shards.splitmix64`), ``P``
    chosen so that one bucket's sub-stream fits the budget. Pass ``p`` reads the access stream
    in analysis order (:meth:`Dataset.iter_blocks`) and keeps the accesses to bucket ``p``'s
    blocks; every access to a block is in its block's bucket, so the sub-stream gives each
    access's previous access to the same block exactly. The exact kernel
    (:func:`fcctl.analyzers.reuse.stack.reuse_pass`) runs on each sub-stream, and the sums over the
    buckets are the whole trace's: distinct blocks, blocks accessed once, re-accesses
    (``once_only_block_share``, ``reuse_access_share``), the reuse distance in requests (a
    count per distance) and in seconds (each distinct distance with its count: memory grows
    with the distinct (request, previous request) gaps, refused past the budget), re-accesses
    per request, and distinct blocks per session (a (session, block) pair lives in its
    block's bucket). Request sizes, turns and per-session figures come from the request table.
  - *LRU stack distances and the memory tier are sampled* (SHARDS, :mod:`.shards`): fixed-rate
    at the largest of :data:`MEASURED_RATES` whose sample fits the budget (or
    ``--sample-rate``), with capacities up to ``exact_below_blocks`` counted exactly by a
    bounded-depth LRU over every access (:func:`head_blocks`: at least the largest reported
    capacity, so the memory-tier points are exact up to 4 Mi blocks). A stack distance only
    exists against the whole ordered stream, so it cannot be summed over buckets; the sample
    is the bounded way. The estimator's re-access total is the exact one of the bucket passes.
  - *Session inference* (traces without session ids) needs the whole stream and is not done:
    the session figures are then absent, with a note.

Every figure the JSON holds is labelled: ``trace.sampled``, ``trace.sample_rate``, and
``trace.sampling`` (method, rate, exact head, which keys are sampled, the budget, and the error
measured for that rate by ``benchmarks/shards_error.py``, stated as the bound); each
``memory_tier`` point says whether it is sampled.

**Memory model** (:func:`plan_memory`, bytes): the request table, :data:`BYTES_PER_REQUEST` a
request; the exact in-memory analysis, :data:`BYTES_PER_EXACT_ACCESS` an access; one bucket
pass, :data:`BYTES_PER_BUCKET_ACCESS` an access of the bucket; the SHARDS pass,
:data:`BYTES_PER_SAMPLED_ACCESS` a sampled access plus :data:`BYTES_PER_HEAD_BLOCK` a block of
the exact head. The constants are measured peaks (docs/scale.md) with a margin.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import utc_now
from fcctl.layout.geometry import KvGeometry

from ..traces.dataset import Dataset
from ..traces.schema import Trace
from .analyze import (
    AnalysisResult,
    BlockFigures,
    DatasetSummary,
    ErrorBound,
    Note,
    NoteCode,
    Sampling,
    ScheduleSummary,
    VerdictThresholds,
    analyze_trace,
    assemble_result,
    cdf_frame,
    check_geometry,
    counts_cdf_frame,
    request_figures,
    seconds_cdf_frame,
    summarize_schedule,
)
from .memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES, MemoryTierPoint
from .metrics import (
    HISTOGRAM_SCHEMA,
    QUANTILES,
    Percentiles,
    ReuseMetrics,
    histogram_frame,
)
from .sessions import (
    SessionMetrics,
    distinct_blocks_per_session,
    session_index_from_ids,
    session_summary,
)
from .shards import (
    DEFAULT_MAX_EXACT_BLOCKS,
    DEFAULT_MIN_SAMPLED_BLOCKS,
    SampledStack,
    sampled_stack,
)
from .stack import (
    Accesses,
    dense_ids,
    log2_histogram_from_counts,
    percentiles_from_weighted,
    reuse_pass,
    seconds_histogram_edges,
)

BYTES_PER_REQUEST = 200
BYTES_PER_EXACT_ACCESS = 32
BYTES_PER_BUCKET_ACCESS = 40
BYTES_PER_SAMPLED_ACCESS = 56
BYTES_PER_HEAD_BLOCK = 48
#: Memory outside the model: the interpreter, numba, polars, a merge batch per file.
BASELINE_BYTES = 768 << 20
#: The sampling rates the default plan picks from: those whose error is measured
#: (docs/analyze.md, ``benchmarks/shards_error.py``), largest first.
MEASURED_RATES = (0.1, 0.01, 0.001)
#: The default budget's share of the machine's memory (physical, or the cgroup's limit).
DEFAULT_BUDGET_SHARE = 0.3

# Measured with benchmarks/shards_error.py on this project's machine (docs/analyze.md, table
# "Sampled stack distances"), fixed-rate SHARDS with the default exact head: the largest
# error over the whole Claude Code trace and both Mooncake traces, per rate. Mean/max absolute
# error of the hit curve over the dense grid of 33 capacities (pp), and the largest relative
# error of the stack-distance p50/p90/p99. analyze's own head is deeper (at least the largest
# reported capacity, head_blocks); measured that way (shards_error.py --as-analyze, the "as
# analyze" rows) the errors are lower, so the default-head figures stated here are conservative.
MEASURED_ERROR: dict[float, tuple[float, float, float]] = {
    0.1: (0.059, 0.389, 0.043),
    0.01: (0.000, 0.000, 0.116),
    0.001: (0.000, 0.000, 0.000),
}
MEASURED_ON = (
    "benchmarks/shards_error.py: whole Claude Code trace (94 M accesses), Mooncake "
    "conversation and synthetic; largest error of the three at this rate (docs/analyze.md)"
)
# The same table's rows with exact head 0 (pure SHARDS: every capacity sampled), for an
# analysis that cannot afford the exact head's ordered pass (the Dask engine without it).
MEASURED_ERROR_NO_HEAD: dict[float, tuple[float, float, float]] = {
    0.1: (2.952, 4.156, 0.151),
    0.01: (3.518, 5.031, 0.281),
    0.001: (11.046, 23.943, 0.440),
}

SAMPLED_FIGURES = (
    "reuse_distance.stack_blocks",
    "reuse_distance.stack_bytes",
    "memory_tier (points above exact_below_blocks)",
    "verdict (its memory-tier checks)",
)
EXACT_FIGURES = (
    "trace",
    "once_only_block_share",
    "reuse_access_share",
    "reuse_distance.requests",
    "reuse_distance.seconds",
    "sessions",
    "request_sizes",
    "memory_tier (points at or below exact_below_blocks)",
)


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup v2/v1 limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


def default_memory_budget() -> int:
    """:data:`DEFAULT_BUDGET_SHARE` of :func:`machine_memory_bytes`."""
    return int(machine_memory_bytes() * DEFAULT_BUDGET_SHARE)


def head_blocks(rate: float, at_least: int = 0) -> int:
    """The exact head's depth: ``max(ceil(1024 / rate), at_least)``, at most 4 Mi blocks.

    ``at_least`` is the largest capacity the analysis reports (blocks): counting up to it
    exactly costs about 48 bytes a block, so every reported memory-tier point is exact up to
    4 Mi blocks (32 TiB of 8 MiB blocks).
    """
    want = max(math.ceil(DEFAULT_MIN_SAMPLED_BLOCKS / rate), int(at_least))
    return min(want, DEFAULT_MAX_EXACT_BLOCKS)


def error_bound(rate: float, *, exact_head: bool = True) -> ErrorBound:
    """The measured error of the largest measured rate at or below ``rate`` (conservative).

    ``exact_head``: whether capacities up to :func:`head_blocks` are counted exactly (the
    default plan); without the head the pure-SHARDS rows (:data:`MEASURED_ERROR_NO_HEAD`).
    """
    if rate >= 1:
        return ErrorBound(0.0, 0.0, 0.0, "exact (rate 1)")
    below = [r for r in MEASURED_RATES if r <= rate]
    if not below:
        return ErrorBound(None, None, None, f"rate {rate:g} is below the measured rates")
    r = max(below)
    mean, worst, rel = (MEASURED_ERROR if exact_head else MEASURED_ERROR_NO_HEAD)[r]
    head = "" if exact_head else "; pure SHARDS (exact head 0)"
    return ErrorBound(mean, worst, rel, f"{MEASURED_ON}; measured at rate {r:g}{head}")


@dataclass(frozen=True)
class MemoryPlan:
    """How an analysis fits its budget (see the module docstring's memory model)."""

    budget_bytes: int
    exact: bool  # the whole trace in memory, analyze_trace
    block_passes: int  # hash buckets of the bounded block passes (0 when exact)
    sample_rate: float | None  # SHARDS rate (None when exact)
    exact_below_blocks: int
    estimated_peak_bytes: int

    def describe(self) -> str:
        if self.exact:
            return f"exact, in memory (about {self.estimated_peak_bytes / 2**30:.1f} GiB)"
        return (
            f"bounded: {self.block_passes} exact block pass(es), stack distances sampled at "
            f"rate {self.sample_rate:g} (exact below {self.exact_below_blocks:,} blocks)"
        )


def largest_capacity_blocks(
    dataset: Dataset, geometry: KvGeometry, capacities_bytes: Sequence[int] | None
) -> int:
    """The largest memory-tier capacity the analysis reports, in blocks (0 without blocks)."""
    block = int(dataset.block_size_tokens)
    if block <= 0:
        return 0
    caps = capacities_bytes or DEFAULT_MEMORY_CAPACITIES_BYTES
    return max(caps) // geometry.bytes_per_block(block)


def check_budget(value: object, name: str = "memory_budget_bytes") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FcctlInputError(
            f"{name}: must be a whole number of bytes >= 1; got {value!r}", parameter=name
        )
    return value


def check_sample_rate(rate: object) -> float:
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or not 0 < rate <= 1
    ):
        raise FcctlInputError(
            f"sample_rate: must be a number with 0 < rate <= 1; got {rate!r}",
            parameter="sample_rate",
        )
    return float(rate)


ENGINES = ("local", "dask")
DASK_INSTALL_HINT = "pip install 'fcctl[dask]'"


def check_engine(engine: str, scheduler: str | None) -> None:
    """Refuse an unknown engine, a scheduler without dask, or dask when it is not installed."""
    if engine not in ENGINES:
        raise FcctlInputError(
            f"engine: must be one of {', '.join(ENGINES)}; got {engine!r}", parameter="engine"
        )
    if scheduler is not None and engine != "dask":
        raise FcctlInputError(
            "scheduler: names a Dask scheduler, so it needs the dask `engine`",
            parameter="scheduler",
        )
    if engine == "dask":
        import importlib

        # Imported, not only looked up: an installed package that cannot import (a missing
        # or mismatched dependency) is as missing as an absent one.
        for module in ("dask", "distributed", "dask.dataframe"):
            try:
                importlib.import_module(module)
            except ImportError as e:
                absent = isinstance(e, ModuleNotFoundError) and e.name == module
                why = (
                    "which is not installed"
                    if absent
                    else f"which does not import ({' '.join(str(e).split())[:120]})"
                )
                raise FcctlInputError(
                    f"engine: dask needs the {module} package, {why}; {DASK_INSTALL_HINT}",
                    parameter="engine",
                ) from None


def plan_memory(
    requests: int,
    accesses: int,
    budget_bytes: int,
    *,
    sample_rate: float | None = None,
    exact_capacity_blocks: int = 0,
) -> MemoryPlan:
    """The plan for a trace of ``requests`` requests and ``accesses`` block accesses.

    Exact in memory when it fits and no ``sample_rate`` is asked; otherwise the bounded plan
    at ``sample_rate`` or the largest measured rate that fits, with an exact head at least
    ``exact_capacity_blocks`` deep (:func:`head_blocks`). A budget that fits not even the
    smallest measured rate (or the asked one) is an error naming what it would need.
    """
    budget = check_budget(budget_bytes)
    if sample_rate is not None:
        sample_rate = check_sample_rate(sample_rate)
    fixed = BASELINE_BYTES + requests * BYTES_PER_REQUEST
    exact_bytes = fixed + accesses * BYTES_PER_EXACT_ACCESS
    if (sample_rate is None and exact_bytes <= budget) or sample_rate == 1.0:
        return MemoryPlan(budget, True, 0, None, 0, exact_bytes)

    def shards_bytes(rate: float) -> int:
        sampled = math.ceil(accesses * rate)
        head = head_blocks(rate, exact_capacity_blocks)
        return fixed + sampled * BYTES_PER_SAMPLED_ACCESS + head * BYTES_PER_HEAD_BLOCK

    rates = (sample_rate,) if sample_rate is not None else MEASURED_RATES
    rate = next((r for r in rates if shards_bytes(r) <= budget), None)
    smallest = rates[-1]
    # A bucket pass needs room for at least one request's accesses beyond the fixed part.
    room = budget - fixed
    if rate is None or room <= 0:
        need = max(shards_bytes(smallest), fixed + (1 << 20))
        raise FcctlInputError(
            f"memory_budget_bytes: {budget:,} bytes is too small for this trace ({requests:,} "
            f"requests, {accesses:,} block accesses): the "
            + (f"sample at rate {smallest:g}" if rate is None else "request table")
            + f" needs about {need:,} bytes; raise `memory_budget_bytes`"
            + (" or lower `sample_rate`" if sample_rate is not None else ""),
            parameter="memory_budget_bytes",
        )
    passes = max(1, math.ceil(accesses * BYTES_PER_BUCKET_ACCESS / room))
    peak = max(shards_bytes(rate), fixed + math.ceil(accesses / passes) * BYTES_PER_BUCKET_ACCESS)
    head = head_blocks(rate, exact_capacity_blocks)
    return MemoryPlan(budget, False, passes, rate, head, peak)


# --- the bucket passes ----------------------------------------------------------------------


@njit(cache=True)
def _select_bucket(  # pragma: no cover - numba
    ids: np.ndarray,
    lens: np.ndarray,
    buckets: np.uint64,
    bucket: np.uint64,
    out_ids: np.ndarray,
    out_lens: np.ndarray,
) -> int:
    """Keep the ids whose splitmix64 hash is ``bucket`` mod ``buckets``; per-row kept counts."""
    pos = 0
    kept = 0
    for r in range(lens.shape[0]):
        c = 0
        for _ in range(lens[r]):
            x = ids[pos]
            pos += 1
            z = x + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = z ^ (z >> np.uint64(31))
            if h % buckets == bucket:
                out_ids[kept] = x
                kept += 1
                c += 1
        out_lens[r] = c
    return kept


def bucket_stream(
    chunks: Iterator[tuple[np.ndarray, np.ndarray]], buckets: int, bucket: int
) -> tuple[np.ndarray, np.ndarray]:
    """The sub-stream of one bucket: (kept ids in order, kept count per request)."""
    kept_ids: list[np.ndarray] = []
    kept_lens: list[np.ndarray] = []
    out = np.empty(0, dtype=np.uint64)  # reused: one allocation, not one per chunk
    for lens, ids in chunks:
        lens = np.ascontiguousarray(lens, dtype=np.int64)
        if buckets == 1:
            kept_ids.append(ids.copy())
            kept_lens.append(lens.copy())
            continue
        if out.shape[0] < ids.shape[0]:
            out = np.empty(max(ids.shape[0], 2 * out.shape[0]), dtype=np.uint64)
        out_lens = np.empty(lens.shape[0], dtype=np.int64)
        n = _select_bucket(
            np.ascontiguousarray(ids, dtype=np.uint64),
            lens,
            np.uint64(buckets),
            np.uint64(bucket),
            out,
            out_lens,
        )
        kept_ids.append(out[:n].copy())
        kept_lens.append(out_lens)
    del out
    ids_all = np.concatenate(kept_ids) if kept_ids else np.zeros(0, dtype=np.uint64)
    lens_all = np.concatenate(kept_lens) if kept_lens else np.zeros(0, dtype=np.int64)
    return ids_all, lens_all


@dataclass
class BlockTotals:
    """The exact block figures summed over bucket passes (module docstring)."""

    num_requests: int
    num_sessions: int
    accesses: int = 0
    distinct_blocks: int = 0
    once_only_blocks: int = 0
    request_count: np.ndarray | None = None  # re-accesses per distance in requests
    seconds_values: np.ndarray | None = None  # distinct distances in seconds ...
    seconds_counts: np.ndarray | None = None  # ... and how many re-accesses have each
    seconds_hist: np.ndarray | None = None
    reused_per_request: np.ndarray | None = None
    session_distinct: np.ndarray | None = None
    max_seconds_values: int = 1 << 62

    def __post_init__(self) -> None:
        self.request_count = np.zeros(max(self.num_requests, 1), dtype=np.int64)
        self.seconds_values = np.zeros(0, dtype=np.float64)
        self.seconds_counts = np.zeros(0, dtype=np.int64)
        self.seconds_hist = None
        self.reused_per_request = np.zeros(self.num_requests, dtype=np.int64)
        self.session_distinct = np.zeros(self.num_sessions, dtype=np.int64)

    def add_bucket(
        self,
        ids: np.ndarray,
        lens: np.ndarray,
        timestamp_s: np.ndarray,
        session: np.ndarray | None,
    ) -> np.ndarray:
        """Add one bucket's sub-stream; returns its stack counts (global only when P = 1)."""
        offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        if ids.shape[0]:
            dense, n = dense_ids(np.ascontiguousarray(ids, dtype=np.uint64))
        else:
            dense, n = np.zeros(0, dtype=np.int32), 0
        acc = Accesses(dense, offsets, int(n))
        rp = reuse_pass(acc, timestamp_s)
        assert self.request_count is not None and self.reused_per_request is not None
        self.accesses += rp.num_accesses
        self.distinct_blocks += rp.num_blocks
        self.once_only_blocks += int(np.count_nonzero(rp.access_count == 1))
        self.request_count[: rp.request_count.shape[0]] += rp.request_count
        self.reused_per_request += rp.reused_per_request
        self.seconds_hist = (
            rp.seconds_hist if self.seconds_hist is None else self.seconds_hist + rp.seconds_hist
        )
        self._add_seconds(rp.seconds_values, rp.seconds_counts)
        if session is not None and self.session_distinct is not None and acc.num_accesses:
            self.session_distinct += distinct_blocks_per_session(acc, session, self.num_sessions)
        return rp.stack_count

    def add_totals(self, other: BlockTotals) -> None:
        """Add the totals of other buckets (disjoint from this one's, e.g. a Dask partition's).

        Every figure is a sum over blocks, so totals of disjoint bucket sets add up to those of
        their union, whatever the grouping.
        """
        if (other.num_requests, other.num_sessions) != (self.num_requests, self.num_sessions):
            raise ValueError(
                f"block totals of {other.num_requests} requests and {other.num_sessions} "
                f"sessions cannot be added to {self.num_requests} and {self.num_sessions}"
            )
        assert self.request_count is not None and other.request_count is not None
        assert self.reused_per_request is not None and other.reused_per_request is not None
        assert self.session_distinct is not None and other.session_distinct is not None
        assert other.seconds_values is not None and other.seconds_counts is not None
        self.accesses += other.accesses
        self.distinct_blocks += other.distinct_blocks
        self.once_only_blocks += other.once_only_blocks
        self.request_count += other.request_count
        self.reused_per_request += other.reused_per_request
        self.session_distinct += other.session_distinct
        if other.seconds_hist is not None:
            self.seconds_hist = (
                other.seconds_hist.copy()
                if self.seconds_hist is None
                else self.seconds_hist + other.seconds_hist
            )
        self._add_seconds(other.seconds_values, other.seconds_counts)

    def _add_seconds(self, values: np.ndarray, counts: np.ndarray) -> None:
        assert self.seconds_values is not None and self.seconds_counts is not None
        v = np.concatenate([self.seconds_values, values])
        c = np.concatenate([self.seconds_counts, counts])
        uniq, inverse = np.unique(v, return_inverse=True)
        self.seconds_values = uniq
        self.seconds_counts = np.bincount(inverse, weights=c, minlength=uniq.shape[0]).astype(
            np.int64
        )
        if uniq.shape[0] > self.max_seconds_values:
            raise FcctlInputError(
                f"memory_budget_bytes: the exact reuse distances in seconds hold {uniq.shape[0]:,} "
                "distinct values (one per distinct gap between a request and the one it "
                "re-reads), more than the budget allows; raise `memory_budget_bytes`",
                parameter="memory_budget_bytes",
            )


# --- from sample to figures -----------------------------------------------------------------


def _weighted_log2_histogram(
    values: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[0,1), [1,2), [2,4), ... buckets of weighted values: (lo, hi, rounded count), trimmed."""
    if values.shape[0] == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    k = np.where(values < 1, 0, np.floor(np.log2(np.maximum(values, 1))).astype(np.int64) + 1)
    sums = np.bincount(k, weights=weights)
    lo = np.array([0] + [1 << (j - 1) for j in range(1, sums.shape[0])], dtype=np.int64)
    hi = np.array([1 << j for j in range(sums.shape[0])], dtype=np.int64)
    counts = np.round(sums).astype(np.int64)
    nz = np.flatnonzero(counts)
    end = int(nz[-1]) + 1 if nz.shape[0] else 0
    return lo[:end], hi[:end], counts[:end]


def _memory_tier(
    sampled: SampledStack,
    *,
    reuse_access_share: float | None,
    block_bytes: int,
    capacities_bytes: Sequence[int],
) -> tuple[MemoryTierPoint, ...]:
    out = []
    for c in capacities_bytes:
        blocks = c // block_bytes
        hit = sampled.lru_hit_share(blocks)
        is_sampled = blocks > sampled.exact_below_blocks
        if reuse_access_share:
            ideal = hit / reuse_access_share
            out.append(MemoryTierPoint(c, blocks, hit, ideal, 1.0 - ideal, is_sampled))
        else:
            out.append(MemoryTierPoint(c, blocks, hit, None, None, is_sampled))
    return tuple(out)


def _stack_tables(
    sampled: SampledStack, block_bytes: int
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, list[pl.DataFrame]]:
    """Histograms (stack_blocks, stack_bytes), hit curve and stack CDFs from the sample."""
    values, weights = sampled.distribution()
    frames = []
    edges = _weighted_log2_histogram(values, weights)
    for metric, scale in (("stack_blocks", 1), ("stack_bytes", block_bytes)):
        frames.append(histogram_frame(metric, *edges, scale))
    top = int(values.max()) + 1 if values.shape[0] else 1
    caps = np.unique(np.concatenate([np.geomspace(1, top, num=64).astype(np.int64), [top]]))
    share = sampled.hit_curve(caps)
    cdf_frames = []
    if values.shape[0]:
        order = np.argsort(values, kind="stable")
        v, w = values[order], np.cumsum(weights[order])
        points = np.unique(np.concatenate([[0, top], np.geomspace(1, top, 256)]).astype(np.int64))
        cum = w[np.clip(np.searchsorted(v, points, side="right") - 1, 0, None)] / w[-1]
        cum = np.where(points < v[0], 0.0, cum)
        for metric, scale in (("stack_bytes", block_bytes), ("stack_blocks", 1)):
            cdf_frames.append(cdf_frame(metric, points.astype(np.float64) * scale, cum))
    return pl.concat(frames), caps, share, cdf_frames


# --- the analysis ---------------------------------------------------------------------------


def analyze_dataset(
    dataset: Dataset,
    *,
    geometry: KvGeometry,
    memory_budget_bytes: int | None = None,
    sample_rate: float | None = None,
    memory_capacities_bytes: Sequence[int] | None = None,
    progress: Progress | None = None,
    thresholds: VerdictThresholds | None = None,
    rate_requests_per_s: float | None = None,
    concurrent_sessions: int | None = None,
    seed: int = 0,
) -> AnalysisResult:
    """Analyse ``dataset`` within ``memory_budget_bytes`` (default :func:`default_memory_budget`).

    The exact plan is :func:`~fcctl.analyzers.reuse.analyze.analyze_trace` on the loaded trace (and
    takes its schedule arguments); the bounded plan is described in the module docstring and
    refuses a schedule (interleaving sessions needs the whole trace in memory).
    """
    progress = progress or Progress(enabled=False)
    check_geometry(geometry)
    budget = default_memory_budget() if memory_budget_bytes is None else memory_budget_bytes
    plan = plan_memory(
        dataset.num_requests,
        dataset.block_accesses,
        budget,
        sample_rate=sample_rate,
        exact_capacity_blocks=largest_capacity_blocks(dataset, geometry, memory_capacities_bytes),
    )
    summary = (
        None
        if dataset.mode == "file"
        else DatasetSummary(dataset.mode, len(dataset.parts), dataset.units)
    )
    if plan.exact or not dataset.has_hashes:
        trace = dataset.load_trace(progress)
        result = analyze_trace(
            trace,
            geometry=geometry,
            memory_capacities_bytes=memory_capacities_bytes,
            progress=progress,
            thresholds=thresholds,
            rate_requests_per_s=rate_requests_per_s,
            concurrent_sessions=concurrent_sessions,
            seed=seed,
        )
        return dataclasses.replace(result, trace=dataclasses.replace(result.trace, dataset=summary))
    refuse_schedule(plan, rate_requests_per_s, concurrent_sessions)
    return analyze_bounded(
        dataset,
        plan,
        geometry=geometry,
        capacities=sorted(set(memory_capacities_bytes or DEFAULT_MEMORY_CAPACITIES_BYTES)),
        progress=progress,
        thresholds=thresholds or VerdictThresholds(),
        summary=summary,
    )


#: The passes over the block ids of the bounded analysis: ``(dataset, plan, timestamp_s per
#: request, session index per request or None, number of sessions, progress)`` -> (the SHARDS
#: result, the exact block totals). :func:`_local_passes` here; the Dask engine's on a cluster.
BoundedPasses = Callable[
    [Dataset, MemoryPlan, np.ndarray, np.ndarray | None, int, Progress],
    tuple[SampledStack, BlockTotals],
]


def seconds_values_limit(budget_bytes: int) -> int:
    """How many distinct reuse distances in seconds the exact totals may hold in a budget."""
    return max(budget_bytes // 4 // 16, 1 << 20)


def _local_passes(
    dataset: Dataset,
    plan: MemoryPlan,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    n_sessions: int,
    progress: Progress,
) -> tuple[SampledStack, BlockTotals]:
    """The SHARDS pass and ``plan.block_passes`` bucket passes, each over the ordered stream."""
    assert plan.sample_rate is not None
    total = dataset.block_accesses

    def stream(task_name: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with progress.task(task_name, total) as task:
            done = 0
            for lens, ids in dataset.iter_blocks():
                yield lens, ids
                done += ids.shape[0]
                task.update(done)

    sampled = sampled_stack(
        lambda: (ids for _, ids in stream(f"SHARDS sample (rate {plan.sample_rate:g})")),
        rate=plan.sample_rate,
        exact_below_blocks=plan.exact_below_blocks,
    )
    totals = BlockTotals(
        dataset.num_requests,
        n_sessions,
        max_seconds_values=seconds_values_limit(plan.budget_bytes),
    )
    for p in range(plan.block_passes):
        sub_ids, sub_lens = bucket_stream(
            stream(f"exact block pass {p + 1}/{plan.block_passes}"), plan.block_passes, p
        )
        totals.add_bucket(sub_ids, sub_lens, timestamp_s, session)
        del sub_ids, sub_lens
    return sampled, totals


def refuse_schedule(
    plan: MemoryPlan, rate_requests_per_s: float | None, concurrent_sessions: int | None
) -> None:
    """Refuse a session schedule for a bounded plan (interleaving needs the whole trace)."""
    for parameter, value in (
        ("rate_requests_per_s", rate_requests_per_s),
        ("concurrent_sessions", concurrent_sessions),
    ):
        if value is not None:
            raise FcctlInputError(
                f"{parameter}: a session schedule needs the whole trace in memory, and this "
                f"one is analysed in bounded memory ({plan.describe()}); raise "
                "`memory_budget_bytes` or leave it out",
                parameter=parameter,
            )


def analyze_bounded(
    dataset: Dataset,
    plan: MemoryPlan,
    *,
    geometry: KvGeometry,
    capacities: Sequence[int],
    progress: Progress,
    thresholds: VerdictThresholds,
    summary: DatasetSummary | None,
    passes: BoundedPasses | None = None,
) -> AnalysisResult:
    """The bounded plan's result; ``passes`` computes the sample and the block totals."""
    started = utc_now()
    assert plan.sample_rate is not None
    trace = dataset.request_trace()
    requests = request_figures(trace, geometry.bytes_per_token)
    block_tokens = int(trace.block_size_tokens)
    block_bytes = geometry.bytes_per_block(block_tokens)
    total = dataset.block_accesses
    session = None
    ids: list[str] = []
    n_sessions = 0
    if trace.has_sessions:
        session, ids, n_sessions = session_index_from_ids(trace.requests["session_id"])
    sampled, totals = (passes or _local_passes)(
        dataset, plan, requests.timestamp_s, session, n_sessions, progress
    )
    if totals.accesses != total:  # pragma: no cover - the buckets partition the stream
        raise RuntimeError(f"bounded analysis: buckets hold {totals.accesses} of {total} accesses")
    sampled = sampled.with_distinct_blocks(totals.distinct_blocks)
    reuse = _reuse_metrics(totals, sampled, block_bytes)
    hist_stack, caps, share, stack_cdf = _stack_tables(sampled, block_bytes)
    assert totals.request_count is not None
    reuse = dataclasses.replace(reuse, histograms=pl.concat([hist_stack, reuse.histograms]))
    cdf = pl.concat(
        [
            *stack_cdf,
            counts_cdf_frame("requests", totals.request_count),
            seconds_cdf_frame(reuse.histograms),
        ]
    )
    sessions, notes = _bounded_sessions(
        trace, (session, ids, n_sessions), totals, block_tokens, geometry
    )
    assert totals.reused_per_request is not None  # set by BlockTotals.__post_init__
    blocks = BlockFigures(
        block_accesses=total,
        distinct_blocks=totals.distinct_blocks,
        blocks_per_request=trace_blocks(dataset),
        reused_per_request=totals.reused_per_request,
        stack_count=np.zeros(0, dtype=np.int64),
        reuse=reuse,
        sessions=sessions,
        hit_curve_capacity_blocks=caps,
        hit_curve_share=share,
        cdf=cdf,
    )
    points = _memory_tier(
        sampled,
        reuse_access_share=reuse.reuse_access_share,
        block_bytes=block_bytes,
        capacities_bytes=capacities,
    )
    sampling = _bounded_sampling(plan, sampled)
    notes.insert(0, _sampled_note(plan, sampled, sampling, total))
    schedule_summary: ScheduleSummary = summarize_schedule(trace.order, None, None, sessions)
    return assemble_result(
        trace,
        geometry=geometry,
        requests=requests,
        blocks=blocks,
        points=points,
        schedule_summary=schedule_summary,
        thresholds=thresholds,
        started=started,
        sampling=sampling,
        dataset=summary,
        extra_notes=notes,
    )


def _bounded_sessions(
    trace: Trace,
    index: tuple[np.ndarray | None, list[str], int],
    totals: BlockTotals,
    block_tokens: int,
    geometry: KvGeometry,
) -> tuple[SessionMetrics | None, list[Note]]:
    """Per-session figures from the passes' distinct blocks per session (``index``: each
    request's session ordinal, the ids, their count); a note instead without session ids."""
    session, ids, n_sessions = index
    if session is None:
        return None, [
            Note(
                NoteCode.NO_INFERRED_SESSIONS,
                "The trace has no session ids, and inferring sessions from prefix chains needs "
                "the whole access stream in memory; per-session figures are not reported "
                "(raise `memory_budget_bytes` to analyse it exactly).",
            )
        ]
    assert totals.session_distinct is not None
    sessions = session_summary(
        trace.requests,
        session,
        ids,
        n_sessions,
        totals.session_distinct,
        block_size_tokens=block_tokens,
        bytes_per_token=geometry.bytes_per_token,
        inferred=False,
    )
    return sessions, []


def _bounded_sampling(plan: MemoryPlan, sampled: SampledStack) -> Sampling:
    """What the sample was and the error measured at its rate (docs/scale.md)."""
    assert plan.sample_rate is not None
    return Sampling(
        method="shards-fixed-rate",
        rate=sampled.rate,
        exact_below_blocks=sampled.exact_below_blocks,
        sampled_accesses=sampled.sampled_accesses,
        sampled_blocks=sampled.sampled_blocks,
        memory_budget_bytes=plan.budget_bytes,
        block_passes=plan.block_passes,
        sampled_figures=SAMPLED_FIGURES,
        exact_figures=EXACT_FIGURES,
        error_bound=error_bound(sampled.rate, exact_head=sampled.exact_below_blocks > 0),
    )


def _sampled_note(plan: MemoryPlan, sampled: SampledStack, sampling: Sampling, total: int) -> Note:
    """The note that says which figures are estimated, from how much, and how well."""
    bound = sampling.error_bound
    stated = (
        f"measured error at this rate: {bound.hit_share_mean_abs_pp:.3g} pp mean, "
        f"{bound.hit_share_max_abs_pp:.3g} pp max on the hit curve, "
        f"{bound.stack_percentile_rel:.1%} on stack-distance percentiles"
        if bound.hit_share_mean_abs_pp is not None
        and bound.hit_share_max_abs_pp is not None
        and bound.stack_percentile_rel is not None
        else "no error measured at this rate"
    )
    return Note(
        NoteCode.SAMPLED,
        f"Analysed in bounded memory (budget {plan.budget_bytes / 2**30:.1f} GiB): LRU "
        f"stack distances and memory-tier points above {sampled.exact_below_blocks:,} "
        f"blocks are estimated from a SHARDS sample at rate {sampled.rate:g} "
        f"({sampled.sampled_accesses:,} of {total:,} accesses; {stated}); every other "
        "figure is exact.",
    )


def trace_blocks(dataset: Dataset) -> np.ndarray:
    """Block accesses per request (int64), in analysis order."""
    return dataset.requests["n_blocks"].to_numpy().astype(np.int64)


def _reuse_metrics(totals: BlockTotals, sampled: SampledStack, block_bytes: int) -> ReuseMetrics:
    """The exact shares and distances of the bucket passes, the sampled stack distances."""
    assert totals.request_count is not None and totals.seconds_values is not None
    assert totals.seconds_counts is not None
    if totals.accesses == 0:
        empty = Percentiles()
        return ReuseMetrics(
            None, None, empty, empty, empty, empty, pl.DataFrame(schema=HISTOGRAM_SCHEMA)
        )
    stack = Percentiles(*sampled.percentiles(QUANTILES))
    hist = totals.seconds_hist if totals.seconds_hist is not None else np.zeros(0, dtype=np.int64)
    frames = [
        histogram_frame("requests", *log2_histogram_from_counts(totals.request_count)),
        histogram_frame("seconds", *seconds_histogram_edges(hist)),
    ]
    reaccesses = totals.accesses - totals.distinct_blocks
    return ReuseMetrics(
        once_only_block_share=totals.once_only_blocks / totals.distinct_blocks,
        reuse_access_share=reaccesses / totals.accesses,
        distance_requests=Percentiles.of_counts(totals.request_count),
        distance_seconds=Percentiles(
            *percentiles_from_weighted(totals.seconds_values, totals.seconds_counts, QUANTILES)
        ),
        distance_stack_blocks=stack,
        distance_stack_bytes=stack.scaled(block_bytes),
        histograms=pl.concat(frames),
    )
