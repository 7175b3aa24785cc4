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


def test_help_shows_each_command_purpose_whole() -> None:
    from fcctl.cli import app

    result = subprocess.run(
        [sys.executable, "-m", "fcctl", "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    commands = result.stdout.split("Commands:")[1]
    assert "..." not in commands  # click cuts a purpose at 45 characters with "..."
    for info in app.registered_commands:
        assert info.callback is not None and info.callback.__doc__
        purpose = " ".join(info.callback.__doc__.strip().split("\n\n")[0].split())
        # rich/click wrap long lines; compare with whitespace and wrap hyphens folded.
        assert purpose.replace("-", "") in text.replace("- ", "").replace("-", ""), purpose


def test_cli_turns_numpy_huge_page_advice_off_unless_the_user_set_it() -> None:
    import os
    import subprocess
    import sys

    code = "import fcctl.cli, os; print(os.environ['NUMPY_MADVISE_HUGEPAGE'])"
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "0", got.stderr
    env["NUMPY_MADVISE_HUGEPAGE"] = "1"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "1", got.stderr
