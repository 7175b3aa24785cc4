"""Canonical Parquet, as written by :func:`analyzers.traces.canonical.write_canonical`.

A Parquet file is input like any other, so it is checked like any other: the canonical
columns with compatible dtypes (cast to the schema), plus optionally the columns of
``OPTIONAL_COLUMNS`` (``type``: String, Categorical or all-null, nulls allowed;
``think_time_s``: a number type or all-null, each value null or finite >= 0, NaN refused; a
file written before the column existed reads with none; any other column
is the user's own: dropped, and named once in the trace's notes), then every value rule the readers
enforce, each violation one line naming the file, the row (0-based, as polars and pyarrow
number rows: the ``request_index`` of a canonical file) and the column:

* no nulls in ``request_index``, ``timestamp_s``, ``input_tokens``, ``output_tokens``,
  ``block_size_tokens``, nor inside a ``hash_ids`` list;
* ``timestamp_s`` finite; token counts >= 0;
* ``block_size_tokens`` the same in every row, >= 1 when the table has hashes;
* ``hash_ids`` either set in every row or null in every row (``session_id`` may be null in
  some rows of a file without metadata; fcctl's own files have it in every row or in none);
* ``parent_request`` names another row: 0 <= parent < n, not the row itself; in a table of
  order ``session`` an earlier row of the same session (each request extends the previous
  one; the Claude Code reader produces nothing else). A time-ordered table may hold a parent
  stamped after its child (Bailian logs keep such replies, e.g. with second-granularity or
  skewed clocks), so there "earlier" is not required;
* with fcctl metadata: ``request_index`` is 0..n-1 in row order, the metadata agrees with the
  table (``has_hashes``/``has_sessions`` against the columns, ``block_size_tokens`` against
  the column), and the rows are in the stated ``order`` (``time``: ``timestamp_s``
  non-decreasing; ``session``: each session's rows together, time non-decreasing within it).

With fcctl metadata the table is then taken as written. A Parquet file with the canonical
columns but no metadata is taken as ``order == "time"``: rows are sorted by ``timestamp_s``
(stable), ``request_index`` is renumbered and ``parent_request`` remapped to the new numbers
(a parent naming no ``request_index`` of the file is an error).

The checks are vectorised over the 49 K rows and read the 94 M block ids only through their
null count, so they cost a few percent of reading the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fcctl.common.progress import Progress

from ..schema import (
    OPTIONAL_COLUMNS,
    SCHEMA,
    Order,
    SourceTrace,
    Trace,
    first_bad_think_time,
    first_bad_timestamp,
    think_time_rule,
    timestamp_rule,
)
from ..trace_metadata import (
    METADATA_KEY,
    PARTITION_KEY,
    PartitionMetadata,
    TraceMetadata,
    TraceMetadataError,
    parse_partition_metadata,
    parse_trace_metadata,
)
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    TraceFormatError,
    check_file,
    fail,
    reading_task,
    show,
    stable_time_order,
)

PARQUET_MAGIC = b"PAR1"
_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)
NOT_NULL = ("request_index", "timestamp_s", "input_tokens", "output_tokens", "block_size_tokens")


def ignored_columns(schema: Mapping[str, object]) -> list[str]:
    """The columns of a Parquet schema that are neither canonical nor optional (dropped)."""
    return [c for c in schema if c not in SCHEMA and c not in OPTIONAL_COLUMNS]


def _row_error(path: Path, row: int, column: str, message: str) -> TraceFormatError:
    return fail(path, f"row {row}", f"column {column!r} {message}")


def _first(mask: np.ndarray | pl.Series) -> int | None:
    """Index of the first true entry of a boolean mask, or ``None``."""
    if isinstance(mask, pl.Series):
        hits = mask.arg_true()
        return int(hits[0]) if len(hits) else None
    if not mask.any():
        return None
    return int(np.argmax(mask))


class ParquetReader:
    name = "parquet"
    description = "canonical Parquet (what `fcctl convert` writes)"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(PARQUET_MAGIC)

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        # max_line_bytes bounds text lines; Parquet has none (it is part of the protocol).
        return self._with_ignored_note(path, self._read(path, progress))

    def _read(self, path: Path, progress: Progress) -> Trace:
        size = check_file(path, "Parquet file")
        try:
            metadata = pl.read_parquet_metadata(path)
            # One read call, no partial progress to report: the bar shows that work is under way.
            with reading_task(progress, path, size) as task:
                frame = pl.read_parquet(path)
                task.update(size)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise fail(
                path, None, f"unreadable Parquet ({' '.join(str(e).split())[:160]})"
            ) from None
        if frame.height == 0:
            raise fail(path, None, "the table has no rows (no requests)")
        frame = self._conform(path, frame)
        info = self._info(path, metadata.get(METADATA_KEY))
        if info is None:
            frame = stable_time_order(self._renumber(path, frame))
            has_hashes, has_sessions, block_size = self._check_values(path, frame)
            return Trace(
                path=str(path),
                format=self.name,
                requests=frame,
                order="time",
                has_hashes=has_hashes,
                has_sessions=has_sessions,
                block_size_tokens=block_size,
                notes=("Parquet without fcctl metadata: taken as time-ordered",),
            )
        index = frame["request_index"]
        if index.null_count():
            row = _first(index.is_null())
            raise _row_error(path, row or 0, "request_index", "must not be null")
        bad = _first(index.to_numpy() != np.arange(frame.height))
        if bad is not None:
            if PARTITION_KEY in metadata:
                raise fail(
                    path,
                    None,
                    "is one part of a partitioned dataset (its request_index values are the "
                    "dataset's); analyze the dataset's directory instead",
                )
            raise _row_error(
                path, bad, "request_index", f"must be 0..n-1 in row order; got {index[bad]!r}"
            )
        has_hashes, has_sessions, block_size = self._check_values(path, frame)
        self._check_metadata(path, frame, info, has_hashes, has_sessions, block_size)
        return Trace(
            path=str(path),
            format=self.name,
            requests=frame,
            order=info.order,
            has_hashes=info.has_hashes,
            has_sessions=info.has_sessions,
            block_size_tokens=info.block_size_tokens,
            notes=info.notes,
            converted_from=SourceTrace(path=info.path, format=info.format),
        )

    def read_part(
        self, path: Path
    ) -> tuple[pl.DataFrame, TraceMetadata, PartitionMetadata | None, dict[str, str]]:
        """One file of a dataset: its checked table, trace metadata, part metadata, raw metadata.

        A file with :data:`PARTITION_KEY` metadata is a *part*: its ``request_index`` values are
        the dataset's (strictly increasing, 0 <= index < ``dataset_requests``), its row count
        and block accesses must be the metadata's, and every per-file rule of the module
        docstring holds except those about the whole dataset (indices 0..n-1, the parent of an
        order-``session`` row), which :mod:`fcctl.analyzers.traces.dataset` checks. A file without
        it is read as a whole trace (:meth:`read`), so its metadata may also be absent; then
        the returned :class:`TraceMetadata` is what :meth:`read` inferred.
        """
        size = check_file(path, "Parquet file")
        try:
            metadata = pl.read_parquet_metadata(path)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise fail(
                path, None, f"unreadable Parquet ({' '.join(str(e).split())[:160]})"
            ) from None
        raw_part = metadata.get(PARTITION_KEY)
        if raw_part is None:
            trace = self.read(path, Progress(enabled=False))
            source = trace.source
            inferred = TraceMetadata(
                path=source.path,
                format=source.format,
                order=trace.order,
                has_hashes=trace.has_hashes,
                has_sessions=trace.has_sessions,
                block_size_tokens=trace.block_size_tokens,
                notes=trace.notes,
            )
            return trace.requests, inferred, None, metadata
        try:
            part = parse_partition_metadata(raw_part)
        except TraceMetadataError as e:
            raise fail(path, None, f"metadata {PARTITION_KEY!r}: {e}") from None
        info = self._info(path, metadata.get(METADATA_KEY))
        if info is None:
            raise fail(path, None, f"has {PARTITION_KEY!r} metadata but no {METADATA_KEY!r}")
        try:
            frame = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise fail(
                path, None, f"unreadable Parquet ({' '.join(str(e).split())[:160]})"
            ) from None
        del size
        if frame.height == 0:
            raise fail(path, None, "the table has no rows (no requests)")
        frame = self._conform(path, frame)
        index = frame["request_index"]
        if index.null_count():
            raise _row_error(
                path, _first(index.is_null()) or 0, "request_index", "must not be null"
            )
        values = index.to_numpy()
        bad = _first((values < 0) | (values >= part.dataset_requests))
        if bad is not None:
            raise _row_error(
                path,
                bad,
                "request_index",
                f"must be in 0..{part.dataset_requests - 1} (the dataset's requests, as the "
                f"{PARTITION_KEY!r} metadata says); got {int(values[bad])!r}",
            )
        bad = _first(values[1:] <= values[:-1])
        if bad is not None:
            raise _row_error(
                path,
                bad + 1,
                "request_index",
                f"must increase from row to row in a dataset part; got {int(values[bad + 1])!r} "
                f"after {int(values[bad])!r}",
            )
        if frame.height != part.requests:
            raise fail(
                path,
                None,
                f"metadata {PARTITION_KEY!r} says {part.requests} requests; the table has "
                f"{frame.height} rows",
            )
        has_hashes, has_sessions, block_size = self._check_values(
            path, frame, dataset_requests=part.dataset_requests
        )
        self._check_metadata(path, frame, info, has_hashes, has_sessions, block_size, part=True)
        accesses = int(frame["hash_ids"].list.len().sum() or 0)
        if accesses != part.block_accesses:
            raise fail(
                path,
                None,
                f"metadata {PARTITION_KEY!r} says {part.block_accesses} block accesses; the "
                f"table's hash_ids hold {accesses}",
            )
        return frame, info, part, metadata

    @staticmethod
    def _renumber(path: Path, frame: pl.DataFrame) -> pl.DataFrame:
        """Row positions as ``request_index``; ``parent_request`` mapped from old numbers."""
        index = frame["request_index"]
        if index.null_count():
            raise _row_error(
                path, _first(index.is_null()) or 0, "request_index", "must not be null"
            )
        if index.n_unique() != frame.height:
            row = _first(index.is_duplicated()) or 0
            raise _row_error(
                path,
                row,
                "request_index",
                f"must hold unique values; got {index[row]!r} again",
            )
        lookup = pl.DataFrame(
            {"request_index": index, "_position": np.arange(frame.height, dtype=np.int64)}
        )
        parents = (
            frame.select("parent_request")
            .join(
                lookup,
                left_on="parent_request",
                right_on="request_index",
                how="left",
                maintain_order="left",
            )
            .get_column("_position")
        )
        # A parent that names no request of the file would silently become null in the join.
        lost = _first(parents.is_null() & frame["parent_request"].is_not_null())
        if lost is not None:
            raise _row_error(
                path,
                lost,
                "parent_request",
                f"must be the request_index of a row of the file; got "
                f"{frame['parent_request'][lost]!r}",
            )
        return frame.with_columns(
            pl.Series("request_index", np.arange(frame.height, dtype=np.int64)),
            parents.alias("parent_request"),
        )

    @staticmethod
    def _check_values(
        path: Path, frame: pl.DataFrame, *, dataset_requests: int | None = None
    ) -> tuple[bool, bool, int]:
        """The value rules of the module docstring; returns what the table holds.

        ``(has_hashes, has_sessions, block_size_tokens)`` as seen in the columns. For a part of
        a dataset (``dataset_requests`` given), ``parent_request`` names a request of the whole
        dataset: 0 <= parent < dataset_requests and not the row's own ``request_index``.
        """
        n = frame.height
        for name in NOT_NULL:
            column = frame[name]
            if column.null_count():
                raise _row_error(path, _first(column.is_null()) or 0, name, "must not be null")
        ts = frame["timestamp_s"].to_numpy()
        bad = first_bad_timestamp(ts)
        if bad is not None:
            raise _row_error(path, bad, "timestamp_s", timestamp_rule(float(ts[bad])))
        for name in ("input_tokens", "output_tokens"):
            values = frame[name].to_numpy()
            bad = _first(values < 0)
            if bad is not None:
                raise _row_error(path, bad, name, f"must be >= 0; got {int(values[bad])!r}")

        hashes = frame["hash_ids"]
        has_hashes = hashes.null_count() < n
        if has_hashes and hashes.null_count():
            raise _row_error(
                path,
                _first(hashes.is_null()) or 0,
                "hash_ids",
                "is null, but other rows hold block ids (a table has hashes in every row or "
                "in none)",
            )
        if has_hashes:
            ParquetReader._check_hash_elements(path, hashes)
        # session_id may be null in some rows (requests outside any session); the metadata
        # check below holds fcctl's own files to "every row or none".
        has_sessions = frame["session_id"].null_count() < n

        blocks = frame["block_size_tokens"].to_numpy()
        block_size = int(blocks[0])
        bad = _first(blocks != block_size)
        if bad is not None:
            raise _row_error(
                path,
                bad,
                "block_size_tokens",
                f"must be the same in every row ({block_size} in row 0); got {int(blocks[bad])!r}",
            )
        if has_hashes and block_size < 1:
            raise _row_error(
                path, 0, "block_size_tokens", f"must be >= 1 with hash_ids; got {block_size!r}"
            )
        if block_size < 0:
            raise _row_error(path, 0, "block_size_tokens", f"must be >= 0; got {block_size!r}")

        parents = frame["parent_request"]
        if parents.null_count() < n:
            values = parents.fill_null(-1).to_numpy()
            limit = n if dataset_requests is None else dataset_requests
            own = (
                np.arange(n, dtype=np.int64)
                if dataset_requests is None
                else frame["request_index"].to_numpy()
            )
            bad = _first(
                parents.is_not_null().to_numpy()
                & ((values < 0) | (values >= limit) | (values == own))
            )
            if bad is not None:
                raise _row_error(
                    path,
                    bad,
                    "parent_request",
                    f"must be the request_index of another request (0 <= parent_request < "
                    f"{limit}, not {int(own[bad])} itself); got {int(values[bad])!r}",
                )
        return has_hashes, has_sessions, block_size

    @staticmethod
    def _check_hash_elements(path: Path, hashes: pl.Series) -> None:
        """No null inside a ``hash_ids`` list; reads only the null counts of the arrow buffers."""
        nulls = 0
        for chunk in _arrow_chunks(hashes.to_arrow()):
            nulls += chunk.flatten().null_count
        if not nulls:
            return
        per_row = hashes.list.eval(pl.element().is_null().any()).explode()
        row = _first(per_row.fill_null(False)) or 0
        element = hashes[row].to_list().index(None)
        raise _row_error(
            path, row, "hash_ids", f"element {element} must be a block id; got None (a null)"
        )

    @staticmethod
    def _check_metadata(
        path: Path,
        frame: pl.DataFrame,
        info: TraceMetadata,
        has_hashes: bool,
        has_sessions: bool,
        block_size: int,
        *,
        part: bool = False,
    ) -> None:
        """The metadata says what the table holds, and the rows are in its stated order.

        For a ``part`` of a dataset the parents of an order-``session`` table may be in another
        part: that rule is the dataset's (:mod:`fcctl.analyzers.traces.dataset`) to check.
        """
        meta = f"metadata {METADATA_KEY!r}"
        if info.has_hashes != has_hashes:
            held = "holds block ids" if has_hashes else "is null in every row"
            raise _row_error(  # the row: hashes are in every row or in none (checked)
                path,
                0,
                "hash_ids",
                f"{held}, but the {meta} says has_hashes is {str(info.has_hashes).lower()}",
            )
        sessions = frame["session_id"]
        if info.has_sessions and sessions.null_count():
            raise _row_error(
                path,
                _first(sessions.is_null()) or 0,
                "session_id",
                f"is null, but the {meta} says has_sessions is true",
            )
        if not info.has_sessions and has_sessions:
            raise _row_error(
                path,
                _first(sessions.is_not_null()) or 0,
                "session_id",
                f"names a session, but the {meta} says has_sessions is false",
            )
        if info.block_size_tokens != block_size:
            raise _row_error(
                path,
                0,
                "block_size_tokens",
                f"is {block_size}, but the {meta} says block_size_tokens is "
                f"{info.block_size_tokens}",
            )
        if info.order == "session" and not has_sessions:
            raise _row_error(path, 0, "session_id", f"is null, but the {meta} says order 'session'")

        def error(row: int, column: str, message: str) -> TraceFormatError:
            return _row_error(path, row, column, message)

        check_order(frame, info.order, error, parents=not part)

    @staticmethod
    def _with_ignored_note(path: Path, trace: Trace) -> Trace:
        ignored = ignored_columns(pl.read_parquet_schema(path))
        if not ignored:
            return trace
        note = f"ignored non-canonical column(s) {', '.join(map(repr, ignored))}"
        return dataclasses.replace(trace, notes=(*trace.notes, note))

    @staticmethod
    def _conform(path: Path, frame: pl.DataFrame) -> pl.DataFrame:
        """Check the canonical columns are there with compatible dtypes; cast.

        Columns of the user's own (not canonical, not optional) are dropped, as table tools
        ignore columns they do not know; :func:`ignored_columns` names them for a note.
        """
        columns = []
        for name, dtype in SCHEMA.items():
            if name not in frame.columns:
                raise fail(path, None, f"missing column {name!r}; got columns {frame.columns!r}")
            got = frame.schema[name]
            ok = (
                got == dtype
                or (
                    isinstance(dtype, pl.List)
                    and isinstance(got, pl.List)
                    and isinstance(got.inner, _INTEGERS)
                )
                or (got.is_integer() and (dtype.is_integer() or dtype == pl.Float64()))
            )
            ok = ok or (got == pl.Null())
            if not ok:
                raise fail(path, None, f"column {name!r} must be {dtype}; got {got}")
            try:
                columns.append(frame[name].cast(dtype, strict=True))
            except pl.exceptions.PolarsError:
                raise ParquetReader._uncastable(path, frame[name], dtype) from None
        for name, dtype in OPTIONAL_COLUMNS.items():
            if name in frame.columns:
                check = _optional_seconds if dtype == pl.Float64() else _optional_text
                columns.append(check(path, frame[name], dtype))
        return pl.DataFrame(columns)

    @staticmethod
    def _uncastable(path: Path, column: pl.Series, dtype: pl.DataType) -> TraceFormatError:
        """The error for the first value of ``column`` that does not fit ``dtype``."""
        cast = column.cast(dtype, strict=False)
        if isinstance(dtype, pl.List):
            lost = (
                cast.list.eval(pl.element().is_null()).list.sum()
                != column.list.eval(pl.element().is_null()).list.sum()
            )
            row = _first(lost.fill_null(False)) or 0
            values, fitted = column[row].to_list(), cast[row].to_list()
            element = next(
                i
                for i, (a, b) in enumerate(zip(values, fitted, strict=True))
                if b is None and a is not None
            )
            return _row_error(
                path,
                row,
                column.name,
                f"element {element} must be an integer in [0, 2**64); got {values[element]!r}",
            )
        row = _first(cast.is_null() & column.is_not_null()) or 0
        return _row_error(path, row, column.name, f"must fit {dtype}; got {show(column[row])}")

    @staticmethod
    def _info(path: Path, raw: str | None) -> TraceMetadata | None:
        if raw is None:
            return None
        try:
            return parse_trace_metadata(raw)
        except TraceMetadataError as e:
            raise fail(path, None, f"metadata {METADATA_KEY!r}: {e}") from None


def _optional_text(path: Path, column: pl.Series, dtype: pl.DataType) -> pl.Series:
    """An optional text column (``type``): String, Categorical, Enum or all-null; nulls allowed."""
    got = column.dtype
    if not (got == pl.String() or got == pl.Null() or isinstance(got, pl.Categorical | pl.Enum)):
        raise fail(path, None, f"column {column.name!r} must be {dtype} (nullable); got {got}")
    return column.cast(dtype)


def _optional_seconds(path: Path, column: pl.Series, dtype: pl.DataType) -> pl.Series:
    """An optional seconds column (``think_time_s``): numbers or all-null; each null or finite
    >= 0."""
    got = column.dtype
    if not (got.is_numeric() or got == pl.Null()):
        raise fail(path, None, f"column {column.name!r} must be {dtype} (nullable); got {got}")
    seconds = column.cast(dtype)
    bad = first_bad_think_time(seconds)
    if bad is not None:
        raise _row_error(path, bad, column.name, think_time_rule(float(seconds[bad])))
    return seconds


def check_order(
    frame: pl.DataFrame,
    order: Order,
    error: Callable[[int, str, str], TraceFormatError],
    *,
    parents: bool = True,
) -> None:
    """The rows of ``frame`` are in the stated ``order`` (the module docstring's rules).

    ``time``: ``timestamp_s`` non-decreasing. ``session`` (the table has session ids): each
    session's rows together, time non-decreasing within it, and (``parents``) each parent an
    earlier row of the same session, rows numbered by position. A violation is
    ``error(row, column, message)``, so a caller names the row its own way (a file's row, or a
    dataset's part and row).
    """
    ts = frame["timestamp_s"].to_numpy()
    if order == "time":
        bad = _first(ts[1:] < ts[:-1])
        if bad is not None:
            raise error(
                bad + 1,
                "timestamp_s",
                f"must not decrease in a table of order 'time'; got {ts[bad + 1]!r} after "
                f"{ts[bad]!r}",
            )
        return
    sessions = frame["session_id"]
    change = (sessions[1:] != sessions[:-1]).fill_null(True).to_numpy()
    starts = np.flatnonzero(np.concatenate(([True], change)))
    if len(starts) != sessions.n_unique():
        seen: set[Any] = set()
        for row in starts:
            value = sessions[int(row)]
            if value in seen:
                raise error(
                    int(row),
                    "session_id",
                    f"{value!r} appears again after other sessions (order 'session' keeps "
                    "each session's rows together)",
                )
            seen.add(value)
    within = ts[1:] < ts[:-1]
    within[starts[1:] - 1] = False  # a new session may start at any clock
    bad = _first(within)
    if bad is not None:
        raise error(
            bad + 1,
            "timestamp_s",
            f"must not decrease within a session in a table of order 'session'; got "
            f"{ts[bad + 1]!r} after {ts[bad]!r}",
        )
    if not parents:
        return
    parent = frame["parent_request"].fill_null(-1).to_numpy()
    own = np.arange(frame.height, dtype=np.int64)
    session_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, frame.height)))
    has_parent = parent >= 0
    wrong = has_parent & (
        (parent >= own) | (session_of[np.where(has_parent, parent, 0)] != session_of)
    )
    bad = _first(wrong)
    if bad is not None:
        raise error(
            bad,
            "parent_request",
            f"must name an earlier row of the same session in a table of order 'session'; "
            f"got {int(parent[bad])!r}",
        )


def _arrow_chunks(array: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(array.chunks) if isinstance(array, pa.ChunkedArray) else [array]
