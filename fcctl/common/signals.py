"""SIGINT, SIGTERM and SIGHUP raised as ``KeyboardInterrupt``, so every ``finally`` cleans up.

Python turns Ctrl-C (SIGINT) into ``KeyboardInterrupt`` but lets SIGTERM and SIGHUP kill the
process at once: temporary ``--out`` directories, workspaces and child processes would be left
behind whenever a job runner, ``timeout`` or a closed terminal ends a run. This module is the one
place that changes that, for every command:

* :func:`first_interrupt_raises` (what the CLI's one handler, :func:`fcctl.errors.cli_errors`,
  wraps every command in): the first SIGINT raises ``KeyboardInterrupt``, the first SIGTERM or
  SIGHUP :class:`Interrupted`; every later one is only answered with "cleaning up, please wait",
  so a second Ctrl-C never cuts the unwinding (removing temporary outputs, stopping child
  processes) short.
* :func:`held_signals`: a block that must finish (removing files, terminating a child) records
  the three signals instead of raising.
* :func:`interrupts_raise`: SIGTERM and SIGHUP raise :class:`Interrupted` within a block (SIGINT
  keeps Python's own handler), for library callers outside the CLI.

The CLI exits with ``exit_status``: 130 for Ctrl-C, 128 + the signal number otherwise (143 for
SIGTERM), the shell's convention for death by that signal, so a caller still sees why.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

#: The signals turned into :class:`Interrupted` (SIGINT is Python's ``KeyboardInterrupt``).
HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)
#: Every signal that interrupts a command.
INTERRUPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, *HANDLED_SIGNALS)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every ``finally`` cleans up.

    ``exit_status`` is 128 + the signal number (143 for SIGTERM, 129 for SIGHUP) rather than
    Ctrl-C's 130; ``signal_name`` (``"SIGTERM"``) is what the CLI's one-line message names.
    """

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"signal {name}")
        self.signal_name = name
        self.exit_status = 128 + int(signum)


