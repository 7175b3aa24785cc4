"""Canonical Parquet, as written by :func:`analyzers.canonical.write_canonical`.

With fcctl metadata the table is taken as written (checked: canonical columns and dtypes,
``request_index`` 0..n-1). A Parquet file with the canonical columns but no metadata is taken
as ``order == "time"``: rows are sorted by ``timestamp_s`` (stable), ``request_index`` is
renumbered and ``parent_request`` remapped to the new numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from fcctl.analyzers.readers._common import (
    TraceFormatError,
    fail,
    reading_task,
    show,
    stable_time_order,
)
from fcctl.analyzers.schema import SCHEMA, Trace
from fcctl.analyzers.trace_metadata import (
    METADATA_KEY,
    TraceMetadata,
    TraceMetadataError,
    parse_trace_metadata,
)

from fcctl.common.progress import Progress

PARQUET_MAGIC = b"PAR1"
_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


class ParquetReader:
    name = "parquet"
    description = "canonical Parquet (what `fcctl convert` writes)"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(PARQUET_MAGIC)

    def read(self, path: Path, progress: Progress) -> Trace:
        try:
            metadata = pl.read_parquet_metadata(path)
            # One read call, no partial progress to report: the bar shows that work is under way.
            size = path.stat().st_size
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
            block_sizes = frame["block_size_tokens"].drop_nulls()
            return Trace(
                path=str(path),
                format=self.name,
                requests=frame,
                order="time",
                has_hashes=frame["hash_ids"].null_count() < frame.height,
                has_sessions=frame["session_id"].null_count() < frame.height,
                block_size_tokens=int(block_sizes[0]) if len(block_sizes) else 0,
                notes=("Parquet without fcctl metadata: taken as time-ordered",),
            )
        index = frame["request_index"].to_numpy()
        if not np.array_equal(index, np.arange(frame.height)):
            raise fail(path, None, "column 'request_index' must be 0..n-1 in row order")
        return Trace(
            path=info.path,
            format=info.format,
            requests=frame,
            order=info.order,
            has_hashes=info.has_hashes,
            has_sessions=info.has_sessions,
            block_size_tokens=info.block_size_tokens,
            notes=info.notes,
        )

    @staticmethod
    def _renumber(path: Path, frame: pl.DataFrame) -> pl.DataFrame:
        """Row positions as ``request_index``; ``parent_request`` mapped from old numbers."""
        index = frame["request_index"]
        if index.null_count() or index.n_unique() != frame.height:
            raise fail(path, None, "column 'request_index' must hold unique, non-null values")
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
        return frame.with_columns(
            pl.Series("request_index", np.arange(frame.height, dtype=np.int64)),
            parents.alias("parent_request"),
        )

    @staticmethod
    def _conform(path: Path, frame: pl.DataFrame) -> pl.DataFrame:
        """Check every canonical column is there with a compatible dtype; cast to the schema."""
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
                raise fail(
                    path, None, f"column {name!r} has values that do not fit {dtype}"
                ) from None
        return pl.DataFrame(columns)

    @staticmethod
    def _info(path: Path, raw: str | None) -> TraceMetadata | None:
        if raw is None:
            return None
        try:
            return parse_trace_metadata(raw)
        except TraceMetadataError:
            raise TraceFormatError(
                f"{path}: metadata {METADATA_KEY!r} must be a JSON object with the trace "
                f"description; got {show(raw)}"
            ) from None
