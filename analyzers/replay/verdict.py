"""One decision per run (issue #33): capacity at SLO, with a paired bootstrap spread.

The per-load :class:`~.decision.Decision` compares point figures with fixed margins; this module
turns a run's figures into one answer that carries its uncertainty. The rule, stated exactly so
another tool can recompute it (docs/simulator.md, "The decision"):

* **Spread.** Every compared figure gets a 95 % interval from a *paired Poisson bootstrap over
  sessions*: ``B`` draws (seeded by the run's seed); draw ``b`` reads replica ``b mod R``, gives
  each session a Poisson(1) weight (the same weights for every policy, since the policies ran
  the same sessions) and recomputes each figure with each request weighted by its session's
  weight. The interval is the draws' 2.5th-97.5th percentiles.
* **Figures** (per policy, per load point, per draw): GPU hit share = weighted delivered blocks /
  weighted block accesses over the requests that ran (rejected ones excluded, as
  ``gpu_hit_share_served``: with unit weights the two are equal);
  mean and p99 TTFT over the requests that ran (p99: the smallest TTFT whose cumulative weight
  reaches 99 % of the total); staging-cancel share = weighted cancelled tiered prefetches /
  weighted requests that ran.
* **SLO.** A policy meets the SLO at a load point when its p99 TTFT <= ``slo_ttft_p99_s`` and its
  staging-cancel share <= ``max_cancel_share``. Its **capacity** is the highest achieved load
  among the points where it meets the SLO and every lower point does too (0 when it fails at
  the lowest; *censored* when it meets it at every point swept).
* **Rule.** Among the candidates (memory-only, tiered, flat) the one with the largest median
  capacity leads when its paired capacity ratio over the runner-up has its interval above
  ``1 + ttft_margin``. Otherwise the operating point decides: A leads B when neither of its mean
  and p99 TTFT paired ratios (B / A) has its interval entirely below 1 and at least one has it
  entirely above ``1 + ttft_margin``; one above and the other below is a *trade-off* (``best`` is
  ``none``); anything else is ``none`` (does not matter here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from fcctl.common.errors import InputError

from .decision import CANDIDATES, DEFAULT_TTFT_MARGIN, NONE

DEFAULT_SLO_TTFT_P99_S = 2.0
"""p99 TTFT bound, seconds. The notes in shared/notes give no serving team's bound, so we take
MLPerf Inference's server-scenario latency bound for its chat LLM benchmarks (Llama-2-70B and
Llama-3.1-8B: TTFT p99 <= 2 s, mlcommons/inference ``mlperf.conf``): a bound the field already
reports capacity against (STYLE.md 17)."""
DEFAULT_MAX_CANCEL_SHARE = 0.01
"""Largest share of requests whose tiered prefetch may be cancelled for lack of staging. 1 %:
above it, requests that recompute their cached prefix make up more than the p99 tail itself,
so the p99 bound no longer describes what the cancelled requests see."""
DEFAULT_BOOTSTRAP_DRAWS = 200
MAX_REPLICAS = 64
_LOW_Q, _HIGH_Q = 2.5, 97.5
_P99 = 0.99
_FIELDS = ("gpu_hit_share", "ttft_mean_s", "ttft_p99_s", "cancel_share")
#: The figures of the per-load spread (:class:`PolicySpread`), in its order.
SPREAD_FIGURES = ("gpu_hit_share_served", *_FIELDS)
#: The :class:`FigureDraws` field each of :data:`SPREAD_FIGURES` is read from: the spread's
#: ``gpu_hit_share`` is over every request, as the per-load figure of that name.
SPREAD_SOURCES = {f: "gpu_hit_share_all" if f == "gpu_hit_share" else f for f in SPREAD_FIGURES}


@dataclass(frozen=True)
class Interval:
    """A figure's median over the bootstrap draws and its 95 % interval (same unit)."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, draws: np.ndarray) -> Interval:
        if np.isnan(draws).all():  # e.g. a ratio of two zero capacities: no figure to compare
            return cls(math.nan, math.nan, math.nan)
        # Linear interpolation between two unbounded draws (a ratio over a zero capacity) is
        # inf - inf: with any such draw, take the nearest draw's value instead.
        qs = [_LOW_Q, 50.0, _HIGH_Q]
        if np.isinf(draws).any():
            lo, med, hi = np.nanpercentile(draws, qs, method="nearest")
        else:
            lo, med, hi = np.nanpercentile(draws, qs)
        return cls(float(med), float(lo), float(hi))


