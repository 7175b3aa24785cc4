"""Loads and sizes that find the answer: ``--rates auto`` and ``--host-memory auto``.

**Sizes.** A replay may sweep the node's KV sizes (``--gpu-kv``, ``--host-memory``,
``--staging`` each take a list): every combination is a *size point*, run at every load point,
each with its own decision. ``--host-memory auto`` adds, to the value given (or the preset's),
the capacities at which an LRU memory tier of the trace's own access order serves 50 %, 90 %
and 99 % of the ideal hit share (:func:`working_set_bytes`: one stack-distance pass, as
``fcctl analyze`` computes its memory tier), rounded up to whole GiB: the sizes at which the
tiers' answer can change.

**Rates.** ``--rates auto`` (the default) sweeps the offered rate from light load to saturation
(:func:`auto_rates`):

1. *Capacity estimate* ``c``: requests per second the workers could prefill if every reused
   block were already in GPU memory (the ideal): ``workers x requests / sum(prefill_s(new,
   cached))``, new tokens = input tokens minus the tokens of the request's re-accessed blocks.
2. Offered rates ``c/16, c/8, ...`` doubling, each point running every policy, until the
   *leading* policy (the decision's ``best``, else the candidate with the highest hit share)
   stops gaining load: its central achieved rate grows less than 10 % over the previous
   point's, its busiest worker's prefill utilisation reaches 95 %, or its p99 TTFT exceeds
   ``--slo-ttft-p99``; at most :data:`MAX_DOUBLINGS` points.
3. *Refinement*: between two neighbouring rates whose decisions differ, the geometric mean is
   run too (at most :data:`MAX_REFINEMENTS` such points, lowest pair first).
4. *Knees*: for each policy, the lowest pair of neighbouring doublings between which it stops
   being served as offered (:func:`is_knee`: its mean TTFT grows more than
   :data:`KNEE_TTFT_RATIO`-fold, or its achieved rate falls more than :data:`KNEE_SERVED_DROP`
   of the offered rate further behind it) is bisected: the geometric mean runs, then the mean
   of whichever half still holds the sharp change, :data:`KNEE_BISECTIONS` times, every
   policy's knee in the same rounds (knees on the same pair share their point), at most
   :data:`MAX_KNEE_POINTS` points in all. A doubling can step from an idle node to a flooded
   one (0.36 s to 64 s mean TTFT); bisecting narrows the step from 2x to 2^(1/2), 2^(1/4),
   2^(1/8) (about 9 %), so the sweep shows where each layout stops keeping up.

The user's own operating point (``--rate R``), when given, is run as well and reported first.

Each doubling reads the previous point, so the sweep runs in rounds (:func:`auto_rate_steps`):
one point per doubling, then every refinement at once with each knee's first point (they read
only the doublings), then every knee's next point at once; a round's simulations
(every policy, every size point's round) run together where the replay runs them
(:mod:`.parallel`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fcctl.common.errors import FcctlInputError

from .decision import CANDIDATES
from .result import RateResult
from .timemodel import prefill_s
from .workload import Workload

GiB = 1 << 30
#: Shares of the ideal hit share whose LRU capacities ``--host-memory auto`` adds.
WORKING_SET_SHARES: tuple[float, ...] = (0.5, 0.9, 0.99)
#: The auto sweep's first rate, as a fraction of the capacity estimate.
START_FRACTION = 1 / 16
MAX_DOUBLINGS = 8
MAX_REFINEMENTS = 3
#: Bisections of one knee: 2x narrowed to 2^(1/8), about 9 %, inside the saturation tolerance.
KNEE_BISECTIONS = 3
#: Points the knees' bisections may add, all knees together (module docstring, step 4): three
#: bisections of two knees, or two of three.
MAX_KNEE_POINTS = 6
#: The most load points one auto sweep runs.
MAX_AUTO_POINTS = MAX_DOUBLINGS + MAX_REFINEMENTS + MAX_KNEE_POINTS
#: A knee: between two neighbouring loads some policy's mean TTFT grows more than this many
#: times. Below saturation a doubled load moves TTFT by queueing a little (the samples: at most
#: 1.7x until the node falls behind); past the knee it grows with the queue, by 8x-180x.
KNEE_TTFT_RATIO = 2.0
#: A knee: some policy's achieved rate falls this much further behind its offered rate (a
#: fraction of the offered rate), the saturation tolerance: one neighbour kept up, the other not.
KNEE_SERVED_DROP = 0.10
#: A point whose leading policy's achieved rate grew less than this over the previous one
#: ends the sweep: more offered load no longer reaches the node.
GROWTH_STOP = 0.10
UTILISATION_STOP = 0.95
#: Hardware fields a size point may set.
SIZE_FIELDS: tuple[str, ...] = ("gpu_kv_bytes", "host_memory_bytes", "staging_bytes")


@dataclass(frozen=True)
class WorkingSet:
    """LRU capacities (bytes) serving ``shares`` of the ideal hit share, in the trace's order."""

    shares: tuple[float, ...]
    capacity_bytes: tuple[int | None, ...]


