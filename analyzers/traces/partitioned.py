"""A trace as a partitioned dataset: what ``fcctl convert TRACE -o DIR --partition-by`` writes.

**Layout** (hive-style, one directory per partition value, empty partitions not written)::

    DIR/dataset.json                            the manifest, written last
    DIR/day=00003/part-00000.parquet            --partition-by day
    DIR/session_bucket=07/part-00000.parquet    --partition-by session-hash

* ``day`` = ``floor(timestamp_s / 86400)``, the exact floor of the quotient
  (``numpy.floor_divide``: 86399.999 is day 0, 86400.0 day 1, -0.5 day -1), zero-padded to 5
  digits in the directory name. Only for traces on one clock (``Trace.order == "time"``): the
  timestamps of a trace with per-session clocks (``order == "session"``, Claude Code) are
  offsets from each session's start, which no day can be derived from, so it is refused.
* ``session_bucket`` = :func:`session_bucket`: the first 8 bytes of the BLAKE2b digest
  (``digest_size=8``) of the UTF-8 ``session_id``, read as a big-endian unsigned 64-bit
  integer, modulo ``partitions``; zero-padded to the digits of ``partitions - 1`` (at least 2).
  Stable across runs, machines and Python versions (unlike the salted ``hash()``), and every
  request of a session lands in the same bucket. Only for traces with session ids.

**Parts.** Each ``part-NNNNN.parquet`` holds the canonical rows of one partition in
``request_index`` order with the *global* ``request_index`` and ``parent_request`` (not
renumbered), whatever columns the trace's table has (an optional ``type`` column is kept), the
``fcctl.trace`` metadata exactly as :func:`~fcctl.analyzers.traces.canonical.write_canonical` writes
it, and :data:`~fcctl.analyzers.traces.trace_metadata.PARTITION_KEY` (a
:class:`~fcctl.analyzers.traces.trace_metadata.PartitionMetadata`). A partition with more than
``max_part_rows`` rows or ``max_part_accesses`` block accesses is cut into consecutive parts
``part-00000``, ``part-00001``, ... of its directory (a single request over the access limit is
a part of its own). Parts are numbered (``partition``) 0.. in the order of their key (numeric),
then of their file; ``key`` is the day or bucket as a decimal integer (``"3"``, ``"7"``).

**Atomic.** Everything is written into a temporary sibling of ``DIR`` that replaces it in one
rename (:func:`fcctl.common.outdir.atomic_out_dir`, marker ``dataset.json``); a full disk is
:class:`~fcctl.common.errors.RunFailed` naming the file being written, and leaves nothing.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import dumps
from fcctl.common.outdir import atomic_out_dir, check_out_dir
from fcctl.common.paths import display_path
from fcctl.common.progress import Progress
from fcctl.common.version import fcctl_version

from .sampling import session_hash
from .schema import COLUMNS, SourceTrace, Trace
from .trace_metadata import (
    PartitionMetadata,
    partition_metadata,
    trace_metadata,
)

MANIFEST = "dataset.json"
SCHEMA_VERSION = 1
#: ``--partition-by`` values: the cut, and the hive column of its directories.
PARTITION_COLUMNS = {"day": "day", "session-hash": "session_bucket"}
DEFAULT_PARTITIONS = 16
MAX_PARTITIONS = 65_536
DEFAULT_MAX_PART_ROWS = 1_000_000
#: A part is also cut at this many block accesses: 32 Mi ids are 256 MiB in memory.
DEFAULT_MAX_PART_ACCESSES = 1 << 25
SECONDS_PER_DAY = 86_400
_COMMAND = "fcctl convert --partition-by"
_DAY_DIGITS = 5


@dataclass(frozen=True)
class PartFile:
    """One written part: path relative to the dataset directory, its partition and counts."""

    file: str
    partition: int
    key: str
    requests: int
    block_accesses: int
    bytes: int


@dataclass(frozen=True)
class PartitionedResult:
    """What :func:`write_partitioned` wrote; the manifest ``dataset.json`` holds the same.

    ``partitions`` is the bucket count for ``session-hash`` (buckets 0..partitions-1, empty
    ones not written) and None for ``day``; ``source`` is the original trace (as in the parts'
    ``fcctl.trace`` metadata); ``requests`` and ``block_accesses`` are the dataset's totals.
    """

    schema_version: int
    fcctl_version: str
    dataset_id: str
    partition_by: str
    partitions: int | None
    source: SourceTrace
    requests: int
    block_accesses: int
    max_part_rows: int
    max_part_accesses: int
    parts: tuple[PartFile, ...]


def session_bucket(session_id: str, partitions: int) -> int:
    """The bucket of ``session_id``: BLAKE2b-64 of its UTF-8 bytes, big-endian, mod partitions."""
    return session_hash(session_id) % partitions


def check_partition_args(by: str | None, partitions: int | None) -> int | None:
    """The bucket count to use (None for ``day``); :class:`FcctlInputError` for bad arguments.

    ``by`` is ``"day"`` or ``"session-hash"``; ``partitions`` (default 16) is an integer
    1..65536 and only goes with ``session-hash``.
    """
    if by is None:
        if partitions is not None:
            raise FcctlInputError(
                "partitions: applies only with --partition-by session-hash; got no --partition-by",
                parameter="partitions",
            )
        return None
    if by not in PARTITION_COLUMNS:
        raise FcctlInputError(
            f"partition_by: must be one of {', '.join(PARTITION_COLUMNS)}; got {by!r}",
            parameter="partition_by",
        )
    if by != "session-hash":
        if partitions is not None:
            raise FcctlInputError(
                f"partitions: applies only to --partition-by session-hash; got --partition-by {by}",
                parameter="partitions",
            )
        return None
    if partitions is None:
        return DEFAULT_PARTITIONS
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise FcctlInputError(
            f"partitions: must be an integer 1..{MAX_PARTITIONS}; got {partitions!r}",
            parameter="partitions",
        )
    return partitions


def check_dataset_out(
    out: str | Path,
    *,
    by: str,
    partitions: int | None = None,
    force: bool = False,
    source: str | Path | None = None,
) -> None:
    """Refuse, before the trace is read, arguments or an output directory that cannot be used.

    ``out`` must be absent, empty, or (with ``force``) an earlier partitioned convert output
    (it holds ``dataset.json``); ``source``, the input trace, must not lie inside it (replacing
    the directory would delete it).
    """
    check_partition_args(by, partitions)
    target = Path(out)
    check_out_dir(target, force=force, marker=MANIFEST, command=_COMMAND, flag="-o")
    if source is not None and Path(source).exists() and target.exists():
        inside = Path(source).resolve()
        if inside == target.resolve() or target.resolve() in inside.parents:
            raise FcctlInputError(
                f"-o {display_path(target)}: holds the input trace {display_path(source)}; "
                f"choose another output directory"
            )


def _partition_keys(trace: Trace, by: str, partitions: int | None) -> np.ndarray:
    """The partition value (day or bucket) of every row, int64."""
    frame = trace.requests
    shown = display_path(trace.path)
    if by == "day":
        if trace.order != "time":
            raise FcctlInputError(
                f"partition_by: {shown}: timestamps are per-session offsets (order "
                f"{trace.order!r}, format {trace.format}), not times on one clock, so they "
                f"have no day; use --partition-by session-hash",
                parameter="partition_by",
            )
        ts = frame["timestamp_s"].to_numpy()
        bad = ~np.isfinite(ts)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise FcctlInputError(
                f"{shown}: row {row}: field 'timestamp_s' must be a finite number of seconds "
                f"to partition by day; got {ts[row]!r}"
            )
        return np.floor_divide(ts, SECONDS_PER_DAY).astype(np.int64)
    assert partitions is not None
    sessions = frame["session_id"]
    if not trace.has_sessions:
        raise FcctlInputError(
            f"partition_by: {shown}: the trace has no session ids (format {trace.format}); "
            f"use --partition-by day",
            parameter="partition_by",
        )
    if sessions.null_count():
        row = int(np.flatnonzero(sessions.is_null().to_numpy())[0])
        raise FcctlInputError(
            f"{shown}: row {row}: field 'session_id' must not be null to partition by session-hash"
        )
    unique = sessions.unique()
    buckets = [session_bucket(s, partitions) for s in unique.to_list()]
    mapped = sessions.replace_strict(unique, pl.Series(buckets, dtype=pl.Int64))
    return mapped.to_numpy().astype(np.int64, copy=False)


def _cuts(accesses: np.ndarray, max_rows: int, max_accesses: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` ranges, each within both limits and at least one row."""
    total = np.cumsum(accesses)
    cuts = []
    start, n = 0, accesses.shape[0]
    while start < n:
        before = int(total[start - 1]) if start else 0
        by_accesses = int(np.searchsorted(total, before + max_accesses, side="right"))
        stop = max(start + 1, min(start + max_rows, by_accesses, n))
        cuts.append((start, stop))
        start = stop
    return cuts


