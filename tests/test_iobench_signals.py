"""Clean exits with real processes: fio's process group, a second Ctrl-C during cleanup, the
run directory of a SIGKILLed run, and a disk that fills mid-run (a real small tmpfs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.iobench.run import RunHooks
from fcctl.iobench.safety import LOCK_NAME, PREFIX
from tests.conftest import REPO
from tests.iobench_helpers import (
    app_with_hooks,
    small_iobench_args,
    start_iobench,
    tiny_model_config,
    wait_for_restores,
)

runner = CliRunner()
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _live_fio(pids: list[int]) -> list[int]:
    """Those of ``pids`` that are still a running (not zombie) fio, from /proc."""
    live = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        comm = stat[stat.find(b"(") + 1 : stat.rfind(b")")]
        if comm == b"fio" and stat[stat.rfind(b")") + 2 :].split()[0] != b"Z":
            live.append(pid)
    return live


def _children_named(pid: int, name: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        comm = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode()
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        if ppid == pid and comm == name:
            out.append(int(entry))
    return out


def _stop(proc: subprocess.Popen | None) -> None:  # type: ignore[type-arg]
    """Kill and reap a child a failed test left running."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _popen_with_default_interrupts(args: list[str], **kwargs) -> subprocess.Popen:  # type: ignore[no-untyped-def, type-arg]
    """``Popen`` with SIGINT and SIGTERM at their defaults in the child, as a shell starts a
    command. An ignored disposition and a blocked mask survive fork and exec, and this pytest
    process may be in either state after an earlier test (the full suite once left SIGINT
    ignored or blocked here: the child then never saw the test's Ctrl-C and fio ran its 60 s);
    a Python handler, by contrast, becomes the default in the child."""
    wanted = {signal.SIGINT, signal.SIGTERM}
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_term = signal.signal(signal.SIGTERM, lambda *_: None)
    old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_fio_leaves_no_fio_process(tmp_path, fio_bin, sig):
    """fio (and the job processes it forks) is terminated and reaped, whatever interrupts us.

    The job is time_based with a 60 s runtime, so neither deleting its file nor finishing a
    pass ends it: only iobench's termination of the group can.
    """
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    child = textwrap.dedent(
        f"""
        from fcctl.common.signals import interrupts_raise
        from fcctl.iobench.fio import run_fio
        with interrupts_raise():
            run_fio([{fio_bin!r}, "--name=long", "--filename={data}", "--rw=read",
                     "--bs=4k", "--ioengine=psync", "--time_based", "--runtime=60",
                     "--numjobs=2", "--thread=0"], timeout_s=120)
        """
    )
    proc = _popen_with_default_interrupts(
        [sys.executable, "-c", child], env=ENV, cwd=REPO, stderr=subprocess.PIPE
    )
    fio_pids: list[int] = []
    jobs: list[int] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not fio_pids:
            fio_pids = _children_named(proc.pid, "fio")
            time.sleep(0.05)
        assert fio_pids, "fio never started"
        fio_pid = fio_pids[0]
        # fio forks one process per job, and each calls setsid: fio's own group does not
        # hold them, so they are looked up as fio's children.
        deadline = time.monotonic() + 20
        jobs: list[int] = []
        while time.monotonic() < deadline and len(jobs) < 2:
            jobs = _children_named(fio_pid, "fio")
            time.sleep(0.05)
        assert len(jobs) == 2, "fio's job processes never started"
        assert os.getpgid(fio_pid) != os.getpgid(proc.pid)  # fio's group is not ours
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode != 0, err.decode()
        assert _live_fio([fio_pid, *jobs]) == [], "fio processes outlived the interrupt"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _live_fio([*fio_pids, *jobs]):  # never leave a 60 s job behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_second_ctrl_c_during_cleanup_does_not_abort_it(tmp_path):
    """Ctrl-C, then Ctrl-C every 2 ms until the process ends: still everything is removed.

    On tmpfs (/dev/shm), so the thousands of small files are written in seconds; their removal
    is what the later Ctrl-Cs hit.
    """
    from fcctl.iobench.run import filesystem_of

    shm = Path("/dev/shm")
    if not shm.is_dir() or filesystem_of(shm).type != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    bench = shm / f"fcctl-test-ctrlc-{os.getpid()}"
    bench.mkdir()
    proc = None
    try:
        proc = start_iobench(
            tmp_path,
            bench,
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
        )
        wait_for_restores(bench)
        proc.send_signal(signal.SIGINT)
        while proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            time.sleep(0.002)
        _, err = proc.communicate(timeout=60)
        text = err.decode()
        assert proc.returncode == 130, text
        assert "iobench: cleaning up, please wait" in text
        assert list(bench.iterdir()) == [], "a second Ctrl-C cut the cleanup short"
        assert "Traceback" not in text
    finally:
        _stop(proc)
        shutil.rmtree(bench, ignore_errors=True)


