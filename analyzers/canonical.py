"""The canonical trace as a Parquet file: what ``fcctl convert`` writes.

The table is :data:`analyzers.schema.SCHEMA`, rows in analysis order. What the reader knew
about the trace goes in the Parquet file's key-value metadata
(:mod:`fcctl.analyzers.trace_metadata`, shared with the reader), so that
reading the file back (the ``"parquet"`` reader) gives a :class:`Trace` equal to the one
written (:func:`traces_equal`), including the source ``path`` and ``format``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fcctl.analyzers.readers import read_trace
from fcctl.analyzers.schema import COLUMNS, Trace
from fcctl.analyzers.trace_metadata import trace_metadata

from fcctl.common.errors import FcctlInputError


def check_output_file(path: str | Path) -> None:
    """Refuse an output path that cannot be written, before minutes of parsing."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise FcctlInputError(f"{target}: output directory {str(directory)!r} does not exist")
    if target.is_dir():
        raise FcctlInputError(f"{target}: is a directory, expected an output file name")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FcctlInputError(f"{target}: cannot create files in {str(directory)!r} (permission)")


def write_canonical(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as canonical Parquet at ``path``, atomically.

    The table goes to a temporary file in the same directory, which is renamed over ``path``
    only once complete: an interrupted or failed write leaves nothing at ``path``.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    check_output_file(target)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise FcctlInputError(f"{target}: cannot create it ({e.strerror}: {e.filename})") from None
    os.close(fd)
    try:
        trace.requests.select(COLUMNS).write_parquet(
            tmp_name, compression="zstd", metadata=trace_metadata(trace)
        )
        os.chmod(tmp_name, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp_name, target)
    except OSError as e:
        Path(tmp_name).unlink(missing_ok=True)
        raise FcctlInputError(f"{target}: cannot write it ({e.strerror}: {e.filename})") from None
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_canonical(path: str | Path) -> Trace:
    """Read a canonical Parquet file (same as ``read_trace(path, format="parquet")``)."""
    return read_trace(path, format="parquet")


def traces_equal(a: Trace, b: Trace) -> bool:
    """Field-by-field equality (``Trace.__eq__`` cannot compare the DataFrames)."""
    return (
        a.path == b.path
        and a.format == b.format
        and a.order == b.order
        and a.has_hashes == b.has_hashes
        and a.has_sessions == b.has_sessions
        and a.block_size_tokens == b.block_size_tokens
        and tuple(a.notes) == tuple(b.notes)
        and a.requests.schema == b.requests.schema
        and a.requests.equals(b.requests)
    )
