"""A replay run as its plan's replicas, with the run's one decision attached (issue #33).

Replica ``i`` replays the whole plan with seed ``seed + i`` and keeps its per-request tables;
:mod:`.verdict` reads them into the ``decision``. The document is the first replica's (seed
``seed``, so ``replicas = 1`` gives the figures a plain replay gives), with the tables dropped
unless the spec asked to keep them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import numpy as np

from fcctl.common.progress import Progress

from ..traces.sampling import SessionSample
from ..traces.schema import Trace
from .achieved import served_rate
from .decision import CANDIDATES
from .loadplan import LoadPlan
from .parallel import Execution
from .result import PolicyResult, RateResult, ReplayResult
from .run import replay_trace, simulation_workload
from .sampling import NOT_MEASURED, SampleError, session_sampling
from .spec import RunSpec
from .verdict import (
    DEFAULT_BOOTSTRAP_DRAWS,
    DEFAULT_MAX_CANCEL_SHARE,
    DEFAULT_SLO_TTFT_P99_S,
    SPREAD_FIGURES,
    SPREAD_SOURCES,
    FigureDraws,
    Interval,
    PolicySpread,
    RequestTable,
    VerdictInputs,
    decide_run,
    meets_slo,
    replica_figure_draws,
    session_weights,
)


def _without_tables(point: RateResult) -> RateResult:
    return replace(point, policies={n: replace(p, table=None) for n, p in point.policies.items()})


def replay_decided(
    trace: Trace,
    spec: RunSpec,
    plan: LoadPlan,
    *,
    progress: Progress | None = None,
    execution: Execution | None = None,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    samples: Sequence[tuple[Trace, SessionSample]] = (),
) -> ReplayResult:
    """:func:`~.run.replay_trace` as ``plan.replicas`` replicas, and the decision over them.

    Replica 0 (seed ``spec.seed``) runs the whole plan; the others replay only the load points
    the decision reads (:func:`replica_points`), each as one batch on the workload replica 0
    built, and not at all where the seed changes nothing (:func:`seed_free`). ``samples``:
    replica ``i``'s own sampled trace and what it kept (one per replica, salts ``seed + i``),
    replayed instead of ``trace``; the result's ``sampling`` then states the error measured
    across them (:func:`replica_error`)."""
    kept = replace(spec, keep_tables=True)
    traces = [t for t, _ in samples] if samples else [trace] * plan.replicas
    if len(traces) != plan.replicas:
        raise ValueError("replay_decided: give one sample per replica")
    # One workload for every replica of one trace (a sampled replica has its own sessions).
    shared = None if samples else simulation_workload(trace, spec.geometry, spec.hardware)
    first = replay_trace(
        traces[0], kept, plan, progress=progress, execution=execution, workload=shared
    )
    slo = plan.slo_ttft_p99_s if plan.slo_ttft_p99_s is not None else DEFAULT_SLO_TTFT_P99_S
    runs, notes = [first], list(first.notes)
    if not first.load.get("closed_loop") and len(samples) < 2:
        notes.append(
            "decision spread: an open-loop trace replays the same schedule under every seed, so "
            "the bootstrap over sessions is the whole spread"
        )
    if plan.replicas > 1 and seed_free(first, plan, samples):
        notes.append(f"replicas: 1 run of {plan.replicas} (the others would repeat it)")
    elif plan.replicas > 1:
        keys = replica_points(first, slo, draws=draws, seed=spec.seed)
        again = fixed_plan(plan, keys)
        for i in range(1, plan.replicas):
            runs.append(
                replay_trace(
                    traces[i],
                    replace(kept, seed=spec.seed + i),
                    again,
                    progress=progress,
                    execution=execution,
                    workload=shared,
                )
            )
        notes.append(_replicas_note(first, keys, plan.replicas, spec.seed))
    verdict = decide_run(
        inputs_of(runs, draws=draws, seed=spec.seed),
        slo_ttft_p99_s=slo,
        ttft_margin=plan.decision_ttft_margin,
    )
    first = with_spread(runs, draws=draws, seed=spec.seed)
    sampling = first.sampling
    if len(samples) > 1:
        kept_sessions = ", ".join(f"{s.sessions_kept:,}" for _, s in samples)
        notes.append(
            f"sampling per replica: salts {spec.seed}..{spec.seed + len(samples) - 1} kept "
            f"{kept_sessions} of {samples[0][1].sessions_total:,} sessions"
        )
    if samples:
        sampling = session_sampling(samples[0][1], replica_error(runs, [s for _, s in samples]))
    if not spec.keep_tables:
        first = replace(
            first,
            rates=tuple(_without_tables(p) for p in first.rates),
            operating_point=(
                _without_tables(first.operating_point) if first.operating_point else None
            ),
        )
    return replace(first, decision=verdict, notes=tuple(notes), sampling=sampling)


def seed_free(
    first: ReplayResult, plan: LoadPlan, samples: Sequence[tuple[Trace, SessionSample]]
) -> bool:
    """Whether every replica would replay exactly what replica 0 did: an open-loop trace at
    offered rates (its requests arrive at their own scaled timestamps; the seed draws nothing),
    unamplified, every replica on the same sessions. Its replicas' per-request tables would
    be equal, and a bootstrap split over equal tables is the bootstrap of one, so running one
    changes no figure of the decision."""
    return (
        not samples
        and plan.amplify == 1
        and first.load.get("axis") == "rate"
        and not first.load.get("closed_loop")
    )


def replica_points(
    first: ReplayResult,
    slo_ttft_p99_s: float,
    *,
    max_cancel_share: float = DEFAULT_MAX_CANCEL_SHARE,
    draws: int = DEFAULT_BOOTSTRAP_DRAWS,
    seed: int = 0,
) -> list[tuple[float, int]]:
    """The load points (at the node's sizes, as :func:`_point_key`) the other replicas replay:
    those the decision reads. A policy's capacity is the highest load of its leading run of
    points that meet the SLO (:func:`~.verdict.capacity_draws`), so per policy every point of
    the longest leading run over replica 0's bootstrap draws, the first point past it (where
    the run ends) and the one after (where another seed's run would end if it went one
    further); and the operating point. Points above those move no capacity, and keep the
    bootstrap spread of replica 0 alone."""
    keys = sorted(_node_points(first))
    inp = inputs_of([first], draws=draws, seed=seed)
    picked: set[tuple[float, int]] = set()
    for figures in inp.figures.values():
        meets = np.stack([meets_slo(f, slo_ttft_p99_s, max_cancel_share) for f in figures])
        lead = int(np.cumprod(meets, axis=0).sum(axis=0).max(initial=0))
        picked.update(keys[: lead + 2])
    if inp.operating_index is not None:
        picked.add(keys[inp.operating_index])
    return sorted(picked)


def fixed_plan(plan: LoadPlan, keys: Sequence[tuple[float, int]]) -> LoadPlan:
    """``plan`` at exactly the load points ``keys`` (:func:`_point_key`), at the node's own
    sizes, nothing swept: what a replica past the first replays."""
    fixed: dict[str, object] = {
        "auto_rates": False,
        "auto_concurrency": False,
        "amplify_growth": False,
        "size_lists": {},
        "host_memory_auto": False,
        "replicas": 1,
    }
    if any(c for _, c in keys):
        fixed.update(concurrency=tuple(c for _, c in keys), operating_rate=None)
    else:
        rates = tuple(r for r, _ in keys)
        op = plan.operating_rate if plan.operating_rate in rates else None
        fixed.update(concurrency=None, rates=rates, operating_rate=op)
    return replace(plan, **fixed)  # type: ignore[arg-type]


def _replicas_note(
    first: ReplayResult, keys: Sequence[tuple[float, int]], replicas: int, seed: int
) -> str:
    axis = first.load.get("axis")
    shown = ", ".join(
        f"{c:,} sessions" if axis == "concurrency" else f"{r:g} req/s" for r, c in keys
    )
    every = len(keys) == len(_node_points(first))
    where = (
        "every load point"
        if every
        else f"the load points the decision reads ({shown}); elsewhere the spread is seed "
        f"{seed}'s bootstrap over sessions alone"
    )
    return f"replicas: seeds {seed}..{seed + replicas - 1} at {where}"


def _relative_range(values: Sequence[float | None]) -> float | None:
    """(max - min) / median of ``values``; None when one is missing or the median is 0."""
    if any(v is None for v in values):
        return None
    known = [float(v) for v in values if v is not None]
    centre = float(np.median(known))
    return (max(known) - min(known)) / centre if centre > 0 else None


def _range_pp(shares: Sequence[float | None]) -> float | None:
    """(max - min) of ``shares`` in percentage points; None when one is missing."""
    known = [float(v) for v in shares if v is not None]
    return 100 * (max(known) - min(known)) if len(known) == len(shares) and known else None


def replica_error(
    replicas: Sequence[ReplayResult], samples: Sequence[SessionSample]
) -> SampleError | Literal["not measured"]:
    """The sampling error measured across ``replicas`` (replica ``i`` ran sample ``i``, other
    sessions each; docs/simulator.md, "Sampling per replica"): per policy and load point the
    replicas all ran (node's sizes), the range of GPU hit share (served) in percentage points
    (max - min) and the relative range ((max - min) / median) of mean TTFT, p99 TTFT and SSD
    read bytes x ``scale_to_full``; the largest of each over policies and points. Not measured
    with fewer than two replicas or no point they share."""
    if len(replicas) < 2:
        return NOT_MEASURED
    by_replica = [_node_points(r) for r in replicas]
    keys = sorted(set.intersection(*(set(p) for p in by_replica)))
    worst = [0.0, 0.0, 0.0, 0.0]
    seen = False
    for key in keys:
        for name in by_replica[0][key].policies:
            pols = [pts[key].policies.get(name) for pts in by_replica]
            ps = [p for p in pols if p is not None]
            if len(ps) < len(pols):
                continue
            hits = [p.gpu_hit_share_served for p in ps]
            scaled = [
                p.ssd_read_bytes / s.request_fraction if s.request_fraction else None
                for p, s in zip(ps, samples, strict=True)
            ]
            figures = [
                _range_pp(hits),
                _relative_range([p.ttft_s.mean for p in ps]),
                _relative_range([p.ttft_s.p99 for p in ps]),
                _relative_range(scaled),
            ]
            for i, f in enumerate(figures):
                if f is not None:
                    worst[i], seen = max(worst[i], f), True
    if not seen:
        return NOT_MEASURED
    hit_pp, mean_rel, p99_rel, ssd_rel = worst
    return SampleError(
        gpu_hit_share_abs_pp=hit_pp,
        ttft_mean_rel=mean_rel,
        ttft_p99_rel=p99_rel,
        ssd_read_bytes_rel=ssd_rel,
        measured_on=f"{len(replicas)} replicas of this trace's sample, other sessions each: the "
        "largest over policies and load points of the range across replicas (docs/simulator.md)",
    )


def _point_key(p: RateResult) -> tuple[float, int]:
    return (p.rate or 0.0, p.concurrency or 0)


def _node_points(result: ReplayResult) -> dict[tuple[float, int], RateResult]:
    """The load points at the node's own sizes (the first size point), by (rate, concurrency)."""
    own = result.divergence[0]["sizes"] if result.divergence else None
    return {_point_key(p): p for p in result.rates if own is None or dict(p.sizes) == dict(own)}


def _central_rate(p: PolicyResult) -> float:
    """Requests/s served (:attr:`.operating.AchievedRate.served`; 0 when none was)."""
    return float(p.achieved_rate.served or 0.0)


def _draws_of(
    by_replica: Sequence[dict[tuple[float, int], RateResult]],
    keys: Sequence[tuple[float, int]],
    names: Sequence[str],
    draws: int,
    seed: int,
) -> dict[str, list[FigureDraws]]:
    """Per policy in ``names``, per load point in ``keys``, its figures over the bootstrap's
    draws (the weights depend on the session count and ``seed`` only, so every policy's draws
    are paired, whichever policies are asked)."""
    tables: dict[str, list[list[RequestTable]]] = {n: [] for n in names}
    for key in keys:
        for n in names:
            # The replicas that ran this point (replica 0 ran every one: replay_decided).
            per = [pts[key].policies[n].table for pts in by_replica if key in pts]
            if any(t is None for t in per):
                raise ValueError("inputs_of: replay with keep_tables=True (the spread needs them)")
            tables[n].append([RequestTable.of(t) for t in per if t is not None])
    sessions = max(
        (
            int(t.session.max()) + 1
            for ts in tables.values()
            for k in ts
            for t in k
            if t.session.size
        ),
        default=0,
    )
    weights = session_weights(sessions, draws, seed)
    return {n: [replica_figure_draws(k, weights) for k in tables[n]] for n in names}


def _shared_points(
    replicas: Sequence[ReplayResult],
) -> tuple[list[dict[tuple[float, int], RateResult]], list[tuple[float, int]]]:
    """Per replica its points at the node's sizes, and the points of the first (the one that
    ran the whole plan; the others ran some of its points: :func:`replica_points`)."""
    by_replica = [_node_points(r) for r in replicas]
    return by_replica, sorted(by_replica[0])


def with_spread(
    replicas: Sequence[ReplayResult], *, draws: int = DEFAULT_BOOTSTRAP_DRAWS, seed: int = 0
) -> ReplayResult:
    """The first of ``replicas`` with every policy's ``spread`` at its load points at the
    node's sizes: the median and 95 % interval of each figure over the same bootstrap the
    decision reads, over the replicas that ran the point (docs/simulator.md §6.2, "Per-load
    spread"); None at other sizes."""
    by_replica, keys = _shared_points(replicas)
    first = replicas[0]
    if not keys:
        return first
    names = list(by_replica[0][keys[0]].policies)
    figures = _draws_of(by_replica, keys, names, draws, seed)
    spreads = {
        key: {
            n: PolicySpread(
                *(Interval.of(getattr(figures[n][k], SPREAD_SOURCES[f])) for f in SPREAD_FIGURES)
            )
            for n in names
        }
        for k, key in enumerate(keys)
    }
    own = {id(p) for p in by_replica[0].values()}

    def spread(point: RateResult) -> RateResult:
        at = spreads.get(_point_key(point)) if id(point) in own else None
        if at is None:
            return point
        pols = {n: replace(p, spread=at.get(n)) for n, p in point.policies.items()}
        return replace(point, policies=pols)

    op = first.operating_point
    return replace(
        first,
        rates=tuple(spread(p) for p in first.rates),
        operating_point=spread(op) if op is not None else None,
    )


def inputs_of(
    replicas: Sequence[ReplayResult], *, draws: int = DEFAULT_BOOTSTRAP_DRAWS, seed: int = 0
) -> VerdictInputs:
    """The decision's inputs from ``replicas`` (the same replay run with seeds ``seed + i``,
    each with its per-request tables kept: ``RunSpec.keep_tables``). Load points are the
    first's at the node's own sizes, in increasing offered load, each over the replicas that
    ran it (:func:`replay_decided`); a point's load is the one its label names (the leading
    layout's served rate in the first replica, :func:`.achieved.served_rate`), and a policy's
    capacity reads its own central achieved rate (requests/s served, the mean over the
    replicas that ran the point)."""
    if not replicas:
        raise ValueError("inputs_of: give at least one replay result")
    by_replica, keys = _shared_points(replicas)
    names = [n for n in CANDIDATES if n in by_replica[0][keys[0]].policies] if keys else []
    figures = _draws_of(by_replica, keys, names, draws, seed)
    policy_loads = {
        n: np.array(
            [
                np.mean([_central_rate(pts[k].policies[n]) for pts in by_replica if k in pts])
                for k in keys
            ]
        )
        for n in names
    }
    # A point's load is the one its label names (.achieved.served_rate: the leading layout's
    # served rate, replica 0's), so the decision's sentence and the per-load lines agree.
    loads = np.array([served_rate(by_replica[0][k]) or 0.0 for k in keys], dtype=np.float64)
    op = replicas[0].operating_point
    return VerdictInputs(
        loads=loads,
        load_unit="requests/s served",
        figures=figures,
        replicas=len(replicas),
        operating_index=keys.index(_point_key(op)) if op is not None else None,
        policy_loads=policy_loads,
    )
