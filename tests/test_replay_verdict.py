"""The run's one decision (analyzers/replay/verdict.py): hand-computed spreads and rule cases."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from fcctl.analyzers.replay.verdict import (
    Capacity,
    FigureDraws,
    RequestTable,
    VerdictInputs,
    capacity_draws,
    capacity_words,
    check_replicas,
    check_slo,
    decide_run,
    figure_draws,
    replica_figure_draws,
    session_weights,
    verdict_sentences,
)
from fcctl.common.errors import InputError


def _table(**cols: object) -> RequestTable:
    return RequestTable.of(pl.DataFrame(cols))


TABLE = _table(
    session_index=[0, 0, 1, 2],
    rejected=[None, None, None, "context"],
    ttft_s=[1.0, 3.0, 2.0, float("nan")],
    delivered_blocks=[2, 4, 0, 0],
    blocks=[4, 4, 2, 6],
    cancelled=[False, True, False, False],
)


def test_unit_weights_give_the_plain_figures() -> None:
    fig = figure_draws(TABLE, np.ones((1, 3)))
    # Over the requests that ran: the rejected request's 6 accesses do not count.
    assert fig.gpu_hit_share[0] == pytest.approx(6 / 10)
    assert fig.ttft_mean_s[0] == pytest.approx(2.0)
    assert fig.ttft_p99_s[0] == 3.0  # the largest of three equally weighted values
    assert fig.cancel_share[0] == pytest.approx(1 / 3)


def test_session_weights_reweight_every_figure() -> None:
    # Session 0 dropped, session 1 counted twice: only request 2 (and the rejected one) remain.
    fig = figure_draws(TABLE, np.array([[0.0, 2.0, 1.0]]))
    assert fig.gpu_hit_share[0] == 0.0  # request 2 (2 accesses, twice weighted) delivered none
    assert fig.ttft_mean_s[0] == pytest.approx(2.0)
    assert fig.ttft_p99_s[0] == 2.0
    assert fig.cancel_share[0] == 0.0


def test_weighted_p99_matches_a_repeated_sample() -> None:
    rng = np.random.default_rng(5)
    n = 300
    table = _table(
        session_index=np.arange(n),
        rejected=pl.Series([None] * n, dtype=pl.String),
        ttft_s=rng.exponential(1.0, n),
        delivered_blocks=np.zeros(n, dtype=np.int64),
        blocks=np.ones(n, dtype=np.int64),
        cancelled=np.zeros(n, dtype=bool),
    )
    w = session_weights(n, 4, seed=9)
    fig = figure_draws(table, w)
    for b in range(4):
        repeated = np.sort(np.repeat(table.ttft_s, w[b].astype(int)))
        expect = repeated[math.ceil(0.99 * repeated.size) - 1]  # smallest reaching 99 % of weight
        assert fig.ttft_p99_s[b] == expect


def test_draws_alternate_over_replicas() -> None:
    slow = _table(
        session_index=[0, 1, 2],
        rejected=pl.Series([None] * 3, dtype=pl.String),
        ttft_s=[10.0, 10.0, 10.0],
        delivered_blocks=[0, 0, 0],
        blocks=[1, 1, 1],
        cancelled=[False] * 3,
    )
    fig = replica_figure_draws([TABLE, slow], np.ones((4, 3)))
    assert list(fig.ttft_mean_s) == [2.0, 10.0, 2.0, 10.0]


def test_capacity_is_the_leading_run_of_points_that_meet_the_slo() -> None:
    meets = np.array([[True, True, False], [False, True, True], [True, True, True]])
    assert list(capacity_draws(meets, np.array([1.0, 2.0, 3.0]))) == [1.0, 3.0, 0.0]


def _figs(p99: list[float], mean: float | None = None, draws: int = 50) -> list[FigureDraws]:
    rng = np.random.default_rng(len(p99))
    out = []
    for v in p99:
        noise = 1.0 + 0.01 * rng.standard_normal(draws)
        out.append(
            FigureDraws(
                np.full(draws, 0.5),
                (mean if mean is not None else v / 2) * noise,
                v * noise,
                np.zeros(draws),
            )
        )
    return out


def test_the_policy_holding_the_slo_longest_leads_on_capacity() -> None:
    inp = VerdictInputs(
        loads=np.array([1.0, 2.0, 3.0]),
        load_unit="requests/s served",
        figures={"memory-only": _figs([1.0, 3.0, 5.0]), "flat": _figs([1.0, 1.5, 1.9])},
        replicas=1,
    )
    v = decide_run(inp, slo_ttft_p99_s=2.0)
    assert (v.best, v.objective, v.runner_up) == ("flat", "capacity at SLO", "memory-only")
    assert v.capacity["flat"] == Capacity(3.0, 3.0, 3.0, True)
    assert v.capacity["memory-only"].median == 1.0
    assert v.ratio is not None and v.ratio.median == pytest.approx(3.0)
    assert not v.inside_spread
    # Both meet the SLO only at the lowest point: that is the operating point.
    assert (v.load, v.operating_point) == (1.0, "highest load every candidate meets the SLO")
    text = verdict_sentences(v)
    assert text.startswith("decision: flat (capacity at SLO, at 1 requests/s served")
    assert "flat: capacity at least 3 requests/s served (the highest load swept);" in text
    assert "memory-only: capacity 1 requests/s served (95 % interval 1-1);" in text
    assert v.loads_swept == (1.0, 2.0, 3.0)


def test_a_capacity_of_zero_reads_as_below_the_lowest_load_swept() -> None:
    unit = "requests/s served"
    # Most draws fail at the lowest point, a few hold it: the interval reaches that load.
    some = Capacity(0.0, 0.0, 0.0778, False)
    assert capacity_words(some, unit, (0.0778, 0.2)) == (
        "below the lowest load swept (0.0778 requests/s served) in most draws; "
        "95 % interval 0-0.0778"
    )
    every = Capacity(0.0, 0.0, 0.0, False)
    assert capacity_words(every, unit, (0.5,)) == (
        "below the lowest load swept (0.5 requests/s served) in every draw"
    )
    assert capacity_words(Capacity(3.0, 2.0, 3.0, True), unit, (1.0, 3.0)) == (
        "at least 3 requests/s served (the highest load swept)"
    )
    assert "[" not in capacity_words(Capacity(2.0, 1.0, 3.0, False), unit, (1.0, 3.0))


def test_a_lead_on_mean_contradicted_by_p99_is_a_trade_off() -> None:
    inp = VerdictInputs(
        loads=np.array([1.0]),
        load_unit="requests/s served",
        figures={"tiered": _figs([1.5], mean=0.5), "flat": _figs([1.0], mean=0.8)},
        replicas=1,
    )
    v = decide_run(inp, slo_ttft_p99_s=2.0)
    assert v.best == "none" and v.objective == "TTFT at the operating point"
    assert v.trade_off == "tiered has the lower mean TTFT, flat the lower p99 TTFT"


def test_figures_inside_their_spread_do_not_matter() -> None:
    same = _figs([1.0, 1.2])
    inp = VerdictInputs(
        np.array([1.0, 2.0]), "concurrent sessions", {"tiered": same, "flat": same}, 2
    )
    v = decide_run(inp)
    assert (v.best, v.trade_off, v.inside_spread) == ("none", None, True)
    assert "does not matter here" in v.reason


@pytest.mark.parametrize("bad", [0, -1, 65, float("nan"), 2.0, True])
def test_bad_replicas_named(bad: object) -> None:
    with pytest.raises(InputError, match=r"^replicas: "):
        check_replicas(bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_slo_named(bad: float) -> None:
    with pytest.raises(InputError, match=r"^slo_ttft_p99_s: "):
        check_slo(bad, 0.01)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--replicas", "0"),
        ("--replicas", "-1"),
        ("--replicas", "65"),
        ("--replicas", "nan"),
        ("--slo-ttft-p99", "0"),
        ("--slo-ttft-p99", "-1"),
        ("--slo-ttft-p99", "inf"),
    ],
)
def test_bad_cli_values_are_one_line_naming_the_flag(flag: str, value: str) -> None:
    import subprocess
    import sys

    from tests.conftest import SAMPLES

    trace = str(SAMPLES / "claude_code_sample.jsonl.gz")
    r = subprocess.run(
        [sys.executable, "-m", "fcctl", "replay", trace, "--rates", "1", flag, value],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_a_seed_salts_which_sessions_a_sample_keeps() -> None:
    from hashlib import blake2b

    from fcctl.analyzers.traces.sampling import keep_mask, session_hash

    # Salt 0 is BLAKE2b's default salt: the hash convert buckets by and every run kept so far.
    unsalted = int.from_bytes(blake2b(b"s-7", digest_size=8).digest(), "big")
    assert session_hash("s-7") == session_hash("s-7", 0) == unsalted
    assert session_hash("s-7", 1) != unsalted
    ids = [f"s-{i}" for i in range(2000)]
    requests = pl.DataFrame(
        {"session_id": ids, "request_index": np.arange(len(ids), dtype=np.int64)}
    )
    kept = {salt: keep_mask(requests, 0.25, salt) for salt in (0, 1, 2)}
    for mask, n_kept, n in kept.values():
        assert n == 2000 and 400 < n_kept < 600  # about a quarter, whatever the salt
        assert int(mask.sum()) == n_kept
    assert not np.array_equal(kept[0][0], kept[1][0])
    assert not np.array_equal(kept[1][0], kept[2][0])
    # Same salt, same sessions: a replica is reproducible.
    assert np.array_equal(keep_mask(requests, 0.25, 2)[0], kept[2][0])


def test_an_unbounded_ratio_renders_after_a_json_round_trip() -> None:
    import json

    from fcctl.common.jsonio import dumps, from_jsonable

    # flat meets the SLO at both points; memory-only fails at the lowest in some draws.
    mem = _figs([1.9, 5.0])
    mem[0] = FigureDraws(
        mem[0].gpu_hit_share,
        mem[0].ttft_mean_s,
        np.where(np.arange(50) % 3 == 0, 2.5, 1.5),
        mem[0].cancel_share,
    )
    inp = VerdictInputs(
        np.array([1.0, 2.0]), "requests/s served", {"memory-only": mem, "flat": _figs([1, 1])}, 1
    )
    v = decide_run(inp)
    assert v.best == "flat" and v.ratio is not None and math.isinf(v.ratio.high)
    back = from_jsonable(type(v), json.loads(dumps(v)))
    assert "unbounded, beyond the spread)" in verdict_sentences(back)


def _replica(sessions: int, ttft: float) -> RequestTable:
    """One sampled replica: ``sessions`` sessions of two requests each, every TTFT ``ttft``
    (a little noise per request, so the bootstrap has something to draw)."""
    n = 2 * sessions
    rng = np.random.default_rng(sessions)
    return _table(
        session_index=np.repeat(np.arange(sessions), 2),
        rejected=pl.Series([None] * n, dtype=pl.String),
        ttft_s=ttft * (1 + 0.01 * rng.standard_normal(n)),
        delivered_blocks=np.ones(n, dtype=np.int64),
        blocks=np.full(n, 2, dtype=np.int64),
        cancelled=np.zeros(n, dtype=bool),
    )


def test_a_difference_inside_the_sampling_replicas_spread_is_a_tie() -> None:
    """Three replicas of a sample, each other sessions (10, 7 and 12 kept): flat is 30 % faster
    in two of them and 30 % slower in the third, so its median lead lies inside the spread the
    replicas measure (issue #36 item 17): the decision is a tie, not flat."""
    sizes, tiered_ttft = (10, 7, 12), 1.0
    flat = [_replica(s, t) for s, t in zip(sizes, (0.7, 0.7, 1.3), strict=True)]
    tiered = [_replica(s, tiered_ttft) for s in sizes]
    weights = session_weights(max(sizes), 200, seed=0)
    inp = VerdictInputs(
        loads=np.array([1.0]),
        load_unit="requests/s served",
        figures={
            "tiered": [replica_figure_draws(tiered, weights)],
            "flat": [replica_figure_draws(flat, weights)],
        },
        replicas=3,
    )
    v = decide_run(inp, slo_ttft_p99_s=2.0)
    assert v.objective == "TTFT at the operating point" and v.best == "none"
    assert v.inside_spread and v.ratio is not None
    assert v.ratio.median > 1.2 and v.ratio.low < 1.0  # the lead is real in the median only
    # One replica (the difference measured once) would have decided it.
    one = VerdictInputs(
        np.array([1.0]),
        "requests/s served",
        {
            "tiered": [replica_figure_draws(tiered[:1], weights)],
            "flat": [replica_figure_draws(flat[:1], weights)],
        },
        1,
    )
    assert decide_run(one, slo_ttft_p99_s=2.0).best == "flat"


def test_each_policy_at_each_load_carries_its_spread_from_the_decisions_bootstrap() -> None:
    """``spread``: per policy and load point, the median and 95 % interval of the figures over
    the bootstrap the decision reads (hand-computed here from the kept table), in the JSON and
    read back by from_json; the decision's figures at its point are the same intervals."""
    import json

    import fcctl
    from fcctl.analyzers.replay import ReplayResult
    from fcctl.analyzers.replay.verdict import DEFAULT_BOOTSTRAP_DRAWS, Interval, figure_draws
    from fcctl.common.jsonio import dumps
    from tests.conftest import SAMPLES

    trace = str(SAMPLES / "claude_code_sample.jsonl.gz")
    r = fcctl.replay(trace, rates=[0.5, 2.0], rate=2.0, keep_tables=True, seed=3, jobs=1)
    point = r.rates[1]
    flat = point.policies["flat"]
    assert flat.spread is not None and flat.table is not None
    table = RequestTable.of(flat.table)
    sessions = max(
        int(RequestTable.of(p.table).session.max()) + 1
        for p in point.policies.values()
        if p.table is not None
    )
    draws = figure_draws(table, session_weights(sessions, DEFAULT_BOOTSTRAP_DRAWS, 3))
    assert draws.gpu_hit_share_served is not None
    assert flat.spread.gpu_hit_share_served == Interval.of(draws.gpu_hit_share_served)
    assert flat.spread.ttft_p99_s == Interval.of(draws.ttft_p99_s)
    s = flat.spread.gpu_hit_share_served
    assert s.low <= s.median <= s.high
    assert r.decision is not None and r.decision.operating_point == "given"
    for name, at in r.decision.at_point.items():
        mine = point.policies[name].spread
        assert mine is not None
        got, want = mine.ttft_mean_s, at.ttft_mean_s
        assert (got.median, got.low, got.high) == pytest.approx((want.median, want.low, want.high))
    doc = json.loads(dumps(r))
    assert list(doc["rates"][0]["policies"]["flat-fcfs"]["spread"]) == [
        "gpu_hit_share_served",
        "gpu_hit_share",
        "ttft_mean_s",
        "ttft_p99_s",
        "cancel_share",
    ]
    back = ReplayResult.from_json(doc)
    assert back.rates[1].policies["flat"].spread == flat.spread
