"""The simulator's typed settings: :class:`RunSpec` (one simulation), :class:`LoadPlan` (the
sweep and its one generator of load points), the :class:`StoreFactory`'s reference flag."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fcctl.analyzers.replay import (
    LoadPlan,
    ReplayConfig,
    RunSpec,
    replay_trace,
    simulate,
    simulation_workload,
)
from fcctl.analyzers.replay.load import ThinkTime
from fcctl.analyzers.replay.reference import ReferenceStore
from fcctl.analyzers.replay.store import FastStore
from fcctl.analyzers.replay.sweep import MAX_DOUBLINGS
from fcctl.common.errors import FcctlInputError, InputError
from fcctl.common.jsonio import dumps, to_jsonable
from fcctl.layout.placement import PlacementRule
from tests.replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node

BAD_SPECS: list[tuple[str, Any]] = [
    ("router", "nearest"),
    ("cancel", "keep"),
    ("seed", -1),
    ("seed", True),
    ("think_time", "capped:5"),  # a string is parsed at the edge, never here
    ("placement", (256, 8192)),
    ("keep_tables", "yes"),
    ("hardware", "h200-8x"),
]


@pytest.mark.parametrize(("parameter", "value"), BAD_SPECS)
def test_a_bad_run_spec_names_its_parameter(parameter: str, value: Any) -> None:
    with pytest.raises(FcctlInputError) as bad:
        RunSpec(**{"geometry": TINY, "hardware": tiny_node(), parameter: value})
    assert bad.value.parameter == parameter
    assert str(bad.value).startswith(f"{parameter}: ") and repr(value) in str(bad.value)


BAD_PLANS: list[tuple[dict[str, Any], str]] = [
    ({"policies": ("flat", "lru")}, "policies"),
    ({"policies": ()}, "policies"),
    ({"concurrency": ()}, "concurrency"),
    ({"concurrency": (0,)}, "concurrency"),
    ({"concurrency": (2,), "operating_rate": 1.0}, "concurrency"),
    ({"concurrency": (2,), "auto_rates": True}, "concurrency"),
    ({"operating_rate": float("nan")}, "operating_rate"),
    ({"slo_ttft_p99_s": 0.0}, "slo_ttft_p99_s"),
    ({"size_lists": {"ssd_bytes": (1,)}}, "size_lists"),
    ({"size_lists": {"host_memory_bytes": (-1,)}}, "host_memory_bytes"),
    ({"decision_margin_pp": -1.0}, "decision_margin_pp"),
    ({"decision_ttft_margin": 10.0}, "decision_ttft_margin"),
]


@pytest.mark.parametrize(("kwargs", "parameter"), BAD_PLANS)
def test_a_bad_load_plan_names_its_parameter(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InputError) as bad:
        LoadPlan(**kwargs)
    assert bad.value.parameter == parameter
    assert str(bad.value).startswith(f"{parameter}: ")


def test_bad_rates_are_refused_by_the_one_rate_rule() -> None:
    for rates in ((1.0, -2.0), (), (float("inf"),)):
        with pytest.raises(FcctlInputError, match="rates: "):
            LoadPlan(rates=rates)
    LoadPlan(rates=(), auto_rates=True)  # the sweep finds its own rates


def test_a_load_plan_is_normalised_once() -> None:
    plan = LoadPlan(policies=("flat", "tiered", "flat"), rates=(4, 1, 4.0), operating_rate=2)
    assert plan.policies == ("flat", "tiered")
    assert plan.rates == (1.0, 4.0)
    assert plan.fixed_points(sessions=9) == [(2.0, None), (1.0, None), (4.0, None)]
    assert plan.axis == "rate" and not plan.sweeps_rates
    closed = LoadPlan(concurrency=(3, None))
    assert closed.axis == "concurrency"
    assert closed.fixed_points(sessions=9) == [(None, 3), (None, 9)]


def test_the_rounds_run_every_fixed_point_then_each_size_points_sweep() -> None:
    """The generator asks for every fixed point at every size point first, then the sweep's
    rounds, all size points together; it returns each size point's points in order."""
    from fcctl.analyzers.replay import RateResult
    from fcctl.analyzers.replay.decision import Decision

    plan = LoadPlan(policies=("flat",), auto_rates=True, operating_rate=3.0)
    rounds = plan.rounds(2, sessions=5, capacity=16.0)
    asked = [next(rounds)]
    assert asked[0] == [(0, 3.0, None), (1, 3.0, None)]
    w = simulation_workload(random_session_trace(2), TINY, tiny_node())
    template = simulate(w, RunSpec(TINY, tiny_node()), "flat", 1.0)

    def point(rate: float | None) -> RateResult:
        return RateResult(rate, {"flat": template}, Decision("none", None, None, None, ""))

    # The same figures at every rate: the achieved rate stops growing, which ends each sweep.
    try:
        while True:
            asked.append(rounds.send([point(r) for _, r, _ in asked[-1]]))
    except StopIteration as done:
        sweeps = done.value
    assert [k for k, _, _ in asked[1]] == [0, 1]  # both size points advance together
    assert len(asked) - 1 <= MAX_DOUBLINGS
    assert len(sweeps) == 2 and all(s.fixed[0].rate == 3.0 for s in sweeps)
    assert all(s.why is not None and len(s.swept) >= 1 for s in sweeps)


