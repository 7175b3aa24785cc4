"""Shared plumbing for the trace readers: errors, byte/line streaming, field checks, tables.

Every reader reports bad input as :class:`TraceFormatError` with one line that names the file,
the place (``line N`` for JSON Lines, 1-based; ``row N`` for CSV, 1-based data row), the field,
the rule, and ``got {value!r}``.
"""

from __future__ import annotations

import array
import errno
import io
import math
import os
import stat
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import polars as pl
import pyarrow as pa

from fcctl.common.errors import FcctlInputError
from fcctl.common.inputfile import file_kind
from fcctl.common.paths import display_path
from fcctl.common.progress import Progress, Task

from ..schema import (
    OPTIONAL_COLUMNS,
    SCHEMA,
    first_bad_think_time,
    first_bad_timestamp,
    think_time_rule,
    timestamp_rule,
)

# One JSON document (bytes or str) to Python values: what both parsers below accept.
_loads: Callable[[bytes | str], Any]
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
# Compressed bytes fed to zlib per call: a damaged stream loses at most the output of one
# such piece, so the error can name the last line read before the damage.
GZIP_INPUT_BYTES = 64 * 1024
MAX_REPR = 80
# Far above any real record (the longest Claude Code session line is ~10 MB), far below what
# would exhaust memory: one line is held whole while it is parsed.
DEFAULT_MAX_LINE_BYTES = 64 * 2**20


class TraceFormatError(FcctlInputError):
    """A trace file is malformed, truncated, empty, or not in the expected format.

    ``line`` is the 1-based line the error is about, when it is about a line of a text trace
    (:func:`blame_gzip` uses it); ``None`` otherwise.
    """

    line: int | None = None


def show(value: Any) -> str:
    """``repr`` of a bad value, cut short so an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def where(path: str | Path, place: str | None) -> str:
    shown = display_path(path)
    return f"{shown}: {place}" if place else shown


def fail(path: str | Path, place: str | None, message: str) -> TraceFormatError:
    error = TraceFormatError(f"{where(path, place)}: {message}")
    if place and place.startswith("line "):
        number = place[5:].split(",", 1)[0]
        error.line = int(number) if number.isdigit() else None
    return error


def mib(n: int) -> str:
    """A byte limit as people write it: ``64 MiB``, or plain bytes when not whole MiB."""
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"


def check_max_line_bytes(max_line_bytes: int) -> int:
    if type(max_line_bytes) is not int or max_line_bytes < 1:
        raise TraceFormatError(
            f"max_line_bytes: must be an integer >= 1; got {max_line_bytes!r}",
            parameter="max_line_bytes",
        )
    return max_line_bytes


def line_too_long(path: Path, lineno: int, max_line_bytes: int) -> TraceFormatError:
    error = fail(
        path,
        f"line {lineno}",
        f"line is longer than the limit of {mib(max_line_bytes)} (`max_line_bytes` "
        "to raise it); stopped reading there",
    )
    error.line = None  # not a sign of gzip damage: blame_gzip must not decompress the rest
    return error


def _not_regular(path: Path, mode: int, what: str) -> TraceFormatError:
    return TraceFormatError(
        f"{display_path(path)}: is {file_kind(mode)}, expected a regular {what}"
    )


def missing(path: Path) -> TraceFormatError:
    """A path that is not there: absent, or a symbolic link whose target is absent."""
    shown = display_path(path)
    if path.is_symlink():
        target = display_path(os.readlink(path))
        return TraceFormatError(f"{shown}: is a symbolic link to {target}, which does not exist")
    return TraceFormatError(f"{shown}: no such file or directory")


def _os_error(path: Path, e: OSError) -> TraceFormatError:
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return missing(path)
    return TraceFormatError(f"{display_path(path)}: cannot read it ({e.strerror})")


def check_file(path: Path, what: str = "trace file") -> int:
    """The file is a regular file (after symlinks) that is not empty; returns its size.

    FIFOs, devices and sockets are refused before anything opens them: opening a FIFO blocks
    until a writer comes, and ``/dev/zero`` never ends.
    """
    try:
        st = path.stat()
    except OSError as e:
        raise _os_error(path, e) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    if st.st_size == 0:
        raise TraceFormatError(f"{display_path(path)}: file is empty")
    return st.st_size


def open_regular(path: Path, what: str = "trace file") -> IO[bytes]:
    """Open ``path`` for reading, refusing anything but a regular file without blocking on it.

    ``O_NONBLOCK`` makes opening a FIFO return at once (a swap between the check and the open
    cannot hang us); the type is then checked on the open descriptor itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _os_error(path, e) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def loads(data: bytes | str) -> Any:
    return _loads(data)


