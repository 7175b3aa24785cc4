"""SIGTERM and SIGHUP raised as ``KeyboardInterrupt``, so every ``finally`` cleans up for them.

Python turns Ctrl-C (SIGINT) into ``KeyboardInterrupt`` but lets SIGTERM and SIGHUP kill the
process at once: temporary ``--out`` directories, workspaces and child processes would be left
behind whenever a job runner, ``timeout`` or a closed terminal ends a run. Within
:func:`interrupts_raise` those two signals raise :class:`Interrupted` instead; the CLI's one
error handler (:mod:`fcctl.errors`) exits with its ``exit_status``, 128 + the signal number, the
shell's convention for death by that signal (143 for SIGTERM), so a caller still sees why.

Every command uses this one module (analyze, and iobench once it switches from its own copy).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: The signals turned into :class:`Interrupted`.
HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)


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


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted`; old handlers after.

    Only the main thread may install signal handlers; elsewhere the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["HANDLED_SIGNALS", "Interrupted", "interrupts_raise"]
