"""Session-start schedules: how sessions of a per-session-clock trace interleave under load.

Traces whose times are per session (Claude Code: every session's clock starts at 0) say nothing
about how many sessions run at once. Analysing them "one session after another" is the best
case for a memory tier: no other session's blocks arrive between two turns. A schedule places
each session's start on one shared clock, each session keeping its own offsets between
requests, so that requests of concurrent sessions interleave as they would on a busy server.

Two schedules, both deterministic for a seed:

* **by rate** (:func:`schedule_by_rate`): sessions start as a Poisson process whose rate is
  chosen so that the aggregate *request* rate is the target ``R`` requests/s. With ``S``
  sessions and ``N`` requests, a session brings ``N/S`` requests on average, so sessions start
  at ``lambda = R * S / N`` per second: inter-start gaps are exponential with mean
  ``1/lambda``, drawn with ``numpy.random.default_rng(seed)``. Sessions start in trace order.
* **by concurrency** (:func:`schedule_by_concurrency`): ``C`` sessions run at once. Sessions,
  in trace order, take the first of ``C`` slots to come free (ties: the lowest slot); a
  session holds its slot from its start until its last request's arrival offset.

:func:`interleave` then orders requests by ``session start + own offset`` (stable: trace
order breaks ties), renumbers ``request_index``, remaps ``parent_request`` and returns a
trace with one shared clock (``order == "time"``). The replay simulator and
``fcctl analyze --rate`` use this one library, so both see the same interleaving.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal, TypeGuard

import numpy as np
import polars as pl

from fcctl.common.errors import FcctlInputError

from .schema import Trace

ScheduleKind = Literal["rate", "concurrency"]


@dataclass(frozen=True)
class SessionSchedule:
    """Where each session starts on the shared clock (seconds), by session ordinal."""

    kind: ScheduleKind
    seed: int
    sessions: int
    requests: int
    start_s: np.ndarray  # float64, one per session, in trace order
    rate_requests_per_s: float | None = None
    session_rate_per_s: float | None = None
    concurrent_sessions: int | None = None

    def mean_concurrent_sessions(self, duration_s: np.ndarray) -> float:
        """Average sessions active at once: total session time over the schedule's span."""
        if self.sessions == 0:
            return 0.0
        ends = self.start_s + duration_s
        span = float(ends.max() - self.start_s.min())
        if span <= 0:
            return float(self.sessions)
        return float(duration_s.sum()) / span


#: The rule every offered rate (requests/s) is held to, in the words of its messages.
RATE_RULE = "must be > 0 and finite (requests/s)"


def _is_rate(value: object) -> TypeGuard[int | float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _parameter(name: str) -> str | None:
    # A library parameter (``rate_requests_per_s``) is shown by the CLI as its flag; a name that
    # is a flag already (``--rates``) is kept as it is.
    return name if name.isidentifier() else None


def check_rate(rate: object, name: str) -> float:
    """``rate`` as a float: a finite number of requests/s > 0 (a bool is not one).

    The one rate validator of fcctl (analyze's session-start rate, the schedules, replay's and
    the recommender's rates through :func:`check_rates`). ``name`` starts the message: a library
    parameter (``rate_requests_per_s``, which the CLI shows as its flag) or a flag (``--rates``).
    """
    if not _is_rate(rate):
        raise FcctlInputError(f"{name}: {RATE_RULE}; got {rate!r}", parameter=_parameter(name))
    return float(rate)


def check_rates(rates: Iterable[object], name: str) -> tuple[float, ...]:
    """Rates (requests/s) by :func:`check_rate`'s rule, sorted and unique; at least one."""
    out = []
    for r in rates:
        if not _is_rate(r):
            raise FcctlInputError(
                f"{name}: each rate {RATE_RULE}; got {r!r}", parameter=_parameter(name)
            )
        out.append(float(r))
    if not out:
        raise FcctlInputError(f"{name}: give at least one rate", parameter=_parameter(name))
    return tuple(sorted(set(out)))


def _session_ordinals(requests: pl.DataFrame) -> tuple[np.ndarray, int]:
    """Session ordinal per request (first appearance order) and the number of sessions."""
    if requests["session_id"].null_count():
        raise FcctlInputError(
            "schedule: every request needs a session_id to schedule sessions; "
            f"{requests['session_id'].null_count()} have none"
        )
    codes = requests.select(
        pl.col("session_id").rank("dense").cast(pl.Int64) - 1,
    )["session_id"].to_numpy()
    # Dense ranks sort by id; renumber them by first appearance (trace order).
    _, first = np.unique(codes, return_index=True)
    order = np.argsort(first, kind="stable")
    renumber = np.empty_like(order)
    renumber[order] = np.arange(order.shape[0])
    return renumber[codes], int(order.shape[0])


def session_durations_s(requests: pl.DataFrame) -> np.ndarray:
    """Each session's last arrival offset (seconds after its own start), in trace order."""
    ordinal, n = _session_ordinals(requests)
    t = requests["timestamp_s"].to_numpy()
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, ordinal, t)
    np.maximum.at(last, ordinal, t)
    return last - first


