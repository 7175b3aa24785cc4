"""Partitioned datasets: a directory or glob of canonical Parquet files read as one trace.

``fcctl analyze DIR_OR_GLOB`` reads every ``*.parquet`` file under a directory (recursively,
hive-style ``key=value/`` folders welcome) or every file a glob names, in sorted path order, as
one trace. Two kinds of input, decided from the files' metadata:

* **A partitioned dataset** (``fcctl convert -o DIR --partition-by``, ``fcctl synth``): every
  file carries :data:`~fcctl.analyzers.traces.trace_metadata.PARTITION_KEY` metadata with the same
  ``dataset_id``, the same trace metadata, and the *global* ``request_index``. The parts'
  indices together must be exactly 0..N-1 (N = ``dataset_requests``; a missing or repeated
  index is an error naming the part), and the analysis order is ``request_index``: the figures
  are exactly those of the single file the dataset was cut from.
* **An assembled dataset**: files converted separately (each a whole canonical trace, with
  0..n-1 indices), and complete partitioned datasets among them, are *units*, in order of their
  first file's path. Units must agree on ``has_hashes``, ``has_sessions`` and
  ``block_size_tokens`` (block ids are assumed to be one namespace). When every unit is of
  order ``time`` the requests are ordered by timestamp, then unit, then index (a stable merge:
  a log cut into daily files reassembles into one timeline); when every unit has per-session
  clocks (order ``session``, Claude Code) the units are concatenated in order, since their
  clocks cannot be compared, and a session id may then appear in one unit only. Mixing the two
  orders is an error. ``parent_request`` is renumbered into the assembled order.

Every file is checked as :mod:`fcctl.analyzers.traces.readers.parquet` checks one file; the rules
that
concern the whole dataset (indices 0..N-1; in order ``time`` timestamps non-decreasing in
analysis order; in order ``session`` each session's requests together, time non-decreasing
within it, each parent an earlier request of the same session) are checked here, and a
violation names the part file and its row.

:func:`open_dataset` reads the files once and keeps the *request table* (every canonical column
but the block ids, plus each request's block count): O(requests) memory, about 100 bytes a
request. The block ids are read again when needed, file by file: :meth:`Dataset.load_trace`
(the whole trace in memory, for the exact analysis) or :meth:`Dataset.iter_blocks` (the access
stream in analysis order, in chunks, for the bounded passes of
:mod:`fcctl.analyzers.reuse.bounded`),
which merges the files by analysis position so that memory holds one batch per file.
"""

from __future__ import annotations

import errno
import glob as globlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from fcctl.common.errors import FcctlInputError
from fcctl.common.paths import display_path
from fcctl.common.progress import Progress

from .readers import (
    DEFAULT_MAX_LINE_BYTES,
    TraceFormatError,
    check_file,
    fail,
    missing,
    read_trace,
)
from .readers.parquet import (
    PARQUET_MAGIC,
    ParquetReader,
    check_order,
    ignored_columns,
)
from .schema import Order, SourceTrace, Trace, table_columns
from .trace_metadata import PartitionMetadata, TraceMetadata

DATASET_FORMAT = "parquet-dataset"
GLOB_CHARS = frozenset("*?[")
#: Rows of one file read per batch by :meth:`Dataset.iter_blocks` (at most; fewer when the
#: rows are long, so that one batch holds about ``batch_accesses`` block ids).
DEFAULT_BATCH_ACCESSES = 1 << 22

Mode = Literal["partitioned", "assembled", "file"]


def is_dataset_spec(spec: str | Path) -> bool:
    """Whether ``spec`` names a dataset: a glob pattern, or a directory holding Parquet files.

    A directory of Claude Code ``trace_*.json`` files is a trace, not a dataset.
    """
    text = str(spec)
    path = Path(text)
    if not path.exists() and GLOB_CHARS & set(text):
        return True
    if path.is_dir():
        return not any(path.glob("trace_*.json")) and any(path.rglob("*.parquet"))
    return False


