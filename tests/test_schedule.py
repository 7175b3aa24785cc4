"""Session-start schedules (analyzers/traces/schedule.py): hand-computed cases and invariants."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fcctl.analyzers.traces.schedule import (
    RATE_RULE,
    check_rate,
    check_rates,
    interleave,
    schedule_by_concurrency,
    schedule_by_rate,
    session_durations_s,
)
from fcctl.analyzers.traces.schema import SCHEMA, Trace
from fcctl.common.errors import FcctlInputError


def _trace(rows: list[tuple[str, float]]) -> Trace:
    """Requests (session, own offset s), in per-session analysis order; a chain of parents."""
    parents: list[int | None] = []
    last: dict[str, int] = {}
    for i, (sid, _) in enumerate(rows):
        parents.append(last.get(sid))
        last[sid] = i
    n = len(rows)
    df = pl.DataFrame(
        {
            "request_index": list(range(n)),
            "session_id": [s for s, _ in rows],
            "turn": [0] * n,
            "parent_request": parents,
            "timestamp_s": [t for _, t in rows],
            "input_tokens": [64 * (i + 1) for i in range(n)],
            "output_tokens": [1] * n,
            "block_size_tokens": [64] * n,
            "hash_ids": [[i] for i in range(n)],
        },
        schema=SCHEMA,
    )
    return Trace(path="t", format="test", requests=df, order="session", has_sessions=True)


THREE = [("a", 0.0), ("a", 10.0), ("a", 20.0), ("b", 0.0), ("b", 5.0), ("c", 0.0)]


def test_durations_are_last_offsets() -> None:
    assert session_durations_s(_trace(THREE).requests).tolist() == [20.0, 5.0, 0.0]


def test_concurrency_one_is_one_session_after_another() -> None:
    s = schedule_by_concurrency(_trace(THREE).requests, 1)
    assert s.start_s.tolist() == [0.0, 20.0, 25.0]
    out = interleave(_trace(THREE), s).requests
    assert out["timestamp_s"].to_list() == [0.0, 10.0, 20.0, 20.0, 25.0, 25.0]
    assert out["session_id"].to_list() == ["a", "a", "a", "b", "b", "c"]


def test_concurrency_two_interleaves_and_remaps_parents() -> None:
    # a holds slot 0 for 20 s; b takes slot 1 at 0 and frees it at 5 s; c starts at 5 s.
    s = schedule_by_concurrency(_trace(THREE).requests, 2)
    assert s.start_s.tolist() == [0.0, 0.0, 5.0]
    out = interleave(_trace(THREE), s).requests
    # time order; a tie at 0 s and at 5 s keeps trace order (a before b, b before c).
    assert list(zip(out["session_id"], out["timestamp_s"], strict=True)) == [
        ("a", 0.0),
        ("b", 0.0),
        ("b", 5.0),
        ("c", 5.0),
        ("a", 10.0),
        ("a", 20.0),
    ]
    assert out["request_index"].to_list() == list(range(6))
    # a's second request (now index 4) continues a's first (index 0); b's second b's first.
    assert out["parent_request"].to_list() == [None, None, 1, None, 0, 4]
    # hash ids travel with their request
    assert out["hash_ids"].to_list() == [[0], [3], [4], [5], [1], [2]]


def test_rate_schedule_is_seeded_and_hits_the_request_rate() -> None:
    rows = [(f"s{k}", float(j)) for k in range(4000) for j in range(5)]
    req = _trace(rows).requests
    a = schedule_by_rate(req, 2.0, seed=7)
    b = schedule_by_rate(req, 2.0, seed=7)
    c = schedule_by_rate(req, 2.0, seed=8)
    assert np.array_equal(a.start_s, b.start_s) and not np.array_equal(a.start_s, c.start_s)
    # 5 requests a session, 2 requests/s: sessions start at 0.4/s.
    assert a.session_rate_per_s == pytest.approx(0.4)
    achieved = req.height / a.start_s[-1]
    assert achieved == pytest.approx(2.0, rel=0.05)  # 4000 exponential gaps: ~1.6% std error
    assert a.start_s[0] == 0.0 and np.all(np.diff(a.start_s) >= 0)


def test_interleave_keeps_every_request_once() -> None:
    rng = np.random.default_rng(3)
    rows = [(f"s{k}", float(t)) for k in range(30) for t in np.sort(rng.uniform(0, 50, 4))]
    trace = _trace(rows)
    out = interleave(trace, schedule_by_rate(trace.requests, 1.0, seed=1))
    assert out.order == "time"
    assert out.requests["timestamp_s"].is_sorted()
    assert sorted(out.requests["hash_ids"].list.first().to_list()) == list(range(len(rows)))
    for sid, grp in out.requests.group_by("session_id"):
        offsets = grp["timestamp_s"].to_numpy() - grp["timestamp_s"].min()
        own = np.array([t for s, t in rows if s == sid[0]])
        assert np.allclose(offsets, own - own.min())  # each session keeps its own gaps


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True])
def test_bad_rates_are_refused(bad: float) -> None:
    with pytest.raises(FcctlInputError, match="rate: must be"):
        schedule_by_rate(_trace(THREE).requests, bad)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1", None])
def test_one_rate_rule_names_the_parameter_or_the_flag(bad: object) -> None:
    with pytest.raises(FcctlInputError) as e:
        check_rate(bad, "rate_requests_per_s")
    assert str(e.value) == f"rate_requests_per_s: {RATE_RULE}; got {bad!r}"
    assert e.value.parameter == "rate_requests_per_s"  # the CLI shows it as the flag
    with pytest.raises(FcctlInputError) as e:
        check_rates([1.0, bad], "--rates")
    assert str(e.value) == f"--rates: each rate {RATE_RULE}; got {bad!r}"
    assert e.value.parameter is None  # a flag already


def test_rates_are_floats_sorted_and_unique() -> None:
    assert check_rate(2, "rate") == 2.0 and isinstance(check_rate(2, "rate"), float)
    assert check_rates([2, 0.5, 2.0], "--rates") == (0.5, 2.0)
    with pytest.raises(FcctlInputError) as e:
        check_rates([], "--rates")
    assert str(e.value) == "--rates: give at least one rate"


def test_every_rate_of_fcctl_goes_through_the_one_rule() -> None:
    """analyze's session-start rate, replay's rates and operating rate, the recommender's rates
    and target rate: one rule, one message shape."""
    from fcctl.analyzers.recommend import RecommendConfig, recommend_thresholds
    from fcctl.analyzers.replay import PRESETS, ReplayConfig, replay_trace
    from fcctl.analyzers.reuse.analyze import check_schedule_args
    from fcctl.layout.geometry import model_geometry

    with pytest.raises(FcctlInputError) as e:
        check_schedule_args(float("nan"), None)
    assert str(e.value) == f"rate_requests_per_s: {RATE_RULE}; got nan"
    geometry, hw = model_geometry("llama-3.1-8b"), PRESETS["h100-8x"]
    trace = _trace(THREE)
    for config, message in [
        (ReplayConfig(geometry, hw, rates=(0.0,)), f"rates: each rate {RATE_RULE}; got 0.0"),
        (ReplayConfig(geometry, hw, operating_rate=-1.0), f"operating_rate: {RATE_RULE}; got -1.0"),
    ]:
        with pytest.raises(FcctlInputError) as e:
            replay_trace(trace, config)
        assert str(e.value) == message
    rec = RecommendConfig(geometry, hw, target_rate=float("inf"))
    with pytest.raises(FcctlInputError) as e:
        recommend_thresholds(trace, rec)
    assert str(e.value) == f"target_rate: each rate {RATE_RULE}; got inf"


def test_bad_concurrency_and_time_ordered_traces_are_refused() -> None:
    with pytest.raises(FcctlInputError, match="concurrent_sessions: must be >= 1"):
        schedule_by_concurrency(_trace(THREE).requests, 0)
    timed = _trace(THREE)
    timed = Trace(path="t", format="x", requests=timed.requests, order="time")
    with pytest.raises(FcctlInputError, match="per-session clocks"):
        interleave(timed, schedule_by_concurrency(timed.requests, 1))


def test_time_scaled_keeps_proportions_and_reaches_the_rate() -> None:
    from fcctl.analyzers.traces.schedule import natural_rate_per_s, time_scaled

    t = np.array([10.0, 11.0, 13.0, 14.0])
    assert natural_rate_per_s(t) == pytest.approx(4 / 4.0)
    scaled = time_scaled(t, 2.0)  # twice the trace's own rate: gaps halve
    assert scaled.tolist() == pytest.approx([0.0, 0.5, 1.5, 2.0])
    assert time_scaled(np.array([5.0, 5.0]), 3.0).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="rate"):
        time_scaled(t, 0.0)


def test_session_ordinals_follow_first_appearance() -> None:
    from fcctl.analyzers.traces.schedule import session_ordinals

    req = pl.DataFrame({"session_id": ["b", "a", "b", "c", "a"]})
    ordinal, n = session_ordinals(req)
    assert n == 3 and ordinal.tolist() == [0, 1, 0, 2, 1]
