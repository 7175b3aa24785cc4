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
the checks that passed.
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


@dataclass(frozen=True)
class Verdict:
    layout: Layout
    reasons: tuple[str, ...]
    reference_capacity_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "reasons": list(self.reasons),
            "reference_capacity_bytes": self.reference_capacity_bytes,
        }


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
    flat: list[str] = []
    tiered: list[str] = []
    ref = reference_point(memory_tier)
    ref_cap = ref.capacity_bytes if ref else None

    if reuse_access_share is None:
        size = request_kv_p90_bytes
        lead = (
            "Block reuse cannot be measured (the trace has no block hashes), so the verdict "
            "rests on request sizes alone."
        )
        if size is not None and size >= FLAT_SESSION_KV_P90_BYTES:
            return Verdict(
                "flat",
                (
                    lead,
                    f"Requests reach GBs: p90 request KV is "
                    f"{format_bytes(size)} (>= {format_bytes(FLAT_SESSION_KV_P90_BYTES)}).",
                ),
                ref_cap,
            )
        shown = "unknown" if size is None else format_bytes(size)
        return Verdict(
            "tiered",
            (
                lead,
                f"Requests are small: p90 request KV is {shown} "
                f"(< {format_bytes(FLAT_SESSION_KV_P90_BYTES)}); a lower bound "
                "on session size, since sessions are not visible.",
            ),
            ref_cap,
        )

    if ref is not None and ref.share_of_ideal is not None:
        cap = format_bytes(ref.capacity_bytes)
        hit = _pct(ref.lru_hit_share or 0.0)
        ideal = _pct(reuse_access_share)
        if ref.share_of_ideal < FLAT_BELOW_SHARE_OF_IDEAL:
            flat.append(
                f"The memory tier filters little of the reuse: an LRU of {cap} hits {hit} of "
                f"block accesses against an ideal {ideal}, {_pct(ref.share_of_ideal)} of the ideal "
                f"(< {_pct(FLAT_BELOW_SHARE_OF_IDEAL)}), so {_pct(1.0 - ref.share_of_ideal)} of "
                "the reuse would come from the SSD."
            )
        else:
            quick = ""
            if reuse_p50_requests is not None and reuse_p50_seconds is not None:
                unit = "request" if reuse_p50_requests == 1 else "requests"
                quick = (
                    f" Reuse comes quickly: the median re-access is {reuse_p50_requests:g} "
                    f"{unit} and {reuse_p50_seconds:.3g} s after the previous one."
                )
            tiered.append(
                f"A {cap} memory tier serves most of the reuse: its LRU hits {hit} of block "
                f"accesses against an ideal {ideal}, {_pct(ref.share_of_ideal)} of the ideal "
                f"(>= {_pct(FLAT_BELOW_SHARE_OF_IDEAL)}).{quick}"
            )
    elif reuse_access_share == 0:
        tiered.append(
            "No block is ever reused, so no cache tier gains anything; "
            "the layout only has to hold what is written."
        )

    if session_kv_p90_bytes is not None:
        what = "inferred sessions" if sessions_inferred else "sessions"
        if session_kv_p90_bytes >= FLAT_SESSION_KV_P90_BYTES:
            flat.append(
                f"{what.capitalize()} reach GBs: p90 session KV is "
                f"{format_bytes(session_kv_p90_bytes)} "
                f"(>= {format_bytes(FLAT_SESSION_KV_P90_BYTES)})."
            )
        else:
            tiered.append(
                f"{what.capitalize()} are small: p90 session KV is "
                f"{format_bytes(session_kv_p90_bytes)} "
                f"(< {format_bytes(FLAT_SESSION_KV_P90_BYTES)})."
            )
    if flat:
        # The checks that passed are still figures the decision weighed: keep them, after.
        return Verdict(
            "flat", (*flat, *tiered, "A flat per-session SSD layout is recommended."), ref_cap
        )
    return Verdict(
        "tiered", (*tiered, "Tiered storage (memory in front of SSD) is probably fine."), ref_cap
    )
