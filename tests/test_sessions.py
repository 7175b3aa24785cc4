from __future__ import annotations

import pytest

from fcctl.analyzers.reuse.analyze import NoteCode, analyze_trace
from fcctl.analyzers.reuse.sessions import infer_sessions
from fcctl.analyzers.reuse.stack import flatten_accesses
from fcctl.common.jsonio import to_jsonable
from tests.analyze_helpers import TEN_BYTES_PER_TOKEN, example_trace, make_trace


def test_session_metrics_by_hand() -> None:
    res = analyze_trace(example_trace(), geometry=TEN_BYTES_PER_TOKEN)
    s = res.sessions
    assert s is not None and not s.inferred and s.count == 2
    # a = r0, r1, r3: blocks {1,2,3,4,6} = 5 -> 5 x 4 tokens x 10 B = 200
    # b = r2, r4:     blocks {5,3}       = 2 -> 80   (block 3 counts in both sessions)
    assert s.table["distinct_blocks"].to_list() == [5, 2]
    # kv [80, 200]: p50 140; p90 80 + 0.9*120 = 188; p99 80 + 0.99*120 = 198.8
    assert to_jsonable(s.kv_bytes) == pytest.approx(
        {"p50": 140, "p90": 188, "p99": 198.8, "max": 200, "mean": 140}
    )
    # turns [3, 2]: p50 2.5, p90 2 + 0.9 = 2.9, p99 2.99
    assert to_jsonable(s.turns) == pytest.approx({"p50": 2.5, "p90": 2.9, "p99": 2.99})
    # largest inputs a: 16, b: 4 -> p50 10, p90 4 + 0.9*12 = 14.8, p99 4 + 0.99*12 = 15.88
    assert to_jsonable(s.max_input_tokens) == pytest.approx({"p50": 10, "p90": 14.8, "p99": 15.88})
    assert to_jsonable(res)["trace"]["sessions"] == 2


def _infer(hashes: list[list[int]], inputs: list[int], block: int = 4) -> tuple[list, list]:
    t = make_trace(hashes, input_tokens=inputs, block_size_tokens=block)
    acc = flatten_accesses(t.requests)
    session, parent, _ = infer_sessions(acc, t.requests["input_tokens"].to_numpy(), block)
    return session.tolist(), parent.tolist()


def test_inference_follows_full_block_prefix_chains() -> None:
    # r0 [1,2,3] 10 tokens: 3rd block partial -> full prefix [1,2]
    # r1 [1,2,7,8] starts with [1,2] and is longer -> continues r0; 16 tokens: prefix [1,2,7,8]
    # r2 [9] -> new session
    # r3 [1,2,7,8,5] extends r1's [1,2,7,8] (longer than r0's [1,2]) -> parent r1
    # r4 [1,2] is not longer than r0's prefix -> new session
    session, parent = _infer(
        [[1, 2, 3], [1, 2, 7, 8], [9], [1, 2, 7, 8, 5], [1, 2]], [10, 16, 4, 20, 8]
    )
    assert session == [0, 0, 1, 0, 2]
    assert parent == [-1, 0, -1, 1, -1]


def test_inference_partial_block_must_not_match() -> None:
    # r0 [1,2,3] with 10 tokens: block 3 is partial, so r1 [1,2,3,4] matches only [1,2]:
    # still a continuation. r2 [1,5] with 5 tokens has full prefix [1] -> r3 [1,6] continues it.
    session, parent = _infer([[1, 2, 3], [1, 2, 3, 4], [1, 5], [1, 6]], [10, 16, 5, 8])
    assert parent[1] == 0
    # r3 [1,6]: candidates r0? its prefix is [1,2] (no). r2's full prefix [1] (yes) -> r2
    assert parent[3] == 2 and session[3] == session[2]


def test_inference_needs_one_full_block() -> None:
    # r0 has 3 tokens: no full block, so nothing can continue it.
    session, parent = _infer([[1], [1, 2]], [3, 8])
    assert parent == [-1, -1] and session == [0, 1]


def test_inference_ties_go_to_latest() -> None:
    # r0 and r1 both have full prefix [1,2]; r2 [1,2,3] continues the latest, r1.
    session, parent = _infer([[1, 2], [1, 2], [1, 2, 3]], [8, 8, 12])
    assert parent == [-1, -1, 1] and session == [0, 1, 1]


def test_inference_diverging_continuations_mark_a_shared_prefix() -> None:
    # r0 [1] (4 tokens): a system prompt alone. r1 [1,2] extends it -> continues r0.
    # r2 [1,3] also extends r0 but not r1: r0 was already continued, so [1] is a shared
    # prefix, not one conversation -> r2 starts its own session. r3 [1,3,4] continues r2.
    session, parent = _infer([[1], [1, 2], [1, 3], [1, 3, 4]], [4, 8, 8, 12])
    assert parent == [-1, 0, -1, 2]
    assert session == [0, 0, 1, 1]


def test_inferred_sessions_are_reported() -> None:
    res = analyze_trace(example_trace(with_sessions=False), geometry=TEN_BYTES_PER_TOKEN)
    doc = to_jsonable(res)
    assert doc["trace"]["sessions_inferred"] is True
    # inputs are exact multiples of 4, so full prefixes are whole hash lists:
    # r1 [1,2,4] does not start with r0's [1,2,3] -> new; r3 [1,2,4,6] extends r1 -> same
    # sessions: {r0}, {r1, r3}, {r2}, {r4}
    assert doc["trace"]["sessions"] == 4
    assert NoteCode.INFERRED_SESSIONS in [n.code for n in res.note_details]
    assert doc["notes"] == [n.text for n in res.note_details]


def test_interleaved_sessions_count_blocks_per_session() -> None:
    # time order interleaves a and b; block 1 is shared: it counts once in each.
    t = make_trace([[1, 2], [1, 3], [2, 1], [3]], sessions=["a", "b", "a", "b"])
    res = analyze_trace(t, geometry=TEN_BYTES_PER_TOKEN)
    assert res.sessions is not None
    assert res.sessions.table["distinct_blocks"].to_list() == [2, 2]
