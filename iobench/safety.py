"""Where iobench may write, whether it fits, and removing what it wrote (Ctrl-C included).

Rules:

* Without ``--dir``: a new directory under the system temp dir (``fcctl-iobench-*``).
* With ``--dir D``: ``D`` must be a directory, or not exist yet with an existing parent (then we
  create it, and remove it at the end if it is empty). A non-empty ``D`` needs ``--force``. In
  every case the benchmark writes only inside a fresh subdirectory ``D/fcctl-iobench-*`` that it
  creates, and removes only that subdirectory.
* Free space: refuse when ``bytes_needed > free - margin`` where the margin is ``--free-margin``
  or, by default, ``max(1 GiB, 5% of the filesystem)`` (``shutil.disk_usage`` of ``D``, or of
  its parent when ``D`` does not exist yet).
* Ownership: each run directory holds :data:`LOCK_NAME` (``pid start_time``, the start time in
  clock ticks since boot from ``/proc/PID/stat``, so a reused pid is not mistaken for the owner).
  A run directory whose owner is gone (a run killed with SIGKILL) is removed by the next run in
  the same place, which says so; one without a readable lock is named with the command that
  removes it. Neither silently blocks the next run.
* Cleanup: :meth:`Workspace.cleanup` in a ``finally``; the one signal mechanism,
  :mod:`fcctl.common.signals` (which the CLI wraps every command in), turns SIGTERM and SIGHUP
  into ``KeyboardInterrupt`` (as Ctrl-C already is) so the ``finally`` runs for them too.
  While files are removed, SIGINT, SIGTERM and SIGHUP are held (a second
  Ctrl-C prints "cleaning up, please wait" and does not abort the removal; the run then still
  ends as interrupted). ``--keep`` leaves the files and says where they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fcctl.common.errors import FcctlInputError
from fcctl.common.signals import first_interrupt_raises as _first_interrupt_raises
from fcctl.common.signals import held_signals as _held_signals
from fcctl.common.signals import interruption

#: Warnings of a run; the CLI shows them on stderr (fcctl.errors.library_log_shown).
log = logging.getLogger(__name__)

GiB = 2**30
MARGIN_MIN_BYTES = 1 * GiB
MARGIN_FRACTION = 0.05
PREFIX = "fcctl-iobench-"
LOCK_NAME = ".fcctl-iobench.lock"
KEPT_NAME = ".fcctl-iobench.kept"  # a --keep run's directory: never removed by a later run


def margin_bytes(total_bytes: int, margin: int | None = None) -> int:
    """The free space a run leaves: ``margin`` when given, else max(1 GiB, 5% of the total)."""
    if margin is not None:
        return margin
    return max(MARGIN_MIN_BYTES, int(total_bytes * MARGIN_FRACTION))


def check_free_space(path: Path, bytes_needed: int, margin: int | None = None) -> None:
    usage = shutil.disk_usage(path)
    keep = margin_bytes(usage.total, margin)
    room = usage.free - keep
    if bytes_needed > room:
        rule = (
            f"`free_margin_bytes` {keep}"
            if margin is not None
            else "max(1 GiB, 5%), `free_margin_bytes`"
        )
        raise FcctlInputError(
            f"directory: {path}: not enough free space: the benchmark writes {bytes_needed} "
            f"bytes, free space minus the margin ({rule}) is {max(room, 0)} bytes; "
            f"lower `size_limit_bytes` or the workload; got {usage.free} bytes free",
            parameter="directory",
        )


def held_signals(
    record: Callable[[int], None] | None = None,
) -> contextlib.AbstractContextManager[None]:
    """:func:`fcctl.common.signals.held_signals`, answering as ``iobench``."""
    return _held_signals(record, label="iobench")


def first_interrupt_raises(
    *, ignore_after: bool = False
) -> contextlib.AbstractContextManager[None]:
    """:func:`fcctl.common.signals.first_interrupt_raises`, answering as ``iobench``."""
    return _first_interrupt_raises(ignore_after=ignore_after, label="iobench")


# ----------------------------------------------------------------------------- ownership


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22); None when
    there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def write_lock(root: Path) -> None:
    """Record this process as the owner of the run directory ``root``."""
    me = os.getpid()
    (root / LOCK_NAME).write_text(f"{me} {process_start_ticks(me) or 0}\n")


def lock_owner_alive(root: Path) -> bool | None:
    """True while the process that made run directory ``root`` runs, False when it is gone,
    None when ``root`` has no readable lock (made by another tool or an older fcctl)."""
    try:
        pid_text, start_text = (root / LOCK_NAME).read_text().split()[:2]
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return None
    now = process_start_ticks(pid)
    return now is not None and (start == 0 or now == start)


@dataclass(frozen=True)
class Leftovers:
    """Run directories found beside a new run: removed (owner gone) and of unknown owner."""

    removed: tuple[Path, ...] = ()
    unknown: tuple[Path, ...] = ()


def clear_leftovers(base: Path) -> Leftovers:
    """Remove the ``fcctl-iobench-*`` run directories in ``base`` whose owner is gone."""
    removed, unknown = [], []
    try:
        candidates = sorted(p for p in base.iterdir() if p.name.startswith(PREFIX))
    except OSError:
        return Leftovers()
    for p in candidates:
        if not p.is_dir() or p.is_symlink() or (p / KEPT_NAME).exists():
            continue
        alive = lock_owner_alive(p)
        if alive is False:
            shutil.rmtree(p, ignore_errors=True)
            if not p.exists():
                removed.append(p)
                continue
            unknown.append(p)  # could not remove it: say so, with the command
        elif alive is None:
            unknown.append(p)
    return Leftovers(tuple(removed), tuple(unknown))


def remove_command(paths: tuple[Path, ...]) -> str:
    return "rm -rf " + " ".join(shlex.quote(str(p)) for p in paths)


def _report_leftovers(found: Leftovers) -> None:
    for p in found.removed:
        log.warning("iobench: removed %s, left by an earlier run that was killed", p)
    if found.unknown:
        log.warning(
            "iobench: note: %d run directories of unknown owner left in %s; if no iobench is "
            "running, remove them with: %s",
            len(found.unknown),
            found.unknown[0].parent,
            remove_command(found.unknown),
        )


@dataclass
class Workspace:
    """The directory the benchmark writes in, and what to remove at the end."""

    root: Path
    created_parent: Path | None = None
    keep: bool = False
    cleaned: bool = False
    # Signal numbers that arrived during cleanup (held, not lost: the caller re-raises).
    held_signals: list[int] = field(default_factory=list)

    def cleanup(self) -> None:
        """Remove the run directory; SIGINT, SIGTERM and SIGHUP wait until it is gone."""
        if self.cleaned:
            return
        if self.keep:
            # Kept files are the user's now: no later run may take them for a killed run's.
            with contextlib.suppress(OSError):
                (self.root / KEPT_NAME).write_text("kept with --keep\n")
                (self.root / LOCK_NAME).unlink()
            return
        with self.hold_signals():
            shutil.rmtree(self.root, ignore_errors=True)
            if self.created_parent is not None:
                with contextlib.suppress(OSError):
                    self.created_parent.rmdir()  # only when empty
        self.cleaned = True

    @contextlib.contextmanager
    def hold_signals(self) -> Iterator[None]:
        """Within the block SIGINT, SIGTERM and SIGHUP are recorded, not raised (see
        :func:`held_signals`); the first one is re-raised by :meth:`raise_held`."""
        with held_signals(self.held_signals.append):
            yield

    def raise_held(self) -> None:
        """After a clean finish: a signal that arrived during cleanup still ends the run."""
        if not self.held_signals:
            return
        raise interruption(self.held_signals[0])


def prepare_workspace(
    directory: Path | None,
    *,
    force: bool = False,
    keep: bool = False,
    bytes_needed: int = 0,
    margin: int | None = None,
) -> Workspace:
    """Check ``directory`` and the free space, then create the private subdirectory.

    Run directories left by a killed run (owner gone) are removed first, so they neither fill
    the disk nor make ``directory`` look non-empty.
    """
    if directory is None:
        base = Path(tempfile.gettempdir())
        _report_leftovers(clear_leftovers(base))
        check_free_space(base, bytes_needed, margin)
        return _new_workspace(base, None, keep)
    directory = Path(directory)
    created: Path | None = None
    if directory.exists():
        if not directory.is_dir():
            raise FcctlInputError(
                f"directory: must be a directory; got a file {str(directory)!r}",
                parameter="directory",
            )
        found = clear_leftovers(directory)
        for p in found.removed:
            log.warning("iobench: removed %s, left by an earlier run that was killed", p)
        if any(directory.iterdir()) and not force:
            hint = ""
            if found.unknown:
                hint = (
                    f"; it holds run directories of an earlier iobench whose owner is unknown: "
                    f"if no iobench is running, remove them with: {remove_command(found.unknown)}"
                )
            raise FcctlInputError(
                f"directory: not empty (pass `force` to use it; iobench then writes only "
                f"in a new subdirectory){hint}; got {str(directory)!r}",
                parameter="directory",
            )
        if force:
            _report_leftovers(Leftovers(unknown=found.unknown))
        check_free_space(directory, bytes_needed, margin)
    else:
        parent = directory.parent
        if not parent.is_dir():
            raise FcctlInputError(
                f"directory: the parent directory does not exist; got {str(directory)!r}",
                parameter="directory",
            )
        check_free_space(parent, bytes_needed, margin)
        try:
            directory.mkdir()
        except OSError as e:
            raise FcctlInputError(
                f"directory: cannot create it ({e.strerror}); got {str(directory)!r}",
                parameter="directory",
            ) from None
        created = directory
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FcctlInputError(
            f"directory: not writable; got {str(directory)!r}", parameter="directory"
        )
    return _new_workspace(directory, created, keep)


def _new_workspace(base: Path, created: Path | None, keep: bool) -> Workspace:
    # The name is chosen before the directory is made (not mkdtemp), so an interrupt that
    # lands right after the mkdir still finds it to remove.
    while True:
        root = base / f"{PREFIX}{secrets.token_hex(4)}"
        try:
            os.mkdir(root, 0o700)
            write_lock(root)
        except FileExistsError:  # only mkdir raises it: another run's name, not ours
            continue
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return Workspace(root, created, keep)