def working_set_bytes(w: Workload, shares: Sequence[float] = WORKING_SET_SHARES) -> WorkingSet:
    """The smallest LRU capacity (whole GiB) at which the trace's hit share reaches each of
    ``shares`` of its ideal (None: the trace has no reuse)."""
    from ..reuse.stack import Accesses, reuse_pass

    acc = Accesses(w.block, w.offsets, w.num_blocks)
    rp = reuse_pass(acc, w.timestamps_s)
    hits = np.cumsum(rp.stack_count)
    reuses = int(hits[-1]) if hits.shape[0] else 0
    out: list[int | None] = []
    for share in shares:
        if reuses == 0:
            out.append(None)
            continue
        # capacity C blocks hits the re-accesses at stack distance < C: hits[C - 1]
        c_blocks = int(np.searchsorted(hits, share * reuses, side="left")) + 1
        out.append(math.ceil(c_blocks * w.block_bytes / GiB) * GiB)
    return WorkingSet(tuple(shares), tuple(out))


def size_points(
    base: Mapping[str, int], lists: Mapping[str, Sequence[int]]
) -> tuple[dict[str, int], ...]:
    """Every combination of the swept sizes (``lists``: field -> values), the first being the
    base values; fields not swept keep ``base``."""
    for name in lists:
        if name not in SIZE_FIELDS:
            raise ValueError(f"size_points: not a size field: {name!r}")
    points: list[dict[str, int]] = [dict(base)]
    for name, values in lists.items():
        ordered = [base[name], *(v for v in sorted(set(values)) if v != base[name])]
        points = [{**p, name: v} for p in points for v in ordered]
    return tuple(points)


def capacity_estimate(w: Workload, tokens_per_s: float | None) -> float:
    """Requests/s the workers prefill with every re-accessed block cached (module docstring)."""
    first = np.zeros(w.block.shape[0], dtype=np.bool_)
    _, first_pos = np.unique(w.block, return_index=True)
    first[first_pos] = True
    seen_before = np.concatenate([[0], np.cumsum(~first)])
    reused = seen_before[w.offsets[1:]] - seen_before[w.offsets[:-1]]
    cached = np.minimum(reused * w.block_tokens, w.input_tokens)
    new = w.input_tokens - cached
    work = sum(prefill_s(int(n), int(c), tokens_per_s) for n, c in zip(new, cached, strict=True))
    if work <= 0:
        return 1.0
    return w.workers * w.requests / work


def leading(point: RateResult) -> str:
    """The decision's best, else the candidate that ran with the highest hit share."""
    if point.decision.best in point.policies:
        return point.decision.best
    ran = [n for n in CANDIDATES if n in point.policies] or list(point.policies)
    return max(ran, key=lambda n: point.policies[n].gpu_hit_share_served or 0.0)


def _stop(prev: RateResult | None, point: RateResult, slo_ttft_p99_s: float | None) -> str | None:
    """Why the sweep ends at ``point`` (None: keep going)."""
    name = leading(point)
    p = point.policies[name]
    if p.utilisation.prefill_max >= UTILISATION_STOP:
        return f"{name}'s busiest worker is {100 * p.utilisation.prefill_max:.0f} % busy"
    if slo_ttft_p99_s is not None and (p.ttft_s.p99 or 0.0) > slo_ttft_p99_s:
        return f"{name}'s p99 TTFT {p.ttft_s.p99:.3g} s exceeds the {slo_ttft_p99_s:g} s SLO"
    if prev is not None:
        before = prev.policies[name].achieved_rate.central
        now = p.achieved_rate.central
        if before and now is not None and now < before * (1 + GROWTH_STOP):
            return (
                f"{name}'s achieved rate stopped growing ({before:.3g} -> {now:.3g} req/s "
                "while the offered rate doubled)"
            )
    return None


def _served_share(point: RateResult, name: str) -> float | None:
    got = point.policies[name].achieved_rate.central
    return None if got is None or not point.rate else got / point.rate


