"""FlatCake adapter captures: the JSON Lines an engine adapter appends with ``FLATCAKE_TRACE``.

Written by ``layout/adapters/trace.py`` (vLLM, SGLang, LMCache adapters of the emitted
package), one request per line::

    {"flatcake_trace": 1, "engine": "vllm", "timestamp_s": 12.5, "session_id": "chat-7",
     "session_source": "kv_transfer_params", "hash_ids": [..], "block_size_tokens": 16,
     "input_tokens": 912, "output_tokens": 40}

===================  =====================================================================
``flatcake_trace``   format version, 1 (required; what detection looks for)
``engine``           ``vllm``, ``sglang``, ``lmcache`` (optional, named in the notes)
``timestamp_s``      the engine process's monotonic clock, seconds (required); the table's
                     clock starts at the earliest row
``session_id``       string (required): the side channel's id or the adapters' fallback
``session_source``   where the id came from (optional; ``chained`` is the fallback)
``hash_ids``         the request's prefix page keys from the sequence start, folded to
                     unsigned 64-bit integers (required)
``block_size_tokens``  tokens per page, integer >= 1, the same on every row (required)
``input_tokens``     prompt tokens, or null: then ``len(hash_ids) x block_size_tokens``
``output_tokens``    reply tokens, or null (the engine does not tell storage): then 0
===================  =====================================================================

Mapping (``order == "time"``): ``turn`` is the row's 0-based position in its session (time
order), ``parent_request`` the session's previous row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    HashIdBuffer,
    build_frame,
    fail,
    finite_number,
    first_json_record,
    hash_column,
    iter_json_lines,
    non_negative_int,
    optional_text,
    show,
    stable_time_order,
    text,
)

TRACE_VERSION = 1


def _optional_count(record: dict, name: str, path: Path, place: str) -> int | None:
    if record.get(name) is None:
        return None
    return non_negative_int(record, name, path, place)


class FlatCakeReader:
    name = "flatcake"
    description = "FlatCake adapter capture JSONL (FLATCAKE_TRACE): session_id, hash_ids, tokens"

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        return isinstance(record, dict) and "flatcake_trace" in record

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        stamps: list[float] = []
        sessions: list[str] = []
        inputs: list[int] = []
        outputs: list[int] = []
        engines: set[str] = set()
        block_size: int | None = None
        no_input = no_output = chained = 0
        hashes = HashIdBuffer()
        for lineno, record in iter_json_lines(
            path, progress=progress, max_line_bytes=max_line_bytes
        ):
            place = f"line {lineno}"
            version = record.get("flatcake_trace")
            if version != TRACE_VERSION:
                raise fail(path, place, f"field 'flatcake_trace' must be 1; got {show(version)}")
            stamps.append(finite_number(record, "timestamp_s", path, place))
            sessions.append(text(record, "session_id", path, place))
            size = non_negative_int(record, "block_size_tokens", path, place)
            if size < 1 or (block_size is not None and size != block_size):
                want = ">= 1" if block_size is None else f"{block_size} (as on line 1)"
                raise fail(path, place, f"field 'block_size_tokens' must be {want}; got {size}")
            block_size = size
            n_hashes = len(record.get("hash_ids") or [])
            hashes.add(record, "hash_ids", path, place)
            given_in = _optional_count(record, "input_tokens", path, place)
            no_input += given_in is None
            inputs.append(given_in if given_in is not None else n_hashes * size)
            given_out = _optional_count(record, "output_tokens", path, place)
            no_output += given_out is None
            outputs.append(given_out or 0)
            engine = optional_text(record, "engine", path, place)
            if engine:
                engines.add(engine)
            chained += optional_text(record, "session_source", path, place) == "chained"
        if block_size is None:
            raise fail(path, None, "file holds no requests")
        stamp = np.asarray(stamps, dtype=np.float64)
        order = np.argsort(stamp, kind="stable")
        # Turns and parents follow each session's time order.
        turn = [0] * len(stamps)
        parent: list[int | None] = [None] * len(stamps)
        last: dict[str, int] = {}
        for row in order.tolist():
            s = sessions[row]
            if s in last:
                parent[row] = last[s]
                turn[row] = turn[last[s]] + 1
            last[s] = row
        frame = build_frame(
            path=path,
            timestamp_s=stamp - stamp.min(),
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=block_size,
            hash_ids=hash_column(hashes.flat(), hashes.offsets()),
            session_id=sessions,
            turn=turn,
            parent_request=parent,
        )
        by = ", ".join(sorted(engines)) or "engine unknown"
        notes = [
            f"captured by the FlatCake adapters ({by}); hash_ids are the engine's page keys "
            "folded to 64 bits"
        ]
        if no_input:
            notes.append(f"{no_input} rows without input_tokens: hash_ids x block_size_tokens")
        if no_output:
            notes.append(f"{no_output} rows without output_tokens (not given to storage): 0")
        if chained:
            notes.append(f"{chained} rows' sessions come from the adapters' chained fallback")
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=True,
            has_sessions=True,
            block_size_tokens=block_size,
            notes=tuple(notes),
        )
