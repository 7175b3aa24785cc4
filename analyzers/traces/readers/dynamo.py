"""Dynamo (NVIDIA ai-dynamo/dynamo) agentic Mooncake JSON Lines: Mooncake rows with sessions.

Sources: ``lib/data-gen/src/mooncake.rs`` of ai-dynamo/dynamo (``MooncakeRow`` and
``AgenticMooncakeRow``, the row schema: "``timestamp`` and ``delay`` are f64 milliseconds"),
``lib/mocker/src/loadgen/trace.rs`` (``Trace::from_mooncake`` and
``AgenticTrace::from_agentic_mooncake``: how ``python -m dynamo.replay`` schedules the rows),
and the Dynamo "Agent Simulation" guide (docs.nvidia.com/dynamo, user-guides/agents), whose
``request_trace_to_mooncake --agentic`` writes such files from Dynamo's request traces. Fields:

===============================  ===========================================================
``session_id``                   string; rows that share it are the turns of one session.
                                 Absent or null: the row is a session of its own, named
                                 ``request_<line>`` as Dynamo names it
``request_id``                   string, unique; what ``wait_for`` names
``input_length`` (or             integer >= 0, prompt tokens (required)
``input_tokens``)
``output_length`` (or            integer >= 0 (required)
``output_tokens``)
``hash_ids``                     block ids in prompt order, one per 512-token block (required)
``timestamp`` (or                arrival, milliseconds (number >= 0); optional
``created_time``)
``delay`` (or ``delay_ms``),     milliseconds >= 0 waited after what the row follows;
``tool_wait_ms``                 optional (0 when absent)
``wait_for``                     list of ``request_id``s the row waits on; optional
``prefix_reset``                 boolean: the row does not continue its session's context
===============================  ===========================================================

Other fields (``branches``, ``tool_events``, ``priority``, ...) are ignored; a null value is
the field being absent. ``hash_ids`` are global across the file (Dynamo's id mapper is shared
by every row of a trace), 512 tokens per block: the rows carry no block size, Dynamo's replay
takes it as an argument, and 512 is Mooncake's and the Dynamo replay guide's.

Mapping (``order == "time"``, one clock for the file):

* ``timestamp_s`` = arrival / 1000. A row with ``timestamp`` arrives then. A row without one
  arrives ``delay + tool_wait_ms`` after the latest arrival among its ``wait_for`` rows, or,
  with no ``wait_for``, after the previous row of its session in file order (Dynamo dispatches
  it that long after those *complete*; their service time is not in the trace, so such an
  arrival is early by it, and the notes count these rows). A row with neither a timestamp nor
  anything to follow is an error, as is a ``wait_for`` that names no row, the row itself, or a
  cycle.
* ``turn`` = 0-based position of the row in its session (file order); ``parent_request`` =
  the session's previous row in file order, null for its first row and for ``prefix_reset``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    HashIdBuffer,
    build_frame,
    fail,
    first_json_record,
    hash_column,
    iter_json_lines,
    non_negative_int,
    optional_text,
    show,
    stable_time_order,
)

BLOCK_SIZE_TOKENS = 512
# Keys of Dynamo's rows that plain Mooncake rows never have: any of them in the head (not only
# in the first row, which may be a session-less request) tells the two apart.
_DYNAMO_KEYS = re.compile(rb'"(session_id|request_id|wait_for|delay|delay_ms|tool_wait_ms)"\s*:')


def _alias(record: dict[str, Any], name: str, alias: str, path: Path, place: str) -> str:
    """The key under which ``record`` holds a field that has an upstream alias."""
    if record.get(name) is not None and record.get(alias) is not None:
        raise fail(path, place, f"fields {name!r} and {alias!r} are the same field; give only one")
    return alias if record.get(name) is None and record.get(alias) is not None else name


def _milliseconds(
    record: dict[str, Any], name: str, alias: str | None, path: Path, place: str
) -> float | None:
    """An optional finite number >= 0 of milliseconds; ``None`` when absent or null."""
    key = _alias(record, name, alias, path, place) if alias else name
    value = record.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not np.isfinite(value) or value < 0:
        raise fail(
            path, place, f"field {key!r} must be a finite number >= 0 (ms); got {show(value)}"
        )
    return float(value)


class DynamoReader:
    name = "dynamo"
    description = "Dynamo agentic Mooncake JSONL: session_id, timestamp/delay (ms), wait_for"

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        return (
            isinstance(record, dict)
            and "hash_ids" in record
            and "chat_id" not in record
            and _DYNAMO_KEYS.search(head) is not None
        )

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        sessions: list[str] = []
        inputs: list[int] = []
        outputs: list[int] = []
        stamps: list[float | None] = []
        waits: list[float] = []
        follows: list[list[str] | None] = []  # wait_for, or None: follow the session
        resets: list[bool] = []
        lines: list[int] = []
        row_of: dict[str, int] = {}
        own_sessions = 0
        hashes = HashIdBuffer()
        for lineno, record in iter_json_lines(
            path, progress=progress, max_line_bytes=max_line_bytes
        ):
            place = f"line {lineno}"
            session = optional_text(record, "session_id", path, place)
            if session is None:
                session = f"request_{lineno}"
                own_sessions += 1
            request = optional_text(record, "request_id", path, place)
            if request is not None:
                if request in row_of:
                    raise fail(
                        path,
                        place,
                        f"field 'request_id' must be unique; got {request!r} again (first at "
                        f"line {lines[row_of[request]]})",
                    )
                row_of[request] = len(sessions)
            key = _alias(record, "input_length", "input_tokens", path, place)
            inputs.append(non_negative_int(record, key, path, place))
            key = _alias(record, "output_length", "output_tokens", path, place)
            outputs.append(non_negative_int(record, key, path, place))
            hashes.add(record, "hash_ids", path, place)
            stamps.append(_milliseconds(record, "timestamp", "created_time", path, place))
            delay = _milliseconds(record, "delay", "delay_ms", path, place) or 0.0
            waits.append(delay + (_milliseconds(record, "tool_wait_ms", None, path, place) or 0.0))
            follows.append(self._wait_for(record, path, place))
            reset = record.get("prefix_reset")
            if reset is not None and type(reset) is not bool:
                raise fail(
                    path, place, f"field 'prefix_reset' must be true or false; got {show(reset)}"
                )
            resets.append(bool(reset))
            sessions.append(session)
            lines.append(lineno)

        previous, turns = self._session_links(sessions)
        arrival_ms = self._arrivals(path, stamps, waits, follows, previous, row_of, lines)
        parents = [None if reset else p for p, reset in zip(previous, resets, strict=True)]
        frame = build_frame(
            path=path,
            timestamp_s=arrival_ms / 1000.0,
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=BLOCK_SIZE_TOKENS,
            hash_ids=hash_column(hashes.flat(), hashes.offsets()),
            session_id=sessions,
            turn=turns,
            parent_request=parents,
        )
        notes = [f"hash_ids taken as {BLOCK_SIZE_TOKENS}-token blocks (the rows carry no size)"]
        placed = sum(stamp is None for stamp in stamps)
        if placed:
            notes.append(
                f"{placed} of {len(stamps)} rows have no timestamp: placed delay + tool_wait_ms "
                "after the arrival of what they wait for; the service time in between is not "
                "in the trace, so they are early by it"
            )
        if own_sessions:
            notes.append(
                f"{own_sessions} rows without session_id are sessions of their own "
                "(request_<line>), as Dynamo replays them"
            )
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=True,
            has_sessions=True,
            block_size_tokens=BLOCK_SIZE_TOKENS,
            notes=tuple(notes),
        )

    @staticmethod
    def _wait_for(record: dict[str, Any], path: Path, place: str) -> list[str] | None:
        value = record.get("wait_for")
        if value is None or value == []:
            return None
        if not isinstance(value, list) or not all(type(v) is str for v in value):
            raise fail(
                path, place, f"field 'wait_for' must be a list of request ids; got {show(value)}"
            )
        return value

    @staticmethod
    def _session_links(sessions: list[str]) -> tuple[list[int | None], list[int]]:
        """Each row's previous row in its session (file order), and its 0-based turn."""
        last: dict[str, int] = {}
        count: dict[str, int] = {}
        previous: list[int | None] = []
        turns: list[int] = []
        for row, session in enumerate(sessions):
            previous.append(last.get(session))
            turns.append(count.get(session, 0))
            last[session] = row
            count[session] = turns[-1] + 1
        return previous, turns

    @staticmethod
    def _arrivals(
        path: Path,
        stamps: list[float | None],
        waits: list[float],
        follows: list[list[str] | None],
        previous: list[int | None],
        row_of: dict[str, int],
        lines: list[int],
    ) -> np.ndarray:
        """Arrival (ms) of every row, by the rule of the module docstring."""
        n = len(stamps)
        arrival = np.full(n, np.nan)
        state = [0] * n  # 0: not yet, 1: on the stack, 2: done

        def after(row: int) -> list[int]:
            names = follows[row]
            if names is None:
                before = previous[row]
                if before is None:
                    raise fail(
                        path,
                        f"line {lines[row]}",
                        "field 'timestamp' is missing, and the row has no wait_for and no "
                        "earlier row in its session to follow",
                    )
                return [before]
            rows = []
            for name in names:
                if name not in row_of:
                    raise fail(
                        path,
                        f"line {lines[row]}",
                        f"field 'wait_for' names request_id {name!r}, which no row has",
                    )
                if row_of[name] == row:
                    raise fail(
                        path,
                        f"line {lines[row]}",
                        f"field 'wait_for' names the row itself; got {name!r}",
                    )
                rows.append(row_of[name])
            return rows

        for start in range(n):
            if state[start] == 2:
                continue
            stack = [start]
            while stack:
                row = stack[-1]
                if state[row] == 2:  # pushed twice, by two rows that follow it
                    stack.pop()
                    continue
                stamp = stamps[row]
                if stamp is not None:
                    arrival[row] = stamp
                    state[row] = 2
                    stack.pop()
                    continue
                state[row] = 1
                needed = after(row)
                pending = [r for r in needed if state[r] != 2]
                for r in pending:
                    if state[r] == 1:
                        raise fail(
                            path,
                            f"line {lines[row]}",
                            "field 'wait_for' must not form a cycle; the row waits, through "
                            f"line {lines[r]}, on itself",
                        )
                if pending:
                    stack.extend(pending)
                    continue
                arrival[row] = max(arrival[r] for r in needed) + waits[row]
                state[row] = 2
                stack.pop()
        return arrival
