"""A message never names a flag its command does not have (the trial found replay naming
``--now-s``, a storage-core parameter reached through the simulation)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.errors import cli_errors, command_flags
from fcctl.layout.errors import InputError
from tests.conftest import REPO

FLAG = re.compile(r"--[a-z][a-z0-9-]+")


def help_flags(command: str) -> set[str]:
    """The flags ``fcctl COMMAND --help`` lists (its options' declarations)."""
    group = typer.main.get_command(app)
    params = group.commands[command].params  # type: ignore[attr-defined]
    flags = {o for p in params for o in [*p.opts, *p.secondary_opts] if o.startswith("--")}
    done = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert done.exit_code == 0 and all(f in done.output for f in flags), done.output
    return flags - {"--help"}


def raised_flags(path: Path) -> set[str]:
    """Every ``--flag`` in the string literals of ``raise`` statements of ``path``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for sub in ast.walk(node.exc):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    found.update(FLAG.findall(sub.value))
    return found


def _callbacks():
    for info in app.registered_commands:
        yield info.name, info.callback


@pytest.mark.parametrize("name", [n for n, _ in _callbacks()])
def test_the_flags_read_from_a_command_are_those_of_its_help(name):
    callback = dict(_callbacks())[name]
    assert command_flags(callback.__wrapped__) == help_flags(name)


@pytest.mark.parametrize(
    ("command", "sources"),
    [
        ("replay", ["analyzers/replay", "fcctl/commands/replay.py"]),
        ("recommend-thresholds", ["analyzers/recommend", "fcctl/commands/recommend.py"]),
    ],
)
def test_every_flag_named_in_replay_and_recommend_messages_exists(command, sources):
    flags = help_flags(command)
    if command == "replay":
        # recommend-thresholds runs replay's simulation, so its messages may name its flags
        flags |= help_flags("recommend-thresholds")
    for source in sources:
        root = REPO / source
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            missing = raised_flags(path) - flags
            assert not missing, f"{path.relative_to(REPO)} names {sorted(missing)}"


def _app_raising(parameter: str) -> typer.Typer:
    demo = typer.Typer()

    @demo.command("demo")
    @cli_errors
    def demo_command(
        rates: Annotated[str, typer.Option("--rates")] = "1",
    ) -> None:
        raise InputError(f"{parameter}: the clock must not go back; got 1.0", parameter=parameter)

    @demo.command("other")
    def other() -> None:  # a second command, so typer keeps the command names
        pass

    return demo


def test_a_parameter_without_a_flag_keeps_its_own_name():
    done = CliRunner().invoke(_app_raising("now_s"), ["demo"])
    assert done.exit_code == 2
    assert "fcctl: error: now_s: the clock must not go back" in done.output
    assert "--now-s" not in done.output


def test_a_parameter_with_a_flag_is_shown_as_the_flag():
    done = CliRunner().invoke(_app_raising("rates"), ["demo"])
    assert done.exit_code == 2
    assert "fcctl: error: --rates: the clock must not go back" in done.output
