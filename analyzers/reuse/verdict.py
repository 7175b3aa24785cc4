"""The layout verdict: the FlatCake summary's rule of thumb, made concrete.

"If a session is only tens of MB and reuse comes quickly, tiered storage is probably fine";
a flat per-session SSD layout is recommended "when the memory tier filters little of the reuse
or sessions reach GBs". Concretely, at the *reference capacity* (the largest capacity analysed
that is <= ``reference_capacity_bytes``, by default :data:`REALISTIC_MEMORY_BYTES`, 256 GiB;
the smallest one when all are larger), in the order the memory tier was measured in:

* **flat** when
  - the memory tier filters little of the reuse: its LRU hit share is below
    :data:`FLAT_BELOW_SHARE_OF_IDEAL` (0.5) of the ideal (infinite-cache) hit share, i.e. most
    reuse would be served by the SSD; or
  - sessions reach GBs (p90 per-session KV >= ``flat_session_kv_bytes``, by default
    :data:`FLAT_SESSION_KV_P90_BYTES`, 1 GiB) and the memory tier, though it filters, misses
    more than a tenth of the reuse: below :data:`SERVES_IDEAL_SHARE` (0.9) of the ideal.
* **load-dependent** when sessions reach GBs but the memory tier serves at least
  :data:`SERVES_IDEAL_SHARE` of the ideal at the concurrency it was measured at. The verdict
  may not say flat against its own figure (at this concurrency the SSD would supply under a
  tenth of the reuse, which bounds what any SSD layout can gain in hit share), nor tiered
  (the reference capacity holds only a few sessions of that size, so with more of them active
  at once they evict one another and the reuse comes from the SSD, where the flat layout
  wins). Which one holds is a question of load: ``fcctl replay`` at the user's rate answers
  it, and the conclusion says so.
* **tiered** otherwise: sessions are tens of MB (p90 < 1 GiB) and reuse comes quickly enough
  for a realistic memory tier to serve at least half of it.
* **unknown** without block hashes (Azure): reuse cannot be measured, so neither rule can be
  applied; the p90 request KV is still weighed and stated, as a lower bound on session size.

The memory-tier figures depend on the order requests are taken in (:data:`OrderKind`). For a
per-session-clock trace analysed sessions one after another (``"sequential"``) they are a best
case, and every memory-tier sentence says so.

Each reason is a full sentence with the figures it was decided on; a flat verdict lists the
triggering checks first, then the checks that passed. The same figures are in
:attr:`Verdict.checks` as :class:`VerdictCheck` values (name, value, threshold, unit, passed),
in the order evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fcctl.common.units import format_bytes

from .memory_tier import MemoryTierPoint

GiB = 1 << 30
#: Largest host-memory KV budget treated as realistic for one serving node (the default
#: reference capacity).
REALISTIC_MEMORY_BYTES = 256 * GiB
#: Below this share of the ideal hit share at the reference capacity, memory filters little.
FLAT_BELOW_SHARE_OF_IDEAL = 0.5
#: At or above this share of the ideal hit share at the reference capacity, the memory tier
#: serves the reuse at the concurrency measured: the SSD supplies under a tenth of the reuse
#: hits, so flat cannot be the verdict for sessions of any size at that concurrency.
SERVES_IDEAL_SHARE = 0.9
#: A p90 session (or, without sessions, request) KV at or above this is "sessions reach GBs"
#: (the default of ``flat_session_kv_bytes``).
FLAT_SESSION_KV_P90_BYTES = 1 * GiB

Layout = Literal["flat", "tiered", "load-dependent", "unknown"]
#: ``share``: a fraction in [0, 1]; ``bytes``: bytes of KV; ``bool``: 1 true, 0 false.
CheckUnit = Literal["share", "bytes", "bool"]
#: The order the memory-tier figures were measured in: ``"trace"`` (one clock, the trace's own
#: order), ``"sequential"`` (per-session clocks, sessions one after another: a best case for
#: the memory tier), ``"scheduled"`` (per-session clocks interleaved by a session-start
#: schedule).
OrderKind = Literal["trace", "sequential", "scheduled"]

#: The names a :class:`VerdictCheck` can have.
CHECK_SHARE_OF_IDEAL = "share_of_ideal"
CHECK_SERVES_IDEAL = "memory_serves_ideal"
CHECK_REUSE_ACCESS_SHARE = "reuse_access_share"
CHECK_SESSION_KV_P90 = "session_kv_p90_bytes"
CHECK_REQUEST_KV_P90 = "request_kv_p90_bytes"
CHECK_REUSE_MEASURABLE = "reuse_measurable"


@dataclass(frozen=True)
class VerdictCheck:
    """One figure the verdict weighed, against its threshold.

    ``passed`` is True when the figure is compatible with a tiered layout (it does not call
    for flat): ``share_of_ideal >= threshold``; ``session_kv_p90_bytes`` /
    ``request_kv_p90_bytes < threshold`` (an unknown request size passes);
    ``reuse_measurable`` (value 0: the trace has no block hashes) never passes, and makes the
    layout ``unknown``. ``threshold`` is None for ``reuse_access_share`` at 0, where no block
    is reused and there is nothing to compare.
    """

    name: str
    value: float | None
    threshold: float | None
    unit: CheckUnit
    passed: bool


@dataclass(frozen=True)
class Verdict:
    """The layout, every reason as a sentence, and the checks the reasons state."""

    layout: Layout
    reasons: tuple[str, ...]
    reference_capacity_bytes: int | None = None
    checks: tuple[VerdictCheck, ...] = ()


@dataclass(frozen=True)
class _Finding:
    check: VerdictCheck
    reason: str


def reference_point(
    points: Sequence[MemoryTierPoint], reference_capacity_bytes: int = REALISTIC_MEMORY_BYTES
) -> MemoryTierPoint | None:
    """The largest capacity <= ``reference_capacity_bytes``, else the smallest one."""
    if not points:
        return None
    realistic = [p for p in points if p.capacity_bytes <= reference_capacity_bytes]
    if realistic:
        return max(realistic, key=lambda p: p.capacity_bytes)
    return min(points, key=lambda p: p.capacity_bytes)


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _without_reuse(
    request_kv_p90_bytes: float | None, ref_cap: int | None, flat_session_kv_bytes: int
) -> Verdict:
    """No block hashes: no rule can be applied; the request sizes are stated, not decisive."""
    size = request_kv_p90_bytes
    measurable = VerdictCheck(CHECK_REUSE_MEASURABLE, 0.0, 1.0, "bool", False)
    lead = (
        "Verdict unknown: reuse cannot be measured without block hashes (this trace has "
        "sizes only), so neither the memory tier's share of the reuse nor per-session KV "
        "can be computed."
    )
    limit = format_bytes(flat_session_kv_bytes)
    passed = size is None or size < flat_session_kv_bytes
    check = VerdictCheck(CHECK_REQUEST_KV_P90, size, flat_session_kv_bytes, "bytes", passed)
    if not passed:
        reason = (
            f"Requests reach GBs: p90 request KV is {format_bytes(size or 0)} (>= {limit}), "
            "which points to flat, since a session holds at least its largest request; "
            "a trace with block hashes would decide it."
        )
    else:
        shown = "unknown" if size is None else format_bytes(size)
        reason = (
            f"Requests are small: p90 request KV is {shown} (< {limit}); that is only a lower "
            "bound on session size, since sessions are not visible, so it does not decide "
            "the layout either."
        )
    return Verdict("unknown", (lead, reason), ref_cap, (measurable, check))


def _order_phrase(order: OrderKind, order_description: str | None) -> str:
    """Where the memory-tier figure comes from, as a clause; '' for a trace's own order."""
    if order == "sequential":
        return (
            "with sessions one after another (the trace has per-session clocks; a best case "
            "for the memory tier, since concurrent sessions would compete for it; --rate "
            "interleaves them)"
        )
    if order == "scheduled":
        return f"with {order_description}" if order_description else "as scheduled"
    return ""