def is_knee(low: RateResult, high: RateResult, name: str) -> bool:
    """Whether policy ``name`` stops being served as offered between the neighbouring points
    ``low`` and ``high`` (module docstring, step 4)."""
    if name not in low.policies or name not in high.policies:
        return False
    before, after = low.policies[name].ttft_s.mean, high.policies[name].ttft_s.mean
    if before and after is not None and after > KNEE_TTFT_RATIO * before:
        return True
    kept, behind = _served_share(low, name), _served_share(high, name)
    return kept is not None and behind is not None and kept - behind > KNEE_SERVED_DROP


#: A knee being bisected: the policy and the two points around it.
Knee = tuple[str, RateResult, RateResult]


def knees(points: Sequence[RateResult]) -> list[Knee]:
    """Each policy's lowest knee among neighbouring ``points`` (rate order), lowest first."""
    found: list[Knee] = []
    names = dict.fromkeys(n for p in points for n in p.policies)
    for name in names:
        found += [(name, a, b) for a, b in itertools.pairwise(points) if is_knee(a, b, name)][:1]
    return sorted(found, key=lambda k: _rate_of(k[1]))


AutoSteps = Generator[list[float], list[RateResult], tuple[list[RateResult], str]]


def auto_rate_steps(capacity: float, *, slo_ttft_p99_s: float | None = None) -> AutoSteps:
    """The auto sweep (module docstring) as rounds: it yields the rates to run next (one per
    doubling; then every refinement and each knee's first point at once; then each knee's next
    point at once), is sent their points in that order, and returns the points in rate order
    and why it stopped. Each doubling reads the previous point, so the rounds are sequential;
    a round's points (and each point's policies) are independent."""
    if not (math.isfinite(capacity) and capacity > 0):
        raise FcctlInputError(f"rates: auto: no capacity estimate; got {capacity!r}")
    points: list[RateResult] = []
    rate = capacity * START_FRACTION
    why = f"{MAX_DOUBLINGS} doublings"
    for _ in range(MAX_DOUBLINGS):
        (point,) = yield [rate]
        stop = _stop(points[-1] if points else None, point, slo_ttft_p99_s)
        points.append(point)
        if stop is not None:
            why = stop
            break
        rate *= 2
    # Between neighbouring doublings whose decisions differ, lowest pair first; a refined
    # point's own decision is never compared, so every refinement is known before any runs.
    between = [
        _midpoint(a, b) for a, b in itertools.pairwise(points) if a.decision.best != b.decision.best
    ][:MAX_REFINEMENTS]
    open_knees = knees(points)
    budget = MAX_KNEE_POINTS
    for _ in range(KNEE_BISECTIONS):
        if not (between or open_knees):
            break
        # Knees that share their two sides share their point; so may a refinement.
        mids = [_midpoint(low, high) for _, low, high in open_knees]
        knee_rates = [m for m in dict.fromkeys(mids) if m not in between][:budget]
        budget -= len(knee_rates)
        wanted = [*between, *knee_rates]
        ran = dict(zip(wanted, (yield wanted), strict=True))
        points = sorted([*points, *ran.values()], key=_rate_of)
        between = []
        halves = [_knee_half(k, ran[m]) for k, m in zip(open_knees, mids, strict=True) if m in ran]
        open_knees = [k for k in halves if k is not None] if budget > 0 else []
    return points, why


def _rate_of(point: RateResult) -> float:
    return point.rate or 0.0


def _midpoint(low: RateResult, high: RateResult) -> float:
    """The geometric mean of two points' offered rates: rates double, so it halves the step."""
    return math.sqrt(_rate_of(low) * _rate_of(high))


def _knee_half(knee: Knee, middle: RateResult) -> Knee | None:
    """The half of ``knee`` that ``middle`` splits which still holds the sharp change (the
    lower first); None when neither does (the change is spread over both)."""
    name, low, high = knee
    if is_knee(low, middle, name):
        return name, low, middle
    if is_knee(middle, high, name):
        return name, middle, high
    return None


def auto_rates(
    run_point: Callable[[float], RateResult],
    capacity: float,
    *,
    slo_ttft_p99_s: float | None = None,
) -> tuple[list[RateResult], str]:
    """Run the auto sweep (module docstring) one point at a time with ``run_point``; the points
    in rate order and why it stopped."""
    steps = auto_rate_steps(capacity, slo_ttft_p99_s=slo_ttft_p99_s)
    try:
        rates = next(steps)
        while True:
            rates = steps.send([run_point(r) for r in rates])
    except StopIteration as done:
        return done.value
