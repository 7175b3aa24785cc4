"""A replay run as its plan's replicas, with the run's one decision attached (issue #33).

Replica ``i`` replays the whole plan with seed ``seed + i`` and keeps its per-request tables;
:mod:`.verdict` reads them into the ``decision``. The document is the first replica's (seed
``seed``, so ``replicas = 1`` gives the figures a plain replay gives), with the tables dropped
unless the spec asked to keep them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fcctl.common.progress import Progress

from ..traces.schema import Trace
from .decision import CANDIDATES
from .loadplan import LoadPlan
from .parallel import Execution
from .result import PolicyResult, RateResult, ReplayResult
from .run import replay_trace
from .spec import RunSpec
from .verdict import (
    DEFAULT_BOOTSTRAP_DRAWS,
    DEFAULT_SLO_TTFT_P99_S,
    RequestTable,
    VerdictInputs,
    decide_run,
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
) -> ReplayResult:
    """:func:`~.run.replay_trace` ``plan.replicas`` times, and the decision over the replicas."""
    kept = replace(spec, keep_tables=True)
    runs = [
        replay_trace(
            trace, replace(kept, seed=spec.seed + i), plan, progress=progress, execution=execution
        )
        for i in range(plan.replicas)
    ]
    slo = plan.slo_ttft_p99_s if plan.slo_ttft_p99_s is not None else DEFAULT_SLO_TTFT_P99_S
    verdict = decide_run(
        inputs_of(runs, draws=draws, seed=spec.seed),
        slo_ttft_p99_s=slo,
        ttft_margin=plan.decision_ttft_margin,
    )
    first = runs[0]
    notes = list(first.notes)
    if not first.load.get("closed_loop"):
        notes.append(
            "decision spread: an open-loop trace replays the same schedule under every seed, so "
            "the bootstrap over sessions is the whole spread"
        )
    if not spec.keep_tables:
        first = replace(
            first,
            rates=tuple(_without_tables(p) for p in first.rates),
            operating_point=(
                _without_tables(first.operating_point) if first.operating_point else None
            ),
        )
    return replace(first, decision=verdict, notes=tuple(notes))


def _point_key(p: RateResult) -> tuple[float, int]:
    return (p.rate or 0.0, p.concurrency or 0)


def _node_points(result: ReplayResult) -> dict[tuple[float, int], RateResult]:
    """The load points at the node's own sizes (the first size point), by (rate, concurrency)."""
    own = result.divergence[0]["sizes"] if result.divergence else None
    return {_point_key(p): p for p in result.rates if own is None or dict(p.sizes) == dict(own)}


def _central_rate(p: PolicyResult) -> float:
    r = p.achieved_rate
    return float(r.central if r.central is not None else r.whole or 0.0)


def inputs_of(
    replicas: Sequence[ReplayResult], *, draws: int = DEFAULT_BOOTSTRAP_DRAWS, seed: int = 0
) -> VerdictInputs:
    """The decision's inputs from ``replicas`` (the same replay run with seeds ``seed + i``,
    each with its per-request tables kept: ``RunSpec.keep_tables``). Load points are those at
    the node's own sizes that every replica ran, in increasing offered load; a point's load is
    the central achieved rate (requests/s served), a policy's own for its capacity."""
    if not replicas:
        raise ValueError("inputs_of: give at least one replay result")
    by_replica = [_node_points(r) for r in replicas]
    keys = sorted(set.intersection(*(set(p) for p in by_replica)))
    names = [n for n in CANDIDATES if n in by_replica[0][keys[0]].policies] if keys else []
    tables: dict[str, list[list[RequestTable]]] = {n: [] for n in names}
    for key in keys:
        for n in names:
            per = [pts[key].policies[n].table for pts in by_replica]
            if any(t is None for t in per):
                raise ValueError("inputs_of: replay with keep_tables=True (the spread needs them)")
            tables[n].append([RequestTable.of(t) for t in per if t is not None])
    sessions = max(
        (int(t.session.max()) + 1 for ts in tables.values() for k in ts for t in k), default=0
    )
    weights = session_weights(sessions, draws, seed)
    figures = {n: [replica_figure_draws(k, weights) for k in tables[n]] for n in names}
    policy_loads = {
        n: np.array(
            [np.mean([_central_rate(pts[k].policies[n]) for pts in by_replica]) for k in keys]
        )
        for n in names
    }
    loads = np.mean(list(policy_loads.values()), axis=0) if names else np.zeros(len(keys))
    op = replicas[0].operating_point
    return VerdictInputs(
        loads=loads,
        load_unit="requests/s served",
        figures=figures,
        replicas=len(replicas),
        operating_index=keys.index(_point_key(op)) if op is not None else None,
        policy_loads=policy_loads,
    )