def is_dataset_input(
    source: str | Path, format: str | None = None, columns: object | None = None
) -> bool:
    """Whether analyze, replay and convert read ``source`` as a dataset: the one rule the
    three share (:func:`is_dataset_spec`). A dataset's parts are canonical Parquet, so only
    ``format`` None or ``"parquet"`` and no column mapping apply to one; anything else is an
    error naming ``format``, never a second reading of the same input."""
    if not is_dataset_spec(source):
        return False
    if columns is not None or format not in (None, "parquet"):
        raise FcctlInputError(
            f"format: {display_path(Path(source))} is a dataset of canonical Parquet files; "
            "format and columns apply to one trace file, not to a dataset's parts",
            parameter="format",
        )
    return True


def read_source(
    source: str | Path,
    format: str | None = None,
    *,
    progress: Progress | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    columns: str | Mapping[str, str] | None = None,
) -> Trace:
    """Anything analyze and replay read, whole, in memory: a dataset (a directory or glob of
    canonical Parquet parts, :func:`is_dataset_input`) in analysis order, else one trace file
    or Claude Code directory (:func:`~fcctl.analyzers.traces.readers.read_trace`)."""
    if is_dataset_input(source, format, columns):
        return read_dataset(source, progress)
    return read_trace(
        source,
        format,
        progress=progress or False,
        max_line_bytes=max_line_bytes,
        columns=columns,
    )


def _is_parquet_file(path: Path) -> bool:
    """A regular file that starts with the Parquet magic bytes."""
    if not path.is_file():  # before opening: a FIFO would block
        return False
    try:
        with path.open("rb") as f:
            return f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError:
        return False


def dataset_files(spec: str | Path) -> list[Path]:
    """The Parquet files of ``spec`` (directory: ``**/*.parquet``; else a glob), sorted by path.

    Hidden files and folders (names starting with ``.`` or ``_``, such as Spark's
    ``_SUCCESS`` or a temporary ``.fcctl-*``) are skipped. Every file must be a regular file.
    One Parquet file (a regular file starting with ``PAR1``) is a dataset of that one file.
    """
    text = str(spec)
    path = Path(text)
    if _is_parquet_file(path):
        return [path]
    if path.is_dir():
        found = [
            p
            for p in path.rglob("*.parquet")
            if not any(part.startswith((".", "_")) for part in p.relative_to(path).parts)
        ]
        if not found:
            raise fail(path, None, "directory holds no *.parquet files (a dataset's parts)")
    elif GLOB_CHARS & set(text):
        found = [Path(p) for p in globlib.glob(text, recursive=True)]
        if not found:
            raise TraceFormatError(f"{text}: the pattern matches no file")
    else:
        raise missing(path) if not path.exists() else fail(path, None, "is not a dataset")
    files = sorted(found)
    for f in files:
        check_file(f, "Parquet file")
    return files


@dataclass(frozen=True, eq=False)
class DatasetPart:
    """One file: its path, rows and block accesses, and each row's analysis position."""

    path: Path
    rows: int
    block_accesses: int
    rank: np.ndarray  # int64, strictly increasing: the row's place in analysis order


