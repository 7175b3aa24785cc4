"""Progress when stderr is not a terminal (issue #36, item 12): plain lines, never silence.

A whole-trace ``fcctl plan`` with stderr to a file once wrote nothing for 24 minutes: the bar
is drawn only on a terminal. Off one, a step that runs past its delay is named, a line every
``$FCCTL_PROGRESS_INTERVAL_S`` says how far it is and how long is left, and a last line says it
is done. The lines' presence and shape are asserted, never their timing: the display's clock is
a stand-in here, and the real command runs with a short interval.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import (
    DEFAULT_INTERVAL_S,
    INTERVAL_ENV,
    PlainDisplay,
    Progress,
    duration,
    interval_from_env,
)
from tests.conftest import REPO, SAMPLES

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
#: A progress line: the step, how far (an amount of a total and its share, or a share), the
#: time elapsed and, with a total, the time left.
PROGRESS_LINE = re.compile(
    r"^fcctl: (?P<step>[^:]+): (?:(?P<done>[\d,]+)/(?P<total>[\d,]+) \w+ \(\d+%\)|\d+%), "
    r"[\dhmins ]+ elapsed, (?:about [\dhmins ]+ left|time left not known yet)$"
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_step_is_named_then_reported_every_interval_then_done() -> None:
    clock = Clock()
    out = io.StringIO()
    display = PlainDisplay(out, delay_s=5, interval_s=30, clock=clock)
    short = display.add_task("quick step", total=10, unit="items")
    clock.now = 4.9
    display.tick()
    display.remove_task(short)
    assert out.getvalue() == ""  # done before its delay: nothing written

    step = display.add_task("reading trace", total=400, unit="MiB")
    display.advance(step, 100)
    clock.now += 5
    display.tick()
    clock.now += 29
    display.tick()  # under the interval: nothing new
    display.update(step, completed=300)
    clock.now += 1
    display.tick()
    display.update(step, description="reading trace, part 2")  # a renamed step: said at once
    display.remove_task(step)
    assert out.getvalue().splitlines() == [
        "fcctl: reading trace: 100/400 MiB (25%), 5 s elapsed, about 15 s left",
        "fcctl: reading trace: 300/400 MiB (75%), 35 s elapsed, about 12 s left",
        "fcctl: reading trace, part 2: 300/400 MiB (75%), 35 s elapsed, about 12 s left",
        "fcctl: reading trace, part 2: done in 35 s",
    ]
    for line in out.getvalue().splitlines()[:3]:
        assert PROGRESS_LINE.match(line), line


def test_a_step_ended_by_an_error_says_it_stopped() -> None:
    buf = io.StringIO()
    with Progress(enabled=True, console=Console(file=buf), interval_s=0.05) as p:
        with pytest.raises(KeyboardInterrupt), p.task("work", total=10, unit="items") as t:
            t.advance(5)
            for _ in range(400):  # until the step is named (bounded; no time is asserted)
                if "fcctl: work:" in buf.getvalue():
                    break
                time.sleep(0.01)
            raise KeyboardInterrupt
    assert buf.getvalue().splitlines()[-1].startswith("fcctl: work: stopped after ")
    assert "done in" not in buf.getvalue()


def test_a_step_without_a_total_says_what_it_did_and_for_how_long() -> None:
    clock = Clock()
    out = io.StringIO()
    display = PlainDisplay(out, delay_s=1, interval_s=60, clock=clock)
    step = display.add_task("flattening block accesses")
    clock.now = 90
    display.tick()
    clock.now = 3700
    display.tick()
    assert out.getvalue().splitlines() == [
        "fcctl: flattening block accesses: 1 min 30 s elapsed",
        "fcctl: flattening block accesses: 1 h 01 min elapsed",
    ]
    display.remove_task(step)


def test_progress_off_a_terminal_writes_lines_and_no_control_codes() -> None:
    buf = io.StringIO()
    with Progress(enabled=True, console=Console(file=buf), interval_s=0.05) as p:
        assert not p.active  # no bar: plain lines
        with p.task("work", total=10, unit="items") as t:
            t.advance(5)
            # Wait for the display's thread: the step runs past its delay (0.05 s) and a line
            # about it is written. Bounded, and what is asserted is the line, not the time.
            for _ in range(400):
                if "fcctl: work: 5/10 items" in buf.getvalue():
                    break
                time.sleep(0.01)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("fcctl: work: 5/10 items (50%), ")
    assert lines[-1].startswith("fcctl: work: done in ")
    assert "\x1b" not in buf.getvalue() and "\r" not in buf.getvalue()


def test_the_interval_comes_from_the_environment_and_a_bad_one_is_refused_by_name() -> None:
    assert interval_from_env({}) == DEFAULT_INTERVAL_S
    assert interval_from_env({INTERVAL_ENV: " "}) == DEFAULT_INTERVAL_S
    assert interval_from_env({INTERVAL_ENV: "0.5"}) == 0.5
    assert interval_from_env({INTERVAL_ENV: "0"}) == 0  # no lines
    for bad in ("-3", "nan", "inf", "soon"):
        with pytest.raises(FcctlInputError, match=rf"^{INTERVAL_ENV}: must be a number"):
            interval_from_env({INTERVAL_ENV: bad})
    assert [duration(s) for s in (0.4, 59.6, 61, 3599, 7260)] == [
        "0 s",
        "1 min 00 s",
        "1 min 01 s",
        "59 min 59 s",
        "2 h 01 min",
    ]


def test_an_interval_of_0_writes_no_lines() -> None:
    buf = io.StringIO()
    with Progress(enabled=True, console=Console(file=buf), interval_s=0) as p:
        with p.task("work", total=10, unit="items") as t:
            t.advance(5)
            time.sleep(0.2)
    assert buf.getvalue() == ""


def run_piped(*args: str | Path, interval: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), INTERVAL_ENV: interval},
        cwd=cwd,
        timeout=300,
    )


def test_replay_with_stderr_piped_reports_its_steps_as_plain_lines(tmp_path: Path) -> None:
    done = run_piped("replay", MOONCAKE, "--rates", "0.5", interval="0.05", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith("fcctl: ") for line in lines), lines
    assert "\x1b" not in done.stderr and "\r" not in done.stderr  # no bar drawn into a file
    replaying = [m for m in map(PROGRESS_LINE.match, lines) if m and m["step"] == "replaying"]
    assert replaying, lines  # the simulation: how far, of how many requests, and time left
    assert all(m["total"] == replaying[0]["total"] for m in replaying)
    assert "fcctl: replaying: done in" in done.stderr
    assert "GPU hit" in done.stdout  # the data is on stdout as before


def test_a_bad_interval_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_piped("analyze", MOONCAKE, "--json", interval="often", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"fcctl: error: {INTERVAL_ENV}: must be a number of seconds >= 0 (the most time "
        "between two progress lines when stderr is not a terminal; 0: none); got 'often'"
    ]
    assert done.stdout == ""
