from __future__ import annotations

from fcctl.analyzers.memory_tier import MemoryTierPoint
from fcctl.analyzers.verdict import (
    FLAT_BELOW_SHARE_OF_IDEAL,
    FLAT_SESSION_KV_P90_BYTES,
    REALISTIC_MEMORY_BYTES,
    decide,
    reference_point,
)

GiB = 1 << 30


def _pt(cap_gib: int, share_of_ideal: float, ideal: float = 0.8) -> MemoryTierPoint:
    return MemoryTierPoint(
        cap_gib * GiB, cap_gib, share_of_ideal * ideal, share_of_ideal, 1 - share_of_ideal
    )


def test_constants() -> None:
    assert REALISTIC_MEMORY_BYTES == 256 * GiB
    assert FLAT_BELOW_SHARE_OF_IDEAL == 0.5
    assert FLAT_SESSION_KV_P90_BYTES == GiB


def test_reference_capacity_is_largest_realistic() -> None:
    pts = [_pt(16, 0.1), _pt(256, 0.2), _pt(1024, 0.9)]
    assert reference_point(pts).capacity_bytes == 256 * GiB
    assert reference_point([_pt(512, 0.1), _pt(1024, 0.2)]).capacity_bytes == 512 * GiB


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
    assert "256.00 GiB" in v.reasons[0] and "30.0% of the ideal" in v.reasons[0]
    assert "70.0%" in v.reasons[0] and "24.0%" in v.reasons[0]
    # the passing session check is still shown with its figure
    assert any("50.00 MiB" in r for r in v.reasons)


def test_flat_when_sessions_reach_gbs() -> None:
    v = decide(
        memory_tier=[_pt(256, 0.9)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=3 * GiB,
        sessions_inferred=True,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "flat"
    assert v.reasons[0].startswith("Inferred sessions reach GBs") and "3.00 GiB" in v.reasons[0]


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
    assert "90.0% of the ideal" in v.reasons[0] and "3 requests and 12.5 s" in v.reasons[0]
    assert "40.00 MiB" in v.reasons[1]


def test_boundary_is_inclusive_for_flat() -> None:
    # exactly 1 GiB p90 is "reaches GBs"; exactly 0.5 of the ideal is not "filters little"
    v = decide(
        memory_tier=[_pt(256, 0.5)],
        reuse_access_share=0.8,
        session_kv_p90_bytes=GiB,
        sessions_inferred=False,
        request_kv_p90_bytes=None,
    )
    assert v.layout == "flat" and len([r for r in v.reasons if "reach GBs" in r]) == 1
    assert not any("filters little" in r for r in v.reasons)


def test_without_hashes_decides_on_request_sizes() -> None:
    v = decide(
        memory_tier=[],
        reuse_access_share=None,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=2 * GiB,
    )
    assert v.layout == "flat" and "cannot be measured" in v.reasons[0]
    v = decide(
        memory_tier=[],
        reuse_access_share=None,
        session_kv_p90_bytes=None,
        sessions_inferred=False,
        request_kv_p90_bytes=100 * 2**20,
    )
    assert v.layout == "tiered" and "100.00 MiB" in v.reasons[1]