class GzipDamage(Exception):
    """The gzip stream stopped decompressing; the text says why (zlib's words)."""


def _gunzip(raw: IO[bytes]) -> Iterator[bytes]:
    """Decompressed chunks (at most CHUNK_BYTES each) of a gzip stream, members concatenated.

    zlib is fed GZIP_INPUT_BYTES at a time so that what decoded before a damaged spot has been
    handed out when the damage is met (then :class:`GzipDamage`). zlib checks each member's
    CRC and length, so bytes flipped anywhere are caught, at the latest at the member's end.
    """
    d = zlib.decompressobj(wbits=31)
    data = b""
    started = False  # whether the current member has received any byte
    while True:
        if not data:
            data = raw.read(GZIP_INPUT_BYTES)
            if not data:
                if started and not d.eof:
                    raise GzipDamage("truncated: the file ends inside the compressed stream")
                return
        if d.eof:
            # Another member follows (concatenated gzip), or zero padding, as gzip allows.
            data = data.lstrip(b"\x00")
            if not data:
                continue
            d = zlib.decompressobj(wbits=31)
            started = False
        started = True
        try:
            out = d.decompress(data, CHUNK_BYTES)
        except zlib.error as e:
            raise GzipDamage(str(e).removeprefix("Error -3 while decompressing data: ")) from None
        data = d.unconsumed_tail if not d.eof else d.unused_data
        if out:
            yield out


def blame_gzip(path: Path, error: TraceFormatError) -> TraceFormatError:
    """``error``, or, when ``path`` is a damaged gzip file, the error that says so.

    Bytes flipped inside a gzip stream usually decompress into garbage that fails to parse
    some lines before zlib notices (at the latest at the member's CRC). So when a line of a
    gzip file is bad, the rest of the stream is checked (decompressed and dropped, in bounded
    memory); if it is damaged, that is the error, naming the last line read before the damage.
    """
    if error.line is None:
        return error
    try:
        with open_regular(path) as raw:
            if raw.read(2) != GZIP_MAGIC:
                return error
            raw.seek(0)
            for _ in _gunzip(raw):
                pass
    except GzipDamage as damage:
        reason = str(error).split(": ", 2)[-1]
        return fail(
            path,
            None,
            f"gzip stream is broken or truncated ({damage}); the last line read before the "
            f"damage is line {error.line - 1} (line {error.line}: {reason[:100]})",
        )
    except (OSError, TraceFormatError):
        return error
    return error


