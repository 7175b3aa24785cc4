"""Shared plumbing for the trace readers: errors, byte/line streaming, field checks, tables.

Every reader reports bad input as :class:`TraceFormatError` with one line that names the file,
the place (``line N`` for JSON Lines, 1-based; ``row N`` for CSV, 1-based data row), the field,
the rule, and ``got {value!r}``.
"""

from __future__ import annotations

import array
import gzip
import math
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import polars as pl
import pyarrow as pa
from fcctl.analyzers.schema import SCHEMA

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress, Task

try:  # orjson parses the 461 MB Claude Code file ~2x faster than json; json is the fallback.
    import orjson

    _loads = orjson.loads
    JSONDecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover - orjson is a declared dependency
    import json

    _loads = json.loads
    JSONDecodeError = (json.JSONDecodeError, UnicodeDecodeError)

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
CHUNK_BYTES = 8 * 1024 * 1024
MAX_REPR = 80


class TraceFormatError(FcctlInputError):
    """A trace file is malformed, truncated, empty, or not in the expected format."""


def show(value: Any) -> str:
    """``repr`` of a bad value, cut short so an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def where(path: str | Path, place: str | None) -> str:
    return f"{path}: {place}" if place else str(path)


def fail(path: str | Path, place: str | None, message: str) -> TraceFormatError:
    return TraceFormatError(f"{where(path, place)}: {message}")


def check_file(path: Path) -> None:
    """The file exists, is a regular file, and is not empty."""
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or directory")
    if path.is_dir():
        raise TraceFormatError(f"{path}: is a directory, expected a trace file")
    if path.stat().st_size == 0:
        raise TraceFormatError(f"{path}: file is empty")


def loads(data: bytes | str) -> Any:
    return _loads(data)


def read_head(path: Path, size: int = HEAD_BYTES) -> tuple[bytes, str | None]:
    """The first ``size`` bytes of the (decompressed, if gzip) content, and the gzip error.

    A broken or truncated gzip stream gives what did decompress plus the error text, so that
    detection can still work on a long file whose damage lies past the head.
    """
    check_file(path)
    with path.open("rb") as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic != GZIP_MAGIC:
            return raw.read(size), None
        try:
            with gzip.GzipFile(fileobj=raw) as gz:
                return gz.read(size), None
        except (OSError, EOFError, zlib.error) as e:
            raw.seek(0)
            try:
                partial = zlib.decompressobj(wbits=31).decompress(raw.read(size * 4), size)
            except zlib.error:
                partial = b""
            return partial, str(e)


@contextmanager
def open_content(path: Path) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Yield ``(content, raw)``: the decompressed byte stream and the raw file (for progress)."""
    with path.open("rb") as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw) as gz:
                yield gz, raw
        else:
            yield raw, raw


def reading_task(
    progress: Progress, path: Path, total_bytes: int | None, what: str = "reading"
) -> AbstractContextManager[Task]:
    """A line of ``progress`` over the bytes of ``path`` read so far (shown in MiB)."""
    return progress.task(f"{what} {path.name}", total_bytes, unit="MiB", per_unit=2**20)


