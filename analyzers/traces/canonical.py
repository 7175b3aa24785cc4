"""The canonical trace as a Parquet file: what ``fcctl convert`` writes.

The table is :data:`analyzers.traces.schema.SCHEMA` (plus the optional columns the trace has, such
as ``type``), rows in analysis order. What the reader knew about the trace goes in the Parquet
file's key-value metadata
(:mod:`fcctl.analyzers.traces.trace_metadata`, shared with the reader), so that
reading the file back (the ``"parquet"`` reader) gives a :class:`Trace` equal to the one
written (:func:`traces_equal`), including the source ``path`` and ``format``.
"""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path

import polars as pl

from fcctl.common.errors import FcctlInputError
from fcctl.common.outdir import machine_failure, temporary_sibling_file, write_failed
from fcctl.common.paths import display_path

from .readers import read_trace
from .readers.parquet import PARQUET_MAGIC
from .schema import Trace, table_columns
from .trace_metadata import METADATA_KEY, trace_metadata


def check_output_file(
    path: str | Path, *, force: bool = False, source: str | Path | None = None
) -> None:
    """Refuse, before minutes of parsing, an output path that cannot or must not be written.

    An existing ``path`` is replaced only with ``force``, and then only if it is an earlier
    ``fcctl convert`` output (a Parquet file with fcctl metadata), so that a typo in ``-o``
    never overwrites a trace or other data. ``source`` (the input) is never overwritten.
    """
    target = Path(path)
    shown = display_path(target)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise FcctlInputError(f"{shown}: output directory {display_path(directory)} does not exist")
    if target.is_dir():
        raise FcctlInputError(f"{shown}: is a directory, expected an output file name")
    if source is not None and target.exists() and Path(source).exists():
        if os.path.samefile(target, source):
            raise FcctlInputError(f"{shown}: is the input trace; choose another output file")
    if source is not None and _inside_dataset(target, source):
        # A dataset reads every *.parquet under its directory (or its glob): the output
        # written there would be read back as one more part of the input next time.
        raise FcctlInputError(
            f"{shown}: lies inside the input dataset {display_path(Path(source))}, which would "
            "read it as one of its parts; choose an output file outside it"
        )
    if target.exists() or target.is_symlink():
        if not force:
            raise FcctlInputError(f"{shown}: exists (pass --force to replace it)")
        if not _is_convert_output(target):
            raise FcctlInputError(
                f"{shown}: --force replaces only an earlier fcctl convert output (a Parquet "
                f"file with {METADATA_KEY!r} metadata); this file is not one"
            )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FcctlInputError(
            f"{shown}: cannot create files in {display_path(directory)} (permission)"
        )


def _inside_dataset(target: Path, source: str | Path) -> bool:
    """Whether ``target`` is under the directory ``source`` or matches the glob ``source``."""
    spec = Path(source)
    if spec.is_dir():
        return spec.resolve() in target.resolve().parents
    text = str(source)
    return not spec.exists() and any(c in text for c in "*?[") and fnmatch(str(target), text)


def _is_convert_output(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            if f.read(4) != PARQUET_MAGIC:
                return False
        return METADATA_KEY in pl.read_parquet_metadata(path)
    except (OSError, pl.exceptions.PolarsError):
        return False


def _write_failed(target: Path, e: BaseException) -> Exception:
    """The error for a failed write: the machine's (exit 1) or the input's (exit 2)."""
    where = f"-o {display_path(target)}"
    failed = write_failed(where, "writing it", e)
    if failed is not None:
        return failed
    reason = e.strerror if isinstance(e, OSError) and e.strerror else " ".join(str(e).split())
    return FcctlInputError(f"{where}: cannot write it ({reason[:160]}); nothing was left behind")


def write_canonical(trace: Trace, path: str | Path, *, force: bool = False) -> None:
    """Write ``trace`` as canonical Parquet at ``path``, atomically.

    The table goes to a temporary file in the same directory, flushed to disk, then renamed
    over ``path`` only once complete: an interrupted or failed write (a full disk is
    :class:`RunFailed`) leaves nothing at ``path`` and no temporary file. An existing ``path``
    is replaced only with ``force`` (see :func:`check_output_file`).
    """
    target = Path(path)
    check_output_file(target, force=force)
    created = False
    try:
        with temporary_sibling_file(target) as tmp:
            created = True
            trace.requests.select(table_columns(trace.requests.columns)).write_parquet(
                tmp, compression="zstd", metadata=trace_metadata(trace)
            )
            # A full disk may show only when the data reach it (delayed allocation): sync first.
            with open(tmp, "rb") as written:
                os.fsync(written.fileno())
            os.replace(tmp, target)
    except (OSError, pl.exceptions.PolarsError) as e:
        if not created and isinstance(e, OSError) and machine_failure(e) is None:
            raise FcctlInputError(
                f"{display_path(target)}: cannot create it ({e.strerror}: "
                f"{display_path(e.filename or target.parent)})"
            ) from None
        raise _write_failed(target, e) from None


def read_canonical(path: str | Path) -> Trace:
    """Read a canonical Parquet file (same as ``read_trace(path, format="parquet")``)."""
    return read_trace(path, format="parquet")


def traces_equal(a: Trace, b: Trace) -> bool:
    """Same trace, field by field (``Trace.__eq__`` cannot compare the DataFrames).

    Traces are compared by their original (:attr:`Trace.source`), so a trace and the canonical
    Parquet written from it are equal; which file was read is not part of the trace.
    """
    return (
        a.source == b.source
        and a.order == b.order
        and a.has_hashes == b.has_hashes
        and a.has_sessions == b.has_sessions
        and a.block_size_tokens == b.block_size_tokens
        and tuple(a.notes) == tuple(b.notes)
        and a.requests.schema == b.requests.schema
        and a.requests.equals(b.requests)
    )
