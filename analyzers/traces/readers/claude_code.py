"""Claude Code session traces in the kv-cache-tester format (WEKA, callanjfox/kv-cache-tester).

Input: JSON Lines with one session object per line (plain or gzip), or a directory of
``trace_NNNN.json`` files (one session each, taken in name order). A session has ``id``,
``block_size`` (64) and ``requests``; a request has ``t`` (s since session start), ``in``,
``out`` and ``hash_ids`` (one per *full* block: ``floor(in / block_size)``, kept as given). A
``type: "subagent"`` marker carries its own ``requests`` whose ``t`` is relative to the
marker's ``t``.

Mapping to the canonical table (``order == "session"``):

* sessions keep file order; requests of a session (its own and its subagents', whose absolute
  time is marker ``t`` + own ``t``) are sorted by time, stable, listing order breaking ties;
* ``session_id`` = the session's ``id``; ``turn`` = position within the session after that
  sort (0-based); ``parent_request`` = the ``request_index`` of the session's previous request
  (null for its first): each call resends the conversation so far, so the previous call is
  the one it extends. Subagent requests are part of the parent session;
* ``timestamp_s`` is the session clock (seconds since the session started);
* ``think_time_s`` is the client's think time before the request, derived as Dynamo 1.6.1's
  offline replay paces (:data:`~analyzers.traces.schema.THINK_TIME_DEFINITION`): its
  ``timestamp_s`` minus the previous request's (in the order above, subagents' requests
  included), minus the previous request's ``api_time`` (server seconds; the whole difference
  where it has none), floored at 0; null for a session's first request. ``api_time``, where
  present, must be a finite number >= 0. (The trace's own ``think_time`` field is not used:
  Dynamo paces by this difference, and the two agree within the trace's 1 s rounding.)
* **hash id namespacing**: upstream ids are local to a session (``hash_id_scope: "local"``),
  so equal ids in two sessions are unrelated. Each id becomes
  ``(session_ordinal + 1) << 40 | local_id`` where ``session_ordinal`` is the 0-based position
  of the session in the file: 40 bits for local ids (checked: a local id >= 2**40 is an
  error) and 24 bits for the session (at most 2**24 - 1 sessions). Subagents share their
  parent session's namespace, as upstream. Ids from different sessions never collide.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    INT32_MAX,
    HashIdBuffer,
    JSONDecodeError,
    TraceFormatError,
    build_frame,
    check_file,
    fail,
    finite_number,
    first_json_record,
    gather_segments,
    hash_column,
    is_sorted,
    iter_lines,
    loads,
    mib,
    non_negative_int,
    open_regular,
    optional_seconds,
    reading_task,
    require,
    show,
)

LOCAL_ID_BITS = 40
MAX_SESSIONS = 2 ** (64 - LOCAL_ID_BITS) - 1


def namespace_base(session_ordinal: int) -> int:
    """The high bits OR-ed into every hash id of the session at 0-based ``session_ordinal``."""
    return (session_ordinal + 1) << LOCAL_ID_BITS


def client_think_times(times_s: np.ndarray, api_times_s: np.ndarray) -> np.ndarray:
    """Each request's client think time (module docstring; NaN for the first: not recorded).

    ``times_s`` are one session's send times in order, ``api_times_s`` each request's server
    time (NaN where it has none).
    """
    think = np.full(len(times_s), np.nan)
    if len(times_s) > 1:
        gaps = np.diff(times_s) - np.nan_to_num(api_times_s[:-1], nan=0.0)
        think[1:] = np.maximum(gaps, 0.0)
    return think


class _Session:
    """One session's requests, time-ordered, with namespaced hash ids."""

    __slots__ = (
        "block_size",
        "inputs",
        "offsets",
        "outputs",
        "session_id",
        "think_times",
        "times",
        "values",
    )

    def __init__(
        self,
        record: Any,
        ordinal: int,
        path: Path,
        place: str | None,
    ) -> None:
        if not isinstance(record, dict):
            raise fail(path, place, f"session must be a JSON object; got {show(record)}")
        session_id = require(record, "id", path, place)
        if not isinstance(session_id, str):
            raise fail(path, place, f"field 'id' must be a string; got {show(session_id)}")
        block_size = non_negative_int(record, "block_size", path, place, maximum=INT32_MAX)
        if block_size == 0:
            raise fail(path, place, f"field 'block_size' must be > 0; got {block_size!r}")
        requests = require(record, "requests", path, place)
        if not isinstance(requests, list):
            raise fail(path, place, f"field 'requests' must be a list; got {show(requests)}")

        times: list[float] = []
        inputs: list[int] = []
        outputs: list[int] = []
        api_times: list[float] = []  # NaN: the request records none
        hashes = HashIdBuffer()

        def add(requests: list[Any], t0: float, prefix: str) -> None:
            for i, request in enumerate(requests):
                where = f"{place}, {prefix}[{i}]" if place else f"{prefix}[{i}]"
                if not isinstance(request, dict):
                    raise fail(path, where, f"request must be a JSON object; got {show(request)}")
                t = finite_number(request, "t", path, where)
                if request.get("type") == "subagent":
                    nested = require(request, "requests", path, where)
                    if not isinstance(nested, list):
                        raise fail(
                            path, where, f"field 'requests' must be a list; got {show(nested)}"
                        )
                    add(nested, t0 + t, f"{prefix}[{i}].requests")
                    continue
                times.append(t0 + t)
                inputs.append(non_negative_int(request, "in", path, where))
                outputs.append(non_negative_int(request, "out", path, where))
                api_time = optional_seconds(request, "api_time", path, where)
                api_times.append(math.nan if api_time is None else api_time)
                hashes.add(request, "hash_ids", path, where)

        add(requests, 0.0, "requests")

        flat = hashes.flat()
        if flat.size and int(flat.max()) >= 1 << LOCAL_ID_BITS:
            raise fail(
                path,
                place,
                f"session {session_id!r}: local hash ids must be < 2**{LOCAL_ID_BITS} to be "
                f"namespaced per session; got {int(flat.max())!r}",
            )
        offsets = hashes.offsets()
        times_s = np.asarray(times, dtype=np.float64)
        ins = np.asarray(inputs, dtype=np.int64)
        outs = np.asarray(outputs, dtype=np.int64)
        apis = np.asarray(api_times, dtype=np.float64)
        if not is_sorted(times_s):
            order = np.argsort(times_s, kind="stable")
            times_s, ins, outs, apis = times_s[order], ins[order], outs[order], apis[order]
            flat, offsets = gather_segments(flat, offsets, order)
        else:
            flat = flat.copy()  # detach from the array('Q') buffer so it can be freed
        flat |= np.uint64(namespace_base(ordinal))

        self.session_id = session_id
        self.block_size = block_size
        self.times = times_s
        self.inputs = ins
        self.outputs = outs
        self.think_times = client_think_times(times_s, apis)
        self.values = flat
        self.offsets = offsets