def iter_lines(path: Path, *, progress: Progress | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` (1-based, without the newline) for non-blank lines.

    Reads the (possibly gzip) file in large chunks; a broken or truncated gzip stream becomes a
    :class:`TraceFormatError` naming the line being read. An empty file (or one with only blank
    lines) is an error too.
    """
    check_file(path)
    lineno = 0
    seen = False
    bar = reading_task(progress or Progress(enabled=False), path, path.stat().st_size)
    with bar as task, open_content(path) as (content, raw):
        pending: list[bytes] = []
        while True:
            try:
                chunk = content.read(CHUNK_BYTES)
            except (OSError, EOFError, zlib.error) as e:
                raise fail(
                    path, f"line {lineno + 1}", f"gzip stream is broken or truncated ({e})"
                ) from None
            if not chunk:
                break
            task.update(raw.tell())
            parts = chunk.split(b"\n")
            if pending:
                parts[0] = b"".join([*pending, parts[0]])
                pending = []
            pending.append(parts.pop())
            for line in parts:
                lineno += 1
                if line.strip():
                    seen = True
                    yield lineno, line
        tail = b"".join(pending)
        if tail.strip():
            seen = True
            yield lineno + 1, tail
    if not seen:
        raise fail(path, None, "file is empty (no records)")


def iter_json_lines(
    path: Path, *, progress: Progress | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each JSON Lines record; each must be a JSON object."""
    for lineno, line in iter_lines(path, progress=progress):
        try:
            record = _loads(line)
        except JSONDecodeError as e:
            raise fail(
                path, f"line {lineno}", f"invalid JSON ({e}); got {show(line[:60])}"
            ) from None
        if not isinstance(record, dict):
            raise fail(path, f"line {lineno}", f"record must be a JSON object; got {show(record)}")
        yield lineno, record


def first_json_record(head: bytes) -> Any:
    """The first complete JSON line in ``head``, or ``None`` when there is none."""
    # The last piece may be cut short by the head's size; then it simply fails to parse.
    for line in head.split(b"\n"):
        if line.strip():
            try:
                return _loads(line)
            except JSONDecodeError:
                return None
    return None


# --- field checks -------------------------------------------------------------------------


def require(record: dict[str, Any], name: str, path: Path, place: str) -> Any:
    try:
        return record[name]
    except KeyError:
        raise fail(path, place, f"missing field {name!r}") from None


def non_negative_int(record: dict[str, Any], name: str, path: Path, place: str) -> int:
    value = require(record, name, path, place)
    if type(value) is not int or value < 0:
        raise fail(path, place, f"field {name!r} must be a non-negative integer; got {show(value)}")
    return value


def integer(record: dict[str, Any], name: str, path: Path, place: str) -> int:
    value = require(record, name, path, place)
    if type(value) is not int:
        raise fail(path, place, f"field {name!r} must be an integer; got {show(value)}")
    return value


def finite_number(record: dict[str, Any], name: str, path: Path, place: str) -> float:
    value = require(record, name, path, place)
    if type(value) not in (int, float) or not math.isfinite(value):
        raise fail(path, place, f"field {name!r} must be a finite number; got {show(value)}")
    return float(value)


def hash_list(record: dict[str, Any], name: str, path: Path, place: str) -> list[Any]:
    value = require(record, name, path, place)
    if not isinstance(value, list):
        raise fail(path, place, f"field {name!r} must be a list of block ids; got {show(value)}")
    return value


def bad_hash_id(values: list[Any], name: str, path: Path, place: str) -> TraceFormatError:
    """The error for the first element of ``values`` that is not an integer in [0, 2**64)."""
    for i, v in enumerate(values):
        if type(v) is not int or not 0 <= v < 2**64:
            got = show(v)
            if type(v) is float and v.is_integer() and abs(v) >= 2**63:
                # orjson hands integers beyond 64 bits over as floats: say what the file held.
                got = f"an integer beyond 64 bits (about {v:.4g})"
            return fail(path, place, f"{name}[{i}] must be an integer in [0, 2**64); got {got}")
    return fail(path, place, f"field {name!r} holds a bad block id")  # pragma: no cover


class HashIdBuffer:
    """Every request's block ids in one flat ``array('Q')``, plus how many each request had."""

    __slots__ = ("lengths", "values")

    def __init__(self) -> None:
        self.values = array.array("Q")
        self.lengths: list[int] = []

    def add(self, record: dict[str, Any], name: str, path: Path, place: str) -> None:
        ids = hash_list(record, name, path, place)
        try:
            # array('Q') rejects floats, strings, negatives and ids >= 2**64 in C.
            self.values.extend(ids)
        except (TypeError, OverflowError):
            raise bad_hash_id(ids, name, path, place) from None
        self.lengths.append(len(ids))

    def flat(self) -> np.ndarray:
        """The ids as uint64, viewing the buffer (no copy)."""
        if not self.values:
            return np.zeros(0, dtype=np.uint64)
        return np.frombuffer(self.values, dtype=np.uint64)

    def offsets(self) -> np.ndarray:
        """int64 offsets: request ``i``'s ids are ``flat()[offsets[i]:offsets[i + 1]]``."""
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return offsets


# --- table building -----------------------------------------------------------------------


def hash_column(values: np.ndarray, offsets: np.ndarray) -> pl.Series:
    """A zero-copy ``List(UInt64)`` series from flat uint64 ``values`` and int64 ``offsets``."""
    array = pa.LargeListArray.from_arrays(
        pa.array(offsets.astype(np.int64, copy=False)),
        pa.array(values.astype(np.uint64, copy=False)),
    )
    return pl.Series("hash_ids", pl.from_arrow(array), dtype=pl.List(pl.UInt64()))


def null_hash_column(n: int) -> pl.Series:
    return pl.Series("hash_ids", [None] * n, dtype=pl.List(pl.UInt64()))


def build_frame(
    *,
    timestamp_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    block_size_tokens: int | np.ndarray,
    hash_ids: pl.Series,
    session_id: pl.Series | list[str | None] | None = None,
    turn: np.ndarray | list[int | None] | None = None,
    parent_request: np.ndarray | list[int | None] | None = None,
) -> pl.DataFrame:
    """The canonical table, rows already in analysis order; ``request_index`` is 0..n-1."""
    n = len(timestamp_s)
    columns = {
        "request_index": pl.Series(np.arange(n, dtype=np.int64)),
        "session_id": pl.Series(session_id if session_id is not None else [None] * n),
        "turn": pl.Series(turn if turn is not None else [None] * n),
        "parent_request": pl.Series(parent_request if parent_request is not None else [None] * n),
        "timestamp_s": pl.Series(np.asarray(timestamp_s, dtype=np.float64)),
        "input_tokens": pl.Series(np.asarray(input_tokens, dtype=np.int64)),
        "output_tokens": pl.Series(np.asarray(output_tokens, dtype=np.int64)),
        "block_size_tokens": pl.Series(
            np.broadcast_to(np.asarray(block_size_tokens, dtype=np.int32), (n,)).copy()
        ),
        "hash_ids": hash_ids,
    }
    return pl.DataFrame([columns[name].cast(dtype).alias(name) for name, dtype in SCHEMA.items()])


def gather_segments(
    values: np.ndarray, offsets: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reorder variable-length segments ``values[offsets[i]:offsets[i+1]]`` by ``order``."""
    lengths = np.diff(offsets)[order]
    new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    starts = offsets[:-1][order]
    # Index of each output element: its segment's old start plus its position in the segment.
    index = np.repeat(starts - new_offsets[:-1], lengths) + np.arange(new_offsets[-1])
    return values[index], new_offsets


def is_sorted(values: np.ndarray) -> bool:
    return bool(np.all(values[1:] >= values[:-1])) if len(values) > 1 else True


def stable_time_order(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows by ``timestamp_s`` (stable), ``request_index`` renumbered, parents remapped."""
    ts = frame["timestamp_s"].to_numpy()
    if is_sorted(ts):
        return frame
    order = np.argsort(ts, kind="stable")
    new_index = np.empty(len(order), dtype=np.int64)
    new_index[order] = np.arange(len(order), dtype=np.int64)
    # parent_request holds old indices; map them to the new positions (nulls stay null).
    remapped = pl.Series(new_index).gather(frame["parent_request"]).alias("parent_request")
    frame = frame.with_columns(remapped).gather(order)
    return frame.with_columns(pl.Series("request_index", np.arange(len(order), dtype=np.int64)))
