"""The load axes of a replay: offered rate, or sessions kept active; and think time.

* **Rate** (``--rates R,...``): R requests/s offered. Traces on one clock keep their own
  timestamps, time-scaled to R (open loop). Traces on per-session clocks (Claude Code) start
  sessions as a seeded Poisson process sized to R
  (:func:`fcctl.analyzers.traces.schedule.schedule_by_rate`); each later turn arrives as
  "Client pacing" below says, never before the previous turn's output is out.
* **Concurrency** (``--concurrency N,...|all``): a closed loop, as kv-cache-tester runs a
  fixed number of users: N sessions are active at once; a session starts at t = 0 or when an
  active one ends (its last turn's decode done), sessions in trace order; ``all`` starts every
  session at t = 0 (as Dynamo's replay of the Claude Code trace does). Each later turn arrives
  as "Client pacing" below says, never before the previous turn's output.
  Any trace with sessions (ids, or inferred from prefix chains) can run this way.
* **Think time** (``--think-time``) is the gap between a session's consecutive turns as the
  trace records it (arrival to arrival), transformed: ``original`` keeps it, ``none`` makes it
  0 (the next turn follows the previous output at once), ``capped:S`` caps it at S seconds
  (kv-cache-tester caps at 60 s), ``scale:K`` multiplies it by K. It applies wherever turns
  follow each other in a closed loop (per-session clocks, or concurrency mode); a one-clock
  trace replayed at a rate keeps its timestamps, so a think time other than ``original`` is
  refused there.
* **Client pacing** (:meth:`ThinkTime.next_arrival`): where the trace records the client's
  think time before a turn (the canonical ``think_time_s``: Claude Code), the turn arrives as
  the client sends it, at ``max(its scheduled time, the previous turn's response + think
  time)``: its scheduled time is the session's first arrival plus its turns' recorded gaps
  (arrival to arrival), so at ``original`` the session's start plus the turn's offset on the
  trace's per-session clock, Dynamo 1.6.1's rule; the response is the previous turn's decode
  end (its arrival if it was rejected). The think-time mode transforms both the recorded gaps
  and the think time alike: ``none`` sends at the response, ``capped:S`` caps both at S,
  ``scale:K`` multiplies both by K. Where none is recorded (Mooncake, synthetic traces, a
  session's first turn) the turn arrives at ``max(previous arrival + recorded gap, previous
  response)``, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fcctl.common.errors import FcctlInputError

THINK_TIME_MODES = ("original", "none", "capped", "scale")


@dataclass(frozen=True)
class ThinkTime:
    """How a session's recorded gap between turns becomes the replayed one (module docstring)."""

    mode: str = "original"
    value: float | None = None

    def apply(self, gap_s: float) -> float:
        if self.mode == "none":
            return 0.0
        if self.mode == "capped" and self.value is not None:
            return min(gap_s, self.value)
        if self.mode == "scale" and self.value is not None:
            return gap_s * self.value
        return gap_s

    def next_arrival(
        self,
        prev_scheduled_s: float,
        prev_arrival_s: float,
        gap_s: float,
        think_s: float,
        response_s: float,
    ) -> tuple[float, float]:
        """``(arrival, scheduled)`` of a session's next turn (module docstring, client pacing).

        ``prev_scheduled_s``/``prev_arrival_s``: the previous turn's scheduled time and actual
        arrival; ``gap_s``: the trace's time between the two turns' sends; ``think_s``: the
        client's recorded think time before the next turn (NaN: not recorded); ``response_s``:
        when the previous turn's response was out. Seconds throughout.
        """
        gap = self.apply(gap_s)
        scheduled = prev_scheduled_s + gap
        if math.isnan(think_s):
            return max(prev_arrival_s + gap, response_s), scheduled
        return max(scheduled, response_s + self.apply(think_s)), scheduled

    def __str__(self) -> str:
        return self.mode if self.value is None else f"{self.mode}:{self.value:g}"


def parse_think_time(text: str, parameter: str = "think_time") -> ThinkTime:
    """``original``, ``none``, ``capped:S`` (seconds >= 0) or ``scale:K`` (K >= 0), finite."""
    if not isinstance(text, str):
        raise FcctlInputError(f"{parameter}: expected text such as 'capped:60'; got {text!r}")
    mode, sep, arg = text.strip().partition(":")
    if mode in ("original", "none") and not sep:
        return ThinkTime(mode)
    if mode in ("capped", "scale") and sep:
        try:
            value = float(arg)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return ThinkTime(mode, value)
        unit = "seconds" if mode == "capped" else "a factor"
        raise FcctlInputError(
            f"{parameter}: {mode}: needs a finite number >= 0 ({unit}); got {arg!r}",
            parameter=parameter,
        )
    raise FcctlInputError(
        f"{parameter}: one of original, none, capped:SECONDS, scale:FACTOR; got {text!r}",
        parameter=parameter,
    )


def parse_concurrency(
    values: str | int | Sequence[int | str], parameter: str = "concurrency"
) -> tuple[int | None, ...]:
    """Session counts >= 1, sorted and unique; ``all`` is None (every session at t = 0)."""
    items = (
        values.split(",")
        if isinstance(values, str)
        else ([values] if isinstance(values, int) else list(values))
    )
    out: set[int | None] = set()
    for item in items:
        if isinstance(item, str) and item.strip() == "all":
            out.add(None)
            continue
        try:
            n = int(item.strip()) if isinstance(item, str) else item
        except ValueError:
            n = None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise FcctlInputError(
                f"{parameter}: each value a whole number of sessions >= 1, or 'all'; got {item!r}",
                parameter=parameter,
            )
        out.add(n)
    if not out:
        raise FcctlInputError(f"{parameter}: give at least one value", parameter=parameter)
    numbers = sorted(n for n in out if n is not None)
    return (*numbers, *([None] if None in out else []))
