"""The atomic ``--out`` directory, one rule for every command.

Everything is written into a temporary sibling of the target, which is renamed into place only
when the command succeeded, so a reader never sees half an output and a failed or interrupted
run leaves nothing (the temporary sibling is removed on every exit, signals included, as long
as the signal reaches Python as an exception). The target must be absent or an empty
directory; a non-empty one is refused unless ``force``, and even then only if it holds an
earlier output of the same command (its ``marker`` file), so a typo never wipes unrelated data.
The parent folders a run creates for its output go too when the run fails.

A command with two outputs (``recommend-thresholds --out DIR --emit PKG``) writes both inside
:func:`outputs_together`: neither is moved into place until both are complete, so a failure
while writing the second leaves neither.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.signals import deferred_interrupts, interrupt_in_chain


class OutDirError(FcctlInputError):
    """An output directory that cannot be used (exists as a file, not empty, not writable)."""


def check_out_dir(
    out: Path, *, force: bool, marker: str, command: str, flag: str = "--out"
) -> None:
    """Refuse, before any work, an ``out`` that could not be written at the end.

    That is: a non-directory, a non-empty directory (unless ``force`` and it holds ``marker``,
    the file an earlier ``command`` output always has), or a path whose nearest existing
    ancestor is not a directory we can create entries in.
    """
    out = Path(out)
    shown = repr(str(out)) if any(c < " " for c in str(out)) else str(out)
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{flag} {shown}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutDirError(
                f"{flag} {shown}: directory is not empty (pass --force to replace it)"
            )
        if not (out / marker).is_file():
            raise OutDirError(
                f"{flag} {shown}: --force replaces only an earlier {command} output (a "
                f"directory with {marker}); this one has none"
            )
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutDirError(f"{flag} {shown}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutDirError(f"{flag} {shown}: cannot create entries in {str(parent)!r} (permission)")


def make_dirs(path: Path) -> list[Path]:
    """``path`` and its missing parents created (as ``mkdir -p``); the ones this call created,
    outermost first, for :func:`remove_made` to take back after a failure."""
    missing: list[Path] = []
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    made: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue  # another process made it meanwhile: not ours to remove
        made.append(d)
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the folders :func:`make_dirs` created, innermost first, each only while empty
    (anything another process put there meanwhile stays, and so does its folder)."""
    for d in reversed(made):
        try:
            d.rmdir()
        except FileNotFoundError:
            continue  # already removed with what it held
        except OSError:
            return


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Errors of the machine, not of the input, while writing: the run failed (exit 1), the
#: command was right. Each with the words a message uses.
MACHINE_ERRNOS: Mapping[int, str] = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large",
}


def machine_failure(e: BaseException) -> str | None:
    """``"disk full"`` and the like when ``e`` is the machine failing a write, else None.

    Writers that are not Python's own (polars, pyarrow) report the errno only in their
    message: ``"... No space left on device (os error 28)"``.
    """
    if isinstance(e, OSError):
        return MACHINE_ERRNOS.get(e.errno or 0)
    text = str(e)
    for number, words in MACHINE_ERRNOS.items():
        if f"(os error {number})" in text or os.strerror(number) in text:
            return words
    return None


def write_failed(where: str, phase: str, e: BaseException) -> RunFailed | None:
    """The :class:`RunFailed` (exit 1) for a machine failure ``e`` while ``phase``, else None.

    ``where`` names the output as the user gave it (``--out X``), ``phase`` what was being
    done (``writing grid.parquet``).
    """
    words = machine_failure(e)
    if words is None:
        return None
    number = next(n for n, w in MACHINE_ERRNOS.items() if w == words)
    return RunFailed(
        f"{where}: {words} while {phase} ({os.strerror(number)}); nothing was left behind"
    )


