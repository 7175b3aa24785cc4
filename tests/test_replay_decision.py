"""The per-load-point decision (analyzers/replay/decision.py): the rule as documented, on exact
cases, and its properties on random figures."""

from __future__ import annotations

import random

import pytest

from fcctl.analyzers.replay.decision import (
    CANDIDATES,
    NONE,
    Decision,
    PolicyFigures,
    decide,
    divergence_rate,
    leads,
)
from fcctl.common.errors import InputError


def F(h: float, t: float, b: int = 0, sat: bool = False) -> PolicyFigures:
    return PolicyFigures(gpu_hit_share=h, ttft_mean_s=t, ssd_read_bytes=b, saturated=sat)


def test_flat_wins_on_hit_share_and_ttft():
    d = decide(
        {"memory-only": F(0.54, 9.0), "tiered": F(0.806, 31.6, 400), "flat": F(0.958, 1.9, 200)}
    )
    assert d.best == "flat"
    assert d.margin_pp == pytest.approx(15.2)
    assert d.ttft_ratio == pytest.approx(31.6 / 1.9)
    assert d.ssd_read_ratio == pytest.approx(0.5)
    assert "flat leads memory-only, tiered" in d.why and "15.2 pp" in d.why


def test_tie_within_margins_is_none():
    d = decide({"memory-only": F(0.800, 1.00), "tiered": F(0.805, 1.05), "flat": F(0.803, 0.97)})
    assert d.best == NONE
    assert "no layout leads" in d.why and "1 pp" in d.why and "10 %" in d.why
    # first = highest hit share (tiered), runner-up = flat
    assert d.margin_pp == pytest.approx(0.2)
    assert d.ttft_ratio == pytest.approx(0.97 / 1.05)


def test_trade_off_is_none_and_says_so():
    d = decide({"tiered": F(0.90, 5.0), "flat": F(0.80, 1.0)})
    assert d.best == NONE
    assert d.why.startswith("a trade-off: tiered has the higher GPU hit share, flat the lower")


def test_ttft_lead_alone_decides():
    d = decide({"tiered": F(0.900, 3.0), "flat": F(0.905, 1.0)})
    assert d.best == "flat"
    assert "3.00x lower mean TTFT than tiered" in d.why


def test_margins_are_parameters():
    figs = {"tiered": F(0.90, 1.0), "flat": F(0.93, 1.0)}
    assert decide(figs).best == "flat"
    assert decide(figs, margin_pp=5.0).best == NONE
    with pytest.raises(InputError) as e:
        decide(figs, margin_pp=-1.0)
    assert e.value.parameter == "decision_margin_pp"
    with pytest.raises(InputError) as e:
        decide(figs, ttft_margin=float("nan"))
    assert e.value.parameter == "decision_ttft_margin"


def test_flat_fcfs_is_not_a_candidate_and_one_policy_decides_nothing():
    d = decide({"flat-fcfs": F(1.0, 0.1), "tiered": F(0.5, 9.0)})
    assert d.best == NONE and "fewer than two" in d.why
    d = decide({"flat-fcfs": F(1.0, 0.1), "tiered": F(0.5, 9.0), "flat": F(0.4, 9.5)})
    assert d.best == "tiered"


def test_saturation_is_named():
    d = decide({"tiered": F(0.7, 60.0, sat=True), "flat": F(0.9, 2.0)})
    assert d.best == "flat" and d.why.endswith("saturated (cannot reach the offered load): tiered")


def test_ssd_ratio_null_when_runner_up_reads_nothing():
    d = decide({"memory-only": F(0.5, 5.0, 0), "flat": F(0.9, 1.0, 10)})
    assert d.ssd_read_ratio is None


def test_properties_on_random_figures():
    rng = random.Random(7)
    for _ in range(3000):
        names = rng.sample(CANDIDATES, rng.randint(2, 3))
        figs = {
            n: F(rng.choice([rng.random(), 0.5]), rng.choice([rng.uniform(0.01, 10), 1.0]))
            for n in names
        }
        m, e = rng.choice([0.0, 1.0, 3.0]), rng.choice([0.0, 0.1, 0.5])
        d = decide(figs, margin_pp=m, ttft_margin=e)
        # leads is antisymmetric
        for a in names:
            for b in names:
                if a != b:
                    assert not (leads(figs[a], figs[b], m, e) and leads(figs[b], figs[a], m, e))
        if d.best != NONE:
            assert all(leads(figs[d.best], figs[b], m, e) for b in names if b != d.best)
        else:
            assert not any(
                all(leads(figs[a], figs[b], m, e) for b in names if b != a) for a in names
            )


def test_divergence_rate():
    n = Decision(NONE, 0.0, 1.0, None, "")
    f = Decision("flat", 5.0, 2.0, None, "")
    assert divergence_rate([(0.5, n), (1.0, n), (4.0, f), (2.0, f)]) == 2.0
    assert divergence_rate([(0.5, n)]) is None
    assert divergence_rate([]) is None
