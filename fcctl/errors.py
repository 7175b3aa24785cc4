"""The one error handler: every error a command can meet, mapped to one line and an exit status.

| what | status |
|---|---|
| bad input: any :class:`~fcctl.layout.errors.InputError` (a trace, a flag, a file, a size) | 2 |
| the run failed on this machine: :class:`~fcctl.common.errors.RunFailed` (disk, fio) | 1 |
| Ctrl-C | 130 |
| SIGTERM / SIGHUP turned into ``KeyboardInterrupt`` with ``exit_status`` (128 + N) | 128 + N |

Library code raises these and never exits. The storage core's messages name parameters
(``kv_dtype: ...``); the handler shows them as the command's flag (``--kv-dtype: ...``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, TypeVar, overload

import typer

from fcctl.common.errors import InputError, RunFailed
from fcctl.common.signals import interrupt_in_chain

F = TypeVar("F", bound=Callable[..., Any])

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``fcctl: error: <message>`` (one line) to stderr; return the Exit to raise."""
    one_line = " ".join(str(message).split())
    print(f"fcctl: error: {one_line}", file=sys.stderr)
    return typer.Exit(code)


#: Library (and :mod:`fcctl.api`) parameters whose flag is not ``--name-with-dashes``: the one
#: place where a parameter named in a message becomes the flag the user typed.
FLAGS: Mapping[str, str] = {
    "config_path": "--model-config",
    "memory_capacities_bytes": "--memory",
    "rate_requests_per_s": "--rate",
    "flat_session_kv_bytes": "--flat-session-kv",
    "reference_capacity_bytes": "--reference-capacity",
    "memory_budget_bytes": "--memory-budget",
    "short_reply_tokens": "--short-reply",
    "agent_context_tokens": "--agent-context",
    "short_reply_grid": "--short-reply",
    "agent_context_grid": "--agent-context",
    "gpu_kv_bytes": "--gpu-kv",
    "host_memory_bytes": "--host-memory",
    "ssd_bytes": "--ssd",
    "staging_bytes": "--staging",
    "size_limit_bytes": "--size-limit",
    "bucket_bytes": "--bucket-size",
    "memory_tier_bytes": "--memory-tier",
    "max_command_bytes": "--max-command",
    "free_margin_bytes": "--free-margin",
    "engine_threads": "--threads",
    "fio_runtime_s": "--fio-runtime",
    "slo_ttft_p99_s": "--slo-ttft-p99",
    "operating_rate": "--rate",
}


def flag_for(parameter: str, flags: Mapping[str, str] | None = None) -> str:
    """The command-line flag of a library parameter: ``kv_dtype`` -> ``--kv-dtype``.

    ``flags`` (one command's exceptions) win over :data:`FLAGS`.
    """
    if flags and parameter in flags:
        return flags[parameter]
    if parameter in FLAGS:
        return FLAGS[parameter]
    return "--" + parameter.replace("_", "-")


def input_error_message(
    e: InputError,
    flags: Mapping[str, str] | None = None,
    command_flags: Collection[str] | None = None,
) -> str:
    """The message of ``e``, its leading parameter name replaced by the flag.

    ``command_flags`` (the flags the command has): a parameter whose flag is not among them
    keeps its own name, so a message never names a flag the command does not have (a storage
    core check, ``now_s: ...``, reached through replay's simulation is not ``--now-s``).
    """
    text = str(e)
    parameter = getattr(e, "parameter", None)
    if parameter and text.startswith(f"{parameter}:"):
        flag = flag_for(parameter, flags)
        if command_flags is None or flag in command_flags:
            text = flag + text[len(parameter) :]
    return text


