"""Where the simulations run (analyzers/replay/parallel.py, issue #19): in this process, in
worker processes (``--jobs``) or on Dask (``--engine dask``), the figures are the same.

The Dask tests share one module-wide ``distributed.LocalCluster`` (2 single-threaded worker
processes on loopback) and skip without ``pip install 'fcctl[dask]'``; the traces are small
samples, so every figure compared is a relation (dask == local), never a number.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import fcctl
from fcctl.analyzers.replay import Execution, SimTask, default_jobs, open_runner, worker_bytes
from fcctl.analyzers.replay.parallel import PARALLEL_MIN_ACCESSES
from fcctl.analyzers.replay.sweep import auto_rate_steps, auto_rates
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.jsonio import to_jsonable

SAMPLES = Path(__file__).parent.parent / "samples"
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"
MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
GRID = {"short_reply_grid": "256,1024", "agent_context_grid": "8192,65536"}


def _figures(result: Any) -> dict[str, Any]:
    """The JSON document without what says where and when it ran."""
    doc = to_jsonable(result)
    doc.pop("provenance")
    return doc


@pytest.fixture(scope="module")
def claude() -> Any:
    return fcctl.read_trace(CLAUDE)


@pytest.fixture(scope="module")
def mooncake() -> Any:
    return fcctl.read_trace(MOONCAKE)


# --- worker processes ----------------------------------------------------------------------------


def test_replay_jobs_2_equals_jobs_1(mooncake: Any) -> None:
    """Load points and size points in two processes: the same document as in this one."""
    kwargs: dict[str, Any] = {
        "rates": "1,4",
        "rate": 2.0,
        "host_memory_sweep": ["64GiB"],
        "policies": "memory-only,flat",
    }
    one = fcctl.replay(mooncake, jobs=1, **kwargs)
    two = fcctl.replay(mooncake, jobs=2, **kwargs)
    assert _figures(one) == _figures(two)
    assert to_jsonable(two)["provenance"]["engine"] == {"name": "local", "jobs": 2}


def test_recommend_jobs_2_equals_jobs_1(claude: Any) -> None:
    one = fcctl.recommend_thresholds(claude, rates=[1.0], jobs=1, **GRID)
    two = fcctl.recommend_thresholds(claude, rates=[1.0], jobs=2, **GRID)
    assert _figures(one) == _figures(two)
    assert (one.facts.jobs, two.facts.jobs) == (1, 2)


def test_auto_sweep_in_rounds_is_the_sweep_one_point_at_a_time(mooncake: Any) -> None:
    """``--rates auto`` batched by rounds (each doubling, then each round of the knees'
    bisection and the refinements, all knees together) gives the points of the one-at-a-time
    sweep, each simulated once."""
    from fcctl.analyzers.replay import (
        RateResult,
        ReplayConfig,
        decision_of,
        load_hardware,
        simulate,
        simulation_workload,
    )

    geometry, node = fcctl.geometry(), load_hardware(None)
    w = simulation_workload(mooncake, geometry, node)
    config = ReplayConfig(geometry=geometry, hardware=node, policies=("memory-only", "flat"))

    def point(rate: float) -> RateResult:
        runs = {p: simulate(w, config, p, rate) for p in config.policies}
        return RateResult(rate, runs, decision_of(runs))

    one, why_one = auto_rates(point, 4.0)
    steps = auto_rate_steps(4.0)
    rounds = [next(steps)]
    try:
        while True:
            rounds.append(steps.send([point(r) for r in rounds[-1]]))
    except StopIteration as done:
        batched, why_batched = done.value
    assert [p.rate for p in batched] == [p.rate for p in one] and why_batched == why_one
    assert [p.decision for p in batched] == [p.decision for p in one]
    simulated = [r for batch in rounds for r in batch]
    assert sorted(simulated) == sorted(p.rate for p in batched)


def test_default_jobs_use_the_cpus_within_the_memory_budget(claude: Any) -> None:
    from fcctl.analyzers.replay import load_hardware, simulation_workload

    w = simulation_workload(claude, fcctl.geometry(), load_hardware(None))
    assert w.block_accesses < PARALLEL_MIN_ACCESSES
    assert default_jobs(w) == 1  # a small workload runs here
    big = _Sized(w, PARALLEL_MIN_ACCESSES * 50)
    cpus = len(os.sched_getaffinity(0))
    assert default_jobs(big, 1 << 50) == cpus  # memory to spare: every CPU
    assert default_jobs(big, worker_bytes(big) * 2 - 1) == min(cpus, 1)  # room for one worker
    assert default_jobs(big, 1) == 1  # never fewer than one


class _Sized:
    """A workload's size facts, scaled (for the memory rule, which reads only these)."""

    def __init__(self, w: Any, accesses: int) -> None:
        self.block_accesses = accesses
        self.requests = w.requests


