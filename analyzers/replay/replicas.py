"""A replay run as its plan's replicas, with the run's one decision attached (issue #33).

Replica ``i`` replays the whole plan with seed ``seed + i`` and keeps its per-request tables;
:mod:`.verdict` reads them into the ``decision``. The document is the first replica's (seed
``seed``, so ``replicas = 1`` gives the figures a plain replay gives), with the tables dropped
unless the spec asked to keep them."""

from __future__ import annotations

from dataclasses import replace

from fcctl.common.progress import Progress

from ..traces.schema import Trace
from .loadplan import LoadPlan
from .parallel import Execution
from .result import RateResult, ReplayResult
from .run import replay_trace
from .spec import RunSpec
from .verdict import DEFAULT_BOOTSTRAP_DRAWS, DEFAULT_SLO_TTFT_P99_S, decide_run, inputs_of


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