def _memory_tier_finding(
    ref: MemoryTierPoint | None,
    reuse_access_share: float,
    reuse_p50_requests: float | None,
    reuse_p50_seconds: float | None,
    order: OrderKind,
    order_phrase: str,
) -> _Finding | None:
    """Whether the reference capacity's LRU serves at least half of the ideal hit share."""
    if ref is not None and ref.share_of_ideal is not None:
        cap = format_bytes(ref.capacity_bytes)
        hit = _pct(ref.lru_hit_share or 0.0)
        ideal = _pct(reuse_access_share)
        passed = ref.share_of_ideal >= FLAT_BELOW_SHARE_OF_IDEAL
        check = VerdictCheck(
            CHECK_SHARE_OF_IDEAL, ref.share_of_ideal, FLAT_BELOW_SHARE_OF_IDEAL, "share", passed
        )
        if not passed:
            # Filtering little even in a best-case order only makes the point stronger.
            best_case = order == "sequential"
            even = f" This holds even {order_phrase}." if best_case else ""
            where = f" ({order_phrase})" if order_phrase and not best_case else ""
            return _Finding(
                check,
                f"The memory tier filters little of the reuse{where}: an LRU of {cap} hits {hit} "
                f"of block accesses against an ideal {ideal}, {_pct(ref.share_of_ideal)} of the "
                f"ideal (< {_pct(FLAT_BELOW_SHARE_OF_IDEAL)}), so "
                f"{_pct(1.0 - ref.share_of_ideal)} of the reuse would come from the SSD.{even}",
            )
        quick = ""
        if reuse_p50_requests is not None and reuse_p50_seconds is not None:
            unit = "request" if reuse_p50_requests == 1 else "requests"
            quick = (
                f" Reuse comes quickly: the median re-access is {reuse_p50_requests:g} "
                f"{unit} and {reuse_p50_seconds:.3g} s after the previous one."
            )
        where = f" {order_phrase}" if order_phrase else ""
        return _Finding(
            check,
            f"A {cap} memory tier serves most of the reuse{where}: its LRU hits {hit} of block "
            f"accesses against an ideal {ideal}, {_pct(ref.share_of_ideal)} of the ideal "
            f"(>= {_pct(FLAT_BELOW_SHARE_OF_IDEAL)}).{quick}",
        )
    if reuse_access_share == 0:
        return _Finding(
            VerdictCheck(CHECK_REUSE_ACCESS_SHARE, 0.0, None, "share", passed=True),
            "No block is ever reused, so no cache tier gains anything; "
            "the layout only has to hold what is written.",
        )
    return None