class ClaudeCodeReader:
    name = "claude-code"
    description = "Claude Code sessions (kv-cache-tester): one session per line, or a directory"

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        if isinstance(record, dict):
            return isinstance(record.get("requests"), list) and (
                "block_size" in record or "hash_id_scope" in record
            )
        # Sessions are long lines (up to MBs), so the head usually holds only a first part.
        start = head.lstrip()[:1]
        return (
            start == b"{"
            and b'"requests"' in head
            and (b'"hash_id_scope"' in head or b'"block_size"' in head)
        )

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        sessions: list[_Session] = []
        seen: dict[str, str] = {}
        for where, place, record in self._records(path, progress, max_line_bytes):
            ordinal = len(sessions)
            if ordinal >= MAX_SESSIONS:
                raise fail(where, place, f"more than {MAX_SESSIONS} sessions cannot be namespaced")
            session = _Session(record, ordinal, where, place)
            if session.session_id in seen:
                raise fail(
                    where,
                    place,
                    f"field 'id' must be unique; got {session.session_id!r} again "
                    f"(first at {seen[session.session_id]})",
                )
            seen[session.session_id] = place or where.name
            if sessions and session.block_size != sessions[0].block_size:
                raise fail(
                    where,
                    place,
                    f"field 'block_size' must be the same in every session "
                    f"({sessions[0].block_size}); got {session.block_size!r}",
                )
            sessions.append(session)
        if not sessions:
            raise fail(path, None, "no sessions found")
        if not any(len(s.times) for s in sessions):
            raise fail(path, None, f"no requests in any of the {len(sessions)} sessions")
        return self._trace(path, sessions)

    def _records(
        self, path: Path, progress: Progress, max_line_bytes: int
    ) -> Iterator[tuple[Path, str | None, Any]]:
        """Yield ``(file, place, parsed session)`` one at a time.

        Never all sessions at once. ``file`` is the file to name in an error (the member of a
        directory), ``place`` the line in it (``None`` for a one-session member file).
        """
        if path.is_dir():
            files = sorted(path.glob("trace_*.json"))
            if not files:
                raise fail(path, None, "directory holds no trace_*.json files")
            # Every member is checked (type, size) before any is parsed: a FIFO or a device
            # among them is refused at once, not after minutes of parsing the others.
            sizes = [self._member_size(file, max_line_bytes) for file in files]
            with reading_task(progress, path, sum(sizes)) as task:
                for file in files:
                    with open_regular(file, "session file") as handle:
                        try:
                            data = handle.read(max_line_bytes + 1)
                        except OSError as e:
                            raise fail(file, None, f"cannot read it ({e.strerror})") from None
                    if len(data) > max_line_bytes:  # it grew since it was checked
                        raise self._member_too_big(file, max_line_bytes)
                    task.advance(len(data))
                    if not data.strip():
                        raise fail(file, None, "file is empty")
                    try:
                        record = loads(data)
                    except JSONDecodeError as e:
                        raise fail(file, None, f"invalid JSON ({e})") from None
                    yield file, None, record
            return
        for lineno, line in iter_lines(path, progress=progress, max_line_bytes=max_line_bytes):
            try:
                record = loads(line)
            except JSONDecodeError as e:
                raise fail(path, f"line {lineno}", f"invalid JSON ({e})") from None
            yield path, f"line {lineno}", record

    @classmethod
    def _member_size(cls, file: Path, max_line_bytes: int) -> int:
        size = check_file(file, "session file")
        if size > max_line_bytes:
            raise cls._member_too_big(file, max_line_bytes)
        return size

    @staticmethod
    def _member_too_big(file: Path, max_line_bytes: int) -> TraceFormatError:
        return fail(
            file,
            None,
            f"session file is larger than the limit of {mib(max_line_bytes)} "
            "(`max_line_bytes` to raise it)",
        )

    def _trace(self, path: Path, sessions: list[_Session]) -> Trace:
        counts = np.fromiter((len(s.times) for s in sessions), dtype=np.int64, count=len(sessions))
        total_blocks = sum(len(s.values) for s in sessions)
        values = np.empty(total_blocks, dtype=np.uint64)
        offsets = np.zeros(int(counts.sum()) + 1, dtype=np.int64)
        pos_values = 0
        pos_rows = 0
        # Copy session by session and drop each as it is copied, to keep the peak near 1x.
        parts: dict[str, list[np.ndarray]] = {"t": [], "in": [], "out": [], "turn": [], "think": []}
        for k in range(len(sessions)):
            s = sessions[k]
            n = len(s.times)
            values[pos_values : pos_values + len(s.values)] = s.values
            offsets[pos_rows + 1 : pos_rows + n + 1] = s.offsets[1:] + pos_values
            pos_values += len(s.values)
            pos_rows += n
            parts["t"].append(s.times)
            parts["in"].append(s.inputs)
            parts["out"].append(s.outputs)
            parts["turn"].append(np.arange(n, dtype=np.int32))
            parts["think"].append(s.think_times)
            s.values = s.offsets = None  # type: ignore[assignment]
        session_ids = pl.Series([s.session_id for s in sessions], dtype=pl.String())
        frame = build_frame(
            path=path,
            timestamp_s=np.concatenate(parts["t"]),
            input_tokens=np.concatenate(parts["in"]),
            output_tokens=np.concatenate(parts["out"]),
            block_size_tokens=sessions[0].block_size,
            hash_ids=hash_column(values, offsets),
            session_id=session_ids.gather(np.repeat(np.arange(len(sessions)), counts)),
            turn=np.concatenate(parts["turn"]),
            think_time_s=pl.Series(np.concatenate(parts["think"])).fill_nan(None),
        )
        frame = frame.with_columns(
            pl.when(pl.col("turn") == 0)
            .then(None)
            .otherwise(pl.col("request_index") - 1)
            .cast(pl.Int64())
            .alias("parent_request")
        )
        return Trace(
            path=str(path),
            format=self.name,
            requests=frame,
            order="session",
            has_hashes=True,
            has_sessions=True,
            block_size_tokens=sessions[0].block_size,
            notes=(
                "timestamps are per-session clocks (seconds since each session started)",
                "hash ids are local to a session upstream; namespaced here as "
                f"(session_ordinal + 1) << {LOCAL_ID_BITS} | local_id, so cross-session "
                "sharing (e.g. a common system prompt) is not visible",
            ),
        )
