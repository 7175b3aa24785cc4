"""The Dask engine (issue #10 §3) on a real local cluster, against the single-node results.

A module-wide ``distributed.LocalCluster`` (2 single-threaded worker processes on loopback)
serves every test that passes ``--scheduler``; the datasets are real Parquet written by
``write_synth`` and ``write_partitioned``. Skipped without ``pip install 'fcctl[dask]'``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")
pytest.importorskip("dask.dataframe")

import psutil
from analyze_helpers import one_line_exit_2
from distributed import LocalCluster
from typer.testing import CliRunner

from fcctl.analyzers.reuse.analyze import AnalysisResult, NoteCode, analyze_trace
from fcctl.analyzers.reuse.bounded import (
    DASK_INSTALL_HINT,
    MEASURED_ERROR_NO_HEAD,
    analyze_dataset,
    check_engine,
)
from fcctl.analyzers.reuse.dask import room as dask_room
from fcctl.analyzers.reuse.dask_engine import (
    BYTES_PER_EXPLODED_ACCESS,
    BYTES_PER_SHUFFLED_ACCESS,
    BYTES_PER_WORKER_REQUEST,
    MAX_PIECE_ACCESSES,
    WorkerRoom,
    analyze_dask,
    plan_pieces,
    plan_shuffle,
)
from fcctl.analyzers.traces.canonical import write_canonical
from fcctl.analyzers.traces.dataset import open_dataset
from fcctl.analyzers.traces.partitioned import write_partitioned
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.synth import write_synth
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import to_jsonable
from fcctl.common.progress import Progress
from fcctl.layout.geometry import model_geometry

SAMPLES = Path(__file__).parent.parent / "samples"
GEOMETRY = model_geometry("llama-3.1-8b")
# The figures that partition by block or by request: equal to the single-node ones, exactly.
PARTITIONED_KEYS = ("once_only_block_share", "reuse_access_share", "sessions", "request_sizes")
TRACE_KEYS = ("requests", "sessions", "block_accesses", "distinct_blocks", "duration_s", "schedule")


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
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


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dask")
    write_synth(root / "mixed", "mixed", 2000, 50, seed=7, partition_rows=400)
    write_synth(root / "agent", "agent", 600, 8, seed=5, partition_rows=150)
    claude = read_trace(SAMPLES / "claude_code_sample.jsonl.gz")
    write_partitioned(claude, root / "claude", by="session-hash", partitions=4)
    write_canonical(claude, root / "claude.parquet")
    mooncake = read_trace(SAMPLES / "mooncake_conversation_2k.jsonl")
    write_partitioned(mooncake, root / "mooncake", by="day", max_part_rows=500)
    return {
        "mixed": root / "mixed",
        "agent": root / "agent",
        "claude": root / "claude",
        "claude.parquet": root / "claude.parquet",
        "mooncake": root / "mooncake",
    }


def _doc(result: AnalysisResult) -> dict[str, Any]:
    return to_jsonable(result)


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


def _assert_partitioned_keys_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The JSON figures that partition by block or request, and the trace's counts, equal."""
    for key in PARTITIONED_KEYS:
        assert a[key] == b[key], key
    for unit in ("requests", "seconds"):
        assert a["reuse_distance"][unit] == b["reuse_distance"][unit], unit
    for key in TRACE_KEYS:
        assert a["trace"][key] == b["trace"][key], key


def _assert_partitioned_figures_equal(exact: AnalysisResult, dask: AnalysisResult) -> None:
    _assert_partitioned_keys_equal(_doc(exact), _doc(dask))
    assert dask.tables.requests.equals(exact.tables.requests)
    if exact.sessions is not None:
        assert dask.sessions is not None and dask.sessions.table.equals(exact.sessions.table)


def _assert_within_bound(exact: AnalysisResult, dask: AnalysisResult) -> None:
    """Memory-tier points exact at or below the exact head, else within the stated bound."""
    sampling = _doc(dask)["trace"]["sampling"]
    k, bound = sampling["exact_below_blocks"], sampling["error_bound"]
    for pa, pb in zip(_doc(exact)["memory_tier"], _doc(dask)["memory_tier"], strict=True):
        assert pb["sampled"] == (pb["capacity_blocks"] > k)
        diff_pp = abs(pa["lru_hit_share"] - pb["lru_hit_share"]) * 100
        assert diff_pp <= (1e-10 if not pb["sampled"] else bound["hit_share_max_abs_pp"])