def _fresh_sibling(target: Path, infix: str, suffix: str = "") -> Path:
    """A name beside ``target`` for a temporary (``.NAME<infix>XXXXXXXX<suffix>``).

    The name is chosen before the file or directory is made, so the caller can hold it in a
    ``try`` whose cleanup runs even when a signal lands right after the creation (with
    ``mkstemp``/``mkdtemp`` the name is lost when the interrupt comes before they return).
    """
    return target.absolute().parent / f".{target.name}{infix}{secrets.token_hex(4)}{suffix}"


@contextmanager
def temporary_sibling_file(target: Path) -> Iterator[Path]:
    """A new empty file beside ``target`` (mode as a plain ``open(..., "w")``), removed when
    the block raises; the block renames it into place on success."""
    while True:
        tmp = _fresh_sibling(target, ".", ".tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue  # another run's name: never ours to remove
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        break
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, *, flag: str | None = None) -> None:
    """Write ``path`` through a temporary sibling and a rename: never half a file.

    With ``flag`` (e.g. ``-o``: ``path`` is a command's output itself) a full disk (and the
    like, :data:`MACHINE_ERRNOS`) is :class:`RunFailed` naming both; otherwise the ``OSError``
    names ``path``. The temporary is removed on every failure and interrupt.
    """
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    try:
        with temporary_sibling_file(path) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                # A full disk may show only when the data reach it (delayed allocation).
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except OSError as e:
        if flag is not None:
            failed = write_failed(where, f"writing {path.name}", e)
            if failed is not None:
                raise failed from None
        # Named after the file being written, not its temporary (atomic_out_dir names it so).
        raise type(e)(e.errno, e.strerror, os.fspath(path)) from None


def _newest_entry(root: Path) -> Path | None:
    """The entry under ``root`` changed last: the file being written when a write failed."""
    newest, newest_ns = None, -1
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            p = Path(dirpath, name)
            try:
                ns = p.lstat().st_mtime_ns
            except OSError:
                continue
            if ns >= newest_ns:
                newest, newest_ns = p, ns
    return newest


def _watched_dir(path: Path) -> Path:
    """``path`` as a Path that remembers the last path under it handed to the OS.

    Every writer (``open``, polars, matplotlib) turns its path into a string through
    ``os.fspath``, and a path joined under this one keeps its class, so when a write fails
    the last path taken is the file being written, whichever library wrote it and whether or
    not its error carries a file name.
    """
    seen: list[str] = []

    class _Watched(type(path)):  # type: ignore[misc]
        def __fspath__(self) -> str:
            text = super().__fspath__()
            seen[:] = [text]
            return text

    _Watched.last = seen
    return _Watched(path)


def _failing_name(tmp: Path, e: BaseException) -> str:
    """The output file a write into ``tmp`` failed on, relative to it."""
    last = getattr(type(tmp), "last", [])
    for name in (getattr(e, "filename", None), getattr(e, "filename2", None), *last):
        if name:
            try:
                relative = Path(name).absolute().relative_to(tmp)
            except ValueError:
                continue
            if str(relative) != ".":
                return str(relative)
    newest = _newest_entry(tmp)
    return str(newest.relative_to(tmp)) if newest is not None else "its first file"


#: Free space below which a writer's error without an errno is taken for a full disk.
FULL_BELOW_BYTES = 64 * 1024


def _full_after(tmp: Path, e: BaseException) -> str | None:
    """Why ``e``, a writer's error that lost its errno, means the disk under ``tmp`` is full.

    Some writers (polars' streaming Parquet sink) report ENOSPC as a broken file ("Invalid
    thrift: transport error"); the free space after the failure tells what happened.
    """
    if isinstance(e, OSError) or machine_failure(e) is not None:
        return None
    if not isinstance(e, Exception) or isinstance(e, RuntimeError | ValueError | TypeError):
        return None  # our own bugs and refusals, not a writer's I/O error
    try:
        st = os.statvfs(tmp)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        return None
    said = " ".join(str(e).split())[:100]
    return f"{free} bytes free on its file system; the writer said: {said}"