def _session_finding(
    session_kv_p90_bytes: float, sessions_inferred: bool, flat_session_kv_bytes: int
) -> _Finding:
    """Whether p90 session KV reaches GBs."""
    what = ("inferred sessions" if sessions_inferred else "sessions").capitalize()
    shown = format_bytes(session_kv_p90_bytes)
    limit = format_bytes(flat_session_kv_bytes)
    passed = session_kv_p90_bytes < flat_session_kv_bytes
    check = VerdictCheck(
        CHECK_SESSION_KV_P90, session_kv_p90_bytes, flat_session_kv_bytes, "bytes", passed
    )
    if passed:
        return _Finding(check, f"{what} are small: p90 session KV is {shown} (< {limit}).")
    return _Finding(check, f"{what} reach GBs: p90 session KV is {shown} (>= {limit}).")


def _sessions_held(ref: MemoryTierPoint, session_kv_p90_bytes: float) -> str:
    cap = format_bytes(ref.capacity_bytes)
    held = math.floor(ref.capacity_bytes / session_kv_p90_bytes) if session_kv_p90_bytes else 0
    if held < 1:
        return f"{cap} does not hold even one session of p90 KV"
    many = "session" if held == 1 else "sessions"
    return f"{cap} holds only {held} {many} of p90 KV at once"


def _why_still_flat(ref: MemoryTierPoint, session_kv_p90_bytes: float) -> str:
    """Why a tier that serves half to nine tenths of the reuse leaves GB sessions flat."""
    missed = _pct(1.0 - (ref.share_of_ideal or 0.0))
    return (
        f" It does not change the verdict: {missed} of the reuse still comes from the SSD "
        f"(< {_pct(SERVES_IDEAL_SHARE)} of the ideal served), sessions reach GBs and "
        f"{_sessions_held(ref, session_kv_p90_bytes)} "
        f"({format_bytes(session_kv_p90_bytes)} each), so those reads are whole-session "
        "restores that a flat per-session layout reads in large extents, and more sessions "
        "running at once only add to them."
    )


def _why_load_decides(ref: MemoryTierPoint, session_kv_p90_bytes: float) -> str:
    """Why a tier that serves the reuse at this concurrency leaves the layout to the load."""
    return (
        f" At this concurrency flat gains nothing on hit share, but sessions reach GBs and "
        f"{_sessions_held(ref, session_kv_p90_bytes)} "
        f"({format_bytes(session_kv_p90_bytes)} each): with more sessions active at once they "
        "evict one another, the reuse comes from the SSD as whole-session restores, and a flat "
        "per-session layout reads those in large extents."
    )