def _engine(result: AnalysisResult) -> dict[str, Any]:
    engine = result.provenance.extra["engine"]
    assert engine["name"] == "dask" and engine["workers"] >= 1
    assert any(n.code is NoteCode.ENGINE for n in result.note_details)
    return engine


@pytest.mark.parametrize(
    "name",
    # mixed is slow (20-30 s on 2 cores); agent and claude check the same equality by default.
    [pytest.param("mixed", marks=pytest.mark.slow), "agent", "claude"],
)
def test_sampled_run_equals_the_single_node_one(
    scheduler: str, data: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name == "agent":
        # Explode pieces of at most 3,000 accesses: each part is read in many row ranges. (Set
        # where plan_shuffle reads it: dask_engine only names it.)
        monkeypatch.setattr(dask_room, "MAX_PIECE_ACCESSES", 3000)
    ds = open_dataset(data[name])
    local = analyze_dataset(ds, geometry=GEOMETRY, sample_rate=0.1)
    dask = analyze_dask(data[name], geometry=GEOMETRY, scheduler=scheduler, sample_rate=0.1)
    assert _engine(dask)["cluster"] == "connected"
    a, b = _doc(local), _doc(dask)
    # The same plan, sample and exact head: every figure is the single-node bounded one.
    assert _without(a, "provenance", "notes", "trace") == _without(
        b, "provenance", "notes", "trace"
    )
    sa, sb = a["trace"].pop("sampling"), b["trace"].pop("sampling")
    assert b["trace"] == a["trace"] and b["trace"]["sampled"] is True
    assert sb["block_passes"] >= 4  # the shuffle partitions: 2 per worker thread at least
    assert _without(sa, "block_passes") == _without(sb, "block_passes")
    assert dask.tables.histograms.equals(local.tables.histograms)
    # ... and the figures that partition are the exact single-node analysis's.
    exact = analyze_trace(ds.load_trace(), geometry=GEOMETRY)
    _assert_partitioned_figures_equal(exact, dask)
    _assert_within_bound(exact, dask)


def test_exact_plan_equals_the_exact_analysis(scheduler: str, data: dict[str, Path]) -> None:
    exact = analyze_trace(open_dataset(data["claude"]).load_trace(), geometry=GEOMETRY)
    dask = analyze_dask(data["claude"], geometry=GEOMETRY, scheduler=scheduler)
    a, b = _doc(exact), _doc(dask)
    assert b["trace"]["sampled"] is False and b["trace"]["sampling"] is None
    files = len(open_dataset(data["claude"]).parts)
    assert b["trace"].pop("dataset") == {"mode": "partitioned", "files": files, "traces": 1}
    a["trace"].pop("dataset")
    assert _without(a, "provenance", "notes") == _without(b, "provenance", "notes")
    assert b["notes"][: len(a["notes"])] == a["notes"]
    assert "exact analysis ran here" in b["notes"][-1]


def test_a_session_schedule_needs_the_exact_plan(scheduler: str, data: dict[str, Path]) -> None:
    trace = open_dataset(data["claude"]).load_trace()
    exact = analyze_trace(trace, geometry=GEOMETRY, rate_requests_per_s=0.5, seed=3)
    dask = analyze_dask(
        data["claude"], geometry=GEOMETRY, scheduler=scheduler, rate_requests_per_s=0.5, seed=3
    )
    assert _doc(dask)["trace"]["schedule"] == _doc(exact)["trace"]["schedule"]
    assert _doc(dask)["memory_tier"] == _doc(exact)["memory_tier"]
    with pytest.raises(FcctlInputError, match=r"^concurrent_sessions: .* bounded memory"):
        analyze_dask(
            data["claude"],
            geometry=GEOMETRY,
            scheduler=scheduler,
            sample_rate=0.1,
            concurrent_sessions=4,
        )


def test_one_parquet_file_reads_as_the_single_node_path_does(
    scheduler: str, data: dict[str, Path]
) -> None:
    path = data["claude.parquet"]
    local = analyze_dataset(open_dataset(path), geometry=GEOMETRY)
    plain = analyze_trace(read_trace(path), geometry=GEOMETRY)
    dask = analyze_dask(path, geometry=GEOMETRY, scheduler=scheduler)
    assert _doc(dask)["trace"]["format"] == "parquet" and dask.trace.dataset is None
    assert _without(_doc(plain), "provenance", "notes") == _without(
        _doc(dask), "provenance", "notes"
    )
    del local


def test_pure_shards_without_the_exact_head(scheduler: str, data: dict[str, Path]) -> None:
    ds = open_dataset(data["agent"])
    exact = analyze_trace(ds.load_trace(), geometry=GEOMETRY)
    dask = analyze_dask(
        data["agent"], geometry=GEOMETRY, scheduler=scheduler, sample_rate=0.1, exact_head=False
    )
    sampling = _doc(dask)["trace"]["sampling"]
    assert sampling["exact_below_blocks"] == 0
    mean, worst, _rel = MEASURED_ERROR_NO_HEAD[0.1]
    bound = sampling["error_bound"]
    assert (bound["hit_share_mean_abs_pp"], bound["hit_share_max_abs_pp"]) == (mean, worst)
    assert "exact head 0" in bound["measured_on"]
    assert all(p.sampled for p in dask.memory_tier)
    assert "no exact head" in dask.notes[-1]
    _assert_partitioned_figures_equal(exact, dask)
    _assert_within_bound(exact, dask)


def test_a_trace_without_session_ids(scheduler: str, data: dict[str, Path]) -> None:
    ds = open_dataset(data["mooncake"])
    assert len(ds.parts) == 4
    exact = analyze_trace(ds.load_trace(), geometry=GEOMETRY)
    dask = analyze_dask(data["mooncake"], geometry=GEOMETRY, scheduler=scheduler, sample_rate=0.1)
    a, b = _doc(exact), _doc(dask)
    for key in ("once_only_block_share", "reuse_access_share", "request_sizes"):
        assert a[key] == b[key], key
    assert a["reuse_distance"]["requests"] == b["reuse_distance"]["requests"]
    assert a["reuse_distance"]["seconds"] == b["reuse_distance"]["seconds"]
    # Inferring sessions needs the whole ordered stream, as in the single-node bounded path.
    assert dask.sessions is None and any(
        n.code is NoteCode.NO_INFERRED_SESSIONS for n in dask.note_details
    )
    _assert_within_bound(exact, dask)


def test_a_bad_part_gives_the_single_node_message(
    scheduler: str, data: dict[str, Path], tmp_path: Path
) -> None:
    d = tmp_path / "broken"
    write_partitioned(
        read_trace(SAMPLES / "claude_code_sample.jsonl.gz"), d, by="session-hash", partitions=4
    )
    part = sorted(d.rglob("*.parquet"))[2]
    part.write_bytes(part.read_bytes()[:200])
    with pytest.raises(FcctlInputError) as local:
        open_dataset(d)
    with pytest.raises(FcctlInputError) as dask:
        analyze_dask(d, geometry=GEOMETRY, scheduler=scheduler)
    assert str(dask.value) == str(local.value) and str(part) in str(dask.value)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


class _InterruptAt(Progress):
    """A silent progress display that raises KeyboardInterrupt when a stage starts (Ctrl-C)."""

    def __init__(self, stage: str) -> None:
        super().__init__(enabled=False)
        self.stage = stage

    def task(self, description: str, total: float | None = None, **kw: Any) -> Any:
        if description.startswith(self.stage):
            raise KeyboardInterrupt
        return super().task(description, total, **kw)


def test_local_cluster_is_started_and_always_closed(scheduler: str, data: dict[str, Path]) -> None:
    before = _children()
    result = analyze_dask(data["claude"], geometry=GEOMETRY, memory_budget_bytes=2 << 30)
    engine = _engine(result)
    assert engine["cluster"] == "local" and engine["scheduler"].startswith("tcp://127.0.0.1:")
    assert engine["worker_memory_limit_bytes"] == (2 << 30) // engine["workers"]
    with pytest.raises(KeyboardInterrupt):
        analyze_dask(
            data["claude"],
            geometry=GEOMETRY,
            memory_budget_bytes=2 << 30,
            sample_rate=0.1,
            progress=_InterruptAt("Dask:"),
        )
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _children() - before, "a local cluster process outlived analyze_dask"


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, ["analyze", *args])


