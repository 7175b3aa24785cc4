"""Any request log in JSON Lines, CSV or Parquet, read through a column mapping.

A team's own log needs no code: ``read_trace(path, columns="session=sid,timestamp=ts,
input=prompt_tokens,output=completion_tokens")`` (``fcctl analyze LOG --columns ...``; the
``generic`` format is implied by the mapping, never detected). The mapping is comma-separated
``key=value`` pairs (or a ``dict``):

==================  ========  ================================================================
key                 required  value
==================  ========  ================================================================
``timestamp``       yes       column of the arrival time (unit: ``timestamp_unit``)
``input``           yes       column of prompt tokens (integer >= 0)
``output``          yes       column of generated tokens (integer >= 0)
``session``         no        column of the session id (any scalar, read as a string)
``hashes``          no        column of prefix block ids in prompt order: a JSON list of
                              integers in JSONL, a list column in Parquet, and in CSV a cell of
                              ids separated by spaces (``12 13 14``) or a JSON array
                              (``"[12, 13, 14]"``); an empty list is allowed, a null is not
``block_size``      with      tokens per block of ``hashes`` (integer >= 1); required with
                    hashes    ``hashes``, refused without
``turn``            no        column of the turn within the session (integer in [0, 2**31))
``id``              no        column of a request id (unique; what ``parent`` refers to)
``parent``          no        column of the id of the request this one continues (null or empty:
                              none); needs ``id``
``type``            no        column of the request's kind, kept as the optional ``type`` column
``timestamp_unit``  no        ``s`` (default), ``ms``, ``us`` or ``ns`` for numbers; ``iso`` for
                              ISO 8601 text (``2026-06-01T05:40:20.151Z``; no offset: UTC) or a
                              Parquet datetime column
==================  ========  ================================================================

The file kind is told by its content: Parquet by its magic bytes, JSON Lines when the first
non-blank byte is ``{`` (gzip allowed), CSV (with a header row; gzip allowed) otherwise. Every
mapped column must exist (CSV and Parquet: in the header; JSONL: in line 1, and then in every
line), and every value is checked: bad input is one line naming the file, the place (``line N``
of JSONL, 1-based; ``row N`` of CSV, the 1-based data row; ``row N`` of Parquet, 0-based as
polars counts) and the column. A bad mapping (unknown key, missing required key, a column the
file lacks) starts with ``columns:`` (the CLI shows ``--columns:``).

Mapping (``order == "time"``): ``timestamp_s`` = seconds since the earliest request;
``session_id`` = the session column as a string (null without one); ``turn`` = the turn column,
else, with sessions, the 0-based position of the request in its session in time order;
``parent_request`` = the row whose ``id`` is the ``parent`` value (null without ``parent``).
``hash_ids`` are taken as global ids (equal ids in two sessions are the same block); without
``hashes`` the trace has none (sizes and arrivals can be measured, reuse cannot).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from fcctl.common.paths import display_path
from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    HashIdBuffer,
    JSONDecodeError,
    TraceFormatError,
    build_frame,
    check_file,
    fail,
    hash_column,
    iter_json_lines,
    loads,
    null_hash_column,
    open_regular,
    read_csv_text,
    read_head,
    show,
    stable_time_order,
)
from .parquet import PARQUET_MAGIC

COLUMN_KEYS = ("session", "timestamp", "input", "output", "hashes", "turn", "id", "parent", "type")
SETTING_KEYS = ("timestamp_unit", "block_size")
REQUIRED_KEYS = ("timestamp", "input", "output")
TIMESTAMP_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "iso": 1.0}
_MAX_TURN = 2**31 - 1


def columns_error(path: str | Path, message: str) -> TraceFormatError:
    """A bad mapping: ``columns: FILE: message`` (the CLI names its flag for ``columns``)."""
    return TraceFormatError(f"columns: {display_path(path)}: {message}", parameter="columns")


@dataclass(frozen=True)
class ColumnMapping:
    """A parsed ``--columns`` mapping: key -> column name, and the two settings."""

    columns: dict[str, str]
    timestamp_unit: str = "s"
    block_size: int | None = None

    def column(self, key: str) -> str | None:
        return self.columns.get(key)


def parse_columns(spec: str | Mapping[str, str], path: str | Path) -> ColumnMapping:
    """The mapping ``spec`` (``"key=column,..."`` or a dict) checked against the key table.

    ``path`` is the trace, named in the errors.
    """
    if isinstance(spec, str):
        pairs: list[tuple[str, str]] = []
        for part in spec.split(","):
            key, equals, value = part.partition("=")
            if not equals or not key.strip() or not value.strip():
                raise columns_error(
                    path, f"expected key=column pairs separated by commas; got {show(part)}"
                )
            pairs.append((key.strip(), value.strip()))
    elif isinstance(spec, Mapping):
        pairs = [(str(k), str(v)) for k, v in spec.items()]
    else:
        raise columns_error(path, f"expected a 'key=column,...' string; got {show(spec)}")
    known = (*COLUMN_KEYS, *SETTING_KEYS)
    seen: dict[str, str] = {}
    for key, value in pairs:
        if key not in known:
            raise columns_error(path, f"unknown key {key!r}; keys are {', '.join(known)}")
        if key in seen:
            raise columns_error(path, f"key {key!r} is given twice")
        seen[key] = value
    missing = [key for key in REQUIRED_KEYS if key not in seen]
    if missing:
        raise columns_error(
            path,
            f"missing required key(s) {', '.join(missing)} (required: timestamp, input, output)",
        )
    unit = seen.pop("timestamp_unit", "s")
    if unit not in TIMESTAMP_UNITS:
        raise columns_error(
            path, f"timestamp_unit must be one of {', '.join(TIMESTAMP_UNITS)}; got {unit!r}"
        )
    block_size: int | None = None
    if "block_size" in seen:
        raw = seen.pop("block_size")
        if "hashes" not in seen:
            raise columns_error(path, "block_size is for the hashes column; no hashes= given")
        if not raw.isdigit() or int(raw) < 1:
            raise columns_error(path, f"block_size must be an integer >= 1; got {raw!r}")
        # block_size_tokens is an Int32 column: a larger value cannot be stored.
        if int(raw) > _MAX_TURN:
            raise columns_error(path, f"block_size must be <= {_MAX_TURN}; got {raw!r}")
        block_size = int(raw)
    elif "hashes" in seen:
        raise columns_error(path, "hashes= needs block_size= (tokens per block)")
    if "parent" in seen and "id" not in seen:
        raise columns_error(path, "parent= needs id= (the column the parent values refer to)")
    return ColumnMapping(columns=seen, timestamp_unit=unit, block_size=block_size)


# --- reading rows -------------------------------------------------------------------------


def _file_kind(path: Path, max_line_bytes: int) -> str:
    check_file(path)
    with open_regular(path) as f:
        if f.read(4) == PARQUET_MAGIC:
            return "parquet"
    head, _ = read_head(path, max_line_bytes=max_line_bytes)
    return "jsonl" if head.lstrip().startswith(b"{") else "csv"


def _rows(
    path: Path, kind: str, mapping: ColumnMapping, progress: Progress, max_line_bytes: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(place, record)`` per request; the mapped columns are checked to exist first."""
    wanted = sorted(set(mapping.columns.values()))

    def check_header(names: list[str], where: str) -> None:
        for key, name in mapping.columns.items():
            if name not in names:
                raise columns_error(
                    path,
                    f"{key}={name} names no column of {where}; got {show(', '.join(names))}",
                )

    if kind == "jsonl":
        first = True
        for lineno, record in iter_json_lines(
            path, progress=progress, max_line_bytes=max_line_bytes
        ):
            if first:
                check_header(list(record), "line 1")
                first = False
            yield f"line {lineno}", record
        return
    if kind == "csv":
        table = read_csv_text(path, progress=progress, max_line_bytes=max_line_bytes)
        check_header(table.columns, "the CSV header")
        base = 1
    else:
        try:
            table = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise fail(
                path, None, f"unreadable Parquet ({' '.join(str(e).split())[:160]})"
            ) from None
        check_header(table.columns, "the Parquet file")
        base = 0
    if table.height == 0:
        raise fail(path, None, "file is empty (no rows)")
    for i, record in enumerate(table.select(wanted).iter_rows(named=True)):
        yield f"row {i + base}", record


