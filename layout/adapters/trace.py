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

Memory is bounded: records wait in a buffer of at most ``flush_records`` and are appended (one
``write`` per flush, ``O_APPEND``) when it fills, at :meth:`TraceRecorder.flush` and at
:meth:`TraceRecorder.close`. When pyarrow is importable (``parquet=None``, the default; or
``parquet=True``) each flush also writes a canonical Parquet part ``PATH.partNNNNN.parquet``
beside the JSON Lines file: the nine columns of fcctl's canonical trace table, one row per
record, ``request_index`` 0..n-1 within the part, ``turn`` and ``parent_request`` null (a part
does not see the sessions' earlier rows; the JSON Lines file, read whole, links them).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

#: The environment variable that turns capture on in every adapter.
TRACE_ENV = "FLATCAKE_TRACE"
TRACE_VERSION = 1
DEFAULT_FLUSH_RECORDS = 256


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
    ) -> None:
        if not isinstance(flush_records, int) or flush_records < 1:
            raise ValueError(f"flush_records: must be an integer >= 1; got {flush_records!r}")
        self.path = Path(path)
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
        """A recorder for ``trace`` when given, else for ``$FLATCAKE_TRACE`` when set."""
        target = trace if trace is not None else os.environ.get(TRACE_ENV) or None
        return None if target is None else cls(target, engine=engine)

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
            os.write(fd, data)
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
        part = self.path.with_name(f"{self.path.name}.part{self._parts:05d}.parquet")
        pq.write_table(table, part)
        self._parts += 1

    def close(self) -> None:
        self.flush()


def _input_tokens(row: dict[str, Any]) -> int:
    given = row["input_tokens"]
    return int(given) if given is not None else len(row["hash_ids"]) * row["block_size_tokens"]
