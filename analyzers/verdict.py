"""The layout verdict: the FlatCake summary's rule of thumb, made concrete.

"If a session is only tens of MB and reuse comes quickly, tiered storage is probably fine";
a flat per-session SSD layout is recommended "when the memory tier filters little of the reuse
or sessions reach GBs". Concretely:

* **flat** when either
  - the memory tier filters little of the reuse: at the *reference capacity* (the largest
    capacity analysed that is <= :data:`REALISTIC_MEMORY_BYTES`, 256 GiB; the smallest one
    when all are larger) the LRU hit share is below :data:`FLAT_BELOW_SHARE_OF_IDEAL` (0.5)
    of the ideal (infinite-cache) hit share, i.e. most reuse would be served by the SSD; or
  - sessions reach GBs: p90 per-session KV >= :data:`FLAT_SESSION_KV_P90_BYTES` (1 GiB).
* **tiered** otherwise: sessions are tens of MB (p90 < 1 GiB) and reuse comes quickly enough
  for a realistic memory tier to serve at least half of it.

Without block hashes (Azure) reuse cannot be measured: the verdict then rests on request KV
sizes alone (p90 request KV >= 1 GiB -> flat), and says so. Each reason is a full sentence
with the figures it was decided on; a flat verdict lists the triggering checks first, then
the checks that passed. The same figures are in :attr:`Verdict.checks` as
:class:`VerdictCheck` values (name, value, threshold, unit, passed), in the order evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fcctl.analyzers.memory_tier import MemoryTierPoint

from fcctl.common.units import format_bytes

GiB = 1 << 30
#: Largest host-memory KV budget treated as realistic for one serving node.
REALISTIC_MEMORY_BYTES = 256 * GiB
#: Below this share of the ideal hit share at the reference capacity, memory filters little.
FLAT_BELOW_SHARE_OF_IDEAL = 0.5
#: A p90 session (or, without sessions, request) KV at or above this is "sessions reach GBs".
FLAT_SESSION_KV_P90_BYTES = 1 * GiB

Layout = Literal["flat", "tiered"]
#: ``share``: a fraction in [0, 1]; ``bytes``: bytes of KV.
CheckUnit = Literal["share", "bytes"]

#: The names a :class:`VerdictCheck` can have.
CHECK_SHARE_OF_IDEAL = "share_of_ideal"
CHECK_REUSE_ACCESS_SHARE = "reuse_access_share"
CHECK_SESSION_KV_P90 = "session_kv_p90_bytes"
CHECK_REQUEST_KV_P90 = "request_kv_p90_bytes"


@dataclass(frozen=True)
class VerdictCheck:
    """One figure the verdict weighed, against its threshold.

    ``passed`` is True when the figure is compatible with a tiered layout (it does not call
    for flat): ``share_of_ideal >= threshold``; ``session_kv_p90_bytes`` /
    ``request_kv_p90_bytes < threshold`` (an unknown request size passes). ``threshold`` is
    None only for ``reuse_access_share`` at 0, where no block is reused and there is nothing to
    compare.
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


def reference_point(points: Sequence[MemoryTierPoint]) -> MemoryTierPoint | None:
    """The largest capacity <= REALISTIC_MEMORY_BYTES, else the smallest one."""
    if not points:
        return None
    realistic = [p for p in points if p.capacity_bytes <= REALISTIC_MEMORY_BYTES]
    if realistic:
        return max(realistic, key=lambda p: p.capacity_bytes)
    return min(points, key=lambda p: p.capacity_bytes)


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _without_reuse(request_kv_p90_bytes: float | None, ref_cap: int | None) -> Verdict:
    """No block hashes: the verdict rests on request KV sizes alone."""
    size = request_kv_p90_bytes
    lead = (
        "Block reuse cannot be measured (the trace has no block hashes), so the verdict "
        "rests on request sizes alone."
    )
    limit = format_bytes(FLAT_SESSION_KV_P90_BYTES)
    if size is not None and size >= FLAT_SESSION_KV_P90_BYTES:
        check = VerdictCheck(CHECK_REQUEST_KV_P90, size, FLAT_SESSION_KV_P90_BYTES, "bytes", False)
        reason = f"Requests reach GBs: p90 request KV is {format_bytes(size)} (>= {limit})."
        return Verdict("flat", (lead, reason), ref_cap, (check,))
    check = VerdictCheck(CHECK_REQUEST_KV_P90, size, FLAT_SESSION_KV_P90_BYTES, "bytes", True)
    shown = "unknown" if size is None else format_bytes(size)
    reason = (
        f"Requests are small: p90 request KV is {shown} (< {limit}); a lower bound "
        "on session size, since sessions are not visible."
    )
    return Verdict("tiered", (lead, reason), ref_cap, (check,))