@dataclass(frozen=True)
class RequestTable:
    """The columns of a policy's per-request table (``PolicyResult.table``) the spread reads."""

    session: np.ndarray  # int64 session index per request, 0..sessions-1
    ran: np.ndarray  # bool: the request ran (was not rejected)
    ttft_s: np.ndarray  # float64, NaN for rejected requests
    delivered_blocks: np.ndarray  # int64
    blocks: np.ndarray  # int64 block accesses
    cancelled: np.ndarray  # bool: its tiered prefetch was cancelled

    @classmethod
    def of(cls, table: pl.DataFrame) -> RequestTable:
        ran = table["rejected"].is_null().to_numpy()
        ttft = table["ttft_s"].to_numpy().astype(np.float64)
        return cls(
            table["session_index"].to_numpy().astype(np.int64),
            ran,
            np.where(ran, ttft, np.nan),
            table["delivered_blocks"].to_numpy().astype(np.int64),
            table["blocks"].to_numpy().astype(np.int64),
            table["cancelled"].to_numpy().astype(np.bool_),
        )


@dataclass(frozen=True)
class FigureDraws:
    """One policy's figures at one load point, one value per bootstrap draw."""

    gpu_hit_share: np.ndarray
    ttft_mean_s: np.ndarray
    ttft_p99_s: np.ndarray
    cancel_share: np.ndarray
    #: Σ w·delivered / Σ w·blocks over the requests that ran (the per-load spread's; the
    #: decision reads ``gpu_hit_share``); None where a caller built the draws without it.
    gpu_hit_share_served: np.ndarray | None = None
    #: Σ w·delivered / Σ w·blocks over every request, rejected ones as misses (the per-load
    #: spread's ``gpu_hit_share``, as the per-load ``gpu_hit_share``); None as above.
    gpu_hit_share_all: np.ndarray | None = None


def check_replicas(replicas: object) -> int:
    """``replicas`` as an int in 1..MAX_REPLICAS, or an InputError naming it."""
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int)
        or not (1 <= replicas <= MAX_REPLICAS)
    ):
        raise InputError(
            f"replicas: must be an integer in 1..{MAX_REPLICAS}; got {replicas!r}",
            parameter="replicas",
        )
    return replicas


def check_slo(slo_ttft_p99_s: float, max_cancel_share: float) -> None:
    """Refuse an SLO that no run can be judged against."""
    if not (isinstance(slo_ttft_p99_s, (int, float)) and 0.0 < slo_ttft_p99_s < math.inf):
        raise InputError(
            f"slo_ttft_p99_s: must be a finite number of seconds above 0; got {slo_ttft_p99_s!r}",
            parameter="slo_ttft_p99_s",
        )
    if not (isinstance(max_cancel_share, (int, float)) and 0.0 <= max_cancel_share <= 1.0):
        raise InputError(
            f"max_cancel_share: must be a fraction in [0, 1]; got {max_cancel_share!r}",
            parameter="max_cancel_share",
        )


def session_weights(sessions: int, draws: int, seed: int) -> np.ndarray:
    """Poisson(1) weights, shape (draws, sessions); the same array serves every policy."""
    return np.random.default_rng(seed).poisson(1.0, size=(draws, sessions)).astype(np.float64)