@dataclass(frozen=True, eq=False)
class Dataset:
    """A dataset's files and its request table (see the module docstring)."""

    spec: str
    mode: Mode
    parts: tuple[DatasetPart, ...]
    requests: pl.DataFrame  # canonical columns in analysis order; hash_ids null; + n_blocks
    order: Order
    has_hashes: bool
    has_sessions: bool
    block_size_tokens: int
    notes: tuple[str, ...]
    converted_from: SourceTrace | None
    units: int
    #: A trace already in memory (:meth:`from_trace`): its path, format and block ids.
    source: Trace | None = None

    @classmethod
    def from_trace(cls, trace: Trace) -> Dataset:
        """A trace read by :func:`~fcctl.analyzers.traces.readers.read_trace` seen as a dataset.

        ``mode`` is ``"file"``: no parts; the block ids are the trace's, in memory.
        """
        hashes = trace.requests["hash_ids"]
        n_blocks = hashes.list.len().fill_null(0).cast(pl.Int64).alias("n_blocks")
        return cls(
            spec=trace.path,
            mode="file",
            parts=(),
            requests=trace.requests.drop("hash_ids").with_columns(n_blocks),
            order=trace.order,
            has_hashes=trace.has_hashes,
            has_sessions=trace.has_sessions,
            block_size_tokens=trace.block_size_tokens,
            notes=trace.notes,
            converted_from=trace.converted_from,
            units=1,
            source=trace,
        )

    @property
    def num_requests(self) -> int:
        return self.requests.height

    @property
    def block_accesses(self) -> int:
        if self.source is not None:
            return int(self.requests["n_blocks"].sum() or 0)
        return sum(p.block_accesses for p in self.parts)

    def describe(self) -> str:
        if self.mode == "file":
            return "one trace file"
        kind = "partitioned dataset" if self.mode == "partitioned" else "assembled dataset"
        return f"{kind} of {len(self.parts)} Parquet file(s)"

    def request_trace(self) -> Trace:
        """The requests as a :class:`Trace` whose ``hash_ids`` are all null (no block ids)."""
        frame = self.requests.drop("n_blocks").with_columns(
            pl.lit(None, dtype=pl.List(pl.UInt64())).alias("hash_ids")
        )
        return self._trace(frame)

    def load_trace(
        self, progress: Progress | None = None, *, keep: np.ndarray | None = None
    ) -> Trace:
        """The whole trace in memory, block ids included, in analysis order.

        ``keep`` (bool per request, analysis order) reads only those requests, part by part:
        memory then holds the kept block ids and one part's at a time. The rows keep their
        ``request_index``; renumbering is the caller's (:func:`.sampling.renumber`).
        """
        if self.source is not None:
            if keep is None:
                return self.source
            return replace(self.source, requests=self.source.requests.filter(pl.Series(keep)))
        progress = progress or Progress(enabled=False)
        requests = self.requests if keep is None else self.requests.filter(pl.Series(keep))
        if not self.has_hashes:
            return self._trace(
                requests.drop("n_blocks").with_columns(
                    pl.lit(None, dtype=pl.List(pl.UInt64())).alias("hash_ids")
                )
            )
        columns: list[pl.Series] = []
        ranks: list[np.ndarray] = []
        with progress.task("reading block ids", len(self.parts)) as task:
            for i, part in enumerate(self.parts):
                rows = None if keep is None else np.flatnonzero(keep[part.rank])
                if rows is None or rows.shape[0]:
                    column = pl.read_parquet(part.path, columns=["hash_ids"])["hash_ids"]
                    if rows is not None and rows.shape[0] < part.rows:
                        column = column.gather(rows)
                    columns.append(column.cast(pl.List(pl.UInt64())))
                    ranks.append(part.rank if rows is None else part.rank[rows])
                task.update(i + 1)
        if not columns:
            hashes = pl.Series("hash_ids", [], dtype=pl.List(pl.UInt64()))
            rank = np.zeros(0, dtype=np.int64)
        else:
            hashes = pl.concat(columns, rechunk=False)
            rank = np.concatenate(ranks)
        del columns
        order = np.argsort(rank, kind="stable")
        if not np.array_equal(order, np.arange(rank.shape[0])):
            hashes = hashes.gather(order)
        frame = requests.drop("n_blocks").with_columns(hashes.alias("hash_ids"))
        return self._trace(frame)

    def _trace(self, frame: pl.DataFrame) -> Trace:
        return Trace(
            path=self.spec,
            format=DATASET_FORMAT,
            requests=frame.select(table_columns(frame.columns)),
            order=self.order,
            has_hashes=self.has_hashes,
            has_sessions=self.has_sessions,
            block_size_tokens=self.block_size_tokens,
            notes=self.notes,
            converted_from=self.converted_from,
        )

    def iter_blocks(
        self, *, batch_accesses: int = DEFAULT_BATCH_ACCESSES
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The access stream in analysis order: ``(row_lengths, block_ids)`` chunks.

        Each chunk is whole requests, consecutive in analysis order, starting where the last
        ended: ``row_lengths`` (int64) their block counts, ``block_ids`` (uint64) their
        ``hash_ids`` concatenated. The files are merged by analysis position, one batch of
        about ``batch_accesses`` ids per file in memory at a time.
        """
        if not self.has_hashes:
            return
        if self.source is not None:
            yield from _memory_blocks(self.source.requests["hash_ids"], batch_accesses)
            return
        _raise_open_files_limit(len(self.parts) + 64)
        per_file = max(1, batch_accesses // max(len(self.parts), 1))
        # Parts in order of their first position; a part is opened when the merge reaches it
        # and closed when it is done, so only parts whose ranges overlap are open at once.
        pending = sorted(self.parts, key=lambda p: int(p.rank[0]))
        alone = _alone(pending)
        nxt = 0
        active: list[_PartStream] = []
        expected = 0
        while active or nxt < len(pending):
            if not active:
                active.append(_PartStream(pending[nxt], per_file, whole=alone[nxt]))
                nxt += 1
            # Every buffered row ranked at most the lowest "last buffered rank" can go: no
            # unread row of an open part ranks below it (each part's ranks increase), nor any
            # row of a part not yet opened (opened below when it starts at or before it).
            watermark = min(s.last_rank() for s in active)
            while nxt < len(pending) and int(pending[nxt].rank[0]) <= watermark:
                stream = _PartStream(pending[nxt], per_file, whole=alone[nxt])
                nxt += 1
                active.append(stream)
                watermark = min(watermark, stream.last_rank())
            pieces = [p for p in (s.take_until(watermark) for s in active) if p[0].shape[0]]
            active = [s for s in active if not s.done]
            if not pieces:
                continue
            if len(pieces) == 1:
                # One part at this point of the stream (request ranges, days): already in
                # order and contiguous.
                ranks, lens, ids, _ = pieces[0]
            else:
                ranks = np.concatenate([p[0] for p in pieces])
                lens = np.concatenate([p[1] for p in pieces])
                merged = np.concatenate([p[2] for p in pieces])
                starts = np.concatenate([p[3] + off for p, off in _offsets(pieces)])
                order = np.argsort(ranks, kind="stable")
                ranks, lens, starts = ranks[order], lens[order], starts[order]
                ids = _gather_rows(merged, starts, lens)
            if ranks[0] != expected or np.any(
                np.diff(ranks) != 1
            ):  # pragma: no cover - open_dataset checked the ranks cover 0..N-1
                raise RuntimeError("dataset merge: analysis positions are not consecutive")
            expected += ranks.shape[0]
            yield lens, ids


def _alone(parts: list[DatasetPart]) -> list[bool]:
    """For parts sorted by first position: whether no other part's positions interleave."""
    n = len(parts)
    alone = [True] * n
    reach = -1  # the furthest last position of the parts before
    reach_at = -1
    for i, part in enumerate(parts):
        first, last = int(part.rank[0]), int(part.rank[-1])
        if first <= reach:
            alone[i] = False
            alone[reach_at] = False
        if last > reach:
            reach, reach_at = last, i
    return alone


def _raise_open_files_limit(needed: int) -> None:
    """Raise this process's soft limit of open files towards ``needed`` (up to the hard one)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX, or refused
        pass


def _memory_blocks(
    hashes: pl.Series, batch_accesses: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(row lengths, ids) chunks of an in-memory ``hash_ids`` column, about batch_accesses each."""
    lens = hashes.list.len().fill_null(0).to_numpy().astype(np.int64)
    ends = np.cumsum(lens)
    row = 0
    while row < lens.shape[0]:
        base = ends[row - 1] if row else 0
        stop = int(np.searchsorted(ends, base + batch_accesses, side="right"))
        stop = min(max(stop, row + 1), lens.shape[0])
        piece = hashes.slice(row, stop - row).to_arrow()
        flat = pa.concat_arrays(
            [c.flatten() for c in (piece.chunks if isinstance(piece, pa.ChunkedArray) else [piece])]
        )
        yield lens[row:stop], flat.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
        row = stop


def _offsets(
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
) -> Iterator[tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], int]]:
    off = 0
    for p in pieces:
        yield p, off
        off += p[2].shape[0]


