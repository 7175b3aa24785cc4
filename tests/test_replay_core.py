"""The core's placement rule, per-session reclamation and schedulers, by hand."""

from __future__ import annotations

import pytest

from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium, PlacementRule, PlacementSignals, Reason
from fcctl.layout.reclaim import SessionReclaimer
from fcctl.layout.scheduler import FcfsScheduler, TwoQueueScheduler

GB = 10**9


def _signals(**kw: object) -> PlacementSignals:
    base = dict(
        turn=3,
        context_tokens=1000,
        previous_reply_tokens=100,
        prefix_ref_count=1,
        memory_free_bytes=10**12,
        bytes_to_write=10**6,
    )
    base.update(kw)
    return PlacementSignals(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "medium", "reason"),
    [
        ({"memory_free_bytes": 10, "prefix_ref_count": 5}, Medium.SSD, Reason.MEMORY_FULL),
        ({"prefix_ref_count": 2, "turn": 0}, Medium.MEMORY, Reason.SHARED_PREFIX),
        ({"turn": 0, "previous_reply_tokens": None}, Medium.SSD, Reason.FIRST_TURN),
        ({"context_tokens": 40000}, Medium.SSD, Reason.AGENT_CONTEXT),
        ({"previous_reply_tokens": 257}, Medium.SSD, Reason.LONG_REPLY),
        ({"previous_reply_tokens": 256}, Medium.MEMORY, Reason.SHORT_REPLY_CHAT),
    ],
)
def test_placement_rules_in_order(kw: dict, medium: Medium, reason: Reason) -> None:
    p = PlacementRule(short_reply_tokens=256, agent_context_tokens=32768).place(_signals(**kw))
    assert (p.medium, p.reason) == (medium, reason)


def test_placement_threshold_errors_name_the_parameter() -> None:
    with pytest.raises(InputError, match=r"^short_reply_tokens: must be") as e:
        PlacementRule(short_reply_tokens=-1)
    assert e.value.parameter == "short_reply_tokens"


def test_reclaim_oldest_session_not_being_read() -> None:
    r = SessionReclaimer(100, high_watermark=0.9, low_watermark=0.5)
    r.add("a", 30, 0.0)
    r.add("b", 30, 1.0)
    r.add("c", 20, 2.0)
    assert r.reclaim(2.0) == ()  # 80 <= 90
    r.begin_read("a", 3.0)  # a is now the most recent too, and protected
    r.add("d", 15, 4.0)  # 95 > 90: reclaim down to <= 50
    dropped = r.reclaim(4.0)
    # Least recently active first: b (1.0), c (2.0); a is being read; d is enough after c.
    assert [d.session for d in dropped] == ["b", "c"]
    assert r.used_bytes == 45
    r.end_read("a", 5.0)
    assert not r.being_read("a")
    assert r.peak_used_bytes == 95


def test_reclaim_clock_cannot_go_back() -> None:
    r = SessionReclaimer(10)
    r.add("a", 1, 5.0)
    with pytest.raises(InputError, match="now_s"):
        r.add("a", 1, 4.0)


def test_two_queue_priority_is_the_papers_example() -> None:
    # A 1 GB and a 4 GB request that have both waited 2 s: priorities 3 and 1.5.
    s = TwoQueueScheduler(prefetch_slots=1)
    s.submit("busy", 0.0, 1 * GB, 0.0)
    assert s.start_prefetches(0.0) == ["busy"]  # holds the only window slot
    s.submit("big", 1.0, 4 * GB, 1.0)
    s.submit("small", 1.0, 1 * GB, 1.0)
    assert s.priority("small", 3.0) == pytest.approx(3.0)
    assert s.priority("big", 3.0) == pytest.approx(1.5)
    assert s.start_prefetches(3.0) == []  # the window is full: wait, never cancel
    s.prefetch_done("busy", 3.0)
    assert s.start_prefetches(3.0) == ["small"]
    # The big one's priority keeps rising: later it beats a fresh small request.
    s.submit("fresh", 20.0, 1 * GB, 20.0)
    s.prefetch_done("small", 20.0)
    assert s.priority("big", 20.0) > s.priority("fresh", 20.0)
    assert s.start_prefetches(20.0) == ["big"]


def test_two_queue_ready_by_original_arrival() -> None:
    s = TwoQueueScheduler(prefetch_slots=2)
    s.submit("ssd", 1.0, GB, 1.0)
    s.start_prefetches(1.0)
    s.submit("mem", 2.0, 0, 2.0)
    s.prefetch_done("ssd", 3.0)
    # Re-entry by arrival time: the SSD request (arrived 1.0) goes before "mem" (2.0).
    assert s.pop_ready(3.0) == "ssd"
    assert s.pop_ready(3.0) == "mem"
    assert s.pop_ready(3.0) is None


def test_fcfs_blocks_behind_an_ssd_read() -> None:
    s = FcfsScheduler(prefetch_slots=1)
    s.submit("ssd", 1.0, GB, 1.0)
    s.submit("mem", 2.0, 0, 2.0)
    assert s.start_prefetches(2.0) == ["ssd"]
    assert s.pop_ready(2.0) is None  # "mem" waits behind the head
    s.prefetch_done("ssd", 5.0)
    assert [s.pop_ready(5.0), s.pop_ready(5.0)] == ["ssd", "mem"]