def read_head(
    path: Path, size: int = HEAD_BYTES, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[bytes, str | None]:
    """The start of the (decompressed, if gzip) content, and the gzip error if any.

    At least ``size`` bytes (less if the file is shorter); when the content starts with a JSON
    object whose line does not end within them, reading goes on to the end of that first line
    (a 10 MB first record is detected like a short one), up to ``max_line_bytes``, past which
    the line is an error. A broken or truncated gzip stream gives what did decompress plus the
    error text, so that detection can still work on a long file whose damage lies past the head.
    """
    check_file(path)
    parts: list[bytes] = []
    have = 0
    error: str | None = None
    extending = False  # reading on to the end of a long first line
    first_line = 1
    with open_regular(path) as raw:
        magic = raw.read(2)
        raw.seek(0)
        chunks = _gunzip(raw) if magic == GZIP_MAGIC else iter(lambda: raw.read(size), b"")
        try:
            for chunk in chunks:
                parts.append(chunk)
                have += len(chunk)
                if extending:
                    if b"\n" in chunk:
                        break
                elif have >= size:
                    body = b"".join(parts).lstrip()
                    if not body.startswith(b"{") or b"\n" in body:
                        break
                    extending = True
                    first_line += (have - len(body)) and b"".join(parts)[: have - len(body)].count(
                        b"\n"
                    )
                if extending and have > max_line_bytes:
                    raise line_too_long(path, first_line, max_line_bytes)
        except GzipDamage as e:
            error = str(e)
    return b"".join(parts), error


@contextmanager
def open_content(path: Path) -> Iterator[tuple[Iterator[bytes], IO[bytes]]]:
    """Yield ``(chunks, raw)``: decompressed content chunks and the raw file (for progress).

    ``chunks`` raises :class:`GzipDamage` where a gzip stream is broken or truncated.
    """
    with open_regular(path) as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic == GZIP_MAGIC:
            yield _gunzip(raw), raw
        else:
            yield iter(lambda: raw.read(CHUNK_BYTES), b""), raw


def reading_task(
    progress: Progress, path: Path, total_bytes: int | None, what: str = "reading"
) -> AbstractContextManager[Task]:
    """A line of ``progress`` over the bytes of ``path`` read so far (shown in MiB)."""
    return progress.task(f"{what} {path.name}", total_bytes, unit="MiB", per_unit=2**20)


def iter_lines(
    path: Path,
    *,
    progress: Progress | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` (1-based, without the newline) for non-blank lines.

    Reads the (possibly gzip) file in chunks. A line longer than ``max_line_bytes`` is an error
    as soon as that many bytes of it are held, so memory stays near the limit whatever the
    input. A broken or truncated gzip stream is an error naming the last line read before the
    damage. An empty file (or one with only blank lines) is an error too.
    """
    size = check_file(path)
    lineno = 0
    seen = False
    bar = reading_task(progress or Progress(enabled=False), path, size)
    with bar as task, open_content(path) as (chunks, raw):
        pending: list[bytes] = []
        pending_bytes = 0
        while True:
            try:
                chunk = next(chunks, b"")
            except GzipDamage as e:
                last = f"after line {lineno}, the last line read" if lineno else "before line 1"
                raise fail(path, None, f"gzip stream is broken or truncated {last} ({e})") from None
            if not chunk:
                break
            task.update(raw.tell())
            parts = chunk.split(b"\n")
            tail = parts.pop()
            if parts:
                if pending:
                    parts[0] = b"".join([*pending, parts[0]])
                    pending = []
                    pending_bytes = 0
                    if len(parts[0]) > max_line_bytes:  # ends in this chunk, began before
                        raise line_too_long(path, lineno + 1, max_line_bytes)
                if len(chunk) > max_line_bytes and max(map(len, parts)) > max_line_bytes:
                    long = next(i for i, p in enumerate(parts) if len(p) > max_line_bytes)
                    raise line_too_long(path, lineno + long + 1, max_line_bytes)
                for line in parts:
                    lineno += 1
                    if line.strip():
                        seen = True
                        yield lineno, line
            if tail:
                pending.append(tail)
                pending_bytes += len(tail)
                if pending_bytes > max_line_bytes:
                    raise line_too_long(path, lineno + 1, max_line_bytes)
        tail = b"".join(pending)
        if tail.strip():
            seen = True
            yield lineno + 1, tail
    if not seen:
        raise fail(path, None, "file is empty (no records)")


def read_csv_text(
    path: Path, *, progress: Progress | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> pl.DataFrame:
    """A CSV file (plain or gzip) as a table of strings, header names stripped of spaces/BOM.

    Read through :func:`iter_lines`, so the line limit and the gzip checks hold; every cell is
    a string (an empty cell is null), for the reader to parse and check by its own rules.
    """
    lines = iter_lines(path, progress=progress, max_line_bytes=max_line_bytes)
    text = b"\n".join(line for _, line in lines)
    try:
        table = pl.read_csv(io.BytesIO(text), infer_schema=False)
    except (pl.exceptions.PolarsError, ValueError) as e:
        raise fail(path, None, f"unreadable CSV ({' '.join(str(e).split())[:120]})") from None
    return table.rename({c: c.strip().lstrip("\ufeff") for c in table.columns})


def iter_json_lines(
    path: Path,
    *,
    progress: Progress | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each JSON Lines record; each must be a JSON object."""
    for lineno, line in iter_lines(path, progress=progress, max_line_bytes=max_line_bytes):
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


def require(record: dict[str, Any], name: str, path: Path, place: str | None) -> Any:
    try:
        return record[name]
    except KeyError:
        raise fail(path, place, f"missing field {name!r}") from None


INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def synthesised_id_cap() -> int:
    """Most block ids a reader may synthesise from token counts in one file.

    A token count is a few bytes of input that can ask for any number of 8-byte ids, so the
    total is checked before anything is allocated: at most a quarter of physical memory at
    16 bytes an id (the ids plus their copy into the hash column), and never above 2**32.
    """
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 16 * 2**30
    return min(2**32, memory // 4 // 16)


def non_negative_int(
    record: dict[str, Any], name: str, path: Path, place: str | None, maximum: int = INT64_MAX
) -> int:
    """``record[name]`` as an int in ``0..maximum``; the default is the Int64 column it lands in
    (JSON ints are unbounded, and a larger one would overflow the numpy/polars conversion)."""
    value = require(record, name, path, place)
    if type(value) is not int or value < 0:
        raise fail(path, place, f"field {name!r} must be a non-negative integer; got {show(value)}")
    if value > maximum:
        raise fail(path, place, f"field {name!r} must be <= {maximum}; got {show(value)}")
    return value


def integer(
    record: dict[str, Any], name: str, path: Path, place: str | None, maximum: int = INT64_MAX
) -> int:
    """``record[name]`` as an int in ``-maximum-1..maximum`` (the column's dtype range)."""
    value = require(record, name, path, place)
    if type(value) is not int:
        raise fail(path, place, f"field {name!r} must be an integer; got {show(value)}")
    if not -maximum - 1 <= value <= maximum:
        raise fail(
            path, place, f"field {name!r} must be in {-maximum - 1}..{maximum}; got {show(value)}"
        )
    return value


def text(record: dict[str, Any], name: str, path: Path, place: str | None) -> str:
    """``record[name]``, which must be a non-empty JSON string."""
    value = require(record, name, path, place)
    if type(value) is not str or not value:
        raise fail(path, place, f"field {name!r} must be a non-empty string; got {show(value)}")
    return value


def optional_text(record: dict[str, Any], name: str, path: Path, place: str | None) -> str | None:
    """``record[name]`` when it is a string; ``None`` when the field is absent or null."""
    value = record.get(name)
    if value is not None and type(value) is not str:
        raise fail(path, place, f"field {name!r} must be a string or null; got {show(value)}")
    return value


def finite_number(record: dict[str, Any], name: str, path: Path, place: str | None) -> float:
    value = require(record, name, path, place)
    if type(value) not in (int, float) or not math.isfinite(value):
        raise fail(path, place, f"field {name!r} must be a finite number; got {show(value)}")
    return float(value)


def optional_seconds(
    record: dict[str, Any], name: str, path: Path, place: str | None
) -> float | None:
    """Field ``name``: absent or null -> None; else a finite number of seconds >= 0."""
    value = record.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise fail(
            path,
            place,
            f"field {name!r} must be a finite number of seconds >= 0; got {show(value)}",
        )
    return float(value)


def hash_list(record: dict[str, Any], name: str, path: Path, place: str | None) -> list[Any]:
    value = require(record, name, path, place)
    if not isinstance(value, list):
        raise fail(path, place, f"field {name!r} must be a list of block ids; got {show(value)}")
    return value


def bad_hash_id(values: list[Any], name: str, path: Path, place: str | None) -> TraceFormatError:
    """The error for the first element of ``values`` that is not an integer in [0, 2**64)."""
    for i, v in enumerate(values):
        if type(v) is not int or not 0 <= v < 2**64:  # type() is not int: True is refused too
            got = show(v)
            if type(v) is float and v.is_integer() and abs(v) >= 2**63:
                # orjson hands integers beyond 64 bits over as floats: say what the file held.
                got = f"an integer beyond 64 bits (about {v:.4g})"
            return fail(path, place, f"{name}[{i}] must be an integer in [0, 2**64); got {got}")
    return fail(path, place, f"field {name!r} holds a bad block id")  # pragma: no cover


# Lists whose elements are checked for JSON true/false together (see HashIdBuffer.add); their
# references are kept until then, so this bounds the memory held for the check.
_BOOL_CHECK_LISTS = 4096


class HashIdBuffer:
    """Every request's block ids in one flat ``array('Q')``, plus how many each request had."""

    __slots__ = ("_pending", "_pending_start", "lengths", "values")

    def __init__(self) -> None:
        self.values = array.array("Q")
        self.lengths: list[int] = []
        self._pending: list[tuple[list[Any], str, Path, str | None]] = []
        self._pending_start = 0

    def add(self, record: dict[str, Any], name: str, path: Path, place: str | None) -> None:
        """Append ``record[name]``'s ids; anything but an integer in [0, 2**64) is an error.

        array('Q') rejects floats, strings, negatives and ids >= 2**64 in C, but takes a JSON
        ``true`` as 1 and ``false`` as 0. Looking at the type of every element would cost
        seconds on 94 M ids, so only the elements stored as 0 or 1 are looked at, in batches
        (:meth:`_check_bools`): a handful per request.
        """
        ids = hash_list(record, name, path, place)
        try:
            self.values.extend(ids)
        except (TypeError, OverflowError):
            raise bad_hash_id(ids, name, path, place) from None
        self.lengths.append(len(ids))
        self._pending.append((ids, name, path, place))
        if len(self._pending) >= _BOOL_CHECK_LISTS:
            self._check_bools()

    def _check_bools(self) -> None:
        pending, start = self._pending, self._pending_start
        self._pending = []
        self._pending_start = len(self.values)
        if len(self.values) == start:
            return
        # A view of the buffer: it must be gone before the array grows again (BufferError).
        view = np.frombuffer(self.values, dtype=np.uint64)[start:]
        small = np.flatnonzero(view <= 1)
        del view
        if not small.size:
            return
        ends = np.cumsum([len(entry[0]) for entry in pending])
        owners = np.searchsorted(ends, small, side="right")
        for position, k in zip(small.tolist(), owners.tolist(), strict=True):
            ids, name, path, place = pending[k]
            if type(ids[position - int(ends[k]) + len(ids)]) is bool:
                raise bad_hash_id(ids, name, path, place)

    def flat(self) -> np.ndarray:
        """The ids as uint64, viewing the buffer (no copy); checks the last added lists."""
        self._check_bools()
        if not self.values:
            return np.zeros(0, dtype=np.uint64)
        return np.frombuffer(self.values, dtype=np.uint64)

    def offsets(self) -> np.ndarray:
        """int64 offsets: request ``i``'s ids are ``flat()[offsets[i]:offsets[i + 1]]``."""
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return offsets


# --- table building -----------------------------------------------------------------------


def _arrow(a: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A zero-copy Arrow array over a contiguous numpy array. Built from its buffer, not with
    ``pa.array``, whose numpy path imports pandas: 0.35-0.4 s of CPU on every fcctl process
    that reads a trace (measured, docs/benchmarks.md "The figures the docs quote")."""
    return pa.Array.from_buffers(kind, a.shape[0], [None, pa.py_buffer(a)])


def hash_column(values: np.ndarray, offsets: np.ndarray) -> pl.Series:
    """A zero-copy ``List(UInt64)`` series from flat uint64 ``values`` and int64 ``offsets``."""
    array = pa.LargeListArray.from_arrays(
        _arrow(np.ascontiguousarray(offsets, dtype=np.int64), pa.int64()),
        _arrow(np.ascontiguousarray(values, dtype=np.uint64), pa.uint64()),
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
    session_id: pl.Series | Sequence[str | None] | None = None,
    turn: np.ndarray | Sequence[int | None] | None = None,
    parent_request: np.ndarray | Sequence[int | None] | None = None,
    request_type: pl.Series | Sequence[str | None] | None = None,
    think_time_s: pl.Series | None = None,
    path: Path | None = None,
) -> pl.DataFrame:
    """The canonical table, rows already in analysis order; ``request_index`` is 0..n-1.

    ``request_type`` (the trace's own label of each request) becomes the optional ``type``
    column and ``think_time_s`` (the client's think time, null where not recorded) the optional
    column of that name; without them the table has only the nine canonical columns.
    """
    n = len(timestamp_s)
    timestamp_s = np.asarray(timestamp_s, dtype=np.float64)
    bad = first_bad_timestamp(timestamp_s)
    if bad is not None:
        rule = timestamp_rule(float(timestamp_s[bad]))
        raise _bad_request(path, bad, f"timestamp (as timestamp_s) {rule}")
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
    if request_type is not None:
        columns["type"] = pl.Series(request_type)
    if think_time_s is not None:
        bad = first_bad_think_time(think_time_s)
        if bad is not None:
            rule = think_time_rule(float(think_time_s[bad]))
            raise _bad_request(path, bad, f"think time (as think_time_s) {rule}")
        columns["think_time_s"] = think_time_s
    schema = {**SCHEMA, **{k: v for k, v in OPTIONAL_COLUMNS.items() if k in columns}}
    return pl.DataFrame([columns[name].cast(dtype).alias(name) for name, dtype in schema.items()])


def _bad_request(path: Path | None, row: int, message: str) -> TraceFormatError:
    # Every reader's rows are still in file order in build_frame, so "request N" finds it.
    return fail(path or "trace", f"request {row + 1} in file order", message)


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
