"""The automatic sweep of concurrent sessions, for traces whose sessions pace themselves.

A closed-loop trace (Claude Code: per-session clocks, each turn its think time after the
previous one, no global arrival times) cannot be pushed by an offered rate: past about 1 req/s
every offered rate is the same load under another name (issue #33). Its load is how many
sessions are active at once, so ``plan`` sweeps that instead (:func:`auto_concurrency_steps`):

1. **Up to the trace's own sessions**: from ``max(1, round(S / 16))`` sessions (S: the trace's
   sessions; 1/16 as the rate sweep's first point, :data:`.sweep.START_FRACTION`) doubling while
   below 2/3 S, then S itself (the last step is 1.5x-3x; 710 sessions: 44, 88, 176, 352, 710).
   S is always run: it is the **operating point**, "today's load", every session of
   the trace active at once (the trace has no global arrival times to say how many overlap, so
   all of them is the load it records), and the multiple of today's load of a point is
   ``c / S``.
2. **Past them, by amplification**: 2 S, 4 S, 8 S (:data:`GROWTH_MULTIPLES`), each run on the
   workload amplified ``K = ceil(c / S)`` times (``--amplify``, analyzers/replay/amplify.py),
   those whose amplified workload the memory budget holds, once per worker process
   (:func:`.run.growth_within_budget`; the sweep's stop reason says when it limited them).
3. **Stop rules** (:func:`stop_reason`), read after each point: the leading policy's served
   rate (:func:`.achieved.served_rate`) grew less than :data:`.sweep.GROWTH_STOP` (10 %) while
   the sessions doubled (more sessions no longer reach the node), or every candidate's p99 TTFT
   exceeds the SLO (no layout serves that load). Below S a stop skips to S (today's load is
   always reported); past S it ends the sweep. At most :data:`MAX_SESSION_POINTS` points.

Each point reads the previous one, so the sweep runs one point per round.
"""

from __future__ import annotations

import math
from collections.abc import Generator

from .achieved import served_rate
from .decision import CANDIDATES
from .result import RateResult
from .sweep import GROWTH_STOP, START_FRACTION, leading

#: Multiples of the trace's sessions run past them (issue #33: "2x, 4x, 8x").
GROWTH_MULTIPLES: tuple[int, ...] = (2, 4, 8)
#: Doublings from S/16 to S (5 points) and the three multiples past it.
MAX_SESSION_POINTS = 5 + len(GROWTH_MULTIPLES)


def session_counts(sessions: int, *, growth: bool, growth_limit: int | None = None) -> list[int]:
    """Every concurrency the sweep may run, in order (module docstring, steps 1-2); past the
    trace's sessions only the multiples up to ``growth_limit`` (None: all of them), the most
    copies the memory budget holds (:func:`growth_within_budget`)."""
    if sessions < 1:
        raise ValueError(f"session_counts: sessions must be >= 1; got {sessions!r}")
    c = max(1, round(sessions * START_FRACTION))
    out = []
    # Below 2/3 of S only: a doubling just under S (704 of 710) would run today's load twice.
    while 3 * c < 2 * sessions:
        out.append(c)
        c *= 2
    out.append(sessions)
    if growth:
        out += [k * sessions for k in GROWTH_MULTIPLES if growth_limit is None or k <= growth_limit]
    return out[-MAX_SESSION_POINTS:]


def amplification(concurrency: int, sessions: int) -> int:
    """K: the copies of every session a concurrency of ``concurrency`` needs (1 up to the
    trace's ``sessions``)."""
    return max(1, math.ceil(concurrency / sessions))


def stop_reason(
    prev: RateResult | None, point: RateResult, slo_ttft_p99_s: float | None
) -> str | None:
    """Why the sweep stops growing at ``point`` (module docstring, step 3); None: go on."""
    ran = [n for n in CANDIDATES if n in point.policies] or list(point.policies)
    if slo_ttft_p99_s is not None and all(
        (point.policies[n].ttft_s.p99 or 0.0) > slo_ttft_p99_s for n in ran
    ):
        return f"every layout's p99 TTFT exceeds the {slo_ttft_p99_s:g} s SLO"
    if prev is None:
        return None
    name = leading(point)
    before = served_rate(prev) if leading(prev) == name else None
    if before is None and name in prev.policies:
        before = prev.policies[name].achieved_rate.served
    now = served_rate(point)
    if before and now is not None and now < before * (1 + GROWTH_STOP):
        return (
            f"{name}'s served rate stopped growing ({before:.3g} -> {now:.3g} req/s from "
            f"{prev.concurrency:,} to {point.concurrency:,} sessions)"
        )
    return None


#: Yields the concurrencies to run next (one a round), is sent their points, returns the points
#: in concurrency order and why the sweep ended.
SessionSteps = Generator[list[int], list[RateResult], tuple[list[RateResult], str]]


def auto_concurrency_steps(
    sessions: int,
    *,
    slo_ttft_p99_s: float | None = None,
    growth: bool = False,
    growth_limit: int | None = None,
) -> SessionSteps:
    """The sweep of the module docstring as rounds of one point each."""
    counts = session_counts(sessions, growth=growth, growth_limit=growth_limit)
    points: list[RateResult] = []
    if not growth:
        why = (
            f"the trace's own {sessions:,} sessions (growth past them needs session amplification)"
        )
    elif counts[-1] <= sessions:
        why = (
            f"the trace's own {sessions:,} sessions: the memory budget holds no "
            f"{GROWTH_MULTIPLES[0]}x amplification of them (raise `memory_budget_bytes`)"
        )
    elif counts[-1] < GROWTH_MULTIPLES[-1] * sessions:
        why = (
            f"{counts[-1] // sessions}x the trace's sessions, the most copies the memory budget "
            "holds (raise `memory_budget_bytes` for more)"
        )
    else:
        why = f"{counts[-1] // sessions}x the trace's sessions, the most the sweep runs"
    stopped = False  # a stop below the trace's sessions: only today's load runs after it
    for c in counts:
        if stopped and c != sessions:
            if c > sessions:
                break
            continue
        (point,) = yield [c]
        stop = stop_reason(points[-1] if points else None, point, slo_ttft_p99_s)
        points.append(point)
        if stopped or stop is None:
            continue
        if c < sessions:
            stopped = True  # today's load is reported whatever the lighter points did
            why = f"{stop}; then the trace's own {sessions:,} sessions, today's load"
            continue
        why = stop
        break
    return points, why


__all__ = [
    "GROWTH_MULTIPLES",
    "MAX_SESSION_POINTS",
    "SessionSteps",
    "amplification",
    "auto_concurrency_steps",
    "session_counts",
    "stop_reason",
]
