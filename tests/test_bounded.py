"""Bounded-memory analysis (issue #10 §2): exact partitioned passes, SHARDS, the memory plan."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from analyze_helpers import one_line_exit_2
from typer.testing import CliRunner

from fcctl.analyzers.reuse.analyze import analyze_trace
from fcctl.analyzers.reuse.bounded import (
    BASELINE_BYTES,
    BYTES_PER_BUCKET_ACCESS,
    BYTES_PER_REQUEST,
    MEASURED_RATES,
    BlockTotals,
    analyze_dataset,
    bucket_stream,
    error_bound,
    head_blocks,
    plan_memory,
)
from fcctl.analyzers.traces.dataset import Dataset, open_dataset
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.synth import write_synth
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import to_jsonable
from fcctl.layout.geometry import model_geometry

SAMPLES = Path(__file__).parent.parent / "samples"
GEOMETRY = model_geometry("llama-3.1-8b")


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bounded") / "mixed"
    write_synth(d, "mixed", 2500, 50, seed=11, partition_rows=400)
    return d


def _budget(ds: Dataset, passes: int) -> int:
    """A budget that the plan turns into ``passes`` bucket passes."""
    fixed = BASELINE_BYTES + ds.num_requests * BYTES_PER_REQUEST
    return fixed + -(-ds.block_accesses * BYTES_PER_BUCKET_ACCESS // passes)


EXACT_KEYS = ("once_only_block_share", "reuse_access_share", "request_sizes")


def _compare(exact, bounded, *, passes: int) -> None:
    a, b = to_jsonable(exact), to_jsonable(bounded)
    assert b["trace"]["sampled"] is True
    sampling = b["trace"]["sampling"]
    assert sampling["block_passes"] == passes
    assert b["trace"]["sample_rate"] == sampling["rate"]
    for key in EXACT_KEYS:
        assert a[key] == b[key], key
    for unit in ("requests", "seconds"):
        assert a["reuse_distance"][unit] == b["reuse_distance"][unit], unit
    for key in ("requests", "block_accesses", "distinct_blocks", "sessions", "duration_s"):
        assert a["trace"][key] == b["trace"][key], key
    if a["sessions"] is not None:
        assert a["sessions"] == b["sessions"]
    assert bounded.tables.requests.equals(exact.tables.requests)
    k = sampling["exact_below_blocks"]
    bound = sampling["error_bound"]
    for pa, pb in zip(a["memory_tier"], b["memory_tier"], strict=True):
        assert pb["sampled"] == (pb["capacity_blocks"] > k)
        if not pb["sampled"]:
            assert pa["lru_hit_share"] == pytest.approx(pb["lru_hit_share"], abs=1e-12)
        else:
            diff_pp = abs(pa["lru_hit_share"] - pb["lru_hit_share"]) * 100
            assert diff_pp <= max(bound["hit_share_max_abs_pp"], 0.5)


@pytest.mark.parametrize(("rate", "passes"), [(0.1, 1), (0.1, 3), (0.01, 4)])
def test_bounded_figures_equal_the_exact_ones(synth_dir: Path, rate: float, passes: int) -> None:
    ds = open_dataset(synth_dir)
    exact = analyze_trace(ds.load_trace(), geometry=GEOMETRY)
    bounded = analyze_dataset(
        ds, geometry=GEOMETRY, memory_budget_bytes=_budget(ds, passes), sample_rate=rate
    )
    assert not any(p.sampled for p in bounded.memory_tier)
    _compare(exact, bounded, passes=passes)
    assert any("bounded memory" in n for n in bounded.notes)


def test_capacities_past_the_exact_head_are_sampled_within_the_bound(synth_dir: Path) -> None:
    ds = open_dataset(synth_dir)
    # 64 TiB is 8 Mi blocks of 8 MiB, past the exact head's 4 Mi-block cap: a sampled point.
    caps = [16 << 30, 64 << 30, 64 << 40]
    exact = analyze_trace(ds.load_trace(), geometry=GEOMETRY, memory_capacities_bytes=caps)
    bounded = analyze_dataset(ds, geometry=GEOMETRY, sample_rate=0.1, memory_capacities_bytes=caps)
    assert [p.sampled for p in bounded.memory_tier] == [False, False, True]
    assert bounded.trace.sampling is not None
    _compare(exact, bounded, passes=bounded.trace.sampling.block_passes)


def test_bounded_on_a_trace_in_memory_without_sessions() -> None:
    trace = read_trace(SAMPLES / "mooncake_conversation_2k.jsonl")
    exact = analyze_trace(trace, geometry=GEOMETRY)
    ds = Dataset.from_trace(trace)
    bounded = analyze_dataset(ds, geometry=GEOMETRY, sample_rate=0.5)
    a, b = to_jsonable(exact), to_jsonable(bounded)
    for key in EXACT_KEYS:
        assert a[key] == b[key]
    assert a["reuse_distance"]["requests"] == b["reuse_distance"]["requests"]
    # Inferring sessions needs the whole stream: absent, and said so.
    assert b["sessions"] is None and a["sessions"] is not None
    assert any("no session ids" in n for n in bounded.notes)


def test_bucket_totals_do_not_depend_on_the_bucket_count(synth_dir: Path) -> None:
    ds = open_dataset(synth_dir)
    ts = ds.requests["timestamp_s"].to_numpy()
    results = []
    for buckets in (1, 2, 5):
        totals = BlockTotals(ds.num_requests, 0)
        kept = 0
        for b in range(buckets):
            ids, lens = bucket_stream(ds.iter_blocks(batch_accesses=50_000), buckets, b)
            assert lens.shape[0] == ds.num_requests
            kept += ids.shape[0]
            totals.add_bucket(ids, lens, ts, None)
        assert kept == ds.block_accesses
        results.append(totals)
    first = results[0]
    for other in results[1:]:
        assert other.distinct_blocks == first.distinct_blocks
        assert other.once_only_blocks == first.once_only_blocks
        assert np.array_equal(other.request_count, first.request_count)
        assert np.array_equal(other.reused_per_request, first.reused_per_request)
        assert np.array_equal(other.seconds_values, first.seconds_values)
        assert np.array_equal(other.seconds_counts, first.seconds_counts)


def test_plan_memory() -> None:
    fits = plan_memory(1000, 1_000_000, 8 << 30)
    assert fits.exact and fits.sample_rate is None
    # 1 B accesses in 8 GiB: sampled, the largest measured rate that fits, several passes.
    big = plan_memory(690_000, 1_000_000_000, 8 << 30)
    assert not big.exact and big.sample_rate in MEASURED_RATES and big.block_passes >= 2
    assert big.exact_below_blocks == head_blocks(big.sample_rate)
    deep = plan_memory(690_000, 1_000_000_000, 8 << 30, exact_capacity_blocks=131072)
    assert deep.exact_below_blocks == max(131072, head_blocks(deep.sample_rate))
    smaller = plan_memory(690_000, 1_000_000_000, 2 << 30)
    assert smaller.sample_rate is not None and smaller.sample_rate < big.sample_rate
    assert smaller.block_passes > big.block_passes
    assert plan_memory(10, 100, 8 << 30, sample_rate=1).exact
    with pytest.raises(FcctlInputError, match=r"memory_budget_bytes: .* too small"):
        plan_memory(690_000, 10**12, 1 << 30)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(FcctlInputError, match="memory_budget"):
            plan_memory(10, 10, bad)  # type: ignore[arg-type]
    for bad in (0, 1.5, float("nan"), -0.1):
        with pytest.raises(FcctlInputError, match="sample_rate"):
            plan_memory(10, 10, 8 << 30, sample_rate=bad)


def test_error_bound_is_the_measured_one() -> None:
    assert error_bound(1.0).hit_share_max_abs_pp == 0.0
    for rate in MEASURED_RATES:
        bound = error_bound(rate)
        assert bound.hit_share_mean_abs_pp is not None and f"rate {rate:g}" in bound.measured_on
    # Between measured rates: the bound of the next lower measured rate (conservative).
    assert error_bound(0.05) == error_bound(0.01)
    assert error_bound(0.0001).hit_share_mean_abs_pp is None


def _run(*args: str):
    return CliRunner().invoke(app, ["analyze", *args])


def test_cli_sampled_json_says_what_is_sampled(synth_dir: Path) -> None:
    result = _run(str(synth_dir), "--sample-rate", "0.1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    t = doc["trace"]
    assert t["sampled"] is True and t["sample_rate"] == pytest.approx(0.1)
    s = t["sampling"]
    # The exact head reaches the largest reported capacity (1 TiB = 131,072 blocks of 8 MiB).
    assert s["method"] == "shards-fixed-rate" and s["exact_below_blocks"] == 131072
    assert head_blocks(0.1) == 10240 and head_blocks(0.1, 131072) == 131072
    assert all(p["sampled"] is False for p in doc["memory_tier"])
    assert "reuse_distance.stack_blocks" in s["sampled_figures"]
    assert "reuse_distance.seconds" in s["exact_figures"]
    assert s["error_bound"]["hit_share_mean_abs_pp"] is not None
    assert t["dataset"] == {"mode": "partitioned", "files": 7, "traces": 1}
    human = _run(str(synth_dir), "--sample-rate", "0.1")
    assert human.exit_code == 0 and "SAMPLED" in human.stdout and "~ LRU stack" in human.stdout
    exact = json.loads(_run(str(synth_dir), "--sample-rate", "1", "--json").stdout)
    assert exact["trace"]["sampled"] is False and exact["trace"]["sampling"] is None


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--sample-rate", "0"), "--sample-rate"),
        (("--sample-rate", "nan"), "--sample-rate"),
        (("--memory-budget", "lots"), "--memory-budget"),
        (("--memory-budget", "1KiB"), "--memory-budget"),
        (("--engine", "spark"), "--engine"),
        (("--scheduler", "tcp://127.0.0.1:1"), "--scheduler"),
    ],
)
def test_cli_bad_budget_flags_exit_2(synth_dir: Path, args: tuple[str, ...], flag: str) -> None:
    assert flag in one_line_exit_2(_run(str(synth_dir), *args))


def test_cli_schedule_needs_the_exact_plan(tmp_path: Path) -> None:
    sample = str(SAMPLES / "claude_code_sample.jsonl.gz")
    line = one_line_exit_2(_run(sample, "--rate", "0.5", "--sample-rate", "0.1"))
    assert "--rate" in line and "whole trace in memory" in line
    assert _run(sample, "--rate", "0.5", "--json").exit_code == 0