def schedule_by_rate(
    requests: pl.DataFrame, rate_requests_per_s: float, *, seed: int = 0
) -> SessionSchedule:
    """Poisson session starts at the session rate that gives ``rate_requests_per_s`` requests/s."""
    _, n_sessions = _session_ordinals(requests)
    return schedule_sessions_by_rate(n_sessions, requests.height, rate_requests_per_s, seed=seed)


def schedule_sessions_by_rate(
    sessions: int, requests: int, rate_requests_per_s: float, *, seed: int = 0
) -> SessionSchedule:
    """:func:`schedule_by_rate` for ``sessions`` sessions (ordinals 0..sessions - 1, in order of
    first appearance) holding ``requests`` requests, without their table."""
    rate = check_rate(rate_requests_per_s, "rate")
    if sessions == 0:
        return SessionSchedule("rate", seed, 0, 0, np.zeros(0), rate, None)
    session_rate = rate * sessions / requests
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / session_rate, size=sessions)
    gaps[0] = 0.0  # the first session opens the clock
    return SessionSchedule(
        kind="rate",
        seed=seed,
        sessions=sessions,
        requests=requests,
        start_s=np.cumsum(gaps),
        rate_requests_per_s=rate,
        session_rate_per_s=session_rate,
    )


def schedule_by_concurrency(requests: pl.DataFrame, concurrent_sessions: int) -> SessionSchedule:
    """``concurrent_sessions`` slots; each session takes the first slot to come free."""
    if isinstance(concurrent_sessions, bool) or not isinstance(concurrent_sessions, int):
        raise FcctlInputError(
            f"concurrent_sessions: must be a whole number; got {concurrent_sessions!r}"
        )
    if concurrent_sessions < 1:
        raise FcctlInputError(f"concurrent_sessions: must be >= 1; got {concurrent_sessions!r}")
    durations = session_durations_s(requests)
    n = durations.shape[0]
    slots = [(0.0, k) for k in range(min(concurrent_sessions, max(n, 1)))]
    heapq.heapify(slots)
    start = np.zeros(n)
    for i in range(n):
        free_at, k = heapq.heappop(slots)
        start[i] = free_at
        heapq.heappush(slots, (free_at + float(durations[i]), k))
    return SessionSchedule(
        kind="concurrency",
        seed=0,
        sessions=n,
        requests=requests.height,
        start_s=start,
        concurrent_sessions=concurrent_sessions,
    )


