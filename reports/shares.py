"""The hit shares in words: over the requests that ran (served), and over all requests with
the rejected ones as misses beside it where they differ (docs/simulator.md, "Shares over what
was served"). The one wording of the terminal summaries."""

from __future__ import annotations

from collections.abc import Iterable

from fcctl.analyzers.replay.result import PolicyResult

from . import format as fmt

#: What a "served / all" hit cell means, printed under a table that shows one.
CELL_LEGEND = (
    "GPU hit: share of the block accesses of the requests that ran (served); "
    "'served / all' where requests were rejected (all: rejected requests' accesses as misses)"
)


def hit_cell(p: PolicyResult) -> str:
    """The GPU hit share over served requests, then over all where any request was rejected."""
    served = fmt.share(p.gpu_hit_share_served, "-")
    if not p.rejected_requests.count:
        return served
    return f"{served} / {fmt.share(p.gpu_hit_share, '-')}"


def ideal_line(policies: Iterable[PolicyResult], ideal_all: float | None) -> str:
    """The ideal hit share: over served requests, and over all when a request was rejected
    (the first policy with rejections names them: every policy rejects the same ones)."""
    rejecting = next((p for p in policies if p.rejected_requests.count), None)
    if rejecting is None:
        return f"ideal hit share (reuse access share): {fmt.share(ideal_all, '-')}"
    rej = rejecting.rejected_requests
    reasons = ", ".join(f"{n:,} {why}" for why, n in rej.reasons.items())
    return (
        f"ideal hit share (reuse access share): {fmt.share(rejecting.ideal_hit_share_served, '-')} "
        f"over served requests; {fmt.share(ideal_all, '-')} over all, the {rej.count:,} "
        f"rejected of {rejecting.requests:,} ({reasons}) as misses"
    )
