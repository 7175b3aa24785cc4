"""Every command, run as a real process and interrupted mid-run by SIGINT (Ctrl-C, sent to the
whole process group as a terminal does) and by SIGTERM (sent to fcctl alone, as ``kill`` does):
exit 130 / 143, one line and no traceback, no temporary output left, no child process left.

The signal goes once the command's temporary output exists (or, for the one command that has
none worth waiting for, once its SIGTERM handler is installed, read from /proc/PID/status); a
run that finished first is started again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES
from tests.iobench_helpers import tiny_model_config

psutil = pytest.importorskip("psutil")

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def fcctl(*args: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def catches_sigterm(pid: int) -> bool:
    """Whether ``pid`` has a SIGTERM handler (the command body runs under fcctl's)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def temporaries(directory: Path) -> list[Path]:
    """fcctl's temporary outputs in ``directory``: ``.NAME.tmp-*`` dirs, ``.NAME.*.tmp`` files."""
    return sorted(p for p in directory.iterdir() if p.name.startswith(".") and ".tmp" in p.name)


def spawned_workers(pid: int) -> list:
    """Live multiprocessing workers among ``pid``'s descendants: spawned ones (``spawn_main``
    in their command line), and those forked from a fork server (its children: the server
    itself is ``pid``'s child, and its workers keep its command line)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            cmdline = " ".join(child.cmdline())
            if "spawn_main" in cmdline or ("forkserver" in cmdline and child.ppid() != pid):
                out.append(child)
        except psutil.Error:
            pass
    return out


def assert_none_left(processes: list, what: str = "child processes") -> None:
    """Within 10 s none of ``processes`` runs; any that still does is killed, then reported."""
    deadline = time.monotonic() + 10
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive(processes)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert left == [], f"{what} outlived fcctl: {left}"


def alive(processes: list) -> list:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@dataclass
class Case:
    args: list[str | Path]
    ready: Callable[[int], bool]  # mid-run: safe to signal now
    workdir: Path  # where the outputs (and their temporaries) go
    absent: list[Path]  # outputs an interrupted run must not leave
    # Signalled only once fcctl handles SIGTERM (read from /proc): for a command with no
    # temporary output to wait for, so the signal cannot land while Python starts.
    wait_for_handler: bool = False


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory) -> Path:
    """A 20 000-request chat trace as one canonical Parquet file."""
    d = tmp_path_factory.mktemp("synth")
    fcctl(
        "synth",
        "--requests",
        "20000",
        "--sessions",
        "2000",
        "--profile",
        "chat",
        "--partition-rows",
        "100000",
        "-o",
        d / "t",
        cwd=d,
    )
    return d / "t" / "part-00000.parquet"


@pytest.fixture(scope="module")
def analysis_json(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("analysis")
    done = fcctl("analyze", MOONCAKE, "--json", cwd=d)
    (d / "analysis.json").write_text(done.stdout)
    return d / "analysis.json"


def _has_temporary(workdir: Path, inside: str | None = None) -> Callable[[int], bool]:
    """Ready once a temporary output exists in ``workdir`` (holding ``inside``, if given)."""

    def ready(pid: int) -> bool:
        for t in temporaries(workdir):
            if inside is None or (t.is_dir() and any(t.rglob(inside))):
                return True
        return False

    return ready


def _case(command: str, tmp: Path, synth_trace: Path, analysis_json: Path) -> Case:
    out = tmp / "out"
    out.mkdir()
    if command == "analyze":
        return Case(
            ["analyze", MOONCAKE, "--out", out / "a"], _has_temporary(out), out, [out / "a"]
        )
    if command == "convert":
        return Case(
            ["convert", synth_trace, "-o", out / "t.parquet"],
            _has_temporary(out),
            out,
            [out / "t.parquet"],
        )
    if command == "convert-partitioned":
        args = [
            "convert",
            synth_trace,
            "-o",
            out / "ds",
            "--partition-by",
            "session-hash",
            "--partitions",
            "4096",
        ]
        return Case(args, _has_temporary(out, "part-*.parquet"), out, [out / "ds"])
    if command == "synth":
        args = [
            "synth",
            "--requests",
            "2000000",
            "--sessions",
            "50000",
            "--profile",
            "chat",
            "--partition-rows",
            "2000",
            "-o",
            out / "s",
        ]
        return Case(args, _has_temporary(out, "part-*.parquet"), out, [out / "s"])
    if command == "replay":
        return Case(
            ["replay", MOONCAKE, "--rates", "0.5", "--out", out / "r"],
            _has_temporary(out),
            out,
            [out / "r"],
        )
    if command == "recommend-thresholds":
        # Signalled during the sweep, once both worker processes run.
        args = [
            "recommend-thresholds",
            synth_trace,
            "--jobs",
            "2",
            "--out",
            out / "r",
            "--emit",
            out / "e",
        ]
        return Case(args, lambda pid: len(spawned_workers(pid)) >= 2, out, [out / "r", out / "e"])
    if command == "report":
        # The page is built in well under a second: signalled as soon as the body runs.
        return Case(
            ["report", analysis_json, "-o", out / "page.html"],
            lambda pid: True,
            out,
            [out / "page.html"],
            wait_for_handler=True,
        )
    if command == "iobench":
        bench = out / "bench"
        bench.mkdir()
        cfg = tiny_model_config(tmp / "tiny.json", layers=32)
        args = [
            "iobench",
            "--model-config",
            cfg,
            "--no-fio",
            "--sessions",
            "800",
            "--tokens",
            "32",
            "--turns",
            "2",
            "--layout",
            "flat",
            "--concurrency",
            "1",
            "--repeat",
            "500",
            "--free-margin",
            "0",
            "--dir",
            bench,
        ]

        def ready(pid: int) -> bool:
            return any(bench.glob("fcctl-iobench-*/*"))

        return Case(args, ready, bench, [])
    raise AssertionError(command)


COMMANDS = [
    "analyze",
    "convert",
    "convert-partitioned",
    "synth",
    "replay",
    "recommend-thresholds",
    "report",
    "iobench",
]


def start(case: Case) -> subprocess.Popen:
    """``fcctl`` with ``case``'s arguments, in its own process group (so a SIGINT to the group
    reaches all of it, as a terminal's Ctrl-C does), stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "fcctl", *map(str, case.args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=case.workdir,
        start_new_session=True,
    )


