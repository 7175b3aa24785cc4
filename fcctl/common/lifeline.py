"""Processes that end with the process that owns them, even when it is killed with SIGKILL.

A parent killed with SIGKILL runs no ``finally``: it cannot stop its worker processes, and
the workers, blocked on a queue whose other end they hold themselves, would wait for ever
(issue #36, item 10: four processes left behind). So each worker ends itself:

* :func:`die_with_parent`: the kernel sends the worker a signal when its parent ends
  (``prctl(PR_SET_PDEATHSIG)`` on Linux, through ctypes);
* :func:`watch_parent`: where that is not available, or came too late (the parent died between
  the worker's start and its call), a thread notices within :data:`POLL_S` that the parent
  changed (the worker was re-parented) or that the owning process is gone, and exits.

Only the standard library is imported: a fork server imports this before any worker exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: Seconds between two looks at the parent (:func:`watch_parent`).
POLL_S = 1.0
#: The exit status of a worker that ended because its owner did.
ORPHANED_EXIT_STATUS = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent ends; True where it will
    (Linux). The parent is the thread that forked this process: a process started from a
    short-lived thread would get the signal when that thread ends, so call it only in a process
    whose parent forks from a thread that lasts (a fork server's one thread, a main thread)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc with prctl: the watch alone
        return False


def owner_gone(parent: int, owner: int | None) -> bool:
    """Whether this process's parent is no longer ``parent`` (it died and this process was
    re-parented) or the process ``owner`` no longer exists."""
    if os.getppid() != parent:
        return True
    if owner is None:
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user: not ours to judge
        return False
    return False


def watch_parent(owner: int | None = None, *, poll_s: float = POLL_S) -> None:
    """End this process (``os._exit``) once :func:`owner_gone`: now, if it already is, else
    from a daemon thread that looks every ``poll_s`` seconds."""
    parent = os.getppid()
    if owner_gone(parent, owner):
        os._exit(ORPHANED_EXIT_STATUS)

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(poll_s):
            if owner_gone(parent, owner):
                # Nothing to clean up in a worker (its outputs go to the owner, who is gone);
                # os._exit, as a thread cannot end the process otherwise.
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os._exit(ORPHANED_EXIT_STATUS)

    threading.Thread(target=watch, name="fcctl-parent-watch", daemon=True).start()


def exit_with_parent(owner: int | None = None) -> None:
    """In a worker: end when the parent ends (:func:`die_with_parent`, SIGKILL) or, as a
    fallback, within :data:`POLL_S` of the parent or ``owner`` (a pid) going away."""
    die_with_parent()
    watch_parent(owner)


__all__ = ["die_with_parent", "exit_with_parent", "owner_gone", "watch_parent"]
