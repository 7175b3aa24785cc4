"""Where iobench may write, whether it fits, and removing what it wrote (Ctrl-C included).

Rules:

* Without ``--dir``: a new directory under the system temp dir (``fcctl-iobench-*``).
* With ``--dir D``: ``D`` must be a directory, or not exist yet with an existing parent (then we
  create it, and remove it at the end if it is empty). A non-empty ``D`` needs ``--force``. In
  every case the benchmark writes only inside a fresh subdirectory ``D/fcctl-iobench-*`` that it
  creates, and removes only that subdirectory.
* Free space: refuse when ``bytes_needed > free - margin`` where
  ``margin = max(1 GiB, 5% of the filesystem)`` (``shutil.disk_usage`` of ``D``, or of its parent
  when ``D`` does not exist yet).
* Cleanup: :meth:`Workspace.cleanup` in a ``finally``; :func:`interrupts_raise` turns SIGTERM
  and SIGHUP into ``KeyboardInterrupt`` (as Ctrl-C already is) so the ``finally`` runs for them
  too. ``--keep`` leaves the files and says where they are.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fcctl.common.errors import FcctlInputError

GiB = 2**30
MARGIN_MIN_BYTES = 1 * GiB
MARGIN_FRACTION = 0.05
PREFIX = "fcctl-iobench-"


def margin_bytes(total_bytes: int) -> int:
    return max(MARGIN_MIN_BYTES, int(total_bytes * MARGIN_FRACTION))


def check_free_space(path: Path, bytes_needed: int) -> None:
    usage = shutil.disk_usage(path)
    room = usage.free - margin_bytes(usage.total)
    if bytes_needed > room:
        raise FcctlInputError(
            f"--dir {path}: not enough free space: the benchmark writes {bytes_needed} bytes, "
            f"free space minus the margin (max(1 GiB, 5%)) is {max(room, 0)} bytes; "
            f"lower --size-limit or the workload; got {usage.free} bytes free"
        )


@dataclass
class Workspace:
    """The directory the benchmark writes in, and what to remove at the end."""

    root: Path
    created_parent: Path | None = None
    keep: bool = False
    cleaned: bool = False

    def cleanup(self) -> None:
        if self.cleaned or self.keep:
            return
        shutil.rmtree(self.root, ignore_errors=True)
        if self.created_parent is not None:
            with contextlib.suppress(OSError):
                self.created_parent.rmdir()  # only when empty
        self.cleaned = True


def prepare_workspace(
    directory: Path | None,
    *,
    force: bool = False,
    keep: bool = False,
    bytes_needed: int = 0,
) -> Workspace:
    """Check ``directory`` and the free space, then create the private subdirectory."""
    if directory is None:
        base = Path(tempfile.gettempdir())
        check_free_space(base, bytes_needed)
        return Workspace(Path(tempfile.mkdtemp(prefix=PREFIX, dir=base)), keep=keep)
    directory = Path(directory)
    created: Path | None = None
    if directory.exists():
        if not directory.is_dir():
            raise FcctlInputError(f"--dir: must be a directory; got a file {str(directory)!r}")
        if any(directory.iterdir()) and not force:
            raise FcctlInputError(
                f"--dir: directory is not empty (pass --force to use it; iobench then writes only "
                f"in a new subdirectory); got {str(directory)!r}"
            )
        check_free_space(directory, bytes_needed)
    else:
        parent = directory.parent
        if not parent.is_dir():
            raise FcctlInputError(
                f"--dir: the parent directory does not exist; got {str(directory)!r}"
            )
        check_free_space(parent, bytes_needed)
        try:
            directory.mkdir()
        except OSError as e:
            raise FcctlInputError(
                f"--dir: cannot create it ({e.strerror}); got {str(directory)!r}"
            ) from None
        created = directory
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FcctlInputError(f"--dir: not writable; got {str(directory)!r}")
    return Workspace(Path(tempfile.mkdtemp(prefix=PREFIX, dir=directory)), created, keep)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every ``finally`` cleans up.

    ``exit_status`` is the shell's convention for death by that signal (128 + number), which
    the CLI exits with, so a job runner sees 143 for its SIGTERM rather than Ctrl-C's 130.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + signum


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
