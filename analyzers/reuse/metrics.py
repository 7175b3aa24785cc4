"""Reuse metrics from one :func:`analyzers.reuse.stack.reuse_pass` (definitions in issue #2, §3).

* ``once_only_block_share`` = distinct blocks accessed exactly once / distinct blocks.
* ``reuse_access_share`` = accesses to a block seen earlier / all block accesses: the hit
  ratio of an infinite cache, the ceiling of any cache.
* reuse distance of every re-access, as p50/p90/p99 with numpy's default (linear)
  interpolation over all re-accesses: in requests, in seconds, as LRU stack distance in blocks
  and in bytes (stack distance x block bytes), plus log2 histograms
  (:data:`analyzers.reuse.stack.LOG2_BUCKETS_DOC`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .stack import (
    ReusePass,
    log2_histogram_from_counts,
    percentiles_from_counts,
    percentiles_from_weighted,
    seconds_histogram_edges,
)

QUANTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 (numpy linear interpolation); None when there is nothing to measure."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        if values.shape[0] == 0:
            return cls()
        p = np.percentile(values, QUANTILES)
        return cls(float(p[0]), float(p[1]), float(p[2]))

    @classmethod
    def of_counts(cls, counts: np.ndarray) -> Percentiles:
        a, b, c = percentiles_from_counts(counts, QUANTILES)
        return cls(a, b, c)

    def scaled(self, factor: float) -> Percentiles:
        # Linear interpolation commutes with scaling, so this equals the percentiles of
        # the scaled values.
        return Percentiles(
            *(None if v is None else v * factor for v in (self.p50, self.p90, self.p99))
        )


@dataclass(frozen=True)
class ReuseDistances:
    """Reuse distance of re-accesses in each unit (the JSON ``reuse_distance`` object)."""

    requests: Percentiles = Percentiles()
    seconds: Percentiles = Percentiles()
    stack_blocks: Percentiles = Percentiles()
    stack_bytes: Percentiles = Percentiles()


@dataclass(frozen=True, eq=False)
class ReuseMetrics:
    once_only_block_share: float | None
    reuse_access_share: float | None
    distance_requests: Percentiles
    distance_seconds: Percentiles
    distance_stack_blocks: Percentiles
    distance_stack_bytes: Percentiles
    histograms: pl.DataFrame  # metric, bucket_lo, bucket_hi, count

    def distances(self) -> ReuseDistances:
        return ReuseDistances(
            requests=self.distance_requests,
            seconds=self.distance_seconds,
            stack_blocks=self.distance_stack_blocks,
            stack_bytes=self.distance_stack_bytes,
        )


HISTOGRAM_SCHEMA = {
    "metric": pl.String(),
    "bucket_lo": pl.Float64(),
    "bucket_hi": pl.Float64(),
    "count": pl.Int64(),
}


def histogram_frame(
    metric: str, lo: np.ndarray, hi: np.ndarray, count: np.ndarray, scale: float = 1.0
) -> pl.DataFrame:
    """One metric's histogram rows (:data:`HISTOGRAM_SCHEMA`); bucket edges times ``scale``."""
    return pl.DataFrame(
        {
            "metric": [metric] * lo.shape[0],
            "bucket_lo": lo * float(scale),
            "bucket_hi": hi * float(scale),
            "count": count,
        },
        schema=HISTOGRAM_SCHEMA,
    )


def reuse_metrics(rp: ReusePass, block_bytes: int) -> ReuseMetrics:
    """Shares, distance percentiles and histograms of one reuse pass."""
    if rp.num_accesses == 0:
        empty = Percentiles()
        return ReuseMetrics(
            None, None, empty, empty, empty, empty, pl.DataFrame(schema=HISTOGRAM_SCHEMA)
        )
    once = int(np.count_nonzero(rp.access_count == 1))
    stack_blocks = Percentiles.of_counts(rp.stack_count)
    frames = []
    for metric, counts, scale in (
        ("stack_blocks", rp.stack_count, 1),
        ("stack_bytes", rp.stack_count, block_bytes),
        ("requests", rp.request_count, 1),
    ):
        frames.append(histogram_frame(metric, *log2_histogram_from_counts(counts), scale))
    frames.append(histogram_frame("seconds", *seconds_histogram_edges(rp.seconds_hist)))
    return ReuseMetrics(
        once_only_block_share=once / rp.num_blocks,
        reuse_access_share=rp.num_reaccesses / rp.num_accesses,
        distance_requests=Percentiles.of_counts(rp.request_count),
        distance_seconds=Percentiles(
            *percentiles_from_weighted(rp.seconds_values, rp.seconds_counts, QUANTILES)
        ),
        distance_stack_blocks=stack_blocks,
        distance_stack_bytes=stack_blocks.scaled(block_bytes),
        histograms=pl.concat(frames),
    )