def test_bad_engine_and_jobs_are_refused_by_name(claude: Any) -> None:
    with pytest.raises(FcctlInputError, match=r"^engine: must be one of local, dask"):
        fcctl.replay(claude, rates="1", engine="spark")
    with pytest.raises(FcctlInputError, match=r"^jobs: must be an integer >= 1; got 0"):
        fcctl.replay(claude, rates="1", jobs=0)
    with pytest.raises(FcctlInputError, match=r"^scheduler: names a Dask scheduler"):
        fcctl.recommend_thresholds(claude, rates=[1.0], scheduler="tcp://127.0.0.1:1", **GRID)


# --- Dask ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.ERROR,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as cluster:
        yield str(cluster.scheduler_address)


def test_recommend_on_dask_equals_local(claude: Any, scheduler: str) -> None:
    local = fcctl.recommend_thresholds(claude, rates=[1.0], jobs=1, **GRID)
    dask = fcctl.recommend_thresholds(
        claude, rates=[1.0], engine="dask", scheduler=scheduler, **GRID
    )
    assert _figures(dask) == _figures(local)
    engine = to_jsonable(dask)["provenance"]["engine"]
    assert engine["name"] == "dask" and engine["workers"] == 2 and dask.facts.jobs == 2


def test_replay_auto_rates_and_sizes_on_dask_equal_local(mooncake: Any, scheduler: str) -> None:
    """The adaptive sweep (rounds sequential, each round's points and policies as tasks) and a
    size sweep, on the cluster and here."""
    kwargs: dict[str, Any] = {
        "rate": 2.0,
        "host_memory_sweep": ["64GiB"],
        "policies": "memory-only,flat",
    }
    local = fcctl.replay(mooncake, jobs=1, **kwargs)
    dask = fcctl.replay(mooncake, engine="dask", scheduler=scheduler, **kwargs)
    assert _figures(dask) == _figures(local)
    assert len(local.rates) > 4  # several rounds ran


def test_replicas_on_dask_equal_local(claude: Any, scheduler: str) -> None:
    """Plan's replay step: the sessions sweep, then replicas 1 and 2 at the points the decision
    reads, each a batch of tasks on the cluster; the same figures and decision as here."""
    kwargs: dict[str, Any] = {"concurrency": [1, 2, 5], "replicas": 3, "seed": 4}
    local = fcctl.replay(claude, jobs=1, **kwargs)
    dask = fcctl.replay(claude, engine="dask", scheduler=scheduler, **kwargs)
    assert _figures(dask) == _figures(local)
    assert dask.decision == local.decision and dask.decision is not None
    assert dask.decision.replicas == 3


def test_cli_recommend_on_dask_equals_local(scheduler: str) -> None:
    args = [
        "recommend-thresholds",
        str(CLAUDE),
        "--rates",
        "1",
        "--short-reply",
        "256,1024",
        "--agent-context",
        "8192",
        "--json",
    ]
    runner = CliRunner()
    local = runner.invoke(app, [*args, "--jobs", "1"])
    dask = runner.invoke(app, [*args, "--engine", "dask", "--scheduler", scheduler])
    assert local.exit_code == 0 and dask.exit_code == 0, dask.output
    import json

    one, two = json.loads(local.stdout), json.loads(dask.stdout)
    assert two["provenance"]["engine"]["scheduler"] == scheduler
    one.pop("provenance"), two.pop("provenance")
    assert one == two


def _die(workload: Any, task: SimTask, step: Any) -> Any:
    """A task that kills the worker process running it."""
    os._exit(1)


def test_a_worker_that_keeps_dying_is_one_line_exit_1(claude: Any) -> None:
    """Past Dask's retries (none here) a dead worker is a RunFailed naming the stage."""
    pytest.importorskip("distributed")
    import cloudpickle
    import dask

    from fcctl.analyzers.replay import RunSpec, load_hardware, simulation_workload

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _die runs on the workers
    try:
        w = simulation_workload(claude, fcctl.geometry(), load_hardware(None))
        spec = RunSpec(geometry=fcctl.geometry(), hardware=load_hardware(None))
        with (
            dask.config.set({"distributed.scheduler.allowed-failures": 0}),
            pytest.raises(RunFailed) as failed,
            open_runner(w, _die, Execution("dask", None, None, 2 << 30)) as runner,
        ):
            runner.run([SimTask(spec, "flat", 1.0)], lambda i, r: None)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    message = str(failed.value)
    assert "\n" not in message and message.startswith("a Dask worker died during the simulations")


