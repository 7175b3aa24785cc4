from __future__ import annotations

import pytest

from fcctl.analyzers.reuse.analyze import NoteCode, analyze_trace
from fcctl.common.jsonio import to_jsonable
from tests.analyze_helpers import TEN_BYTES_PER_TOKEN, example_trace, make_trace


def test_shares_and_distances_by_hand() -> None:
    # See tests/analyze_helpers.py for the stream. 12 accesses, 6 distinct blocks.
    res = analyze_trace(example_trace(), geometry=TEN_BYTES_PER_TOKEN)
    r = res.reuse
    assert r is not None
    assert res.trace.block_accesses == 12 and res.trace.distinct_blocks == 6
    # accessed once: blocks 5 and 6 -> 2 / 6
    assert r.once_only_block_share == pytest.approx(2 / 6)
    # 12 accesses - 6 first accesses = 6 re-accesses -> 6 / 12
    assert r.reuse_access_share == pytest.approx(0.5)
    # stack distances sorted [2,2,3,3,3,5]; h = 5q:
    #   p50 h=2.5 -> 3;  p90 h=4.5 -> 3 + 0.5*(5-3) = 4;  p99 h=4.95 -> 3 + 0.95*2 = 4.9
    assert to_jsonable(r.distance_stack_blocks) == pytest.approx({"p50": 3, "p90": 4, "p99": 4.9})
    # block bytes = 4 tokens x 10 B = 40
    assert res.kv.block_bytes == 40
    assert to_jsonable(r.distance_stack_bytes) == pytest.approx(
        {"p50": 120, "p90": 160, "p99": 196}
    )
    # requests sorted [1,1,2,2,2,4]: p50 2; p90 2 + 0.5*2 = 3; p99 2 + 0.95*2 = 3.9
    assert to_jsonable(r.distance_requests) == pytest.approx({"p50": 2, "p90": 3, "p99": 3.9})
    # seconds sorted [10,10,25,25,25,36]: p50 25; p90 25 + 0.5*11 = 30.5; p99 25 + 0.95*11
    assert to_jsonable(r.distance_seconds) == pytest.approx({"p50": 25, "p90": 30.5, "p99": 35.45})


def test_histograms_by_hand() -> None:
    res = analyze_trace(example_trace(), geometry=TEN_BYTES_PER_TOKEN)
    h = res.tables.histograms
    stack = h.filter(h["metric"] == "stack_blocks")
    # distances 2,2,3,3,3 in [2,4); 5 in [4,8)
    assert stack["bucket_lo"].to_list() == [0, 1, 2, 4]
    assert stack["count"].to_list() == [0, 0, 5, 1]
    seconds = h.filter(h["metric"] == "seconds")
    # 10, 10 in [8,16); 25 x3 in [16,32); 36 in [32,64)
    tail = seconds.filter(seconds["count"] > 0)
    assert tail["bucket_lo"].to_list() == [8, 16, 32]
    assert tail["count"].to_list() == [2, 3, 1]
    assert int(h.filter(h["metric"] == "requests")["count"].sum()) == 6


def test_no_reuse_at_all() -> None:
    res = analyze_trace(make_trace([[1, 2], [3], [4, 5]]), geometry=TEN_BYTES_PER_TOKEN)
    r = res.reuse
    assert r is not None
    assert r.once_only_block_share == 1.0 and r.reuse_access_share == 0.0
    assert r.distance_stack_blocks.p50 is None and r.distance_seconds.p99 is None
    doc = to_jsonable(res)
    assert doc["reuse_distance"]["requests"] == {"p50": None, "p90": None, "p99": None}
    assert all(p["share_of_ideal"] is None for p in doc["memory_tier"])
    assert all(p["lru_hit_share"] == 0.0 for p in doc["memory_tier"])


def test_no_hashes_reports_sizes_only() -> None:
    t = make_trace([None, None, None, None], timestamps=[0, 1, 2, 4], input_tokens=[10, 20, 30, 40])
    res = analyze_trace(t, geometry=TEN_BYTES_PER_TOKEN, memory_capacities_bytes=[1000])
    doc = to_jsonable(res)
    assert doc["once_only_block_share"] is None and doc["reuse_access_share"] is None
    assert doc["trace"]["block_accesses"] is None and doc["sessions"] is None
    assert doc["memory_tier"] == [
        {
            "capacity_bytes": 1000,
            "capacity_blocks": None,
            "lru_hit_share": None,
            "share_of_ideal": None,
            "ssd_reuse_share": None,
            "sampled": False,
        }
    ]
    # inputs [10,20,30,40]: p50 h=1.5 -> 25; KV = x10 bytes -> 250
    assert doc["request_sizes"]["input_tokens"]["p50"] == 25
    assert doc["request_sizes"]["kv_bytes"]["p50"] == 250
    # 4 requests over 4 s
    assert doc["request_sizes"]["arrival_rate_per_s"] == 1.0
    assert [n.code for n in res.note_details] == [NoteCode.NO_HASHES]
    assert doc["notes"] == [n.text for n in res.note_details]