def _key_dir(by: str, key: int, partitions: int | None) -> str:
    width = _DAY_DIGITS if partitions is None else max(2, len(str(partitions - 1)))
    return f"{PARTITION_COLUMNS[by]}={key:0{width}d}"


def _check_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FcctlInputError(f"{name}: must be an integer >= 1; got {value!r}", parameter=name)
    return value


def write_partitioned(
    trace: Trace,
    out_dir: str | Path,
    *,
    by: str,
    partitions: int | None = None,
    force: bool = False,
    max_part_rows: int = DEFAULT_MAX_PART_ROWS,
    max_part_accesses: int = DEFAULT_MAX_PART_ACCESSES,
    progress: Progress | None = None,
) -> PartitionedResult:
    """Write ``trace`` as a partitioned dataset in ``out_dir`` (see the module docstring).

    ``by`` is ``"day"`` or ``"session-hash"``; ``partitions`` the bucket count of
    ``session-hash`` (1..65536, default 16). ``out_dir`` must be absent, empty or (with
    ``force``) an earlier partitioned convert output. Bad arguments or a trace that cannot be
    cut so are :class:`FcctlInputError`, raised before anything is written.
    """
    buckets = check_partition_args(by, partitions)
    max_rows = _check_int(max_part_rows, "max_part_rows")
    max_accesses = _check_int(max_part_accesses, "max_part_accesses")
    frame = trace.requests
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:  # a reader's bug, not the input's
        raise RuntimeError(f"trace table lacks canonical column(s) {missing}")
    index = frame["request_index"].to_numpy()
    if not np.array_equal(index, np.arange(frame.height)):
        raise RuntimeError("trace table's request_index is not 0..n-1 in row order")
    keys = _partition_keys(trace, by, buckets)
    accesses = frame["hash_ids"].list.len().fill_null(0).to_numpy().astype(np.int64)
    # Stable: rows of a key keep their request_index order.
    order = np.argsort(keys, kind="stable")
    values, starts = np.unique(keys[order], return_index=True)
    bounds = [*starts.tolist(), frame.height]
    dataset_id = uuid.uuid4().hex
    trace_meta = trace_metadata(trace)
    parts: list[PartFile] = []
    out = Path(out_dir)
    with (
        atomic_out_dir(out, force=force, marker=MANIFEST, command=_COMMAND, flag="-o") as tmp,
        (progress or Progress(enabled=False)).task(
            "writing parts", total=frame.height, unit="requests"
        ) as task,
    ):
        for g, key in enumerate(values.tolist()):
            rows = order[bounds[g] : bounds[g + 1]]
            directory = _key_dir(by, key, buckets)
            (tmp / directory).mkdir()
            for j, (a, b) in enumerate(_cuts(accesses[rows], max_rows, max_accesses)):
                idx = rows[a:b]
                if int(idx[-1]) - int(idx[0]) + 1 == idx.shape[0]:
                    part_frame = frame.slice(int(idx[0]), idx.shape[0])  # contiguous: no copy
                else:
                    part_frame = frame[idx]
                name = f"{directory}/part-{j:05d}.parquet"
                meta = PartitionMetadata(
                    dataset_id=dataset_id,
                    partition=len(parts),
                    partition_by=by,
                    key=str(key),
                    requests=part_frame.height,
                    block_accesses=int(accesses[idx].sum()),
                    dataset_requests=frame.height,
                )
                size = _write_part(part_frame, tmp / name, trace_meta, meta)
                parts.append(
                    PartFile(
                        name, meta.partition, str(key), meta.requests, meta.block_accesses, size
                    )
                )
                task.advance(part_frame.height)
                del part_frame
        result = PartitionedResult(
            schema_version=SCHEMA_VERSION,
            fcctl_version=fcctl_version(),
            dataset_id=dataset_id,
            partition_by=by,
            partitions=buckets,
            source=trace.source,
            requests=frame.height,
            block_accesses=int(accesses.sum()),
            max_part_rows=max_rows,
            max_part_accesses=max_accesses,
            parts=tuple(parts),
        )
        (tmp / MANIFEST).write_text(dumps(result) + "\n")
    return result


def _write_part(
    frame: pl.DataFrame,
    path: Path,
    trace_meta: dict[str, str],
    part: PartitionMetadata,
) -> int:
    """Write one part at ``path``, flushed to disk; its size in bytes.

    A failure reaches :func:`~fcctl.common.outdir.atomic_out_dir`, which names the part: a full
    disk is RunFailed (exit 1).
    """
    frame.write_parquet(
        path, compression="zstd", metadata={**trace_meta, **partition_metadata(part)}
    )
    # A full disk may show only when the data reach it (delayed allocation): sync first.
    with open(path, "rb") as written:
        os.fsync(written.fileno())
    return os.path.getsize(path)
