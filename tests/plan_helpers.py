"""Helpers of the plan and output-directory hardening tests: a small trace, fcctl run as a real
process, a real small file system."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
#: A plan of the first 60 requests takes seconds, not a minute.
SMALL_REQUESTS = 60


def small_trace(directory: Path, requests: int = SMALL_REQUESTS, skip: int = 0) -> Path:
    """The Mooncake sample's requests ``skip`` to ``skip + requests`` as a trace file."""
    lines = MOONCAKE.read_text().splitlines(keepends=True)[skip : skip + requests]
    path = directory / f"mooncake_{skip}_{requests}.jsonl"
    path.write_text("".join(lines))
    return path


def fcctl_env() -> dict[str, str]:
    """This checkout first on the path, so the child imports the code under test."""
    return {**os.environ, "PYTHONPATH": str(REPO)}


def fcctl(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m fcctl ARGS`` to its end, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env=fcctl_env(),
        cwd=cwd,
        timeout=timeout,
    )


def _default_interrupts() -> None:
    # An ignored disposition and a blocked mask survive fork and exec: a test process left in
    # either state by an earlier test would start a child that never sees the test's signal.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def start_fcctl(*args: str | Path, cwd: Path) -> subprocess.Popen[str]:
    """``python -m fcctl ARGS`` started in its own session (signals reach it alone), SIGINT
    and SIGTERM at their defaults and unblocked whatever the test process has."""
    return subprocess.Popen(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fcctl_env(),
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_default_interrupts,
    )


def one_error_line(stderr: str) -> str:
    """The one ``fcctl: error:`` line of a run that failed cleanly (no traceback)."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("fcctl: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (``"64k"``) mounted at ``where`` (skips where mounting is
    refused: it needs root), unmounted after."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    """Poll until ``condition()``; fail if ``proc`` ends first (or after ten minutes, a hung
    child, not a timing assertion)."""
    import time

    deadline = time.monotonic() + 600
    while not condition():
        if proc.poll() is not None:
            err = proc.communicate()[1]
            pytest.fail(f"fcctl ended (status {proc.returncode}) before {what}: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after ten minutes")
        time.sleep(0.05)
