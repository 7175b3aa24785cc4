"""Trace capture: what an engine adapter sees, one JSON line per request, in bounded memory.

With ``FLATCAKE_TRACE=PATH`` in the engine's environment (or ``trace=PATH`` given to an
adapter), each adapter appends one record per request it sees to ``PATH`` (JSON Lines, the
``flatcake`` trace format that ``fcctl analyze`` reads, docs/trace-formats.md):

``{"flatcake_trace": 1, "engine": "vllm", "timestamp_s": 12.5, "session_id": "chat-7",
"session_source": "kv_transfer_params", "hash_ids": [..], "block_size_tokens": 16,
"input_tokens": 912, "output_tokens": 40}``

* ``timestamp_s``: the engine process's monotonic clock, seconds (only differences count);
* ``session_id``: the id that came through the engine's side channel, or the one the write-time
  rule's fallback gave (``session_source`` says which: ``kv_transfer_params``, ``extra_info``,
  ``cache_salt``, or ``chained`` for the fallback);
* ``hash_ids``: the request's prefix block keys from the sequence start, in order, each folded
  to an unsigned 64-bit integer (the first 8 bytes of BLAKE2b of the key's bytes), so equal
  keys give equal ids across engines and runs;
* ``input_tokens`` / ``output_tokens``: where the engine gives them; ``null`` where it does not
  (the reader then counts ``hash_ids x block_size_tokens`` input tokens and 0 output);
* ``delivered_blocks`` / ``failed_blocks``: blocks the request's loads delivered to the engine
  and blocks they failed to deliver (the design's monitors; ``fcctl report`` on the trace draws
  them against load), ``null`` where the adapter does not know them.

One record per request, whatever the engine calls: an engine that looks a prompt up, then
looks it up again as it retrieves (LMCache), asks about one request several times.
:class:`OpenRequests` tells the adapters which lookups belong to a request already recorded.

Several writers, one ``PATH``: every rank of an engine, and the same engine after a restart,
may be given the same ``FLATCAKE_TRACE``. Each flush is one ``write`` of whole lines with
``O_APPEND`` (Linux appends one ``write`` to a regular file whole, never interleaved with
another writer's), so the JSON Lines file keeps every writer's records. ``PATH`` is checked
when the recorder is made (a directory, a missing folder, no permission to append: one
:class:`TraceTargetError` naming ``trace`` or ``$FLATCAKE_TRACE``), not at the first flush
inside a running engine.

Memory is bounded: records wait in a buffer of at most ``flush_records`` and are appended when
it fills, at :meth:`TraceRecorder.flush` and at :meth:`TraceRecorder.close`. When pyarrow is
importable (``parquet=None``, the default; or ``parquet=True``) each flush also writes a
canonical Parquet part ``PATH.part-<writer>-NNNNN.parquet`` beside the JSON Lines file, where
``<writer>`` is the process id, the start time in nanoseconds and 32 random bits (unique per
writer, so ranks and restarts never overwrite each other's parts), written to a temporary name
and renamed, so a reader never sees half a part: the nine columns of fcctl's canonical trace
table, one row per record, ``request_index`` 0..n-1 within the part, ``turn`` and
``parent_request`` null (a part does not see the sessions' earlier rows; the JSON Lines file,
read whole, links them).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError

#: The environment variable that turns capture on in every adapter.
TRACE_ENV = "FLATCAKE_TRACE"
TRACE_VERSION = 1
DEFAULT_FLUSH_RECORDS = 256
#: Requests whose lookups are remembered as not yet served (:class:`OpenRequests`).
MAX_OPEN_REQUESTS = 4096


class TraceTargetError(InputError):
    """The trace path cannot take records: a directory, a missing folder, no permission."""


def check_target(path: str | os.PathLike[str], *, parameter: str) -> Path:
    """``path`` as a JSON Lines file this process can append to, created when missing (empty);
    a :class:`TraceTargetError` naming ``parameter`` otherwise."""
    target = Path(path)
    if target.is_dir():
        raise TraceTargetError(
            f"{parameter}: a trace is a JSON Lines file, not a directory; got {str(target)!r}",
            parameter=parameter,
        )
    if not target.parent.is_dir():
        raise TraceTargetError(
            f"{parameter}: the folder {str(target.parent)!r} does not exist; create it or name "
            f"a file in an existing folder; got {str(target)!r}",
            parameter=parameter,
        )
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        why = "permission denied" if e.errno in (errno.EACCES, errno.EPERM) else e.strerror
        raise TraceTargetError(
            f"{parameter}: cannot append to the trace ({why}); got {str(target)!r}",
            parameter=parameter,
        ) from e
    os.close(fd)
    return target


class OpenRequests:
    """Which lookups belong to a request already recorded.

    A request opens with its first lookup (its prefix chain of block keys) and stays open until
    the engine loads or stores any of its keys (:meth:`close`); while it is open, a lookup whose
    keys all belong to its chain (the same chain again, or the part of it a retrieve asks for)
    is the same request. After the load or store, the same chain again is a new request (the
    same prompt sent twice). At most ``limit`` requests are remembered (the oldest forgotten).
    """

    def __init__(self, limit: int = MAX_OPEN_REQUESTS) -> None:
        self.limit = limit
        self._chains: OrderedDict[int, tuple[Hashable, ...]] = OrderedDict()
        self._owner: dict[Hashable, int] = {}
        self._next = 0

    def is_new(self, keys: Sequence[Hashable]) -> bool:
        """``True`` (and the request opened) unless ``keys`` belong to an open request."""
        if not keys:
            return False
        owner = self._owner.get(keys[0])
        if owner is not None and all(self._owner.get(k) == owner for k in keys):
            return False
        self._next += 1
        chain = tuple(keys)
        self._chains[self._next] = chain
        for k in chain:
            self._owner[k] = self._next
        while len(self._chains) > self.limit:
            self._drop(next(iter(self._chains)))
        return True

    def close(self, keys: Sequence[Hashable]) -> None:
        """The engine loaded or stored ``keys``: the requests they belong to are served."""
        for owner in {self._owner.get(k) for k in keys} - {None}:
            assert owner is not None
            self._drop(owner)

    def _drop(self, owner: int) -> None:
        for k in self._chains.pop(owner, ()):
            if self._owner.get(k) == owner:
                del self._owner[k]


def key_id(key: Hashable) -> int:
    """An engine's block key folded to an unsigned 64-bit integer (stable across processes)."""
    if isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
    elif isinstance(key, int):
        data = key.to_bytes((key.bit_length() + 8) // 8 or 1, "little", signed=True)
    else:
        data = str(key).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class TraceRecorder:
    """Appends request records to ``path`` (module docstring); thread-safe."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        engine: str,
        flush_records: int = DEFAULT_FLUSH_RECORDS,
        parquet: bool | None = None,
        parameter: str = "trace",
    ) -> None:
        if not isinstance(flush_records, int) or flush_records < 1:
            raise ValueError(f"flush_records: must be an integer >= 1; got {flush_records!r}")
        self.path = check_target(path, parameter=parameter)
        # Unique per writer: ranks sharing a path, and this engine after a restart, each
        # write parts of their own.
        self.writer = f"{os.getpid()}-{time.time_ns():x}-{secrets.token_hex(4)}"
        self.engine = engine
        self.flush_records = flush_records
        self.parquet = parquet
        self.records_written = 0
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._parts = 0

    @classmethod
    def from_environment(
        cls, trace: str | os.PathLike[str] | None, *, engine: str
    ) -> TraceRecorder | None:
        """A recorder for ``trace`` when given, else for ``$FLATCAKE_TRACE`` when set; its path
        checked now (:func:`check_target`)."""
        if trace is not None:
            return cls(trace, engine=engine)
        target = os.environ.get(TRACE_ENV) or None
        return None if target is None else cls(target, engine=engine, parameter="$" + TRACE_ENV)

    def record(
        self,
        *,
        timestamp_s: float,
        session_id: str,
        session_source: str,
        keys: Sequence[Hashable],
        block_size_tokens: int,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        delivered_blocks: int | None = None,
        failed_blocks: int | None = None,
    ) -> None:
        """One request: its prefix block keys in order from the sequence start;
        ``delivered_blocks`` / ``failed_blocks``: what its loads delivered to the engine and
        what they failed to (``None`` where the adapter does not know; the monitors)."""
        row = {
            "flatcake_trace": TRACE_VERSION,
            "engine": self.engine,
            "timestamp_s": float(timestamp_s),
            "session_id": session_id,
            "session_source": session_source,
            "hash_ids": [key_id(k) for k in keys],
            "block_size_tokens": int(block_size_tokens),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "delivered_blocks": delivered_blocks,
            "failed_blocks": failed_blocks,
        }
        with self._lock:
            self._buffer.append(row)
            if len(self._buffer) >= self.flush_records:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        rows, self._buffer = self._buffer, []
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write in practice; a short one (a full disk) goes on after it
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self.records_written += len(rows)
        if self.parquet is not False:
            self._write_part(rows)

    def _write_part(self, rows: list[dict[str, Any]]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            if self.parquet:
                raise
            return  # the JSON Lines file holds everything; Parquet parts are a convenience
        n = len(rows)
        table = pa.table(
            {
                "request_index": pa.array(range(n), pa.int64()),
                "session_id": pa.array([r["session_id"] for r in rows], pa.string()),
                "turn": pa.nulls(n, pa.int32()),
                "parent_request": pa.nulls(n, pa.int64()),
                "timestamp_s": pa.array([r["timestamp_s"] for r in rows], pa.float64()),
                "input_tokens": pa.array([_input_tokens(r) for r in rows], pa.int64()),
                "output_tokens": pa.array([r["output_tokens"] or 0 for r in rows], pa.int64()),
                "block_size_tokens": pa.array([r["block_size_tokens"] for r in rows], pa.int32()),
                "hash_ids": pa.array([r["hash_ids"] for r in rows], pa.list_(pa.uint64())),
            }
        )
        part = self.path.with_name(f"{self.path.name}.part-{self.writer}-{self._parts:05d}.parquet")
        temporary = part.with_name(part.name + ".tmp")
        try:
            pq.write_table(table, temporary)
            os.replace(temporary, part)
        finally:
            temporary.unlink(missing_ok=True)
        self._parts += 1

    def close(self) -> None:
        self.flush()


def _input_tokens(row: dict[str, Any]) -> int:
    given = row["input_tokens"]
    return int(given) if given is not None else len(row["hash_ids"]) * row["block_size_tokens"]
