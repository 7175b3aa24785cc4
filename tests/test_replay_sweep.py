"""Loads and sizes that find the answer (analyzers/replay/sweep.py): size points, the working
set against analyze's memory tier, the capacity estimate, and the automatic rate sweep."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.replay import ReplayConfig, replay_trace
from fcctl.analyzers.replay.sweep import (
    MAX_AUTO_POINTS,
    START_FRACTION,
    GiB,
    capacity_estimate,
    is_knee,
    size_points,
    working_set_bytes,
)
from fcctl.analyzers.replay.timemodel import prefill_s
from fcctl.analyzers.replay.workload import build_workload
from fcctl.analyzers.reuse.memory_tier import reference_lru_hit_share
from fcctl.cli import app
from tests.conftest import SAMPLES
from tests.replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node, trace_of


def test_size_points_are_every_combination_base_first() -> None:
    base = {"gpu_kv_bytes": 1, "host_memory_bytes": 10, "staging_bytes": 5}
    pts = size_points(base, {"host_memory_bytes": [30, 20, 10], "staging_bytes": [7]})
    assert pts[0] == base
    assert len(pts) == 3 * 2 and len({tuple(p.items()) for p in pts}) == 6
    assert [p["host_memory_bytes"] for p in pts[::2]] == [10, 20, 30]
    with pytest.raises(ValueError):
        size_points(base, {"ssd_bytes": [1]})


def test_working_set_matches_a_plain_lru() -> None:
    """The capacity reported for each share is the smallest whole-GiB LRU that reaches it."""
    trace = random_time_trace(4, requests=300)
    w = build_workload(trace, TINY, 1)
    ws = working_set_bytes(w, shares=(0.5, 0.9))
    stream = w.block.tolist()
    ideal = w.ideal_hit_share
    for share, cap in zip(ws.shares, ws.capacity_bytes, strict=True):
        assert cap is not None and cap % GiB == 0
        blocks = cap // w.block_bytes
        assert reference_lru_hit_share(stream, blocks) >= share * ideal - 1e-12
        # A whole GiB less (when that is still a capacity) does not reach the share, unless
        # the blocks per GiB exceed the trace's distinct blocks (tiny blocks: one GiB holds all).
        smaller = (cap - GiB) // w.block_bytes
        if cap > GiB and smaller < w.num_blocks:
            assert reference_lru_hit_share(stream, smaller) < share * ideal
    no_reuse = build_workload(trace_of([[1], [2], [3]]), TINY, 1)
    assert working_set_bytes(no_reuse).capacity_bytes == (None, None, None)


def test_capacity_estimate_by_hand() -> None:
    # Two requests: the second re-reads the first's 2 blocks (32 tokens) and adds 1 block.
    trace = trace_of([[1, 2], [1, 2, 3]])
    w = build_workload(trace, TINY, 2)
    tin = w.input_tokens
    work = prefill_s(int(tin[0]), 0, 1000.0) + prefill_s(int(tin[1]) - 32, 32, 1000.0)
    assert capacity_estimate(w, 1000.0) == pytest.approx(2 * 2 / work)


def test_auto_rates_double_from_light_load_and_say_why_they_stop() -> None:
    trace = random_time_trace(9, requests=150)
    hw = tiny_node(prefill_tokens_per_s=400.0)
    config = ReplayConfig(
        geometry=TINY, hardware=hw, auto_rates=True, rates=(), policies=("memory-only", "flat")
    )
    result = replay_trace(trace, config)
    rates = [p.rate for p in result.rates]
    w = build_workload(trace, TINY, hw.gpus)
    c = capacity_estimate(w, hw.prefill_tokens_per_s)
    assert rates[0] == pytest.approx(c * START_FRACTION)
    assert rates == sorted(rates)
    assert len(rates) <= MAX_AUTO_POINTS
    doubled = [r for r in rates if np.isclose(np.log2(r / rates[0]) % 1, 0)]
    assert len(doubled) >= 2
    note = next(n for n in result.notes if n.startswith("rates auto"))
    assert "doubling until" in note
    last = result.rates[-1]
    stopped_busy = any(p.utilisation.prefill_max >= 0.95 for p in last.policies.values())
    assert stopped_busy or "stopped growing" in note or "doublings" in note
    # Refined points sit between neighbouring doublings whose decisions differ or across which
    # a policy's TTFT or served share jumps (a knee: test_replay_knee.py).
    doubled_points = [p for p in result.rates if np.isclose(np.log2(p.rate / rates[0]) % 1, 0)]
    for low, high in itertools.pairwise(doubled_points):
        inside = [p for p in result.rates if low.rate < p.rate < high.rate]
        if inside:
            assert low.decision.best != high.decision.best or any(
                is_knee(low, high, name) for name in low.policies
            )


def test_operating_rate_first_and_sizes_swept() -> None:
    trace = random_session_trace(2, sessions=8, turns=4)
    hw = tiny_node(host=10)
    config = ReplayConfig(
        geometry=TINY,
        hardware=hw,
        rates=(1.0, 4.0),
        operating_rate=2.0,
        size_lists={"host_memory_bytes": (hw.host_memory_bytes * 4,)},
        policies=("memory-only", "tiered", "flat"),
    )
    result = replay_trace(trace, config)
    assert result.operating_point is result.rates[0] and result.rates[0].rate == 2.0
    hosts = [p.sizes["host_memory_bytes"] for p in result.rates]
    assert hosts == [hw.host_memory_bytes] * 3 + [4 * hw.host_memory_bytes] * 3
    assert [d["sizes"]["host_memory_bytes"] for d in result.divergence] == [
        hw.host_memory_bytes,
        4 * hw.host_memory_bytes,
    ]
    assert result.divergence_rate == result.divergence[0]["rate"]
    # The bigger host tier serves memory-only at least as well.
    small = result.rates[0].policies["memory-only"].gpu_hit_share
    big = result.rates[3].policies["memory-only"].gpu_hit_share
    assert big >= small


def test_cli_sizes_auto_and_errors() -> None:
    runner = CliRunner()
    moon = str(SAMPLES / "mooncake_conversation_2k.jsonl")
    r = runner.invoke(
        app,
        [
            "replay",
            moon,
            "--rates",
            "1",
            "--host-memory",
            "1TiB,auto",
            "--policies",
            "memory-only,flat",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    hosts = sorted({p["sizes"]["host_memory_bytes"] for p in doc["rates"]})
    assert 2**40 in hosts and len(hosts) >= 2
    assert any(n.startswith("host memory auto") for n in doc["notes"])
    bad = runner.invoke(app, ["replay", moon, "--rates", "auto,1"])
    assert bad.exit_code == 2 and bad.stderr.startswith("fcctl: error: --rates")
    bad = runner.invoke(app, ["replay", moon, "--slo-ttft-p99", "-1"])
    assert bad.exit_code == 2 and bad.stderr.startswith("fcctl: error: --slo-ttft-p99: ")
    bad = runner.invoke(app, ["replay", moon, "--staging", "1GiB,lots"])
    assert bad.exit_code == 2 and bad.stderr.startswith("fcctl: error: --staging")


def test_auto_rates_stop_at_the_ttft_slo() -> None:
    """With a p99 TTFT bound below what even light load gives, the sweep stops at its first
    point and says the SLO stopped it."""
    trace = random_time_trace(9, requests=150)
    hw = tiny_node(prefill_tokens_per_s=400.0)
    config = ReplayConfig(
        geometry=TINY,
        hardware=hw,
        auto_rates=True,
        rates=(),
        policies=("memory-only", "flat"),
        slo_ttft_p99_s=1e-9,
    )
    result = replay_trace(trace, config)
    assert len(result.rates) == 1
    note = next(n for n in result.notes if n.startswith("rates auto"))
    assert "SLO" in note and "p99 TTFT" in note
