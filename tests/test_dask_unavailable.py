"""``--engine dask`` when Dask cannot help: a scheduler that accepts and never answers is exit
2 within the documented bound (docs/scale.md: 5 s), and a missing or broken dask extra is one
line with the pip hint. Real sockets, real subprocesses, imports that really fail."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fcctl.analyzers.traces.synth import write_synth
from tests.conftest import REPO

pytest.importorskip("distributed")
pytest.importorskip("dask.dataframe")

HINT = "pip install 'fcctl[dask]'"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dask-unavailable") / "ds"
    write_synth(d, "chat", 200, 20, seed=3, partition_rows=100)
    return d


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()
    assert accepted, "fcctl never connected to the server"


def run(args: list[str], *, prelude: str = "", timeout: float = 60, **env: str):
    """``fcctl ARGS`` in a fresh interpreter; ``prelude`` runs first (to break an import)."""
    code = "\n".join(
        [
            "import sys",
            prelude,
            f"sys.argv = ['fcctl', *{args!r}]",
            "from fcctl.cli import main",
            "main()",
        ]
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([*env.values(), str(REPO)])},
        timeout=timeout,
    )


def one_line_exit_2(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fcctl: error: "), done.stderr
    return lines[0]


def test_a_scheduler_that_never_answers_is_exit_2_within_the_bound(dataset, silent_server):
    address = f"tcp://127.0.0.1:{silent_server}"
    # The bound is the connect timeout the message states; run's timeout only guards a hang.
    done = run(["analyze", str(dataset), "--engine", "dask", "--scheduler", address], timeout=90)
    line = one_line_exit_2(done)
    assert line.startswith("fcctl: error: --scheduler: cannot reach a Dask scheduler"), line
    assert address in line and "5 s" in line, line


@pytest.mark.parametrize("module", ["distributed", "dask"])
def test_the_dask_extra_missing_is_one_line_with_the_pip_hint(dataset, module):
    done = run(
        ["analyze", str(dataset), "--engine", "dask"],
        prelude=f"sys.modules[{module!r}] = None  # as if not installed",
    )
    line = one_line_exit_2(done)
    assert f"needs the {module} package, which is not installed" in line, line
    assert line.endswith(HINT), line


def test_an_installed_but_broken_distributed_is_one_line_with_the_pip_hint(dataset, tmp_path):
    # A package that is there but cannot import (a dependency missing): found by find_spec,
    # so only importing it tells.
    fake = tmp_path / "site" / "distributed"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tornado'\", name='tornado')\n"
    )
    for extra in ([], ["--scheduler", "tcp://127.0.0.1:1"]):
        done = run(
            ["analyze", str(dataset), "--engine", "dask", *extra], site=str(tmp_path / "site")
        )
        line = one_line_exit_2(done)
        assert "needs the distributed package, which does not import" in line, line
        assert "tornado" in line and line.endswith(HINT), line