def _weighted_p99(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per draw, the smallest value whose cumulative weight reaches 99 % of the draw's total.

    ``values`` (n,) is sorted once; ``weights`` (draws, n) is cumulated along the rows, so no draw
    sorts. A draw with zero total weight gives NaN."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[:, order], axis=1)
    total = cum[:, -1:]
    idx = np.argmax(cum >= _P99 * total, axis=1)
    out = values[order][idx]
    return np.where(total[:, 0] > 0, out, np.nan)


def figure_draws(table: RequestTable, weights: np.ndarray) -> FigureDraws:
    """The figures of one table under each draw's session weights (``weights`` from
    :func:`session_weights`, over every session index the table names)."""
    w = weights[:, table.session]  # (draws, requests)
    w_ran = w[:, table.ran]
    # Over served requests only, as the per-load ``gpu_hit_share_served``: a layout cannot
    # deliver hits to a request the model refused, so the run's figure must not count them.
    served = w_ran @ table.blocks[table.ran].astype(np.float64)
    served_hits = w_ran @ table.delivered_blocks[table.ran].astype(np.float64)
    ttft = table.ttft_s[table.ran]
    ran_total = w_ran.sum(axis=1)
    every = w @ table.blocks.astype(np.float64)
    every_hits = w @ table.delivered_blocks.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return FigureDraws(
            gpu_hit_share=np.where(served > 0, served_hits / served, np.nan),
            ttft_mean_s=(w_ran @ ttft) / ran_total,
            ttft_p99_s=_weighted_p99(ttft, w_ran),
            cancel_share=(w_ran @ table.cancelled[table.ran].astype(np.float64)) / ran_total,
            gpu_hit_share_served=np.where(served > 0, served_hits / served, np.nan),
            gpu_hit_share_all=np.where(every > 0, every_hits / every, np.nan),
        )


def replica_figure_draws(tables: Sequence[RequestTable], weights: np.ndarray) -> FigureDraws:
    """The figures over the draws, draw ``b`` reading replica ``b mod R`` (``R = len(tables)``).

    The replicas ran the same sessions (only seeds differ), so one weight array serves them."""
    draws = weights.shape[0]
    fields = (*SPREAD_FIGURES, "gpu_hit_share_all")
    out = {f: np.empty(draws) for f in fields}
    for r, table in enumerate(tables):
        part = figure_draws(table, weights[r :: len(tables)])
        for f in fields:
            out[f][r :: len(tables)] = getattr(part, f)
    return FigureDraws(**out)


def meets_slo(fig: FigureDraws, slo_ttft_p99_s: float, max_cancel_share: float) -> np.ndarray:
    """Per draw, whether the SLO holds (NaN figures fail it)."""
    return (fig.ttft_p99_s <= slo_ttft_p99_s) & (fig.cancel_share <= max_cancel_share)


def capacity_draws(meets: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """Per draw, the highest load of the leading run of points that meet the SLO.

    ``meets`` is (points, draws) with the points in increasing load; ``loads`` (points,) or
    (points, draws) the achieved loads. 0 where the lowest point fails."""
    loads = np.broadcast_to(
        np.asarray(loads, dtype=np.float64).reshape(meets.shape[0], -1), meets.shape
    )
    held = np.cumprod(meets, axis=0).astype(bool)  # a point counts only if all below it do
    return np.where(held, loads, 0.0).max(axis=0, initial=0.0)


@dataclass(frozen=True)
class Capacity:
    """A policy's capacity at SLO: achieved load (``load_unit``), interval, censoring."""

    median: float
    low: float
    high: float
    censored: bool  # meets the SLO at every load swept: capacity is at least the highest

    @property
    def below_lowest(self) -> bool:
        return self.median == 0.0


@dataclass(frozen=True)
class PolicyAtPoint:
    """A policy's figures at the operating point, with their intervals."""

    gpu_hit_share: Interval
    ttft_mean_s: Interval
    ttft_p99_s: Interval
    cancel_share: Interval


@dataclass(frozen=True)
class PolicySpread:
    """A policy's figures at one load point with their intervals over the decision's
    bootstrap (``PolicyResult.spread``; docs/simulator.md §6.2, "Per-load spread")."""

    gpu_hit_share_served: Interval
    gpu_hit_share: Interval
    ttft_mean_s: Interval
    ttft_p99_s: Interval
    cancel_share: Interval


@dataclass(frozen=True)
class Verdict:
    """The run's one decision (field names are the JSON keys of ``decision``)."""

    best: str  # a candidate, or "none": does not matter here (or a trade-off)
    objective: str  # "capacity at SLO" or "TTFT at the operating point"
    load: float  # achieved load of the operating point
    load_unit: str  # "requests/s served" or "concurrent sessions"
    operating_point: str  # "given", "highest load every candidate meets the SLO", "lowest swept"
    runner_up: str | None
    capacity: Mapping[str, Capacity]
    ratio: Interval | None  # best (or first) over runner-up: capacity, or TTFT at the point
    inside_spread: bool  # the ratio's interval does not clear 1 (plus the margin)
    at_point: Mapping[str, PolicyAtPoint]
    trade_off: str | None
    reason: str
    slo_ttft_p99_s: float
    max_cancel_share: float
    replicas: int
    draws: int
    #: The achieved load of each point swept (``load_unit``, the points in increasing offered
    #: load): the axis the capacities are read on, so a rendering can name its ends.
    loads_swept: tuple[float, ...] = ()


@dataclass(frozen=True)
class VerdictInputs:
    """What :func:`decide_run` compares: per candidate, per load point (increasing), the draws."""

    loads: np.ndarray  # achieved load per point (central), in load_unit
    load_unit: str
    figures: Mapping[str, Sequence[FigureDraws]]
    replicas: int
    operating_index: int | None = None  # the user's --rate/--concurrency point, when given
    #: Per candidate, its own achieved load per point (capacity reads these); default ``loads``.
    policy_loads: Mapping[str, np.ndarray] | None = None


def _clears(iv: Interval, margin: float) -> bool:
    return iv.low > 1.0 + margin


def _worse(iv: Interval) -> bool:
    return iv.high < 1.0


def _capacities(
    inp: VerdictInputs, names: Sequence[str], slo: float, max_cancel: float
) -> tuple[dict[str, np.ndarray], dict[str, Capacity], dict[str, np.ndarray]]:
    caps, out, meets = {}, {}, {}
    for n in names:
        m = np.stack([meets_slo(f, slo, max_cancel) for f in inp.figures[n]])
        meets[n] = m
        own = inp.policy_loads[n] if inp.policy_loads is not None else inp.loads
        caps[n] = capacity_draws(m, own)
        iv = Interval.of(caps[n])
        out[n] = Capacity(iv.median, iv.low, iv.high, bool(np.median(m.all(axis=0)) >= 0.5))
    return caps, out, meets


def _operating_index(inp: VerdictInputs, meets: Mapping[str, np.ndarray]) -> tuple[int, str]:
    if inp.operating_index is not None:
        return inp.operating_index, "given"
    # A point counts for a policy when it meets the SLO in at least half the draws.
    ok = np.all([np.median(m, axis=1) >= 0.5 for m in meets.values()], axis=0)
    held = np.flatnonzero(np.cumprod(ok))
    if held.size:
        return int(held[-1]), "highest load every candidate meets the SLO"
    return 0, "lowest load swept"


def decide_run(
    inp: VerdictInputs,
    *,
    slo_ttft_p99_s: float = DEFAULT_SLO_TTFT_P99_S,
    max_cancel_share: float = DEFAULT_MAX_CANCEL_SHARE,
    ttft_margin: float = DEFAULT_TTFT_MARGIN,
) -> Verdict:
    """The run's one decision under the module's rule."""
    check_slo(slo_ttft_p99_s, max_cancel_share)
    names = [n for n in CANDIDATES if n in inp.figures]
    caps, capacity, meets = _capacities(inp, names, slo_ttft_p99_s, max_cancel_share)
    idx, op_how = _operating_index(inp, meets)
    at = {
        n: PolicyAtPoint(*(Interval.of(getattr(inp.figures[n][idx], f)) for f in _FIELDS))
        for n in names
    }
    base = Verdict(
        best=NONE,
        objective="capacity at SLO",
        runner_up=None,
        ratio=None,
        inside_spread=True,
        trade_off=None,
        reason="fewer than two of memory-only, tiered and flat ran: nothing to compare",
        load=float(inp.loads[idx]),
        load_unit=inp.load_unit,
        operating_point=op_how,
        capacity=capacity,
        at_point=at,
        slo_ttft_p99_s=slo_ttft_p99_s,
        max_cancel_share=max_cancel_share,
        replicas=inp.replicas,
        draws=int(next(iter(caps.values())).shape[0]) if caps else 0,
        loads_swept=tuple(float(x) for x in inp.loads),
    )
    if len(names) < 2:
        return base
    order = sorted(names, key=lambda n: (-capacity[n].median, names.index(n)))
    first, second = order[0], order[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        cap_ratio = Interval.of(caps[first] / caps[second])
    if capacity[first].median > capacity[second].median and _clears(cap_ratio, ttft_margin):
        return replace(
            base,
            best=first,
            runner_up=second,
            ratio=cap_ratio,
            inside_spread=False,
            trade_off=None,
            reason=f"{first} holds the SLO to a higher load than {second}",
        )
    return _decide_at_point(inp, names, idx, ttft_margin, base)


def _ttft_ratios(inp: VerdictInputs, a: str, b: str, idx: int) -> tuple[Interval, Interval]:
    """b's over a's mean and p99 TTFT at the point, paired draw by draw (above 1: a faster)."""
    fa, fb = inp.figures[a][idx], inp.figures[b][idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (
            Interval.of(fb.ttft_mean_s / fa.ttft_mean_s),
            Interval.of(fb.ttft_p99_s / fa.ttft_p99_s),
        )


def _decide_at_point(
    inp: VerdictInputs, names: Sequence[str], idx: int, margin: float, base: Verdict
) -> Verdict:
    def leads(a: str, b: str) -> bool:
        mean, p99 = _ttft_ratios(inp, a, b, idx)
        return not (_worse(mean) or _worse(p99)) and (_clears(mean, margin) or _clears(p99, margin))

    best = next((a for a in names if all(leads(a, b) for b in names if b != a)), None)
    by_mean = sorted(
        names, key=lambda n: (float(np.nanmedian(inp.figures[n][idx].ttft_mean_s)), names.index(n))
    )
    first = best or by_mean[0]
    second = next(n for n in by_mean if n != first)
    mean = _ttft_ratios(inp, first, second, idx)[0]
    objective = "TTFT at the operating point"
    if best is not None:
        return replace(
            base,
            best=best,
            objective=objective,
            runner_up=second,
            ratio=mean,
            inside_spread=not _clears(mean, margin),
            trade_off=None,
            reason=f"capacities tie; {best} has the lower TTFT at the operating point",
        )
    trade = None
    for a in names:
        for b in names:
            m, p = _ttft_ratios(inp, a, b, idx)
            if _clears(m, margin) and _worse(p):
                trade = f"{a} has the lower mean TTFT, {b} the lower p99 TTFT"
    reason = (
        f"capacities tie and the operating point is a trade-off: {trade}"
        if trade
        else "capacities tie and no layout's TTFT differs beyond its spread: does not matter here"
    )
    return replace(
        base,
        objective=objective,
        runner_up=second,
        ratio=mean,
        inside_spread=True,
        trade_off=trade,
        reason=reason,
    )


def _fig(x: float | None) -> str:
    """A ratio's figure; a JSON document holds an unbounded one (a runner-up capacity of 0 in
    some draws) as null, read back as None."""
    if x is None or math.isinf(x):
        return "unbounded"
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def _load(v: float, unit: str) -> str:
    return f"{v:.3g} {unit}"


def capacity_words(c: Capacity, unit: str, loads_swept: Sequence[float] = ()) -> str:
    """A capacity at SLO in words, the one rendering of it (replay, plan's summary and growth
    lines, the report): a median of 0 means the lowest load swept already failed in most draws,
    and a censored one is a lower bound, never a measured capacity."""
    lowest = f" ({min(loads_swept):.3g} {unit})" if loads_swept else ""
    if c.below_lowest:
        if c.high == 0.0:
            return f"below the lowest load swept{lowest} in every draw"
        return (
            f"below the lowest load swept{lowest} in most draws; "
            f"95 % interval {c.low:.3g}-{c.high:.3g}"
        )
    if c.censored:
        return f"at least {c.median:.3g} {unit} (the highest load swept)"
    return f"{c.median:.3g} {unit} (95 % interval {c.low:.3g}-{c.high:.3g})"


def verdict_sentences(v: Verdict) -> str:
    """The decision in words: the one text every rendering (terminal, report) prints."""
    head = (
        f"decision: {v.best if v.best != NONE else 'none'} ({v.objective}, "
        f"at {_load(v.load, v.load_unit)}: {v.operating_point})"
    )
    lines = [head, f"  why: {v.reason}"]
    if v.ratio is not None and v.runner_up is not None:
        flag = "inside the spread" if v.inside_spread else "beyond the spread"
        lines.append(
            f"  ratio over {v.runner_up}: {_fig(v.ratio.median)}x "
            f"(95 % interval {_fig(v.ratio.low)}-{_fig(v.ratio.high)}, {flag})"
        )
    for n, c in v.capacity.items():
        p = v.at_point[n]
        lines.append(
            f"  {n}: capacity {capacity_words(c, v.load_unit, v.loads_swept)}; GPU hit share "
            f"(served) {100 * p.gpu_hit_share.median:.1f} %, TTFT mean "
            f"{p.ttft_mean_s.median:.3g} s, p99 {p.ttft_p99_s.median:.3g} s"
        )
    lines.append(
        f"  SLO: p99 TTFT <= {v.slo_ttft_p99_s:g} s, staging cancels <= "
        f"{100 * v.max_cancel_share:g} %; spread: {v.draws} bootstrap draws over "
        f"{v.replicas} replica(s)"
    )
    return "\n".join(lines)
