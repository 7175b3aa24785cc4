"""A replay's sweep (:class:`LoadPlan`): which policies, at which loads and node sizes, decided
within which margins; and the one generator of its load points (:meth:`LoadPlan.rounds`).

The load axis is either offered **rates** (requests/s; given, or ``auto_rates``: from light
load to saturation, :mod:`.sweep`, with the user's ``operating_rate`` run too and reported first,
and ``slo_ttft_p99_s`` ending the sweep past it) or **concurrency** (sessions kept active;
:mod:`.load`; given, or ``auto_concurrency``: from a few sessions to all of the trace's and past
them, :mod:`.session_sweep`). With both ``auto_rates`` and ``auto_concurrency`` the trace picks
(:meth:`LoadPlan.for_workload`): sessions for a trace whose sessions pace themselves (an offered
rate cannot push it), rates otherwise; ``fcctl plan`` asks for that.

Every load point runs at every **size point** (``size_lists``: hardware field ->
values besides the node's, every combination; ``host_memory_auto`` adds the trace's working-set
capacities to host memory). A plan is checked where it is made, each message naming the
parameter at fault; a :class:`~.spec.RunSpec` holds what one simulation reads.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fcctl.common.errors import FcctlInputError

from ..traces.schedule import check_rate, check_rates
from .amplify import check_amplify_value
from .decision import DEFAULT_MARGIN_PP, DEFAULT_TTFT_MARGIN, check_margins
from .policies import DEFAULT_POLICIES, POLICIES
from .result import RateResult
from .session_sweep import auto_concurrency_steps
from .sweep import SIZE_FIELDS, auto_rate_steps
from .verdict import check_replicas

DEFAULT_RATES: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
#: One load point at one size point: (size point's index, rate or None, concurrency or None).
LoadPoint = tuple[int, float | None, int | None]


def check_policies(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in order, each a registered policy, no repeats."""
    out: list[str] = []
    for n in names:
        if n not in POLICIES:
            raise FcctlInputError(
                f"policies: unknown policy (known: {', '.join(POLICIES)}); got {n!r}",
                parameter="policies",
            )
        if n not in out:
            out.append(n)
    if not out:
        raise FcctlInputError("policies: name at least one policy", parameter="policies")
    return tuple(out)


def _check_concurrency(values: Sequence[int | None]) -> None:
    if not values:
        raise FcctlInputError("concurrency: give at least one value", parameter="concurrency")
    for c in values:
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise FcctlInputError(
                f"concurrency: each value a whole number of sessions >= 1, or None (all); "
                f"got {c!r}",
                parameter="concurrency",
            )


