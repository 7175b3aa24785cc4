"""Host memory scope (``Hardware.host_scope``, docs/simulator.md §2.0): one pool per node
(Mooncake store) or one per worker (SGLang HiCache). Hand-computed cases on both stores and
through the simulation, capacities per pool, and the scope in the JSON and on the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analyze_helpers import one_line_exit_2
from replay_helpers import BLOCK_BYTES, TINY, random_session_trace, tiny_node, trace_of
from typer.testing import CliRunner

import fcctl
from fcctl.analyzers.replay import ReplayConfig, build_workload, simulate, with_values
from fcctl.analyzers.replay.reference import ReferenceStore
from fcctl.analyzers.replay.store import FastStore
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError
from tests.conftest import SAMPLES

STORES = {"fast": FastStore, "reference": ReferenceStore}
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


def _blocks(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.int32)


def _store(name: str, *, pools: int, host_blocks: int, ssd_blocks: int = 0) -> Any:
    return STORES[name](
        num_blocks=16,
        max_request_blocks=16,
        workers=2,
        gpu_blocks=0,
        host_blocks=host_blocks,
        host_pools=pools,
        ssd_blocks=ssd_blocks,
        blocks_per_bucket=1,
        total_accesses=64,
    )


@pytest.mark.parametrize("name", list(STORES))
def test_a_worker_finds_host_blocks_only_in_its_own_pool(name: str) -> None:
    node = _store(name, pools=1, host_blocks=8)
    node.host_insert(_blocks(1, 2, 3), False, 0)
    assert node.lookup_lru(_blocks(1, 2, 3, 4), 1, False) == (3, 0, 3, 0)  # the node's pool
    per_worker = _store(name, pools=2, host_blocks=4)
    per_worker.host_insert(_blocks(1, 2, 3), False, 0)
    assert per_worker.lookup_lru(_blocks(1, 2, 3, 4), 1, False) == (0, 0, 0, 0)
    assert per_worker.lookup_lru(_blocks(1, 2, 3, 4), 0, False) == (3, 0, 3, 0)
    assert (per_worker.host_used_blocks_of(0), per_worker.host_used_blocks_of(1)) == (3, 0)


@pytest.mark.parametrize("name", list(STORES))
def test_duplicates_count_in_each_pool_and_each_pool_evicts_alone(name: str) -> None:
    store = _store(name, pools=2, host_blocks=3, ssd_blocks=100)
    store.host_insert(_blocks(1, 2, 3), True, 0)
    store.host_insert(_blocks(1, 2, 3), True, 1)
    # The same three blocks twice: 6 blocks of host memory, 3 in each worker's share.
    assert (store.host_used_blocks_of(0), store.host_used_blocks_of(1)) == (3, 3)
    assert store.host_used_blocks == 6 and store.h_peak == 6
    # Worker 1's pool is full: its new block evicts its tail block 3 (tail before head) to
    # the node's SSD; worker 0's copy of 3 stays.
    store.host_insert(_blocks(4), True, 1)
    assert store.ssd_written_blocks == 1 and store.ssd_used_blocks == 1
    assert store.lookup_lru(_blocks(1, 2, 3), 0, True) == (3, 0, 3, 0)
    assert store.lookup_lru(_blocks(1, 2, 3), 1, True) == (3, 0, 2, 1)
    # Worker 0 evicts its copy of 3 later: already on SSD, it is not written again.
    store.host_insert(_blocks(5, 6, 7), True, 0)
    assert store.ssd_written_blocks == 3  # 1, 2 now; 3 was there
    assert (store.host_used_blocks_of(0), store.host_used_blocks_of(1)) == (3, 3)
    assert store.h_peak == 6


# One session, four turns, each prompt the previous one plus new blocks; no GPU cache, so every
# hit is a host (or SSD) hit. Round-robin sends the turns to workers 0, 1, 0, 1.
FOUR_TURNS = trace_of(
    [[1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]],
    sessions=["s"] * 4,
    timestamps=[0.0, 1.0, 2.0, 3.0],
)


def _run(policy: str, scope: str, host: int) -> Any:
    hw = tiny_node(gpu_kv=0, host=host, host_scope=scope)
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True, router="round-robin")
    return simulate(build_workload(FOUR_TURNS, TINY, hw.gpus), config, policy, 1.0)


def test_memory_only_node_scope_hits_where_worker_scope_misses() -> None:
    # Node: every turn finds its previous prompt in the one pool. Worker (5 blocks each): turn 2
    # on worker 1 finds nothing; turn 3 on worker 0 finds turn 1's blocks 1-3 in its pool, not
    # turn 2's 4-5 (they are in worker 1's); turn 3 writes 6 blocks into a 5-block pool and
    # evicts its tail (6), so turn 4 on worker 1 finds 1-5 (its own copies) and misses 6.
    node = _run("memory-only", "node", host=10)
    worker = _run("memory-only", "worker", host=10)
    assert node.table["worker"].to_list() == worker.table["worker"].to_list() == [0, 1, 0, 1]
    assert node.table["host_blocks"].to_list() == [0, 3, 5, 6]
    assert worker.table["host_blocks"].to_list() == [0, 0, 3, 5]
    assert node.table["delivered_blocks"].to_list() == [0, 3, 5, 6]
    assert worker.table["delivered_blocks"].to_list() == [0, 0, 3, 5]
    # Blocks 1-5 sit in both workers' pools: 10 blocks, both shares full; the node holds 7.
    assert worker.peak_host_memory_bytes == 10 * BLOCK_BYTES
    assert node.peak_host_memory_bytes == 7 * BLOCK_BYTES


def test_tiered_worker_pools_evict_to_the_one_node_ssd() -> None:
    # As memory-only, but block 6, evicted from worker 0's pool, went to the node's SSD:
    # turn 4 on worker 1 reads it from there. Worker 1's pool then refuses 6 (on SSD, no
    # re-admission) and evicts 7, its tail: two blocks written in all.
    worker = _run("tiered", "worker", host=10)
    t = worker.table
    assert t["host_blocks"].to_list() == [0, 0, 3, 5]
    assert t["ssd_blocks"].to_list() == [0, 0, 0, 1]
    assert t["delivered_blocks"].to_list() == [0, 0, 3, 6]
    assert worker.ssd_write_bytes == 2 * BLOCK_BYTES
    node = _run("tiered", "node", host=10)
    assert node.table["delivered_blocks"].to_list() == [0, 3, 5, 6]
    assert node.ssd_write_bytes == 0


def test_flat_memory_homes_are_per_worker_pool() -> None:
    # Flat: turn 1's blocks go to SSD (first turn), later turns' new blocks to memory (short
    # replies). Node: turn 3 finds 1-3 on SSD and turn 2's 4-5 in memory. Worker: 4-5 are in
    # worker 1's pool, so turn 3 on worker 0 stops at 4, and writes 4-6 into its own pool.
    node = _run("flat", "node", host=40)
    worker = _run("flat", "worker", host=40)
    assert node.table["ssd_blocks"].to_list() == worker.table["ssd_blocks"].to_list()
    assert node.table["host_blocks"].to_list() == [0, 0, 2, 3]
    assert worker.table["host_blocks"].to_list() == [0, 0, 0, 2]
    assert node.table["delivered_blocks"].to_list() == [0, 3, 5, 6]
    assert worker.table["delivered_blocks"].to_list() == [0, 3, 3, 5]
    # Worker: 4-5 in worker 1's pool, 4-6 in worker 0's, 6-7 in worker 1's too: 7 blocks.
    assert node.peak_host_memory_bytes == 4 * BLOCK_BYTES
    assert worker.peak_host_memory_bytes == 7 * BLOCK_BYTES


class _CheckedStore(FastStore):
    """A FastStore that checks every host pool against its share after each write."""

    most = 0

    def host_insert(self, blk: np.ndarray, tiered: bool, worker: int = 0) -> None:
        super().host_insert(blk, tiered, worker)
        self._check()

    def assign(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None:
        super().assign(blocks, segment, on_ssd, pool=pool)
        self._check()

    def _check(self) -> None:
        for pool in range(self.host_pools):
            held = max(self.host_used_blocks_of(pool), int(np.count_nonzero(self.m_seg[pool] >= 0)))
            assert held <= self.host_blocks
            _CheckedStore.most = max(_CheckedStore.most, held)


@pytest.mark.parametrize("policy", ["memory-only", "tiered", "flat"])
def test_no_worker_pool_exceeds_its_share(policy: str) -> None:
    hw = tiny_node(gpu_kv=4, host=16, host_scope="worker")  # 8 blocks a worker
    config = ReplayConfig(geometry=TINY, hardware=hw, keep_tables=True, router="round-robin")
    _CheckedStore.most = 0
    for seed in range(3):
        workload = build_workload(random_session_trace(seed, sessions=8), TINY, hw.gpus)
        result = simulate(workload, config, policy, 20.0, store_factory=_CheckedStore)
        assert result.peak_host_memory_bytes <= hw.host_memory_bytes
    assert _CheckedStore.most == 8  # the pools did fill up to their share


def test_the_scope_is_checked_and_recorded(tmp_path: Path) -> None:
    hw = fcctl.hardware(host_scope="worker")
    assert hw.host_scope == "worker" and hw.sources["host_scope"] == "host_scope"
    assert fcctl.hardware().host_scope == "node"
    with pytest.raises(
        FcctlInputError,
        match=r"^host_scope: field 'host_scope': must be one of "
        r"node, worker; got 'rack'$",
    ):
        fcctl.hardware(host_scope="rack")
    toml = tmp_path / "hw.toml"
    toml.write_text('host_scope = "worker"\n')
    assert fcctl.hardware(toml).sources["host_scope"] == str(toml)
    # A worker scope on one worker is the node scope.
    one = with_values(tiny_node(gpus=1), {"host_scope": "worker"}, "test")
    config = ReplayConfig(geometry=TINY, hardware=one, keep_tables=True)
    same = ReplayConfig(geometry=TINY, hardware=tiny_node(gpus=1), keep_tables=True)
    workload = build_workload(random_session_trace(1), TINY, 1)
    a = simulate(workload, config, "tiered", 10.0)
    b = simulate(workload, same, "tiered", 10.0)
    assert a.table is not None and b.table is not None and a.table.equals(b.table)


def test_the_json_reports_the_scope() -> None:
    args = [
        CLAUDE,
        "--gpus",
        "2",
        "--gpu-kv",
        "8GiB",
        "--host-memory",
        "16GiB",
        "--ssd",
        "64GiB",
        "--rates",
        "1",
        "--json",
    ]
    runner = CliRunner()
    worker = runner.invoke(app, ["replay", *args, "--host-scope", "worker"])
    assert worker.exit_code == 0, worker.output
    doc = json.loads(worker.stdout)
    assert doc["hardware"]["host_scope"] == {"value": "worker", "source": "--host-scope"}
    node = json.loads(runner.invoke(app, ["replay", *args]).stdout)
    assert node["hardware"]["host_scope"]["value"] == "node"
    assert "Mooncake" in node["hardware"]["host_scope"]["source"]
    # Split pools hold less reuse: memory-only loses host hits (worker 8 GiB each).
    hits = [d["rates"][0]["policies"]["memory-only"]["gpu_hit_share"] for d in (node, doc)]
    assert hits[1] < hits[0]
    flags = ["--short-reply", "128", "--agent-context", "4096", "--jobs", "1"]
    rec = runner.invoke(app, ["recommend-thresholds", *args, *flags, "--host-scope", "worker"])
    assert rec.exit_code == 0, rec.output
    assert json.loads(rec.stdout)["hardware"]["host_scope"]["value"] == "worker"


@pytest.mark.parametrize("command", ["replay", "recommend-thresholds", "plan"])
def test_a_bad_scope_is_one_line(tmp_path: Path, command: str) -> None:
    args = [command, CLAUDE, "--host-scope", "cluster"]
    if command == "plan":
        args += ["-o", str(tmp_path / "plan")]
    err = one_line_exit_2(CliRunner().invoke(app, args))
    assert err == (
        "fcctl: error: --host-scope: field 'host_scope': must be one of node, worker; got 'cluster'"
    )
    assert not (tmp_path / "plan").exists()