def command_flags(func: Callable[..., Any]) -> frozenset[str] | None:
    """Every flag of a typer command function (from its ``typer.Option`` annotations); None
    when they cannot be read."""
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # a name the annotations use is not importable here: no filtering
        return None
    found: set[str] = set()
    for name, hint in hints.items():
        metadata = getattr(hint, "__metadata__", ())
        options = [m for m in metadata if isinstance(m, typer.models.OptionInfo)]
        for option in options:
            decls = [*(option.param_decls or ())]
            if isinstance(option.default, str) and option.default.startswith("-"):
                decls.append(option.default)
            for decl in decls or ["--" + name.replace("_", "-")]:
                found.update(d for d in decl.split("/") if d.startswith("--"))
    return frozenset(found)


def exit_status_of(e: BaseException) -> int:
    """The exit status for an error (see the table above); 1 for anything else."""
    if isinstance(e, InputError):
        return EXIT_BAD_INPUT
    if isinstance(e, KeyboardInterrupt):
        return int(getattr(e, "exit_status", EXIT_INTERRUPTED))
    return EXIT_RUN_FAILED


class EntryPoint:
    """Whether commands run in a process that ends with them: within
    :meth:`process_ends_with_command`, the block the console entry point
    (:func:`fcctl.cli.main`) runs the command in."""

    ending = False

    @classmethod
    @contextlib.contextmanager
    def process_ends_with_command(cls) -> Iterator[None]:
        cls.ending = True
        try:
            yield
        finally:
            cls.ending = False


def _wrap(func: F, flags: Mapping[str, str] | None) -> F:
    label = func.__name__.replace("_", "-")
    own: list[frozenset[str] | None] = []  # read on the first error, not at every start

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from fcctl.common.signals import first_interrupt_raises

        try:
            # Every command: the first SIGINT, SIGTERM or SIGHUP raises, so temporary outputs
            # and child processes go in the ``finally`` blocks on the way out; later ones only
            # say "cleaning up". In the fcctl process they stay ignored once the command is
            # ending (a Ctrl-C in its last steps prints no traceback); run inside another
            # process (typer's CliRunner, app() from Python), the command gives that process
            # its handlers back, or it could never be interrupted again.
            with first_interrupt_raises(ignore_after=EntryPoint.ending, label=label):
                return func(*args, **kwargs)
        except InputError as e:
            if not own:
                own.append(command_flags(func))
            raise fail(input_error_message(e, flags, own[0]), EXIT_BAD_INPUT) from None
        except RunFailed as e:
            raise fail(str(e), EXIT_RUN_FAILED) from None
        except KeyboardInterrupt as e:
            raise _interrupted(e) from None
        except Exception as e:
            # An interrupt raised inside a C extension's call back into Python (numba loading
            # its cache, a polars UDF) reaches us wrapped: SystemError "returned a result with
            # an exception set", the KeyboardInterrupt as its cause.
            interrupt = interrupt_in_chain(e)
            if interrupt is None:
                raise
            raise _interrupted(interrupt) from None

    return wrapper  # type: ignore[return-value]


def _interrupted(e: KeyboardInterrupt) -> typer.Exit:
    # Ctrl-C: 130; a signal turned into KeyboardInterrupt carries its own 128 + N.
    name = getattr(e, "signal_name", "")
    print(f"fcctl: interrupted{f' by {name}' if name else ''}", file=sys.stderr)
    return typer.Exit(exit_status_of(e))


@overload
def cli_errors(func: F) -> F: ...
@overload
def cli_errors(*, flags: Mapping[str, str]) -> Callable[[F], F]: ...
def cli_errors(func: F | None = None, *, flags: Mapping[str, str] | None = None) -> Any:
    """Decorate a command: bad input becomes one line and exit 2, never a traceback; a failed
    run one line and exit 1; SIGINT, SIGTERM and SIGHUP interrupt it (its ``finally`` blocks
    remove temporary outputs and stop child processes) with exit 130, 143 and 129.

    ``flags`` maps library parameter names to this command's flags where the rule
    ``kv_dtype`` -> ``--kv-dtype`` does not hold (``{"config_path": "--model-config"}``).
    """
    if func is not None:
        return _wrap(func, None)
    return lambda f: _wrap(f, flags)
