from __future__ import annotations

from typing import Any

import pytest

from fcctl.analyzers.reuse.memory_tier import MemoryTierPoint
from fcctl.analyzers.reuse.verdict import (
    CHECK_REQUEST_KV_P90,
    CHECK_REUSE_ACCESS_SHARE,
    CHECK_REUSE_MEASURABLE,
    CHECK_SERVES_IDEAL,
    CHECK_SESSION_KV_P90,
    CHECK_SHARE_OF_IDEAL,
    FLAT_BELOW_SHARE_OF_IDEAL,
    SERVES_IDEAL_SHARE,
    Verdict,
    VerdictCheck,
    decide,
    reference_point,
)
from fcctl.common.jsonio import to_jsonable

GiB = 1 << 30


def _pt(cap_gib: int, share_of_ideal: float, ideal: float = 0.8) -> MemoryTierPoint:
    return MemoryTierPoint(
        cap_gib * GiB, cap_gib, share_of_ideal * ideal, share_of_ideal, 1 - share_of_ideal
    )


def _check(v: Verdict, name: str) -> VerdictCheck:
    return next(c for c in v.checks if c.name == name)


def test_reference_capacity_is_largest_realistic() -> None:
    pts = [_pt(16, 0.1), _pt(256, 0.2), _pt(1024, 0.9)]
    assert reference_point(pts).capacity_bytes == 256 * GiB
    assert reference_point([_pt(512, 0.1), _pt(1024, 0.2)]).capacity_bytes == 512 * GiB
    v = decide(
        memory_tier=pts,
        reuse_access_share=0.8,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.reference_capacity_bytes == 256 * GiB
    # The check is taken at the reference capacity (256 GiB: 0.2), not at 1 TiB (0.9).
    assert _check(v, CHECK_SHARE_OF_IDEAL).value == pytest.approx(0.2)


def test_flat_when_memory_filters_little() -> None:
    # at 256 GiB: 0.3 of the ideal 0.8 -> hit 24%, 70% from SSD
    v = decide(
        memory_tier=[_pt(64, 0.1), _pt(256, 0.3), _pt(1024, 0.95)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=50 * 2**20,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "flat"
    tier, sessions = v.checks
    assert tier == VerdictCheck(
        CHECK_SHARE_OF_IDEAL, pytest.approx(0.3), FLAT_BELOW_SHARE_OF_IDEAL, "share", False
    )
    assert tier.threshold == 0.5
    # the passing session check is still weighed, with its figure
    assert sessions == VerdictCheck(CHECK_SESSION_KV_P90, 50 * 2**20, GiB, "bytes", True)
    # The triggering check's sentence leads, the passing one follows, then the conclusion.
    assert v.reasons == (
        "The memory tier filters little of the reuse: an LRU of 256.00 GiB hits 24.0% of block "
        "accesses against an ideal 80.0%, 30.0% of the ideal (< 50.0%), so 70.0% of the reuse "
        "would come from the SSD.",
        "Sessions are small: p90 session KV is 50.00 MiB (< 1.00 GiB).",
        "A flat per-session SSD layout is recommended.",
    )


def test_flat_when_sessions_reach_gbs() -> None:
    v = decide(
        memory_tier=[_pt(256, 0.8)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=3 * GiB,
        sessions_inferred=True,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "flat"
    assert [c.name for c in v.checks] == [
        CHECK_SHARE_OF_IDEAL,
        CHECK_SERVES_IDEAL,
        CHECK_SESSION_KV_P90,
    ]
    assert [c.passed for c in v.checks] == [True, False, False]
    s = _check(v, CHECK_SESSION_KV_P90)
    assert s.value == 3 * GiB and s.threshold == GiB and s.unit == "bytes"
    assert v.reasons[0] == "Inferred sessions reach GBs: p90 session KV is 3.00 GiB (>= 1.00 GiB)."


def test_tiered_when_small_and_quick() -> None:
    v = decide(
        memory_tier=[_pt(256, 0.9)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=40 * 2**20,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
        reuse_p50_requests=3,
        reuse_p50_seconds=12.5,
    )
    assert v.layout == "tiered"
    assert all(c.passed for c in v.checks)
    assert _check(v, CHECK_SHARE_OF_IDEAL).value == pytest.approx(0.9)
    assert _check(v, CHECK_SESSION_KV_P90).value == 40 * 2**20
    # The quick-reuse figures are rendered into the memory-tier reason.
    assert v.reasons[0].endswith(
        "Reuse comes quickly: the median re-access is 3 requests and 12.5 s after the previous one."
    )


def test_boundary_is_inclusive_for_flat() -> None:
    # exactly 1 GiB p90 is "reaches GBs"; exactly 0.5 of the ideal is not "filters little"
    v = decide(
        memory_tier=[_pt(256, 0.5)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=GiB,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "flat"
    tier, serves, sessions = v.checks
    assert tier.value == tier.threshold == 0.5 and tier.passed
    assert serves.value == 0.5 and serves.threshold == SERVES_IDEAL_SHARE and not serves.passed
    assert sessions.value == sessions.threshold == GiB and not sessions.passed
    # exactly 0.9 of the ideal is "serves the reuse": the load decides, not this figure
    v = decide(
        memory_tier=[_pt(256, SERVES_IDEAL_SHARE)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=GiB,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "load-dependent"
    assert _check(v, CHECK_SERVES_IDEAL).passed


def test_no_reuse_at_all_is_a_passing_check_without_threshold() -> None:
    no_reuse = MemoryTierPoint(256 * GiB, 256, 0.0, None, None)
    v = decide(
        memory_tier=[no_reuse],
        reuse_access_share=0.0,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "tiered"
    assert v.checks == (VerdictCheck(CHECK_REUSE_ACCESS_SHARE, 0.0, None, "share", True),)


def test_without_hashes_the_verdict_is_unknown_and_says_why() -> None:
    # Issue #7 §5: sizes alone cannot say whether a memory tier filters reuse: unknown, with a
    # failing reuse_measurable check, and the request size still weighed and stated.
    for size, passed in ((2 * GiB, False), (100 * 2**20, True), (None, True)):
        v = decide(
            memory_tier=[],
            reuse_access_share=None,
            session_kv_p90_bytes=None,
            sessions_inferred=False,
            request_kv_p90_bytes=size,
        )
        assert v.layout == "unknown"
        assert v.checks == (
            VerdictCheck(CHECK_REUSE_MEASURABLE, 0.0, 1.0, "bool", False),
            VerdictCheck(CHECK_REQUEST_KV_P90, size, GiB, "bytes", passed),
        )
        assert "reuse cannot be measured without block hashes" in v.reasons[0]
    assert "100.00 MiB" in v.reasons[1] or "unknown" in v.reasons[1]


def test_without_hashes_request_size_is_rendered_and_uses_the_threshold_flag() -> None:
    v = decide(
        memory_tier=[],
        reuse_access_share=None,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=100 * 2**20,
        flat_session_kv_bytes=64 * 2**20,
    )
    assert v.layout == "unknown"
    assert v.checks[1] == VerdictCheck(
        CHECK_REQUEST_KV_P90, 100 * 2**20, 64 * 2**20, "bytes", False
    )
    assert "100.00 MiB (>= 64.00 MiB)" in v.reasons[1]


def _decide(**overrides: Any) -> Verdict:
    """decide() on a 256 GiB tier at 0.9 of an ideal 0.8, 10 MiB sessions, unless overridden."""
    kw: dict[str, Any] = dict(
        memory_tier=[_pt(256, 0.9)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=10 * 2**20,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    return decide(**(kw | overrides))


def test_thresholds_are_parameters() -> None:
    # 50 MiB sessions: tiered at the default 1 GiB, flat at a 32 MiB threshold.
    kw: dict[str, Any] = dict(
        memory_tier=[_pt(64, 0.3), _pt(256, 0.8)], session_kv_p90_bytes=50 * 2**20
    )
    assert _decide(**kw).layout == "tiered"
    v = _decide(**kw, flat_session_kv_bytes=32 * 2**20)
    assert v.layout == "flat" and _check(v, CHECK_SESSION_KV_P90).threshold == 32 * 2**20
    # A 64 GiB reference capacity weighs the 64 GiB point (0.3 of the ideal): flat.
    v = _decide(**kw, reference_capacity_bytes=64 * GiB)
    assert v.reference_capacity_bytes == 64 * GiB and v.layout == "flat"
    assert _check(v, CHECK_SHARE_OF_IDEAL).value == pytest.approx(0.3)


def test_memory_tier_that_serves_part_of_the_reuse_beside_flat_says_why_it_is_still_flat() -> None:
    # 256 GiB tier at 0.8 of the ideal, p90 session 40 GiB: flat, and the tier's sentence
    # must say why it does not make the layout tiered: 20 % still from SSD, 6 sessions at once.
    v = _decide(memory_tier=[_pt(256, 0.8)], session_kv_p90_bytes=40 * GiB, order="sequential")
    assert v.layout == "flat"
    tier = next(r for r in v.reasons if "memory tier serves" in r)
    assert "best case for the memory tier" in tier
    assert "It does not change the verdict: 20.0% of the reuse still comes from the SSD" in tier
    assert "holds only 6 sessions" in tier
    # No sentence says tiered storage is fine beside a flat verdict.
    assert not any("probably fine" in r for r in v.reasons)


@pytest.mark.parametrize("order", ["sequential", "trace", "scheduled"])
def test_never_flat_while_the_memory_tier_serves_the_ideal(order: str) -> None:
    # Issue #16.1: the whole Claude Code trace, sessions in series: a 256 GiB LRU serves
    # 100 % of the ideal while p90 sessions are 40 GiB. The verdict may not say flat against
    # that figure, nor tiered: it names the load as what decides, and says how to settle it.
    v = _decide(memory_tier=[_pt(256, 1.0)], session_kv_p90_bytes=40 * GiB, order=order)
    assert v.layout == "load-dependent"
    assert [c.passed for c in v.checks] == [True, True, False]
    assert "A flat per-session SSD layout is recommended." not in v.reasons
    assert not any("probably fine" in r for r in v.reasons)
    assert "serves most of the reuse" in v.reasons[0]
    assert "holds only 6 sessions" in v.reasons[0]
    assert v.reasons[-1].startswith("The layout depends on load: run fcctl replay")
    assert "reach GBs" in v.reasons[1]


def test_verdict_agrees_with_its_figures_on_a_grid() -> None:
    # Every combination: flat only when a figure calls for it and none forbids it.
    for share in (0.0, 0.3, 0.5, 0.7, 0.89, 0.9, 1.0):
        for kv in (10 * 2**20, GiB - 1, GiB, 40 * GiB):
            v = _decide(memory_tier=[_pt(256, share)], session_kv_p90_bytes=kv)
            big = kv >= GiB
            if share < FLAT_BELOW_SHARE_OF_IDEAL or (big and share < SERVES_IDEAL_SHARE):
                want = "flat"
            elif big:
                want = "load-dependent"
            else:
                want = "tiered"
            assert v.layout == want, (share, kv, v.reasons)
            if v.layout == "flat":
                assert not all(c.passed for c in v.checks)
            if v.layout == "tiered":
                assert all(c.passed for c in v.checks)


def test_filtering_little_in_the_best_case_order_says_even_then() -> None:
    v = _decide(memory_tier=[_pt(256, 0.2)], order="sequential")
    assert v.layout == "flat"
    assert "This holds even with sessions one after another" in v.reasons[0]


def test_tiered_in_the_best_case_order_is_qualified() -> None:
    v = _decide(order="sequential")
    assert v.layout == "tiered"
    assert "if sessions rarely overlap" in v.reasons[-1] and "--rate" in v.reasons[-1]
    v = _decide(
        order="scheduled",
        order_description="sessions started at 0.5 requests/s (Poisson, seed 0)",
    )
    assert "with sessions started at 0.5 requests/s (Poisson, seed 0)" in v.reasons[0]
    assert v.reasons[-1] == "Tiered storage (memory in front of SSD) is probably fine."


def test_checks_are_in_the_json() -> None:
    v = decide(
        memory_tier=[_pt(256, 0.3)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    doc = to_jsonable(v)
    assert list(doc) == ["layout", "reasons", "reference_capacity_bytes", "checks"]
    assert doc["checks"] == [
        {
            "name": "share_of_ideal",
            "value": pytest.approx(0.3),
            "threshold": 0.5,
            "unit": "share",
            "passed": False,
        }
    ]