def interrupt_mid_run(case: Case, sig: signal.Signals, attempts: int = 3):
    """Run ``case``, signal it once ready; the finished process, its stderr, and the
    descendants and multiprocessing workers it had when signalled."""
    for _ in range(attempts):
        proc = start(case)
        try:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                if case.ready(proc.pid) and (
                    not case.wait_for_handler or catches_sigterm(proc.pid)
                ):
                    break
                time.sleep(0.005)
            if proc.poll() is not None:  # finished (or failed) first: try again
                _, err = proc.communicate()
                assert proc.returncode == 0, err
                for path in case.absent:
                    subprocess.run(["rm", "-rf", str(path)], check=True)
                continue
            assert time.monotonic() < deadline, "the command never reached its mid-run state"
            descendants = psutil.Process(proc.pid).children(recursive=True)
            workers = spawned_workers(proc.pid)
            if sig == signal.SIGINT:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
            _, err = proc.communicate(timeout=120)
            return proc, err, descendants, workers
        except BaseException:
            # A failing run leaves nothing behind either (its orphaned workers are still in
            # its process group).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    why = " (it never handled SIGTERM)" if case.wait_for_handler else ""
    pytest.fail(f"{case.args[0]} finished before it could be interrupted, {attempts} times{why}")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_signal_mid_run_exits_128_plus_n_and_leaves_nothing(
    command, sig, tmp_path, synth_trace, analysis_json
):
    case = _case(command, tmp_path, synth_trace, analysis_json)
    proc, err, descendants, _ = interrupt_mid_run(case, sig)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("fcctl: interrupted"), err
    if sig == signal.SIGTERM:
        assert last == "fcctl: interrupted by SIGTERM", err
    assert temporaries(case.workdir) == [], "temporary output left behind"
    for path in case.absent:
        assert not path.exists(), f"{path} written by an interrupted run"
    if command == "iobench":
        assert list(case.workdir.iterdir()) == [], "the benchmark's files were left behind"
    assert_none_left(descendants)