def _memory_tier_finding(
    ref: MemoryTierPoint | None,
    reuse_access_share: float,
    reuse_p50_requests: float | None,
    reuse_p50_seconds: float | None,
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
            return _Finding(
                check,
                f"The memory tier filters little of the reuse: an LRU of {cap} hits {hit} of "
                f"block accesses against an ideal {ideal}, {_pct(ref.share_of_ideal)} of the ideal "
                f"(< {_pct(FLAT_BELOW_SHARE_OF_IDEAL)}), so {_pct(1.0 - ref.share_of_ideal)} of "
                "the reuse would come from the SSD.",
            )
        quick = ""
        if reuse_p50_requests is not None and reuse_p50_seconds is not None:
            unit = "request" if reuse_p50_requests == 1 else "requests"
            quick = (
                f" Reuse comes quickly: the median re-access is {reuse_p50_requests:g} "
                f"{unit} and {reuse_p50_seconds:.3g} s after the previous one."
            )
        return _Finding(
            check,
            f"A {cap} memory tier serves most of the reuse: its LRU hits {hit} of block "
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


def _session_finding(session_kv_p90_bytes: float, sessions_inferred: bool) -> _Finding:
    """Whether p90 session KV reaches GBs."""
    what = ("inferred sessions" if sessions_inferred else "sessions").capitalize()
    shown = format_bytes(session_kv_p90_bytes)
    limit = format_bytes(FLAT_SESSION_KV_P90_BYTES)
    passed = session_kv_p90_bytes < FLAT_SESSION_KV_P90_BYTES
    check = VerdictCheck(
        CHECK_SESSION_KV_P90, session_kv_p90_bytes, FLAT_SESSION_KV_P90_BYTES, "bytes", passed
    )
    if passed:
        return _Finding(check, f"{what} are small: p90 session KV is {shown} (< {limit}).")
    return _Finding(check, f"{what} reach GBs: p90 session KV is {shown} (>= {limit}).")


def decide(
    *,
    memory_tier: Sequence[MemoryTierPoint],
    reuse_access_share: float | None,
    session_kv_p90_bytes: float | None,
    sessions_inferred: bool,
    request_kv_p90_bytes: float | None,
    reuse_p50_requests: float | None = None,
    reuse_p50_seconds: float | None = None,
) -> Verdict:
    """Apply the rule above; see the module docstring."""
    ref = reference_point(memory_tier)
    ref_cap = ref.capacity_bytes if ref else None
    if reuse_access_share is None:
        return _without_reuse(request_kv_p90_bytes, ref_cap)
    findings = [
        f
        for f in (
            _memory_tier_finding(ref, reuse_access_share, reuse_p50_requests, reuse_p50_seconds),
            None
            if session_kv_p90_bytes is None
            else _session_finding(session_kv_p90_bytes, sessions_inferred),
        )
        if f is not None
    ]
    checks = tuple(f.check for f in findings)
    flat = [f.reason for f in findings if not f.check.passed]
    tiered = [f.reason for f in findings if f.check.passed]
    if flat:
        # The checks that passed are still figures the decision weighed: keep them, after.
        reasons = (*flat, *tiered, "A flat per-session SSD layout is recommended.")
        return Verdict("flat", reasons, ref_cap, checks)
    reasons = (*tiered, "Tiered storage (memory in front of SSD) is probably fine.")
    return Verdict("tiered", reasons, ref_cap, checks)