def _serves_ideal_check(ref: MemoryTierPoint) -> VerdictCheck:
    share = ref.share_of_ideal or 0.0
    return VerdictCheck(
        CHECK_SERVES_IDEAL, share, SERVES_IDEAL_SHARE, "share", share >= SERVES_IDEAL_SHARE
    )


def decide(
    *,
    memory_tier: Sequence[MemoryTierPoint],
    reuse_access_share: float | None,
    session_kv_p90_bytes: float | None,
    sessions_inferred: bool,
    request_kv_p90_bytes: float | None,
    reuse_p50_requests: float | None = None,
    reuse_p50_seconds: float | None = None,
    flat_session_kv_bytes: int = FLAT_SESSION_KV_P90_BYTES,
    reference_capacity_bytes: int = REALISTIC_MEMORY_BYTES,
    order: OrderKind = "trace",
    order_description: str | None = None,
) -> Verdict:
    """Apply the rule above; see the module docstring.

    ``flat_session_kv_bytes``: p90 session KV at or above which the layout is flat (bytes).
    ``reference_capacity_bytes``: the memory budget whose tier point is weighed (bytes).
    ``order`` / ``order_description``: the request order the memory tier was measured in
    (for ``"scheduled"``, a clause such as "sessions started at 0.5 requests/s (seed 0)").
    """
    ref = reference_point(memory_tier, reference_capacity_bytes)
    ref_cap = ref.capacity_bytes if ref else None
    if reuse_access_share is None:
        return _without_reuse(request_kv_p90_bytes, ref_cap, flat_session_kv_bytes)
    tier = _memory_tier_finding(
        ref,
        reuse_access_share,
        reuse_p50_requests,
        reuse_p50_seconds,
        order,
        _order_phrase(order, order_description),
    )
    sessions = (
        None
        if session_kv_p90_bytes is None
        else _session_finding(session_kv_p90_bytes, sessions_inferred, flat_session_kv_bytes)
    )
    findings = [f for f in (tier, sessions) if f is not None]
    gb_sessions = sessions is not None and not sessions.check.passed
    if (
        tier is not None
        and tier.check.name == CHECK_SHARE_OF_IDEAL
        and tier.check.passed
        and gb_sessions
        and ref is not None
        and session_kv_p90_bytes is not None
    ):
        # Sessions reach GBs while the tier filters: how much of the ideal it serves decides
        # between flat and a verdict that only the load can settle.
        serves = _serves_ideal_check(ref)
        if serves.passed:
            reason = tier.reason + _why_load_decides(ref, session_kv_p90_bytes)
        else:
            reason = tier.reason + _why_still_flat(ref, session_kv_p90_bytes)
        findings = [_Finding(tier.check, reason), _Finding(serves, ""), *findings[1:]]
        if serves.passed:
            conclusion = (
                "The layout depends on load: run fcctl replay at your request rate (or "
                "analyze with --rate or --concurrent-sessions to measure the memory tier at "
                "that concurrency) to see which one wins there."
            )
            reasons = [f.reason for f in findings if f.reason]
            checks = tuple(f.check for f in findings)
            return Verdict("load-dependent", (*reasons, conclusion), ref_cap, checks)
    checks = tuple(f.check for f in findings)
    flat = [f.reason for f in findings if not f.check.passed and f.reason]
    tiered = [f.reason for f in findings if f.check.passed and f.reason]
    if flat or not all(c.passed for c in checks):
        # The checks that passed are still figures the decision weighed: keep them, after.
        flat_reasons = (*flat, *tiered, "A flat per-session SSD layout is recommended.")
        return Verdict("flat", flat_reasons, ref_cap, checks)
    conclusion = "Tiered storage (memory in front of SSD) is probably fine."
    if order == "sequential" and tier is not None and tier.check.name == CHECK_SHARE_OF_IDEAL:
        conclusion = (
            "Tiered storage (memory in front of SSD) is probably fine if sessions rarely "
            "overlap; check it at your load with fcctl replay, or analyze with --rate or "
            "--concurrent-sessions."
        )
    return Verdict("tiered", (*tiered, conclusion), ref_cap, checks)