def test_recommend_workers_are_gone_after_sigterm_and_ctrl_c_while_they_start(
    tmp_path, synth_trace
):
    """--jobs 2: SIGTERM to the parent alone stops its workers; Ctrl-C to the group while the
    workers start prints no traceback from any of them."""
    case = _case("recommend-thresholds", tmp_path, synth_trace, synth_trace)
    proc, err, _, workers = interrupt_mid_run(case, signal.SIGTERM)
    assert len(workers) == 2
    assert proc.returncode == 143, err
    assert_none_left(workers, "workers")
    assert "Traceback" not in err, err

    # Ctrl-C the moment the first worker process exists: it is still starting (importing).
    starting = Case(
        case.args, lambda pid: len(spawned_workers(pid)) >= 1, case.workdir, case.absent
    )
    proc, err, descendants, _ = interrupt_mid_run(starting, signal.SIGINT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.count("fcctl: interrupted") == 1, err
    assert_none_left(descendants)


def test_an_interrupt_wrapped_by_a_c_extension_is_still_an_interrupt(tmp_path):
    """Ctrl-C inside a C extension's call back into Python (numba loading its cache) surfaces
    as ``SystemError: ... returned a result with an exception set``: still exit 130, one line,
    the temporary output removed."""
    import typer
    from typer.testing import CliRunner

    from fcctl.common.outdir import atomic_out_dir
    from fcctl.common.signals import Interrupted
    from fcctl.errors import cli_errors

    demo = typer.Typer()
    out = tmp_path / "out"

    @demo.command("demo")
    @cli_errors
    def demo_command(term: bool = typer.Option(False, "--term")) -> None:
        with atomic_out_dir(out, force=False, marker="m", command="demo") as tmp:
            (tmp / "part").write_text("x")
            try:
                raise Interrupted(signal.SIGTERM) if term else KeyboardInterrupt
            except KeyboardInterrupt as e:
                raise SystemError("<function f> returned a result with an exception set") from e

    @demo.command("other")
    def other() -> None:
        pass

    for args, status, line in (
        ([], 130, "fcctl: interrupted"),
        (["--term"], 143, "fcctl: interrupted by SIGTERM"),
    ):
        done = CliRunner().invoke(demo, ["demo", *args])
        assert done.exit_code == status, done.output
        assert done.output.strip() == line
        assert list(tmp_path.iterdir()) == []


def _shm_mappings(processes: list) -> set[str]:
    """The /dev/shm files the ``processes`` map: multiprocessing's semaphores
    (``/dev/shm/sem.*``) and shared arrays (``/dev/shm/... (deleted)`` once nameless)."""
    found: set[str] = set()
    for p in processes:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p.pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
                if path.startswith("/dev/shm/"):
                    found.add(path)
    return found


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_sigkill_of_the_parent_leaves_no_workers_files_or_semaphores(tmp_path, synth_trace):
    """SIGKILL runs no cleanup in fcctl: its workers and their fork server end by themselves
    (the kernel's parent-death signal, a watch of the parent as the fallback), the shared
    arrays never had a name in /dev/shm, and the semaphores go with the last process holding
    them (issue #36, item 10)."""
    shm = Path("/dev/shm")
    before = {p.name for p in shm.iterdir()}
    case = _case("recommend-thresholds", tmp_path, synth_trace, synth_trace)
    proc = start(case)
    try:
        deadline = time.monotonic() + 120
        mapped: set[str] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            workers = spawned_workers(proc.pid)
            mapped = _shm_mappings(workers)
            # Both workers run and have mapped the workload: mid-simulation.
            if len(workers) >= 2 and all(
                any(not m.startswith("/dev/shm/sem.") for m in _shm_mappings([w])) for w in workers
            ):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before both workers mapped the workload"
        tree = psutil.Process(proc.pid).children(recursive=True)
        mapped |= _shm_mappings([psutil.Process(proc.pid), *tree])
        names = {p.name for p in shm.iterdir()} - before
        assert not [n for n in names if n.startswith("fcctl-workload-")], names
        semaphores = {m for m in mapped if m.startswith("/dev/shm/sem.")}
        assert semaphores, mapped  # the workers' queues' semaphores: what must not be left
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert_none_left(tree, "processes of the killed run")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(s).exists() for s in semaphores):
            time.sleep(0.05)
        assert [s for s in semaphores if Path(s).exists()] == [], "semaphores left in /dev/shm"
        left = {p.name for p in shm.iterdir()} - before
        assert not [n for n in left if n.startswith("fcctl-workload-")], left
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)  # reaped, its pipes closed


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_command_interrupted_in_process_leaves_the_signals_as_it_found_them(sig):
    """A command run inside a Python process (typer's CliRunner, ``app()`` from a notebook) and
    interrupted by a real signal once left SIGINT, SIGTERM and SIGHUP ignored in that process:
    ignoring them is right only for the CLI process about to exit. Then pytest itself could no
    longer be stopped with Ctrl-C (issue #36, item 13)."""
    import typer
    from typer.testing import CliRunner

    from fcctl.errors import cli_errors
    from tests.conftest import SignalState

    demo = typer.Typer()

    @demo.command("demo")
    @cli_errors
    def demo_command() -> None:
        os.kill(os.getpid(), sig)  # a real signal, as a user's Ctrl-C or kill sends
        time.sleep(30)  # interrupted at once: the handler raises here

    @demo.command("other")
    def other() -> None:
        pass

    before = SignalState.now()
    done = CliRunner().invoke(demo, ["demo"])
    assert done.exit_code == (130 if sig == signal.SIGINT else 128 + sig), done.output
    assert done.output.strip().startswith("fcctl: interrupted")
    assert SignalState.now() == before


@pytest.mark.parametrize("after_s", [None, 0.0, 5.0], ids=["starting", "started", "running"])
def test_sigterm_to_replay_on_a_local_dask_cluster_is_one_line(tmp_path, after_s):
    """``replay --engine dask`` SIGTERMed while its local cluster starts (its first worker
    process exists), once every worker runs, and some seconds into the simulations: exit 143,
    stderr the one line, no process of the cluster left. A traceback from distributed (a
    half-started cluster closed at exit; a scheduler handler's ``KeyError`` for a worker already
    gone) once followed the line in two runs of three (issue #36, item 9)."""
    pytest.importorskip("distributed")
    args = ["replay", MOONCAKE, "--rates", "0.5,2", "--engine", "dask", "--memory-budget", "4GiB"]

    def ready(pid: int) -> bool:
        workers = spawned_workers(pid)
        if after_s is None:
            return len(workers) >= 1
        if len(workers) < min(2, len(os.sched_getaffinity(0))):
            return False
        started.setdefault("at", time.monotonic())
        return time.monotonic() - started["at"] >= after_s

    started: dict[str, float] = {}
    case = Case(args, ready, tmp_path, [])
    proc, err, descendants, _ = interrupt_mid_run(case, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["fcctl: interrupted by SIGTERM"], err
    assert_none_left(descendants)
