"""The atomic ``--out`` directory, one rule for every command.

Everything is written into a temporary sibling of the target, which is renamed into place only
when the command succeeded, so a reader never sees half an output and a failed or interrupted
run leaves nothing (the temporary sibling is removed on every exit, signals included, as long
as the signal reaches Python as an exception). The target must be absent or an empty
directory; a non-empty one is refused unless ``force``, and even then only if it holds an
earlier output of the same command (its ``marker`` file), so a typo never wipes unrelated data.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fcctl.common.errors import FcctlInputError


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``path`` through a temporary sibling and a rename: never half a file.

    The file gets the mode a plain ``open(path, "w")`` would (``mkstemp`` makes 0600).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.absolute().parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_out_dir(
    out: Path, *, force: bool, marker: str, command: str, flag: str = "--out"
) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``out`` in one rename.

    The caller writes every file (``marker`` among them) into the yielded directory. An error
    or interruption inside the block removes it and leaves ``out`` as it was.
    """
    out = Path(out)
    check_out_dir(out, force=force, marker=marker, command=command, flag=flag)
    try:
        out.absolute().parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.absolute().parent))
    except OSError as e:
        raise OutDirError(f"{flag} {out}: cannot create it ({e.strerror}: {e.filename})") from None
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; give what a plain mkdir would
        yield tmp
        if not (tmp / marker).is_file():
            raise RuntimeError(f"{command} output written without its {marker}")
        if out.exists():
            # Keep the old directory until the new one is in place.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
            out.rename(old / "d")
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        # Disk full, quota, a file system that refuses renames: one line, nothing left behind.
        raise OutDirError(f"{flag} {out}: cannot write it ({e.strerror}: {e.filename})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
