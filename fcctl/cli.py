"""The ``fcctl`` command line: parses flags, calls one library function, renders."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Protocol, cast

# Before numpy is imported: numpy asks the kernel for transparent huge pages on large arrays
# (madvise), and where THP defrag is "madvise" every first touch of such an array compacts
# memory synchronously. Measured on this project's VM: the bounded analysis of 100 M accesses
# 29.1 s -> 21.2 s, of 1 B accesses 394 s -> 288 s, same peak RSS and figures
# (docs/benchmarks.md, "Scale"). A value the user set is kept.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

import typer

from fcctl.common.version import __version__
from fcctl.errors import EntryPoint

app = typer.Typer(
    name="fcctl",
    help="Decide where LLM KV cache lives: host memory, SSD, or both.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Each module defines register(app). Imported here, but each keeps its heavy imports inside
# the command body so `fcctl --help` stays fast and never touches torch or kvikio.
_COMMAND_MODULES = (
    "analyze",
    "convert",
    "iobench",
    "recommend",
    "replay",
    "plan",
    "report",
    "synth",
)


def _version(value: bool) -> None:
    if value:
        print(f"fcctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Decide where LLM KV cache lives: host memory, SSD, or both."""


for _name in _COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"fcctl.commands.{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"fcctl.commands.{_name}":
            raise
        continue
    _mod.register(app)

# `fcctl --help` lists each command with its whole purpose (the docstring's first line); left to
# click, the line is cut at 45 characters with "...".
for _info in app.registered_commands:
    if _info.short_help is None:
        _doc = _info.help or (_info.callback.__doc__ if _info.callback else None) or ""
        _info.short_help = " ".join(_doc.strip().split("\n\n")[0].split())


class _ClickException(Protocol):
    """What main() uses of click's ClickException (typer's vendored copy or click's own)."""

    exit_code: int

    def format_message(self) -> str: ...


def _click_exception() -> type[Exception]:
    # typer >= 0.29 vendors click, older releases depend on it; either way BadParameter derives
    # from the ClickException that the parser raises for every usage error.
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    """Console entry point: usage errors, like every other bad input, are one line, exit 2."""
    click_exception = _click_exception()
    try:
        with EntryPoint.process_ends_with_command():  # this process exits when app() returns
            rv = app(standalone_mode=False)
    except click_exception as exc:
        # Statically only an Exception: the class is looked up at run time (see above).
        e = cast(_ClickException, exc)
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `fcctl`: show the help
            print(e.format_message())
            sys.exit(0)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        one_line = " ".join(f"{where}{e.format_message()}{hint}".split())
        print(f"fcctl: error: {one_line}", file=sys.stderr)
        sys.exit(e.exit_code)
    except typer.Abort:
        print("fcctl: aborted", file=sys.stderr)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
