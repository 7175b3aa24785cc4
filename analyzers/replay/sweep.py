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

The user's own operating point (``--rate R``), when given, is run as well and reported first.

Each doubling reads the previous point, so the sweep runs in rounds (:func:`auto_rate_steps`):
one point per doubling, then every refinement at once (they read only the doublings); a
round's simulations (every policy, every size point's round) run together where the replay
runs them (:mod:`.parallel`).
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
    return max(ran, key=lambda n: point.policies[n].gpu_hit_share or 0.0)


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


AutoSteps = Generator[list[float], list[RateResult], tuple[list[RateResult], str]]


def auto_rate_steps(capacity: float, *, slo_ttft_p99_s: float | None = None) -> AutoSteps:
    """The auto sweep (module docstring) as rounds: it yields the rates to run next (one per
    doubling, then every refinement at once), is sent their points in that order, and returns
    the points in rate order and why it stopped. Each doubling reads the previous point, so the
    rounds are sequential; a round's points (and each point's policies) are independent."""
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
        i
        for i, (a, b) in enumerate(itertools.pairwise(points))
        if a.decision.best != b.decision.best and a.rate is not None and b.rate is not None
    ][:MAX_REFINEMENTS]
    if between:
        refined = yield [math.sqrt(points[i].rate * points[i + 1].rate) for i in between]  # type: ignore[operator]
        for i, point in reversed(list(zip(between, refined, strict=True))):
            points.insert(i + 1, point)
    return points, why


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