def interleave(trace: Trace, schedule: SessionSchedule) -> Trace:
    """``trace`` with its sessions started on ``schedule``: one shared clock, time order."""
    if trace.order != "session":
        raise FcctlInputError(
            f"{trace.path}: schedule: only traces with per-session clocks are rescheduled; "
            f"this one has one clock for all requests (order {trace.order!r})"
        )
    req = trace.requests
    ordinal, n = _session_ordinals(req)
    if n != schedule.sessions:
        raise FcctlInputError(
            f"{trace.path}: schedule: made for {schedule.sessions} sessions; the trace has {n}"
        )
    t = req["timestamp_s"].to_numpy()
    first = np.full(n, np.inf)
    np.minimum.at(first, ordinal, t)
    absolute = schedule.start_s[ordinal] + (t - first[ordinal])
    order = np.lexsort((np.arange(req.height), absolute))  # time, then trace order
    new_index = np.empty(req.height, dtype=np.int64)
    new_index[order] = np.arange(req.height, dtype=np.int64)
    parent = req["parent_request"]
    remapped = pl.Series(
        "parent_request",
        np.where(parent.is_null().to_numpy(), 0, new_index[parent.fill_null(0).to_numpy()]),
        dtype=pl.Int64,
    )
    out = req.with_columns(
        pl.Series("timestamp_s", absolute, dtype=pl.Float64),
        pl.when(parent.is_null()).then(None).otherwise(remapped).alias("parent_request"),
    )[order].with_columns(pl.Series("request_index", np.arange(req.height), dtype=pl.Int64))
    return replace(trace, requests=out, order="time")


def session_ordinals(requests: pl.DataFrame) -> tuple[np.ndarray, int]:
    """Session ordinal of every request (order of first appearance) and the session count.

    The numbering :func:`schedule_by_rate` uses: ``schedule.start_s[ordinal]`` is the start of
    a request's session.
    """
    return _session_ordinals(requests)


#: The steady-state window: arrivals between these rank quantiles (warm-up and drain outside).
WINDOW_QUANTILES = (0.10, 0.90)


def central_window(timestamps_s: np.ndarray) -> tuple[float, float, int]:
    """``(start, end, requests)``: the times of the arrivals at ranks ``floor(0.1 (n - 1))``
    and ``ceil(0.9 (n - 1))`` of ``timestamps_s`` sorted, and how many arrive in ``[start,
    end]`` (replay's steady-state window, analyzers/replay/operating.py)."""
    a = np.sort(np.asarray(timestamps_s, dtype=np.float64))
    n = a.shape[0]
    lo = math.floor(WINDOW_QUANTILES[0] * (n - 1))
    hi = math.ceil(WINDOW_QUANTILES[1] * (n - 1))
    start, end = float(a[lo]), float(a[hi])
    inside = int(np.searchsorted(a, end, side="right") - np.searchsorted(a, start, side="left"))
    return start, end, inside


def natural_rate_per_s(timestamps_s: np.ndarray) -> float | None:
    """The trace's own request rate: the requests arriving in its steady-state window (the
    middle 80 % of arrivals, :func:`central_window`) over the window's length, so a rate
    given to :func:`time_scaled` is the rate arriving over the window the replay measures, a
    long tail of late sessions notwithstanding. Requests / (last - first timestamp) when the
    window has no length; ``None`` for fewer than two distinct times."""
    if timestamps_s.shape[0] < 2:
        return None
    start, end, inside = central_window(timestamps_s)
    if end > start:
        return inside / (end - start)
    span = float(timestamps_s.max() - timestamps_s.min())
    return timestamps_s.shape[0] / span if span > 0 else None


def time_scaled(timestamps_s: np.ndarray, rate_requests_per_s: float) -> np.ndarray:
    """Absolute-time arrivals stretched or squeezed to ``rate_requests_per_s`` requests/s.

    Arrival ``i`` becomes ``(t_i - t_0) * natural_rate / rate`` (the first at 0), keeping every
    gap's proportion, so ``rate`` requests/s arrive over the steady-state window
    (:func:`natural_rate_per_s`); a trace whose requests all arrive at once stays at 0.
    """
    rate = check_rate(rate_requests_per_s, "rate")
    t = np.asarray(timestamps_s, dtype=np.float64)
    if t.shape[0] == 0:
        return t.copy()
    natural = natural_rate_per_s(t)
    if natural is None:
        return np.zeros_like(t)
    return (t - t.min()) * (natural / rate)
