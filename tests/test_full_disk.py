"""A disk that fills while a command writes: exit 1 (the run failed, the command was right),
one line naming the output and the file being written, no traceback, nothing left behind.

Each test mounts a real small tmpfs (we run as root in CI; skipped where mounting is refused).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES
from tests.plan_helpers import small_trace, tmpfs

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a tmpfs of the given size (``"64k"``) under ``tmp_path``; unmounted after."""
    names = itertools.count()
    with ExitStack() as mounts:

        def mount(size: str) -> Path:
            return mounts.enter_context(tmpfs(tmp_path / f"fs{next(names)}", size))

        yield mount


def fcctl(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=cwd,
        timeout=300,
    )


def assert_run_failed(done: subprocess.CompletedProcess, prefix: str) -> str:
    """Exit 1, no traceback, and the last line the one error naming ``prefix`` and a file."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("fcctl: error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"fcctl: error: {prefix}: disk full while writing "), errors[0]
    return errors[0]


def test_analyze_out_on_a_full_disk(tiny_fs, tmp_path):
    fs = tiny_fs("64k")
    done = fcctl("analyze", MOONCAKE, "--out", fs / "a", cwd=tmp_path)
    line = assert_run_failed(done, f"--out {fs / 'a'}")
    # The file named is one analyze writes (not a temporary's name).
    written = line.split("disk full while writing ")[1].split(" (")[0]
    assert not written.startswith("."), line
    assert written.endswith((".json", ".parquet", ".png")), line
    assert list(fs.iterdir()) == [], "the temporary --out directory was left behind"


def test_replay_out_on_a_full_disk(tiny_fs, tmp_path):
    fs = tiny_fs("64k")
    done = fcctl("replay", MOONCAKE, "--rates", "0.5", "--out", fs / "r", cwd=tmp_path)
    line = assert_run_failed(done, f"--out {fs / 'r'}")
    # polars' sink reports this full disk without an errno; the file is named all the same
    assert "while writing requests-memory-only-rate0.5.parquet" in line, line
    assert list(fs.iterdir()) == []


def test_recommend_out_and_emit_on_a_full_disk(tiny_fs, tmp_path):
    fs = tiny_fs("64k")
    # 200 requests: --out (about 120 kB) and --emit (about 440 kB) still overflow 64 kB.
    args = [
        "recommend-thresholds",
        small_trace(tmp_path, 200),
        "--rates",
        "0.5",
        "--short-reply",
        "256",
        "--agent-context",
        "8192",
        "--jobs",
        "1",
    ]
    done = fcctl(*args, "--out", fs / "r", cwd=tmp_path)
    assert_run_failed(done, f"--out {fs / 'r'}")
    assert list(fs.iterdir()) == []
    # --out fits elsewhere; the drop-in package does not.
    done = fcctl(*args, "--out", tmp_path / "r", "--emit", fs / "e", cwd=tmp_path)
    assert_run_failed(done, f"--emit {fs / 'e'}")
    assert list(fs.iterdir()) == []
    # --out fitted, but it is half of what was asked: the two go together or not at all.
    assert not (tmp_path / "r").exists()


def test_synth_parts_on_a_full_disk(tiny_fs, tmp_path):
    fs = tiny_fs("256k")
    done = fcctl(
        "synth",
        "--requests",
        "20000",
        "--sessions",
        "2000",
        "--partition-rows",
        "2000",
        "-o",
        fs / "s",
        cwd=tmp_path,
    )
    line = assert_run_failed(done, f"-o {fs / 's'}")
    assert "part-" in line, line
    assert list(fs.iterdir()) == []


def test_report_page_on_a_full_disk(tiny_fs, tmp_path):
    analysis = tmp_path / "analysis.json"
    done = fcctl("analyze", MOONCAKE, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    analysis.write_text(done.stdout)
    fs = tiny_fs("16k")
    done = fcctl("report", analysis, "-o", fs / "page.html", cwd=tmp_path)
    assert_run_failed(done, f"-o {fs / 'page.html'}")
    assert list(fs.iterdir()) == []


def test_a_bad_out_path_found_before_the_run_is_still_bad_input(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    done = fcctl("analyze", MOONCAKE, "--out", a_file, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"fcctl: error: --out {a_file}: ")
