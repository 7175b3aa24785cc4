"""Map domain errors to one line on stderr and exit status 2."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from fcctl.common.errors import InputError as FcctlInputError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``fcctl: error: <message>`` (one line) to stderr; return the Exit to raise."""
    one_line = " ".join(str(message).split())
    print(f"fcctl: error: {one_line}", file=sys.stderr)
    return typer.Exit(code)


def cli_errors(func: F) -> F:
    """Decorate a command: bad input becomes one line and exit 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FcctlInputError as e:
            raise fail(str(e)) from None
        except KeyboardInterrupt as e:
            # Ctrl-C: 130; a signal turned into KeyboardInterrupt carries its own 128 + N.
            name = getattr(e, "signal_name", "")
            print(f"fcctl: interrupted{f' by {name}' if name else ''}", file=sys.stderr)
            raise typer.Exit(getattr(e, "exit_status", 130)) from None

    return wrapper  # type: ignore[return-value]
