"""benchmarks/sim_speed.py: the before/after table flags a result that moved, bad cases are
refused in one line, and (slow) a whole run on the sample against HEAD finds the results
identical."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO, SAMPLES

SCRIPT = REPO / "benchmarks" / "sim_speed.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sim_speed", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_gives_medians_ratios_and_flags_a_moved_result() -> None:
    compare = _script().compare
    before = {
        "flat@c4": {"seconds": [9.0, 3.0, 4.0], "result": '{"x": 1}'},
        "tiered@r1": {"seconds": [2.0, 2.0, 2.0], "result": '{"x": 2}'},
    }
    after = {
        "flat@c4": {"seconds": [2.0, 1.0, 5.0], "result": '{"x": 1}'},
        "tiered@r1": {"seconds": [1.0, 1.0, 1.0], "result": '{"x": 2.0}'},
    }
    lines, same = compare(before, after, 3)
    assert not same  # the second case's result differs by one character
    flat, tiered = lines[1].split(), lines[2].split()
    assert flat[:5] == ["flat@c4", "4.00", "2.00", "2.00x", "yes"]  # medians 4 and 2
    assert tiered[:5] == ["tiered@r1", "2.00", "1.00", "2.00x", "NO"]
    lines, same = compare(before, before, 3)
    assert same and all(" yes " in line for line in lines[1:])


def test_parse_case() -> None:
    parse = _script().parse_case
    assert parse("flat@c710") == ("flat", None, 710)
    assert parse("memory-only@r1.1") == ("memory-only", 1.1, None)
    for bad in ("flat", "flat@", "flat@x3", "flat@c0", "flat@r-1", "flat@rnan", "nope@c3"):
        with pytest.raises(ValueError, match=f"--cases: .*got {bad!r}"):
            parse(bad)


def test_a_bad_case_is_one_line_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", "HEAD", "--cases", "flat@c0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert "error: --cases:" in done.stderr and "got 'flat@c0'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_the_sample_against_head_is_identical() -> None:
    """The whole script: HEAD exported and this checkout give identical results (at HEAD with
    no change in the checkout's simulator, they must)."""
    sample = str(SAMPLES / "claude_code_sample.jsonl.gz")
    args = ["--base", "HEAD", "--reps", "1", "--trace", sample, "--cases", "flat@c20"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    row = done.stdout.splitlines()[1].split()
    assert row[0] == "flat@c20" and row[4] == "yes"
