"""What fcctl.analyzers.replay offers a caller that runs many simulations on one trace (the
recommender): the workload built once without the hash lists, and a run that frees its cycles."""

from __future__ import annotations

import gc
from dataclasses import fields

import numpy as np
import polars as pl

from fcctl.analyzers.replay import (
    ReplayConfig,
    build_workload,
    simulate,
    simulation_workload,
    workers_of,
)
from fcctl.analyzers.traces.fingerprint import trace_fingerprint
from fcctl.common.jsonio import dumps
from tests.replay_helpers import TINY, random_session_trace, tiny_node


def test_simulation_workload_keeps_no_trace_table_and_simulates_the_same() -> None:
    trace = random_session_trace(3)
    hw = tiny_node()
    light = simulation_workload(trace, TINY, hw)
    full = build_workload(trace, TINY, workers_of(TINY, hw))
    assert "hash_ids" in trace.requests.columns  # the caller's trace is left as it was
    # The workload holds arrays and the trace's identity, none of its table.
    assert not any(isinstance(getattr(light, f.name), pl.DataFrame) for f in fields(light))
    assert (light.path, light.fingerprint) == (trace.path, trace_fingerprint(trace))
    assert light.workers == full.workers == 2
    assert np.array_equal(light.block, full.block) and light.num_blocks == full.num_blocks
    config = ReplayConfig(TINY, hw, policies=("flat",), rates=(1.0,))
    for policy in ("memory-only", "tiered", "flat"):
        got = simulate(light, config, policy, 1.0, release=True)
        want = simulate(full, config, policy, 1.0)
        assert dumps(got) == dumps(want), policy


def test_a_released_simulation_leaves_no_cycle_behind() -> None:
    trace = random_session_trace(4)
    hw = tiny_node()
    w = simulation_workload(trace, TINY, hw)
    config = ReplayConfig(TINY, hw, policies=("flat",), rates=(1.0,))
    gc.collect()
    gc.disable()  # only the run's own collection may free its cycles
    try:
        simulate(w, config, "flat", 1.0, release=True)
        assert gc.collect() == 0  # nothing left for the cyclic GC to find
    finally:
        gc.enable()
