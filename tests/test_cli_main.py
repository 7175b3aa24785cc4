"""The console entry point (`fcctl` / `python -m fcctl`): usage errors are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _fcctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fcctl", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["iobench", "--no-such-flag"], "No such option: --no-such-flag"),
        (["analyze"], "Missing argument 'trace'"),
        (["iobench", "--sessions", "abc"], "Invalid value for '--sessions'"),
        (["no-such-command"], "No such command"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], needle: str) -> None:
    result = _fcctl(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fcctl: error: ") and needle in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_domain_errors_keep_their_line_and_status() -> None:
    result = _fcctl("analyze", "/no/such/trace.jsonl")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "fcctl: error: /no/such/trace.jsonl: no such file or directory"
    ]


def test_bare_fcctl_shows_help_and_version_works() -> None:
    bare = _fcctl()
    assert bare.returncode == 0 and "Commands:" in bare.stdout and "analyze" in bare.stdout
    version = _fcctl("--version")
    assert version.returncode == 0 and version.stdout.startswith("fcctl ")