def test_replay_takes_a_spec_and_a_plan_as_it_takes_the_flat_config() -> None:
    trace = random_time_trace(5)
    hw = tiny_node()
    config = ReplayConfig(
        geometry=TINY,
        hardware=hw,
        policies=("tiered", "flat"),
        rates=(2.0, 8.0),
        placement=PlacementRule(200, 64),
        router="round-robin",
        cancel="credit",
        size_lists={"host_memory_bytes": (hw.host_memory_bytes * 2,)},
    )
    spec, plan = config.split()
    assert spec == RunSpec(
        TINY, hw, placement=PlacementRule(200, 64), router="round-robin", cancel="credit"
    )
    flat = replay_trace(trace, config)
    typed = replay_trace(trace, spec, plan)
    strip = {"provenance"}
    assert {k: v for k, v in to_jsonable(flat).items() if k not in strip} == {
        k: v for k, v in to_jsonable(typed).items() if k not in strip
    }
    assert len(typed.rates) == 4  # two rates at two host-memory sizes
    with pytest.raises(ValueError, match="LoadPlan"):
        replay_trace(trace, spec)


def test_think_time_on_one_clock_is_refused_naming_the_trace() -> None:
    trace = random_time_trace(1)
    spec = RunSpec(TINY, tiny_node(), think_time=ThinkTime("none"))
    with pytest.raises(FcctlInputError) as bad:
        replay_trace(trace, spec, LoadPlan(rates=(1.0,)))
    assert bad.value.parameter == "think_time" and trace.path in str(bad.value)


def test_reference_or_fast_is_the_stores_own_flag() -> None:
    assert ReferenceStore.reference and not FastStore.reference
    trace = random_session_trace(6)
    spec, plan = RunSpec(TINY, tiny_node()), LoadPlan(policies=("flat",), rates=(5.0,))
    fast = replay_trace(trace, spec, plan)
    ref = replay_trace(trace, spec, plan, store_factory=ReferenceStore)
    assert dumps(fast.rates) == dumps(ref.rates)

    class Slow(FastStore):
        """A store of our own, not the reference: it runs where the plan's simulations run."""

        calls = 0

        def gpu_insert(self, blk: Any, worker: int, cap: int | None = None) -> None:
            Slow.calls += 1
            super().gpu_insert(blk, worker, cap)

    mine = replay_trace(trace, spec, plan, store_factory=Slow)
    assert Slow.calls > 0 and dumps(mine.rates) == dumps(fast.rates)


def test_a_cell_of_the_recommender_is_the_shared_spec_with_its_own_rule() -> None:
    from fcctl.analyzers.recommend import RecommendConfig

    config = RecommendConfig(geometry=TINY, hardware=tiny_node(), seed=3)
    cell = dataclasses.replace(config.spec, placement=PlacementRule(10, 20))
    assert (cell.seed, cell.placement) == (3, PlacementRule(10, 20))
    assert cell.router == RunSpec(TINY, tiny_node()).router