def _gather_rows(ids: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The rows ``ids[starts[k] : starts[k] + lens[k]]`` concatenated (one fancy index)."""
    if starts.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64)
    if np.all(starts[1:] == starts[:-1] + lens[:-1]) and starts[0] == 0:
        return ids[: int(lens.sum())]
    total = int(lens.sum())
    out_start = np.zeros(lens.shape[0], dtype=np.int64)
    np.cumsum(lens[:-1], out=out_start[1:])
    index = np.repeat(starts - out_start, lens) + np.arange(total, dtype=np.int64)
    return ids[index]


class _PartStream:
    """One file's rows in batches, with their analysis positions."""

    def __init__(self, part: DatasetPart, batch_accesses: int, *, whole: bool = False) -> None:
        self.part = part
        self._whole = whole
        try:
            self._file = pq.ParquetFile(part.path)
        except OSError as e:
            if e.errno == errno.EMFILE:
                raise FcctlInputError(
                    f"{display_path(part.path)}: too many dataset parts overlap in analysis "
                    "order to be open at once (the process's open-file limit); write the "
                    "dataset with fewer --partitions or raise `ulimit -n`"
                ) from None
            raise fail(part.path, None, f"cannot open ({e.strerror})") from None
        mean = max(part.block_accesses / max(part.rows, 1), 1.0)
        rows = int(min(max(batch_accesses / mean, 1), 1 << 20))
        self._batches = self._file.iter_batches(columns=["hash_ids"], batch_size=rows)
        self._row = 0  # rows of the file before the buffer
        self._lens = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.uint64)
        self._starts = np.zeros(0, dtype=np.int64)
        self._pos = 0  # buffered rows already taken
        self.done = False
        self._fill()

    def _fill(self) -> None:
        self._row += self._lens.shape[0]
        if self._whole:
            # A part no other overlaps is the only one open: one read of the whole column
            # (polars decodes a list column several times faster than pyarrow's batches).
            self._whole = False
            self._batches = iter(())
            hashes = pl.read_parquet(self.part.path, columns=["hash_ids"])["hash_ids"]
            column = hashes.cast(pl.List(pl.UInt64())).to_arrow()
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            del hashes
        else:
            batch = next(self._batches, None)
            if batch is None:
                self.done = True
                self._file.close()
                return
            column = batch.column(0)
        offsets = column.offsets.to_numpy().astype(np.int64)
        self._lens = np.diff(offsets)
        self._starts = offsets[:-1] - offsets[0]
        self._ids = column.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
        self._pos = 0

    def head_rank(self) -> int:
        return int(self.part.rank[self._row + self._pos])

    def last_rank(self) -> int:
        return int(self.part.rank[self._row + self._lens.shape[0] - 1])

    def take_until(self, watermark: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ranks, lengths, ids, starts into ids) of the buffered rows ranked <= watermark."""
        lo = self._row + self._pos
        rank = self.part.rank[lo : self._row + self._lens.shape[0]]
        k = int(np.searchsorted(rank, watermark, side="right"))
        a, b = self._pos, self._pos + k
        lens = self._lens[a:b]
        starts = self._starts[a:b]
        if k:
            lo_id = int(starts[0])
            hi_id = int(starts[-1] + lens[-1])
            ids = self._ids[lo_id:hi_id]
            starts = starts - lo_id
        else:
            ids = np.zeros(0, dtype=np.uint64)
        # Views, not copies: _fill replaces the buffers, it never writes into them.
        out = (rank[:k], lens, ids, starts)
        self._pos = b
        if self._pos >= self._lens.shape[0]:
            self._fill()
        return out


# --- opening: pass 0 ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _File:
    path: Path
    frame: pl.DataFrame  # canonical request columns without hash_ids, + n_blocks
    info: TraceMetadata
    part: PartitionMetadata | None


@dataclass(frozen=True, eq=False)
class _Unit:
    """A whole trace: one standalone file, or the complete parts of one partitioned dataset."""

    files: list[_File]
    frame: pl.DataFrame  # the unit's requests in its own order (request_index 0..n-1)
    file_no: np.ndarray  # per row of frame: which of files
    file_row: np.ndarray  # per row of frame: row in that file
    info: TraceMetadata


def _read_file(path: Path) -> _File:
    """One file read and checked (:meth:`ParquetReader.read_part`), its block ids dropped."""
    frame, info, part, _ = ParquetReader().read_part(path)
    n_blocks = frame["hash_ids"].list.len().fill_null(0).cast(pl.Int64).alias("n_blocks")
    return _File(path, frame.drop("hash_ids").with_columns(n_blocks), info, part)


#: How :func:`open_dataset` applies its per-file read to the files: ``map_files(read, files)``
#: yields ``read(f)`` for every file, in the files' order (the builtin ``map`` by default; the
#: Dask engine runs the reads on its workers). An error a read raises is raised as it is.
MapFiles = Callable[[Callable[[Path], _File], Sequence[Path]], Iterable[_File]]


def open_dataset(
    spec: str | Path, progress: Progress | None = None, *, map_files: MapFiles | None = None
) -> Dataset:
    """Read and check every file of ``spec`` and build the request table (module docstring).

    ``map_files`` runs the per-file reads (:data:`MapFiles`; default: one after another here).
    """
    progress = progress or Progress(enabled=False)
    files = dataset_files(spec)
    read: list[_File] = []
    with progress.task("reading dataset parts", len(files)) as task:
        for i, f in enumerate((map_files or map)(_read_file, files)):
            read.append(f)
            task.update(i + 1)
    units = _units(read)
    label = str(spec)
    if len(units) == 1:
        unit = units[0]
        mode: Mode = "partitioned" if unit.files[0].part is not None else "assembled"
        frame, file_no, file_row, order = unit.frame, unit.file_no, unit.file_row, unit.info.order
        info = unit.info
    else:
        mode = "assembled"
        frame, file_no, file_row, order = _assemble(units)
        info = units[0].info
    all_files = [f for u in units for f in u.files]
    _check_order(all_files, frame, file_no, file_row, order)
    parts = []
    positions = np.arange(frame.height, dtype=np.int64)
    by_file = np.argsort(file_no, kind="stable")
    bounds = np.searchsorted(file_no[by_file], np.arange(len(all_files) + 1))
    for k, f in enumerate(all_files):
        rows = by_file[bounds[k] : bounds[k + 1]]
        # rows of frame from file k, in analysis order; their file rows must increase too
        file_rows = file_row[rows]
        r = np.empty(f.frame.height, dtype=np.int64)
        r[file_rows] = positions[rows]
        if np.any(np.diff(r) <= 0):  # pragma: no cover - guaranteed by the order checks
            raise fail(f.path, None, "rows are not in analysis order")
        parts.append(DatasetPart(f.path, f.frame.height, int(f.frame["n_blocks"].sum()), r))
    notes = list(info.notes)
    if len(units) > 1:
        notes.append(
            f"Assembled from {len(units)} separately converted traces: "
            + (
                "requests ordered by timestamp, then file, then index."
                if order == "time"
                else "per-session clocks, so the traces follow one another in file order."
            )
        )
    # The parts' own extra columns were dropped by the Parquet reader; named once here.
    schemas = [pl.read_parquet_schema(f.path) for f in all_files]
    ignored = sorted({c for schema in schemas for c in ignored_columns(schema)})
    if ignored:
        notes.append(f"ignored non-canonical column(s) {', '.join(map(repr, ignored))}")
    converted = SourceTrace(info.path, info.format) if len(units) == 1 else None
    return Dataset(
        spec=label,
        mode=mode,
        parts=tuple(parts),
        requests=frame,
        order=order,
        has_hashes=info.has_hashes,
        has_sessions=info.has_sessions,
        block_size_tokens=info.block_size_tokens,
        notes=tuple(notes),
        converted_from=converted,
        units=len(units),
    )


def _units(read: list[_File]) -> list[_Unit]:
    """Group the files into whole traces: standalone files, and datasets by ``dataset_id``."""
    groups: dict[str, list[_File]] = {}
    units: list[tuple[Path, _Unit]] = []
    for f in read:
        if f.part is None:
            n = f.frame.height
            units.append(
                (
                    f.path,
                    _Unit(
                        [f],
                        f.frame,
                        np.zeros(n, dtype=np.int64),
                        np.arange(n, dtype=np.int64),
                        f.info,
                    ),
                )
            )
        else:
            groups.setdefault(f.part.dataset_id, []).append(f)
    for group in groups.values():
        units.append((group[0].path, _partitioned_unit(group)))
    units.sort(key=lambda u: u[0])
    result = [u for _, u in units]
    first = result[0].info
    for unit in result[1:]:
        f = unit.files[0]
        for name in ("has_hashes", "has_sessions", "block_size_tokens"):
            a, b = getattr(first, name), getattr(unit.info, name)
            if a != b:
                raise fail(
                    f.path,
                    None,
                    f"metadata field {name!r} is {b!r} but {a!r} in "
                    f"{display_path(result[0].files[0].path)}: the files of a dataset must "
                    "agree on it",
                )
    return result


def _partitioned_unit(group: list[_File]) -> _Unit:
    """The parts of one dataset, checked to cover 0..N-1 exactly, ordered by request_index."""
    head = group[0]
    assert head.part is not None
    total = head.part.dataset_requests
    for f in group[1:]:
        assert f.part is not None
        if f.part.dataset_requests != total:
            raise fail(
                f.path,
                None,
                f"metadata 'fcctl.partition' says dataset_requests {f.part.dataset_requests}, "
                f"but {total} in {display_path(head.path)} (same dataset_id)",
            )
        if f.info != head.info:
            raise fail(
                f.path,
                None,
                f"metadata 'fcctl.trace' differs from {display_path(head.path)}'s (same "
                "dataset_id): the parts of one dataset share it",
            )
    # dataset_requests is a number from metadata, so it sizes nothing until the rows read
    # can back it: 1e11 claimed requests would otherwise be two 800 GB arrays.
    rows = sum(f.frame.height for f in group)
    if total > rows:
        raise fail(
            head.path,
            None,
            f"metadata 'fcctl.partition' field 'dataset_requests' says {total} requests, but "
            f"its {len(group)} part(s) found hold {rows} rows: a part is missing",
        )
    owner = np.full(total, -1, dtype=np.int64)
    owner_row = np.zeros(total, dtype=np.int64)
    for k, f in enumerate(group):
        index = f.frame["request_index"].to_numpy()
        taken = owner[index] >= 0
        if taken.any():
            row = int(np.flatnonzero(taken)[0])
            other = group[int(owner[index[row]])]
            raise fail(
                f.path,
                f"row {row}",
                f"column 'request_index' {int(index[row])} is also in "
                f"{display_path(other.path)} (row {int(owner_row[index[row]])}): a request "
                "belongs to one part",
            )
        owner[index] = k
        owner_row[index] = np.arange(index.shape[0])
    if (owner < 0).any():
        lost = int(np.flatnonzero(owner < 0)[0])
        raise fail(
            head.path,
            None,
            f"the dataset holds {total} requests (metadata 'fcctl.partition'), but "
            f"request_index {lost} is in none of its {len(group)} part(s) found: a part is "
            "missing",
        )
    frame = pl.concat([f.frame for f in group], how="vertical_relaxed")
    order = np.argsort(frame["request_index"].to_numpy(), kind="stable")
    frame = frame[order]
    return _Unit(group, frame, owner, owner_row, head.info)


def _assemble(units: list[_Unit]) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, Order]:
    """Several whole traces as one, in the module docstring's order; parents renumbered."""
    orders = {u.info.order for u in units}
    if len(orders) > 1:
        odd = next(u for u in units if u.info.order != units[0].info.order)
        raise fail(
            odd.files[0].path,
            None,
            f"is of order {odd.info.order!r} but {display_path(units[0].files[0].path)} is of "
            f"order {units[0].info.order!r}: per-session clocks and one shared clock cannot be "
            "assembled into one timeline",
        )
    order: Order = units[0].info.order
    file_base = np.cumsum([0] + [len(u.files) for u in units])
    frames = []
    file_no = []
    file_row = []
    unit_of = []
    offset = 0
    for k, u in enumerate(units):
        n = u.frame.height
        frames.append(
            u.frame.with_columns(
                (pl.col("request_index") + offset).alias("request_index"),
                (pl.col("parent_request") + offset).alias("parent_request"),
            )
        )
        file_no.append(u.file_no + file_base[k])
        file_row.append(u.file_row)
        unit_of.append(np.full(n, k, dtype=np.int64))
        offset += n
    # diagonal: a file without the optional ``type`` column contributes nulls for its rows
    # (the column is optional per file, as the Parquet reader takes it).
    frame = pl.concat(frames, how="diagonal_relaxed")
    fno = np.concatenate(file_no)
    frow = np.concatenate(file_row)
    if order == "session":
        ids = frame["session_id"]
        if ids.null_count() < frame.height:
            units_per = (
                pl.DataFrame({"s": ids, "u": np.concatenate(unit_of)})
                .drop_nulls("s")
                .group_by("s")
                .agg(pl.col("u").n_unique().alias("n"), pl.col("u").min().alias("u0"))
                .filter(pl.col("n") > 1)
            )
            if units_per.height:
                sid = units_per["s"][0]
                u0 = int(units_per["u0"][0])
                raise fail(
                    units[u0].files[0].path,
                    None,
                    f"session {sid!r} appears in more than one file: traces with per-session "
                    "clocks are assembled only from files with distinct sessions",
                )
        return frame, fno, frow, order
    ts = frame["timestamp_s"].to_numpy()
    perm = np.lexsort((frame["request_index"].to_numpy(), np.concatenate(unit_of), ts))
    new_of_old = np.empty(perm.shape[0], dtype=np.int64)
    new_of_old[perm] = np.arange(perm.shape[0], dtype=np.int64)
    frame = frame[perm]
    parents = frame["parent_request"]
    null = parents.is_null().to_numpy()
    remapped = pl.Series(
        "parent_request", new_of_old[parents.fill_null(0).to_numpy()], dtype=pl.Int64()
    ).scatter(np.flatnonzero(null), None)
    frame = frame.with_columns(
        pl.Series("request_index", np.arange(frame.height, dtype=np.int64)), remapped
    )
    return frame, fno[perm], frow[perm], order


def _check_order(
    files: list[_File], frame: pl.DataFrame, file_no: np.ndarray, file_row: np.ndarray, order: Order
) -> None:
    """The whole-dataset rules (module docstring), violations named by part file and row."""

    def at(i: int, column: str, message: str) -> TraceFormatError:
        return fail(
            files[int(file_no[i])].path,
            f"row {int(file_row[i])}",
            f"column {column!r} {message} (request_index {i} of the dataset)",
        )

    check_order(frame, order, at)


def read_dataset(spec: str | Path, progress: Progress | None = None) -> Trace:
    """The whole dataset as one in-memory :class:`Trace` (``open_dataset(spec).load_trace()``)."""
    return open_dataset(spec, progress).load_trace(progress)