def test_the_run_directory_of_a_sigkilled_run_is_removed_by_the_next_run(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    proc = start_iobench(tmp_path, bench, "--sessions", "8", "--tokens", "16384")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(bench.rglob("*.fcc")):
            time.sleep(0.05)
        assert any(bench.rglob("*.fcc")), "the benchmark never started writing"
    finally:
        proc.kill()  # SIGKILL: no cleanup can run (and, on a failure above, no child is left)
        proc.wait()
    (left,) = bench.iterdir()
    assert left.name.startswith(PREFIX)
    pid, _ = (left / LOCK_NAME).read_text().split()
    assert int(pid) == proc.pid
    # The next run in the same --dir is not blocked ("not empty") and removes the leftover.
    cfg = tiny_model_config(tmp_path / "t.json")
    result = runner.invoke(
        app,
        [
            "iobench",
            "--model-config",
            str(cfg),
            "--sessions",
            "2",
            "--tokens",
            "64",
            "--turns",
            "2",
            "--bucket-size",
            "64KiB",
            "--concurrency",
            "1",
            "--no-fio",
            "--dir",
            str(bench),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert f"removed {left}, left by an earlier run that was killed" in result.stderr
    assert list(bench.iterdir()) == []


def test_a_run_directory_of_unknown_owner_is_named_with_the_command_to_remove_it(tmp_path):
    bench = tmp_path / "bench"
    (bench / f"{PREFIX}old").mkdir(parents=True)  # no lock: another tool's, or an old fcctl's
    result = runner.invoke(app, [*small_iobench_args(tmp_path), "--no-fio", "--dir", str(bench)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "not empty" in line
    assert f"remove them with: rm -rf {bench / (PREFIX + 'old')}" in line
    assert (bench / f"{PREFIX}old").is_dir()  # named, never removed


def test_a_live_run_directory_is_left_alone(tmp_path):
    """A lock whose owner still runs (this test process) is another run's: never removed."""
    from fcctl.iobench.safety import clear_leftovers, write_lock

    live = tmp_path / f"{PREFIX}live"
    live.mkdir()
    write_lock(live)
    dead = tmp_path / f"{PREFIX}dead"
    dead.mkdir()
    # A pid that is gone: a finished child's.
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (dead / LOCK_NAME).write_text(f"{child.stdout.strip()} 12345\n")
    found = clear_leftovers(tmp_path)
    assert found.removed == (dead,) and live.is_dir() and not dead.exists()


@pytest.fixture
def small_tmpfs(tmp_path):
    """An 8 MiB tmpfs (needs root); skipped where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(directory: Path) -> None:
    """Write a real file until the filesystem says ENOSPC."""
    with open(directory / "filler", "wb", buffering=0) as f:  # unbuffered: close cannot fail
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            with contextlib.suppress(OSError):
                while f.write(chunk):
                    pass


@pytest.mark.parametrize("phase", ["writes", "fio"])
def test_a_disk_that_fills_mid_run_fails_naming_the_phase_and_enospc(small_tmpfs, phase):
    if phase == "fio" and subprocess.run(["which", "fio"], capture_output=True).returncode:
        pytest.skip("fio is not installed")

    def fill_at(started: str, root: Path) -> None:
        if started == phase:
            _fill(root)

    bench = small_tmpfs / "bench"
    args = [*small_iobench_args(small_tmpfs), "--dir", str(bench), "--free-margin", "0"]
    args += ["--fio-runtime", "0.1"] if phase == "fio" else ["--no-fio"]
    result = runner.invoke(app_with_hooks(RunHooks(on_phase=fill_at)), args)
    assert result.exit_code == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fcctl: error: {phase} failed: the filesystem is out of space (ENOSPC")
    assert result.stdout == ""
    assert not bench.exists()  # what the run wrote (and the filler in it) is gone