def _check_size_lists(lists: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    out = {}
    for name, values in lists.items():
        if name not in SIZE_FIELDS:
            raise FcctlInputError(
                f"size_lists: not a size field (known: {', '.join(SIZE_FIELDS)}); got {name!r}",
                parameter="size_lists",
            )
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise FcctlInputError(
                    f"{name}: sizes must be whole bytes >= 0; got {v!r}", parameter=name
                )
        out[name] = tuple(values)
    return out


@dataclass(frozen=True)
class SizeSweep:
    """What ran at one size point: the fixed load points (in the plan's order), the auto
    sweep's points (rate order) and why it stopped (None: no auto sweep)."""

    fixed: tuple[RateResult, ...]
    swept: tuple[RateResult, ...] = ()
    why: str | None = None


#: :meth:`LoadPlan.rounds`: yields the load points to run next, is sent their results in that
#: order, returns what ran at each size point.
Rounds = Generator[list[LoadPoint], list[RateResult], tuple[SizeSweep, ...]]


@dataclass(frozen=True)
class LoadPlan:
    """The sweep of a replay (module docstring). ``rates`` are sorted and unique once made."""

    policies: tuple[str, ...] = DEFAULT_POLICIES
    rates: tuple[float, ...] = DEFAULT_RATES
    #: Sessions kept active (None in it: every session at t = 0); set, it replaces the rates.
    concurrency: tuple[int | None, ...] | None = None
    auto_rates: bool = False
    #: Sweep concurrent sessions automatically (:mod:`.session_sweep`); with ``auto_rates`` too,
    #: the trace picks the axis (:meth:`for_workload`).
    auto_concurrency: bool = False
    #: Whether the concurrency sweep may grow past the trace's sessions (session amplification).
    amplify_growth: bool = False
    operating_rate: float | None = None
    slo_ttft_p99_s: float | None = None
    size_lists: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    host_memory_auto: bool = False
    decision_margin_pp: float = DEFAULT_MARGIN_PP
    decision_ttft_margin: float = DEFAULT_TTFT_MARGIN
    #: Copies of every session replayed (:mod:`.amplify`); 1: the trace as it is.
    amplify: int = 1
    #: Runs of the whole plan, replica i with seed ``seed + i`` (analyzers/replay/verdict.py).
    replicas: int = 1

    def __post_init__(self) -> None:
        check_margins(self.decision_margin_pp, self.decision_ttft_margin)
        object.__setattr__(self, "amplify", check_amplify_value(self.amplify))
        check_replicas(self.replicas)
        object.__setattr__(self, "policies", check_policies(self.policies))
        if self.auto_concurrency and (
            self.concurrency is not None or self.operating_rate is not None
        ):
            raise FcctlInputError(
                "concurrency: auto sweeps the sessions itself; give no sessions or rate beside it",
                parameter="concurrency",
            )
        if self.concurrency is not None:
            _check_concurrency(self.concurrency)
            object.__setattr__(self, "concurrency", tuple(self.concurrency))
            if self.auto_rates or self.operating_rate is not None:
                raise FcctlInputError(
                    "concurrency: the load axis is rates or concurrency, not both",
                    parameter="concurrency",
                )
        else:
            if not (self.auto_rates or self.auto_concurrency):
                # Still the flag's name, as before this class: the messages that name a flag
                # move to parameter names tree-wide in one change (issue #34, item 5).
                object.__setattr__(self, "rates", check_rates(self.rates, "rates"))
            if self.operating_rate is not None:
                object.__setattr__(
                    self, "operating_rate", check_rate(self.operating_rate, "operating_rate")
                )
            slo = self.slo_ttft_p99_s
            if slo is not None and not (
                isinstance(slo, int | float) and math.isfinite(slo) and slo > 0
            ):
                raise FcctlInputError(
                    f"slo_ttft_p99_s: must be a finite number of seconds > 0; got {slo!r}",
                    parameter="slo_ttft_p99_s",
                )
        object.__setattr__(self, "size_lists", _check_size_lists(self.size_lists))

    @property
    def axis(self) -> str:
        """``rate`` or ``concurrency`` (of a plan resolved by :meth:`for_workload`)."""
        return "concurrency" if self.concurrency is not None or self.sweeps_sessions else "rate"

    @property
    def sweeps_rates(self) -> bool:
        """Whether the auto sweep runs (it needs the workers' capacity estimate)."""
        return self.auto_rates and self.concurrency is None and not self.auto_concurrency

    @property
    def sweeps_sessions(self) -> bool:
        """Whether the automatic concurrency sweep runs."""
        return self.auto_concurrency and not self.auto_rates

    def for_workload(self, closed_loop: bool) -> LoadPlan:
        """The plan for a trace: with both automatic axes, sessions when the trace's sessions
        pace themselves (``closed_loop``), rates otherwise (module docstring)."""
        if not (self.auto_rates and self.auto_concurrency):
            return self
        if closed_loop and self.operating_rate is None:
            return replace(self, auto_rates=False)
        return replace(self, auto_concurrency=False)

    @property
    def margins(self) -> tuple[float, float]:
        return (self.decision_margin_pp, self.decision_ttft_margin)

    def fixed_points(self, sessions: int) -> list[tuple[float | None, int | None]]:
        """The load points known before anything runs, ``(rate, concurrency)``: the
        concurrencies (``None``: all ``sessions``), or the operating rate then the given rates."""
        if self.concurrency is not None:
            return [(None, sessions if c is None else c) for c in self.concurrency]
        points: list[tuple[float | None, int | None]] = (
            [] if self.auto_rates or self.auto_concurrency else [(r, None) for r in self.rates]
        )
        op = self.operating_rate
        if op is not None:
            points = [(op, None)] + [p for p in points if p[0] != op]
        return points

    def rounds(
        self, sizes: int, sessions: int, capacity: float | None, growth_limit: int | None = None
    ) -> Rounds:
        """Every load point of the plan at each of ``sizes`` size points, as rounds of
        independent simulations: first every fixed point, then the auto sweep's rounds
        (``capacity``: its estimate, requests/s; None: no rate sweep; the sessions sweep needs
        none), every size point's sweep advancing together (:func:`.sweep.auto_rate_steps`,
        :func:`.session_sweep.auto_concurrency_steps`)."""
        fixed = self.fixed_points(sessions)
        ran = yield [(k, r, c) for k in range(sizes) for r, c in fixed]
        n = len(fixed)
        out = [SizeSweep(tuple(ran[k * n : (k + 1) * n])) for k in range(sizes)]
        steps: dict[int, Generator[Any, list[RateResult], tuple[list[RateResult], str]]]
        if self.sweeps_sessions:
            steps = {
                k: auto_concurrency_steps(
                    sessions,
                    slo_ttft_p99_s=self.slo_ttft_p99_s,
                    growth=self.amplify_growth,
                    growth_limit=growth_limit,
                )
                for k in range(sizes)
            }
        elif capacity:
            steps = {
                k: auto_rate_steps(capacity, slo_ttft_p99_s=self.slo_ttft_p99_s)
                for k in range(sizes)
            }
        else:
            return tuple(out)
        by_sessions = self.sweeps_sessions
        wanted = {k: next(s) for k, s in steps.items()}
        while wanted:
            ran = yield [
                (k, None, x) if by_sessions else (k, x, None)
                for k, xs in wanted.items()
                for x in xs
            ]
            following: dict[int, list[Any]] = {}
            at = 0
            for k, rs in wanted.items():
                try:
                    following[k] = steps[k].send(ran[at : at + len(rs)])
                except StopIteration as finished:
                    swept, why = finished.value
                    out[k] = SizeSweep(out[k].fixed, tuple(swept), why)
                at += len(rs)
            wanted = following
        return tuple(out)
