"""The operating point of one simulation: the load it reached and how busy the node was.

A figure without its operating point is not a result (docs/simulator.md, "Operating point").
Everything here is computed after the run from the per-request phase times the engine logs
(arrival, loads done, SSD read start, prefill start, first token, decode end), so another tool
can recompute it from the ``--out`` per-request table:

* **span**: from the first arrival to the last decode end; every utilisation is over it.
* **steady-state window** ``[t10, t90]``: the arrival times of the requests at ranks
  ``floor(0.1 (n - 1))`` and ``ceil(0.9 (n - 1))`` of all arrivals sorted (rejected requests
  included: the window is the offered load's; ``schedule.central_window``); the first 10 % of
  arrivals (warm-up) and the last 10 % (drain) fall outside. With one request the window is
  that arrival alone. On one clock the trace is time-scaled so that the offered rate arrives
  over this window (``schedule.natural_rate_per_s``).
* **achieved rate**: ``whole`` is requests over (last first token - first arrival); ``central``
  is the requests whose first token falls in the window over the window's length (None for a
  window of length 0). Both count requests *served*, so a node that cannot keep up shows a
  lower rate than what arrived.
* **saturated**: the central rate is below ``1 - SATURATION_TOLERANCE`` of the reference, the
  part of the offered load that ran: for per-session clocks the offered rate times the share
  of the window's arrivals that were not rejected (a turn waits for the previous turn's
  output, so arrivals slow down with the node), for traces on one clock the arrival rate of
  the requests that ran in the same window (arrivals are the trace's, time-scaled, whatever
  the node does). ``saturated_by`` names the cause: ``node`` when the central rate is also
  more than 10 % below what the same schedule offers an instant node (``unloaded``: the rate
  arriving in the steady-state window when every request is served at once, times the same
  share that ran), ``trace-pacing`` when it is not (per-session turn gaps cannot offer the
  rate: the node is not the limit).
* **utilisation** (fractions of the span): ``prefill_mean``/``prefill_max`` are each worker's
  prefill busy time (the time of its iterations that carried prefill chunks, host->GPU copies
  included; the engine's ``prefill_busy_s``) over the span, mean and max over workers, so
  ``sum(busy) / (workers x span) == prefill_mean``; ``decode_mean`` is, averaged over
  workers, the share of the span in which at least one request decodes on the worker;
  ``ssd_read`` and ``ssd_write`` the share of the SSD drives' capacity (the link's, integrated
  over the span) that reads and writes used;
  ``pcie`` the bytes crossing the GPUs' host links (host->GPU copies and direct SSD->GPU reads)
  over what those links carry at their effective bandwidth in the span.
* **staging**: ``bytes`` the configured staging (tiered: the host staging buffer; flat: the GPU
  read windows, two layers per stream; memory-only: 0); ``peak_bytes`` and ``mean_bytes``
  (time-weighted over the span) of what was held.
* **sessions_active**: a session is active from its first arrival to its last decode end;
  time-weighted mean and max over the span.
* **queue_depth**: requests waiting for their worker (loads done to prefill start), and
  requests in the SSD queue (arrival to loads done, for requests that read from SSD):
  time-weighted mean and max over the span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..traces.schedule import central_window

#: A run is saturated when its central achieved rate is more than this fraction below its
#: reference rate (module docstring). 10 %: sampling noise of Poisson session starts on the
#: bundled samples stays inside it, a node that falls behind does not.
SATURATION_TOLERANCE = 0.10
#: The steady-state window's quantiles of the arrivals.


@dataclass(frozen=True)
class AchievedRate:
    """Requests served per second: over the whole run and in the steady-state window; and
    ``unloaded``, the rate arriving in the steady-state window of the same schedule on a node
    that served instantly (the load's own pace: per-session turn gaps cap it)."""

    whole: float | None
    central: float | None
    unloaded: float | None = None

    @property
    def served(self) -> float | None:
        """The rate a load point is named by: the steady-state window's, the whole run's when
        the window holds none (0 or None: a run of a handful of requests)."""
        return self.central if self.central else self.whole


@dataclass(frozen=True)
class Utilisation:
    """Fractions of the span (module docstring)."""

    prefill_mean: float
    prefill_max: float
    decode_mean: float
    ssd_read: float
    ssd_write: float
    pcie: float


@dataclass(frozen=True)
class Staging:
    bytes: int | None  # None: sized per read (flat's windows)
    peak_bytes: int
    mean_bytes: float


@dataclass(frozen=True)
class MeanMax:
    mean: float
    max: int


@dataclass(frozen=True)
class QueueDepth:
    ready_mean: float
    ready_max: int
    ssd_mean: float
    ssd_max: int


@dataclass(frozen=True)
class Window:
    """The steady-state window, seconds on the run's clock, and the requests arriving in it."""

    start_s: float
    end_s: float
    requests: int


def window_of(arrival_s: np.ndarray) -> Window:
    """The steady-state window of ``arrival_s`` (module docstring)."""
    return Window(*central_window(arrival_s))


def occupancy(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> MeanMax:
    """Time-weighted mean and max of how many intervals ``[start, end)`` cover a time in
    ``[t0, t1]`` (a zero span: the mean is the max)."""
    if starts.shape[0] == 0:
        return MeanMax(0.0, 0)
    s = np.clip(starts, t0, t1)
    e = np.clip(ends, t0, t1)
    times = np.concatenate([s, e])
    steps = np.concatenate([np.ones(s.shape[0], np.int64), -np.ones(e.shape[0], np.int64)])
    # At equal times ends go first, so back-to-back intervals do not count as overlapping.
    order = np.lexsort((steps, times))
    times, level = times[order], np.cumsum(steps[order])
    peak = int(level.max()) if level.shape[0] else 0
    span = t1 - t0
    if span <= 0:
        return MeanMax(float(peak), peak)
    area = float(np.sum(level[:-1] * np.diff(times)))
    return MeanMax(area / span, peak)


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of the intervals ``[start, end)``."""
    if starts.shape[0] == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # A new piece of the union starts where an interval begins after everything before it.
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    piece_start = s[new]
    piece_end = np.concatenate([reach[:-1][new[1:]], reach[-1:]])
    return float(np.sum(piece_end - piece_start))


@dataclass(frozen=True)
class OperatingPoint:
    """What :func:`operating_point` returns (field names are the ``--json`` keys)."""

    achieved_rate: AchievedRate
    saturated: bool
    saturated_by: str | None
    utilisation: Utilisation
    staging: Staging
    sessions_active: MeanMax
    queue_depth: QueueDepth
    window: Window
    span_s: float
    worker_prefill_busy_s: tuple[float, ...]


def _utilisation(
    first: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    worker: np.ndarray,
    *,
    workers: int,
    span: float,
    worker_prefill_busy_s: Sequence[float] | None,
    ssd_used_s: tuple[float, float],
    pcie: tuple[int, float],
    staging: tuple[int, float],
) -> tuple[np.ndarray, Utilisation, float]:
    """Each worker's prefill-busy seconds, the run's utilisation of workers, SSD and links
    over its ``span``, and the mean staging bytes held (``staging``: peak, integral)."""
    ssd_read_used_s, ssd_write_used_s = ssd_used_s
    pcie_bytes, pcie_bytes_per_s = pcie
    staging_peak_bytes, staging_integral = staging
    if worker_prefill_busy_s is None:
        # One request at a time (a table from elsewhere): prefill start to first token.
        busy = np.zeros(workers)
        np.add.at(busy, worker, first - start)
    else:
        busy = np.asarray(worker_prefill_busy_s, dtype=np.float64)
    decode = [union_length(first[worker == w], end[worker == w]) for w in range(workers)]
    if span > 0:
        prefill_each = busy / span
        util = Utilisation(
            prefill_mean=float(busy.sum() / (workers * span)),
            prefill_max=float(prefill_each.max()),
            decode_mean=float(sum(decode) / (workers * span)),
            ssd_read=ssd_read_used_s / span,
            ssd_write=ssd_write_used_s / span,
            pcie=pcie_bytes / (pcie_bytes_per_s * workers * span),
        )
        staging_mean = staging_integral / span
    else:
        util = Utilisation(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        staging_mean = float(staging_peak_bytes)
    return busy, util, staging_mean


def _occupancies(table: pl.DataFrame, t0: float, t1: float) -> tuple[MeanMax, QueueDepth]:
    """Sessions active, and requests waiting for a worker and for an SSD read, over [t0, t1]."""
    arrival = table["arrival_s"].to_numpy()
    start = table["start_s"].to_numpy()
    ready = table["ready_s"].to_numpy()
    end = table["end_s"].to_numpy()
    session = table["session_index"].to_numpy()
    spans = (
        pl.DataFrame({"s": session, "a": arrival, "e": end})
        .group_by("s")
        .agg(pl.col("a").min(), pl.col("e").max())
    )
    sessions = occupancy(spans["a"].to_numpy(), spans["e"].to_numpy(), t0, t1)
    ready_q = occupancy(ready, start, t0, t1)
    reads = ~table["prefetch_s"].is_null().to_numpy()
    ssd_q = occupancy(arrival[reads], ready[reads], t0, t1)
    return sessions, QueueDepth(ready_q.mean, ready_q.max, ssd_q.mean, ssd_q.max)


def operating_point(
    table: pl.DataFrame,
    *,
    workers: int,
    offered_rate: float | None,
    closed_loop: bool,
    ssd_read_used_s: float,
    ssd_write_used_s: float,
    pcie_bytes: int,
    pcie_bytes_per_s: float,
    staging_bytes: int | None,
    staging_peak_bytes: int,
    staging_integral: float,
    worker_prefill_busy_s: Sequence[float] | None = None,
    rejected_arrival_s: np.ndarray | None = None,
    unloaded_arrival_s: np.ndarray | None = None,
) -> OperatingPoint:
    """The operating point of a finished run from its per-request ``table`` (engine columns:
    the requests that ran) and the arrivals of the requests rejected (never run)."""
    arrival = table["arrival_s"].to_numpy()
    first = table["first_token_s"].to_numpy()
    start = table["start_s"].to_numpy()
    end = table["end_s"].to_numpy()
    worker = table["worker"].to_numpy()
    t0, t1 = float(arrival.min()), float(end.max())
    span = t1 - t0
    # The window is the offered load's: every arrival, rejected requests' too, so that on one
    # clock it holds the offered rate exactly; the reference the achieved rate is held to is
    # the part of it that ran.
    offered_arrivals = (
        arrival
        if rejected_arrival_s is None or rejected_arrival_s.shape[0] == 0
        else np.concatenate([arrival, rejected_arrival_s])
    )
    window = window_of(offered_arrivals)
    length = window.end_s - window.start_s
    served = float(first.max() - t0)
    whole = arrival.shape[0] / served if served > 0 else None
    central = None
    reference = offered_rate
    ran = 0
    if length > 0:
        in_window = (first >= window.start_s) & (first <= window.end_s)
        central = int(np.count_nonzero(in_window)) / length
        ran = int(np.count_nonzero((arrival >= window.start_s) & (arrival <= window.end_s)))
        if not closed_loop:
            reference = ran / length
        elif reference is not None and window.requests:
            reference *= ran / window.requests
    saturated = bool(
        central is not None
        and reference is not None
        and central < (1.0 - SATURATION_TOLERANCE) * reference
    )
    # What holds the load back: the node, or the schedule itself (on an instant node the
    # sessions' own turn gaps would not offer the rate either).
    unloaded = None
    if unloaded_arrival_s is not None and unloaded_arrival_s.shape[0] > 1:
        u_start, u_end, u_in = central_window(unloaded_arrival_s)
        unloaded = u_in / (u_end - u_start) if u_end > u_start else None
    saturated_by = None
    if saturated:
        saturated_by = "node"
        if closed_loop and unloaded is not None and central is not None and window.requests:
            share = ran / window.requests
            if central >= (1.0 - SATURATION_TOLERANCE) * unloaded * share:
                saturated_by = "trace-pacing"
    busy, util, staging_mean = _utilisation(
        first,
        start,
        end,
        worker,
        workers=workers,
        span=span,
        worker_prefill_busy_s=worker_prefill_busy_s,
        ssd_used_s=(ssd_read_used_s, ssd_write_used_s),
        pcie=(pcie_bytes, pcie_bytes_per_s),
        staging=(staging_peak_bytes, staging_integral),
    )
    sessions, queue_depth = _occupancies(table, t0, t1)
    return OperatingPoint(
        achieved_rate=AchievedRate(whole, central, unloaded),
        saturated=saturated,
        saturated_by=saturated_by,
        utilisation=util,
        staging=Staging(staging_bytes, staging_peak_bytes, staging_mean),
        sessions_active=sessions,
        queue_depth=queue_depth,
        window=window,
        span_s=span,
        worker_prefill_busy_s=tuple(float(b) for b in busy),
    )