def interruption(signum: int) -> KeyboardInterrupt:
    """What a signal raises: ``KeyboardInterrupt`` for SIGINT, else :class:`Interrupted`."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Interrupted(signum)


def interrupt_in_chain(e: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt among ``e`` and its causes and contexts, if any.

    An interrupt raised inside a C extension's call back into Python (numba loading its
    cache, a polars UDF) surfaces wrapped: ``SystemError: ... returned a result with an
    exception set``, the KeyboardInterrupt as its cause.
    """
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted`; old handlers after.

    Only the main thread may install signal handlers; elsewhere the block runs unchanged, as it
    does inside :func:`first_interrupt_raises` (whose handlers already raise).
    """
    if not _in_main_thread() or getattr(_interrupt_scope, "active", False):
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say_cleaning_up(label: str) -> None:
    # Said even without progress: the user pressed a key and deserves an answer.
    print(f"{label}: cleaning up, please wait", file=sys.stderr, flush=True)


@contextlib.contextmanager
def held_signals(
    record: Callable[[int], None] | None = None, *, label: str = "fcctl"
) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP do not interrupt the block (cleanup that must finish: removing
    files, terminating a child); each one is passed to ``record`` and answered with
    "``label``: cleaning up, please wait" on stderr. Old handlers come back after. Main thread
    only (elsewhere the block runs unchanged, as signals are delivered to the main thread)."""
    if not _in_main_thread():
        yield
        return

    def hold(signum: int, frame: object) -> None:
        if record is not None:
            record(signum)
        _say_cleaning_up(label)

    previous = {sig: signal.signal(sig, hold) for sig in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# Whether a first_interrupt_raises block is active (the outermost one handles the signals).
_interrupt_scope = threading.local()


def _in_finalizer(frame: object) -> bool:
    """Whether ``frame`` (where a signal handler was entered) runs inside a ``__del__``."""
    f = frame
    while f is not None:
        if getattr(getattr(f, "f_code", None), "co_name", None) == "__del__":
            return True
        f = getattr(f, "f_back", None)
    return False


@contextlib.contextmanager
def first_interrupt_raises(*, ignore_after: bool = False, label: str = "fcctl") -> Iterator[None]:
    """Within the block the first SIGINT, SIGTERM or SIGHUP raises (``KeyboardInterrupt``, or
    :class:`Interrupted` with its 128 + N exit status); every later one is only answered with
    "``label``: cleaning up, please wait".

    So once a run is being interrupted, a second Ctrl-C can never land in the unwinding (closing
    engines, terminating children, removing files, printing the error) and cut it short.
    Nested blocks share the outermost one's handlers. ``ignore_after``: after an interrupt,
    leave the signals ignored instead of restoring the old handlers (for a CLI about to exit,
    so a Ctrl-C during its last steps prints no traceback). Main thread only.
    """
    if not _in_main_thread() or getattr(_interrupt_scope, "active", False):
        yield
        return
    raised = False

    def handle(signum: int, frame: object) -> None:
        nonlocal raised
        if raised:
            _say_cleaning_up(label)
            return
        if _in_finalizer(frame):
            # Python ignores an exception raised in a __del__ (numba's LLVM objects free
            # themselves there): the interrupt would be lost and the run end with 0. Send the
            # signal again once the finalizer has returned.
            threading.Timer(0.05, signal.raise_signal, (signum,)).start()
            return
        raised = True
        raise interruption(signum)

    previous = {sig: signal.signal(sig, handle) for sig in INTERRUPT_SIGNALS}
    _interrupt_scope.active = True
    try:
        yield
    finally:
        _interrupt_scope.active = False
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if raised and ignore_after else handler)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block ends, then take effect as usual (sent
    again to this process, so the handlers in force then, e.g. :func:`first_interrupt_raises`,
    see them). For steps that must not be cut in two: a rename pair, a child's start. Main
    thread only."""
    if not _in_main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda n, f: arrived.append(n)) for sig in INTERRUPT_SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if arrived:
        signal.raise_signal(arrived[0])


@contextlib.contextmanager
def starting_children() -> Iterator[None]:
    """Start worker processes (fork + exec) within the block without signals in the way.

    Interrupts are deferred (:func:`deferred_interrupts`) until the block ends, so none cuts a
    start short (a child fed half its start-up data prints a traceback). SIGINT, SIGTERM and
    SIGHUP are also blocked in this thread, and a blocked mask survives ``fork`` and ``exec``:
    each child starts with the three blocked, and should call :func:`worker_ignores_sigint`
    once it runs. Ctrl-C reaches a terminal's whole process group; the workers would otherwise
    each print a traceback while the parent, which owns them, stops them itself.
    """
    if not _in_main_thread():
        yield
        return
    with deferred_interrupts():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(INTERRUPT_SIGNALS))
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored (process-wide) while processes start that another thread launches (a Dask
    LocalCluster starts its workers from its event loop's thread, so :func:`starting_children`,
    which blocks signals in the calling thread, cannot reach them); they inherit ``SIG_IGN``.

    A Ctrl-C at the terminal goes to the whole process group: the workers leave it to this
    process, which closes them, instead of dying half-started with tracebacks of their own. A
    Ctrl-C in this window (about a second) is lost; the next one stops the run. Main thread
    only.
    """
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_ignores_sigint() -> None:
    """In a worker started by :func:`starting_children`: ignore SIGINT for good (the parent
    stops its workers itself on Ctrl-C), and let SIGTERM and SIGHUP end it again (the parent
    stops it with SIGTERM; one sent meanwhile is delivered now)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(HANDLED_SIGNALS))


__all__ = [
    "HANDLED_SIGNALS",
    "INTERRUPT_SIGNALS",
    "Interrupted",
    "first_interrupt_raises",
    "held_signals",
    "interrupt_in_chain",
    "interruption",
    "interrupts_raise",
    "sigint_ignored",
]
