"""The ``fcctl`` command line: parses flags, calls one library function, renders."""

from __future__ import annotations

import importlib

import typer

from fcctl import __version__

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
_COMMAND_MODULES = ("analyze", "convert", "iobench")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