# --- values -------------------------------------------------------------------------------


class _Values:
    """Turns one column's raw values (typed, or CSV text) into checked Python values."""

    def __init__(self, path: Path, kind: str, mapping: ColumnMapping) -> None:
        self.path = path
        self.text = kind == "csv"  # CSV cells are strings; an empty cell reads as None
        self.mapping = mapping

    def _bad(self, place: str, key: str, rule: str, value: Any) -> TraceFormatError:
        name = self.mapping.columns[key]
        got = "an empty cell" if value is None and self.text else show(value)
        return fail(self.path, place, f"column {name!r} ({key}=) must be {rule}; got {got}")

    def get(self, record: dict[str, Any], key: str, place: str) -> Any:
        name = self.mapping.columns[key]
        if name not in record:
            raise fail(self.path, place, f"missing field {name!r} ({key}=)")
        return record[name]

    def count(self, record: dict[str, Any], key: str, place: str, limit: int = 2**63 - 1) -> int:
        value = self.get(record, key, place)
        if self.text and type(value) is str and value.strip().isdigit():
            value = int(value.strip())
        if type(value) is not int or not 0 <= value <= limit:
            rule = "a non-negative integer" + ("" if limit == 2**63 - 1 else f" below {limit + 1}")
            raise self._bad(place, key, rule, value)
        return value

    def seconds(self, record: dict[str, Any], place: str) -> float:
        value = self.get(record, "timestamp", place)
        unit = self.mapping.timestamp_unit
        if unit == "iso":
            if isinstance(value, datetime):
                moment = value
            else:
                try:
                    moment = datetime.fromisoformat(value)
                except (TypeError, ValueError):
                    raise self._bad(
                        place, "timestamp", "an ISO 8601 time (timestamp_unit=iso)", value
                    ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
        if self.text and type(value) is str:
            try:
                value = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                pass
        if type(value) not in (int, float) or not math.isfinite(value):
            raise self._bad(place, "timestamp", f"a finite number (timestamp_unit={unit})", value)
        return value / TIMESTAMP_UNITS[unit]

    def label(self, record: dict[str, Any], key: str, place: str, *, nullable: bool) -> str | None:
        value = self.get(record, key, place)
        if value is None or (self.text and value == ""):
            if nullable:
                return None
            raise self._bad(place, key, "set in every row", value)
        if type(value) not in (str, int):  # floats, booleans and lists are not ids
            raise self._bad(place, key, "a string or an integer", value)
        return str(value)

    def hash_ids(self, record: dict[str, Any], place: str) -> list[Any]:
        value = self.get(record, "hashes", place)
        if self.text and type(value) is str:
            cell = value.strip()
            if cell.startswith("["):
                try:
                    value = loads(cell)
                except JSONDecodeError:
                    raise self._bad(place, "hashes", "a JSON array of block ids", value) from None
            else:
                words = cell.split()
                if not all(w.isdigit() for w in words):
                    raise self._bad(place, "hashes", "block ids separated by spaces", value)
                value = [int(w) for w in words]
        if value is None:
            raise self._bad(place, "hashes", "a list of block ids", value)
        return value


class GenericReader:
    name = "generic"
    description = "any JSONL/CSV/Parquet log through a --columns mapping (never detected)"
    takes_columns = True

    def sniff(self, head: bytes) -> bool:
        return False  # a log of unknown shape has no signature: --columns chooses this reader

    def read(
        self,
        path: Path,
        progress: Progress,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        columns: str | Mapping[str, str] | None = None,
    ) -> Trace:
        if columns is None:
            raise columns_error(
                path, "the generic format needs a column mapping (session=...,timestamp=...)"
            )
        mapping = parse_columns(columns, path)
        kind = _file_kind(path, max_line_bytes)
        values = _Values(path, kind, mapping)
        has = mapping.columns.__contains__
        seconds: list[float] = []
        inputs: list[int] = []
        outputs: list[int] = []
        sessions: list[str | None] = []
        turns: list[int] = []
        ids: dict[str, int] = {}
        parent_ids: list[tuple[str, str] | None] = []
        kinds: list[str | None] = []
        hashes = HashIdBuffer()
        for place, record in _rows(path, kind, mapping, progress, max_line_bytes):
            seconds.append(values.seconds(record, place))
            inputs.append(values.count(record, "input", place))
            outputs.append(values.count(record, "output", place))
            if has("session"):
                sessions.append(values.label(record, "session", place, nullable=False))
            if has("turn"):
                turns.append(values.count(record, "turn", place, limit=_MAX_TURN))
            if has("id"):
                request = values.label(record, "id", place, nullable=False)
                assert request is not None
                if request in ids:
                    raise fail(
                        path,
                        place,
                        f"column {mapping.columns['id']!r} (id=) must be unique; got "
                        f"{request!r} again",
                    )
                ids[request] = len(inputs) - 1
            if has("parent"):
                parent = values.label(record, "parent", place, nullable=True)
                parent_ids.append(None if parent is None else (parent, place))
            if has("type"):
                kinds.append(values.label(record, "type", place, nullable=True))
            if has("hashes"):
                name = mapping.columns["hashes"]
                hashes.add({name: values.hash_ids(record, place)}, name, path, place)

        n = len(inputs)
        stamp = np.asarray(seconds, dtype=np.float64)
        frame = build_frame(
            path=path,
            timestamp_s=stamp - stamp.min(),
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=mapping.block_size or 0,
            hash_ids=(
                hash_column(hashes.flat(), hashes.offsets())
                if has("hashes")
                else null_hash_column(n)
            ),
            session_id=pl.Series(sessions, dtype=pl.String) if has("session") else None,
            turn=turns if has("turn") else None,
            parent_request=self._parents(path, mapping, parent_ids, ids) if has("parent") else None,
            request_type=kinds if has("type") else None,
        )
        frame = stable_time_order(frame)
        if has("session") and not has("turn"):
            frame = frame.with_columns(
                pl.int_range(pl.len()).over("session_id").cast(pl.Int32).alias("turn")
            )
        settings = {"timestamp_unit": mapping.timestamp_unit, "block_size": mapping.block_size}
        shown = ",".join(
            [f"{k}={v}" for k, v in mapping.columns.items()]
            + [f"{k}={v}" for k, v in settings.items() if v is not None]
        )
        notes = [f"generic {kind} log read through --columns {shown}"]
        if not has("session"):
            notes.append("no session column (session=): the log names no sessions")
        return Trace(
            path=str(path),
            format=self.name,
            requests=frame,
            order="time",
            has_hashes=has("hashes"),
            has_sessions=has("session"),
            block_size_tokens=mapping.block_size or 0,
            notes=tuple(notes),
        )

    @staticmethod
    def _parents(
        path: Path,
        mapping: ColumnMapping,
        parent_ids: list[tuple[str, str] | None],
        ids: dict[str, int],
    ) -> list[int | None]:
        rows: list[int | None] = []
        for own, entry in enumerate(parent_ids):
            if entry is None:
                rows.append(None)
                continue
            parent, place = entry
            row = ids.get(parent)
            if row is None or row == own:
                what = "the request itself" if row == own else "no request of the file"
                raise fail(
                    path,
                    place,
                    f"column {mapping.columns['parent']!r} (parent=) names {what}; got {parent!r}",
                )
            rows.append(row)
        return rows