def test_cli_against_the_cluster(scheduler: str, data: dict[str, Path]) -> None:
    args = (str(data["claude"]), "--engine", "dask", "--scheduler", scheduler)
    result = _run(*args, "--sample-rate", "0.1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["provenance"]["engine"]["scheduler"] == scheduler
    assert doc["trace"]["sampled"] is True and doc["trace"]["sampling"]["block_passes"] >= 4
    human = _run(*args)
    assert human.exit_code == 0, human.output
    assert "Dask cluster" in " ".join(human.stdout.split())
    # A session schedule reaches the engine (the exact plan), as on one node.
    scheduled = _run(*args, "--rate", "0.5", "--seed", "3", "--json")
    assert scheduled.exit_code == 0, scheduled.output
    schedule = json.loads(scheduled.stdout)["trace"]["schedule"]
    assert schedule["kind"] == "rate" and schedule["seed"] == 3
    assert "--rate" in one_line_exit_2(_run(*args, "--rate", "0.5", "--sample-rate", "0.1"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_unreachable_scheduler_exit_2(data: dict[str, Path]) -> None:
    line = one_line_exit_2(
        _run(
            str(data["claude"]),
            "--engine",
            "dask",
            "--scheduler",
            f"tcp://127.0.0.1:{_free_port()}",
        )
    )
    assert line.startswith("fcctl: error: --scheduler: cannot reach a Dask scheduler")


@pytest.mark.parametrize(
    ("trace", "words"),
    [
        (str(SAMPLES / "claude_code_sample.jsonl.gz"), "convert it first"),
        (str(SAMPLES / "mooncake_conversation_2k.jsonl"), "fcctl convert"),
        ("s3://bucket/dataset/", "URLs are not supported"),
    ],
)
def test_cli_refuses_what_is_not_canonical_parquet(trace: str, words: str) -> None:
    line = one_line_exit_2(_run(trace, "--engine", "dask"))
    assert line.startswith("fcctl: error: --engine: ") and words in line


def test_without_dask_the_flag_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # The import fails for real (tests/test_dask_unavailable.py does it in a fresh process).
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(FcctlInputError, match="distributed package"):
        check_engine("dask", None)
    line = one_line_exit_2(_run(str(SAMPLES / "claude_code_sample.jsonl.gz"), "--engine", "dask"))
    assert DASK_INSTALL_HINT in line and line.startswith("fcctl: error: --engine: ")


def _gib_in(message: str) -> float:
    match = re.search(r"memory limit of about ([0-9.]+) GiB", message)
    assert match, message
    return float(match.group(1))


def test_shuffle_plan_fits_the_workers(data: dict[str, Path]) -> None:
    ds = open_dataset(data["mixed"])

    def room(limit: float) -> WorkerRoom:
        return WorkerRoom(int(limit), 0.8, 0.95, 356 << 20, 1)

    big = plan_shuffle(ds, room(8 << 30), 2, "scheduler")
    assert big.partitions == 4 and big.piece_accesses == MAX_PIECE_ACCESSES
    # Workers too small: refused up front, saying what limit would do; that limit does.
    with pytest.raises(FcctlInputError, match=r"^memory_budget: .* exploding the widest") as e:
        plan_shuffle(ds, room(0.45 * 2**30), 1, "memory_budget")
    assert "below 80% of its 0.45 GiB memory limit, where Dask pauses it" in str(e.value)
    limit = _gib_in(str(e.value))
    with pytest.raises(FcctlInputError, match=r"^memory_budget: .* per-request arrays") as e:
        plan_shuffle(ds, room(limit * 2**30), 1, "memory_budget")
    enough = room(_gib_in(str(e.value)) * 2**30)
    small = plan_shuffle(ds, enough, 1, "memory_budget")
    # ... which fits: more partitions, each (and each piece) within a task's share.
    task = enough.task_bytes
    assert small.partitions > 4
    per_request = ds.num_requests * BYTES_PER_WORKER_REQUEST
    assert ds.block_accesses / small.partitions * BYTES_PER_SHUFFLED_ACCESS + per_request <= task
    assert small.piece_accesses * BYTES_PER_EXPLODED_ACCESS <= task


def test_pieces_cover_every_row_once(data: dict[str, Path]) -> None:
    ds = open_dataset(data["agent"])
    n_blocks = ds.requests["n_blocks"].to_numpy()
    pieces = plan_pieces(ds, 3000)
    for i, part in enumerate(ds.parts):
        mine = [p for p in pieces if p.part == i]
        assert mine[0].start == 0 and mine[-1].stop == part.rows and len(mine) > 1
        assert all(a.stop == b.start for a, b in itertools.pairwise(mine))
        for p in mine:
            assert p.accesses == int(n_blocks[part.rank[p.start : p.stop]].sum())
            assert p.accesses <= 3000 or p.stop == p.start + 1
    assert sum(p.accesses for p in pieces) == ds.block_accesses


# --- a worker dying during a run (a real death: SIGKILL from a thread while it works) --------


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset whose shuffle keeps the workers busy for a few seconds (6.2 M accesses)."""
    root = tmp_path_factory.mktemp("dask-kill") / "agent"
    write_synth(root, "agent", 4000, 40, seed=3, partition_rows=500)
    return root


def _working_worker(
    proc: psutil.Process, watched: dict[int, tuple[psutil.Process, float | None]]
) -> psutil.Process | None:
    """A worker process of ``proc``'s local cluster connected for 1 s and running (CPU).

    ``watched``: each worker seen, and since when it is connected (None: not yet).
    """
    now = time.monotonic()
    for child in proc.children(recursive=True):
        try:
            if "spawn_main" not in " ".join(child.cmdline()):
                continue
            p, since = watched.setdefault(child.pid, (child, None))
            busy = p.cpu_percent(interval=None) > 50
            if since is None:
                if any(c.status == psutil.CONN_ESTABLISHED for c in p.net_connections()):
                    watched[child.pid] = (p, now)
            elif busy and now - since >= 1.0:
                return p
        except psutil.Error:
            continue
    return None


def _cli_killing_workers(
    args: list[str], kills: int, env: dict[str, str], *, exactly: bool = True
) -> tuple[int, str, str]:
    """``fcctl analyze ARGS`` in a subprocess, SIGKILLing a busy worker ``kills`` times.

    ``exactly=False``: at most ``kills`` times, until the command ends (at least once).

    Returns (exit status, stdout, stderr: the whole process tree's). Checks that no process
    of the tree outlives the command.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "fcctl", "analyze", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    tree = psutil.Process(proc.pid)
    seen: set[int] = set()
    killed: list[int] = []

    def killer() -> None:
        watched: dict[int, tuple[psutil.Process, float | None]] = {}
        while proc.poll() is None and len(killed) < kills:
            with contextlib.suppress(psutil.Error):
                seen.update(p.pid for p in tree.children(recursive=True))
                victim = _working_worker(tree, watched)
                if victim is not None:
                    os.kill(victim.pid, signal.SIGKILL)
                    killed.append(victim.pid)
                    watched.pop(victim.pid, None)
            time.sleep(0.1)
        while proc.poll() is None:  # the processes started after the last kill
            with contextlib.suppress(psutil.Error):
                seen.update(p.pid for p in tree.children(recursive=True))
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    out, err = proc.communicate(timeout=120)
    thread.join()
    assert len(killed) == kills if exactly else killed, f"killed {len(killed)} workers: {err}"
    deadline = time.monotonic() + 10
    left = [p for p in seen if psutil.pid_exists(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in seen if psutil.pid_exists(p)]
    assert not left, f"processes of the run outlived it: {left}"
    return proc.returncode, out, err


def test_a_worker_dying_is_one_line_and_exit_1(shuffled: Path) -> None:
    # No retry allowed: the first worker killed while it runs a task fails the run (a busy
    # worker may be busy with the shuffle's receiving instead: kill until the run ends).
    code, out, err = _cli_killing_workers(
        [str(shuffled), "--engine", "dask", "--sample-rate", "0.1", "--memory-budget", "2GiB"],
        kills=20,
        env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"},
        exactly=False,
    )
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fcctl: error: a Dask worker died during "), err
    assert "raise --memory-budget" in lines[0] and "Traceback" not in err + out


def test_a_worker_dying_once_is_retried(shuffled: Path) -> None:
    # Dask's default retries: the killed worker's tasks run again, the figures are unchanged.
    args = [str(shuffled), "--sample-rate", "0.1", "--memory-budget", "2GiB", "--json"]
    code, out, err = _cli_killing_workers([*args, "--engine", "dask"], kills=1, env={})
    assert code == 0, err
    local = _run(*args)
    assert local.exit_code == 0, local.output
    a, b = json.loads(local.stdout), json.loads(out)
    _assert_partitioned_keys_equal(a, b)
    # The same SHARDS sample, every piece's gathered once (1 GiB workers: no exact head).
    sa, sb = a["trace"]["sampling"], b["trace"]["sampling"]
    assert (sa["sampled_accesses"], sa["sampled_blocks"]) == (
        sb["sampled_accesses"],
        sb["sampled_blocks"],
    )