def test_dask_refuses_jobs_and_a_scheduler_it_cannot_reach(claude: Any) -> None:
    pytest.importorskip("distributed")
    with pytest.raises(FcctlInputError, match=r"^jobs: local worker processes"):
        fcctl.recommend_thresholds(claude, rates=[1.0], engine="dask", jobs=2, **GRID)
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(CLAUDE),
            "--rates",
            "1",
            "--engine",
            "dask",
            "--scheduler",
            "tcp://127.0.0.1:9",
        ],
    )
    assert result.exit_code == 2
    assert "--scheduler: cannot reach a Dask scheduler" in result.output


def test_plan_refuses_a_bad_engine_before_any_step(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["plan", str(CLAUDE), "-o", str(tmp_path / "plan"), "--engine", "spark"]
    )
    assert result.exit_code == 2
    assert "--engine: must be one of local, dask; got 'spark'" in result.output
    assert not (tmp_path / "plan").exists()


def test_workers_share_the_workload_through_files_without_a_name(
    mooncake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workload's large arrays go to the workers as one copy in shared files (not pickled
    through pipes, nor with the trace's hash lists), which have no name in /dev/shm at any
    time: nothing a killed run could leave there."""
    import glob
    import tempfile

    from fcctl.analyzers.replay import load_hardware, simulation_workload
    from fcctl.analyzers.replay.parallel import SHARED_ARRAY_BYTES, _SharedWorkload
    from fcctl.layout.geometry import model_geometry

    geo = model_geometry("llama-3.1-8b")
    w = simulation_workload(mooncake, geo, load_hardware(None))
    assert not any(isinstance(getattr(w, f.name), pl.DataFrame) for f in fields(w))
    assert w.block.nbytes < SHARED_ARRAY_BYTES  # a small trace: every array pickled
    none = _SharedWorkload(w)
    assert none.fds == {}
    where = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    before = set(glob.glob(os.path.join(where, "fcctl-workload-*")))
    shared = _SharedWorkload(w, min_bytes=w.offsets.nbytes)
    try:
        assert {"block", "offsets"} <= set(shared.fds)
        assert set(glob.glob(os.path.join(where, "fcctl-workload-*"))) == before  # no names
        for fd in shared.fds.values():
            assert os.fstat(fd).st_nlink == 0  # a file without a name
        assert shared.rest.block.shape[0] == 0  # the big arrays are not in what is pickled
        back = shared.load()
    finally:
        shared.close()
    # Mapped before the descriptors closed, the arrays are still there.
    assert (back.block == w.block).all() and (back.offsets == w.offsets).all()
    # Through a replay with two workers: the same figures, every array through the files.
    monkeypatch.setattr("fcctl.analyzers.replay.parallel.SHARED_ARRAY_BYTES", 1)
    shared_one = fcctl.replay(mooncake, rates="2", policies="memory-only,flat", jobs=1)
    shared_two = fcctl.replay(mooncake, rates="2", policies="memory-only,flat", jobs=2)
    assert _figures(shared_one) == _figures(shared_two)
    assert set(glob.glob(os.path.join(where, "fcctl-workload-*"))) == before


def test_workers_fork_from_a_small_server_started_before_the_trace() -> None:
    """Workers do not fork from the process holding the trace (each fork would copy its page
    tables): they come from a fork server this process starts, with numpy and numba imported
    once there and polars (whose import starts threads) not."""
    import multiprocessing

    from fcctl.analyzers.replay.parallel import start_worker_server, worker_context

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform: workers are spawned")
    start_worker_server(Execution("local", 1))  # jobs=1: no server needed, none asked for
    start_worker_server(Execution("local", 2))
    start_worker_server()  # a second start is a no-op
    ctx = worker_context()
    assert ctx.get_start_method() == "forkserver"
    import concurrent.futures

    # Builtins only (a function of this module would import fcctl, and polars, in the worker).
    preloaded = "sorted(__import__('sys').modules.keys() & {'numba', 'polars'})"
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        ppids = {pool.submit(os.getppid).result() for _ in range(4)}
        modules = pool.submit(eval, preloaded).result()
    assert len(ppids) == 1 and os.getpid() not in ppids  # one server, not this process
    assert modules == ["numba"]
