"""The threshold sweep as replicas (issue #33 item 2): replica ``i`` sweeps the same grid with
seed ``seed + i`` (the session schedule's), so the recommendation states whether its pair is
the one every replica recommends, and each grid cell its figures' range across replicas.

The document is the first replica's (seed ``seed``: ``replicas = 1`` gives a plain sweep), with
``replicas`` added (:class:`.result.ReplicaSweep`; docs/recommend.md, "Replicas")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .result import CellRange, GridCell, Range, RecommendResult, ReplicaPick, ReplicaSweep


def _range(values: Sequence[float | None]) -> Range:
    if any(v is None for v in values):
        return Range(None, None)
    known = [float(v) for v in values if v is not None]
    return Range(min(known), max(known))


def _cell_key(c: GridCell) -> tuple[int, int, float]:
    return (c.short_reply_tokens, c.agent_context_tokens, c.rate)


def _grid_ranges(results: Sequence[RecommendResult]) -> tuple[CellRange, ...]:
    by_replica = [{_cell_key(c): c for c in r.grid} for r in results]
    common = [k for k in by_replica[0] if all(k in cells for cells in by_replica)]
    ranges = []
    for key in common:
        cells = [cells[key] for cells in by_replica]
        ranges.append(
            CellRange(
                *key,
                gpu_hit_share=_range([c.gpu_hit_share for c in cells]),
                ttft_mean_s=_range([c.ttft_s.mean for c in cells]),
                ttft_p99_s=_range([c.ttft_s.p99 for c in cells]),
            )
        )
    return tuple(ranges)


def replica_sweep(results: Sequence[RecommendResult], seeds: Sequence[int]) -> ReplicaSweep:
    """The replicas' picks and ranges from their results (``seeds[i]`` ran ``results[i]``)."""
    picks = tuple(
        ReplicaPick(
            seed,
            r.recommendation.short_reply_tokens,
            r.recommendation.agent_context_tokens,
            r.recommendation.gpu_hit_share,
            r.recommendation.ttft_s.mean,
            r.recommendation.ttft_s.p99,
        )
        for seed, r in zip(seeds, results, strict=True)
    )
    pair = (picks[0].short_reply_tokens, picks[0].agent_context_tokens)
    stable = all((p.short_reply_tokens, p.agent_context_tokens) == pair for p in picks)
    return ReplicaSweep(len(picks), stable, picks, _grid_ranges(results))


def sweep_replicas(
    sweep: Callable[[int], RecommendResult], seed: int, replicas: int
) -> RecommendResult:
    """``sweep(seed + i)`` for each replica ``i``: the first result with ``replicas`` set (left
    None for one replica, whose document is a plain sweep's)."""
    seeds = [seed + i for i in range(replicas)]
    results = [sweep(s) for s in seeds]
    if replicas == 1:
        return results[0]
    return dataclasses.replace(results[0], replicas=replica_sweep(results, seeds))


def stability_sentence(r: ReplicaSweep) -> str:
    """One line: whether the replicas recommend one pair, and which they recommend."""
    seeds = f"seeds {r.picks[0].seed}..{r.picks[-1].seed}"
    if r.stable:
        p = r.picks[0]
        return (
            f"replicas: all {r.count} ({seeds}) recommend short-reply {p.short_reply_tokens}, "
            f"agent-context {p.agent_context_tokens}: the recommendation is stable"
        )
    pairs = ", ".join(
        f"seed {p.seed}: {p.short_reply_tokens}/{p.agent_context_tokens}" for p in r.picks
    )
    return (
        f"replicas: the {r.count} replicas ({seeds}) recommend different pairs "
        f"(short-reply/agent-context; {pairs}): the pair is not stable at this trace's length"
    )