def _move_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        tmp.rename(out)
        return
    # Keep the old directory until the new one is in place.
    old = _fresh_sibling(out, ".old-")
    os.mkdir(old)
    try:
        out.rename(old / "d")
    except BaseException:
        old.rmdir()
        raise
    try:
        tmp.rename(out)
    except BaseException:
        (old / "d").rename(out)  # the earlier output back where it was
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


#: The outputs of an :func:`outputs_together` block waiting to move into place:
#: (temporary directory, target, the parent folders made for it).
_together: ContextVar[list[tuple[Path, Path, list[Path]]] | None] = ContextVar(
    "_together", default=None
)


@contextmanager
def outputs_together() -> Iterator[None]:
    """Every :func:`atomic_out_dir` completed in the block moves into place when the block
    ends, all of them; when the block fails or is interrupted, none does and every temporary
    goes, so a command with two outputs never leaves one of them without the other."""
    if _together.get() is not None:  # nested: the outer block moves them
        yield
        return
    pending: list[tuple[Path, Path, list[Path]]] = []
    token = _together.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _, made in reversed(pending):
            shutil.rmtree(tmp, ignore_errors=True)
            remove_made(made)
        raise
    finally:
        _together.reset(token)
    # As in atomic_out_dir: an interrupt between two renames would leave half the outputs.
    with deferred_interrupts():
        for i, (tmp, out, _) in enumerate(pending):
            try:
                _move_into_place(tmp, out)
            except BaseException:
                for left, _, made in pending[i:]:
                    shutil.rmtree(left, ignore_errors=True)
                    remove_made(made)
                raise


@contextmanager
def atomic_out_dir(
    out: Path, *, force: bool, marker: str, command: str, flag: str = "--out"
) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``out`` in one rename.

    The caller writes every file (``marker`` among them) into the yielded directory. An error
    or interruption inside the block removes it and leaves ``out`` as it was. A full disk (or
    quota, or an I/O error: :data:`MACHINE_ERRNOS`) while writing is :class:`RunFailed` (exit 1)
    naming ``out`` and the file: ``--out X: disk full while writing grid.parquet``.
    """
    out = Path(out)
    where = f"{flag} {out}"
    check_out_dir(out, force=force, marker=marker, command=command, flag=flag)
    tmp = _watched_dir(_fresh_sibling(out, ".tmp-"))
    phase = "creating it"
    made: list[Path] = []
    try:
        made = make_dirs(out.absolute().parent)
        os.mkdir(tmp)  # the mode a plain mkdir gives (mkdtemp's is 0700)
        phase = "writing"
        yield tmp
        if not (tmp / marker).is_file():
            raise RuntimeError(f"{command} output written without its {marker}")
        pending = _together.get()
        if pending is not None:
            pending.append((tmp, out, made))  # outputs_together moves it with the others
            return
        phase = "moving it into place"
        # Deferred while the directories move: an interrupt between the two renames would
        # leave neither the old output nor the new one at ``out``. One that came meanwhile
        # takes effect after, the new output complete and in place.
        with deferred_interrupts():
            _move_into_place(tmp, out)
    except BaseException as e:
        full = None
        if interrupt_in_chain(e) is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            remove_made(made)
            raise
        if phase == "writing":
            phase = f"writing {_failing_name(tmp, e)}"
            full = _full_after(tmp, e)
        shutil.rmtree(tmp, ignore_errors=True)
        remove_made(made)
        if isinstance(e, KeyboardInterrupt | RunFailed | FcctlInputError):
            raise
        if full is not None:
            raise RunFailed(
                f"{where}: disk full while {phase} ({full}); nothing was left behind"
            ) from None
        failed = write_failed(where, phase, e)
        if failed is not None:
            raise failed from None
        if isinstance(e, OSError):
            verb = "create" if phase == "creating it" else "write"
            raise OutDirError(f"{where}: cannot {verb} it ({e.strerror}: {e.filename})") from None
        raise
