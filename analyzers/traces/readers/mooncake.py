"""Mooncake (Kimi, FAST'25) JSON Lines: one request per line.

``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``; hash ids are
global 512-token prefix-block ids. No sessions: ``session_id``/``turn``/``parent_request`` are
null (sessions can be inferred from prefix chains by the analyzer).
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
    finite_number,
    first_json_record,
    hash_column,
    iter_json_lines,
    non_negative_int,
    stable_time_order,
)

BLOCK_SIZE_TOKENS = 512
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class MooncakeReader:
    name = "mooncake"
    description = "Mooncake JSONL: timestamp (ms), input/output_length, hash_ids (512-token)"

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        return (
            isinstance(record, dict)
            and all(k in record for k in _FIELDS)
            and "chat_id" not in record
        )

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        timestamps_ms: list[float] = []
        inputs: list[int] = []
        outputs: list[int] = []
        hashes = HashIdBuffer()
        lines = iter_json_lines(path, progress=progress, max_line_bytes=max_line_bytes)
        for lineno, record in lines:
            place = f"line {lineno}"
            timestamps_ms.append(finite_number(record, "timestamp", path, place))
            inputs.append(non_negative_int(record, "input_length", path, place))
            outputs.append(non_negative_int(record, "output_length", path, place))
            hashes.add(record, "hash_ids", path, place)
        frame = build_frame(
            path=path,
            timestamp_s=np.asarray(timestamps_ms, dtype=np.float64) / 1000.0,
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=BLOCK_SIZE_TOKENS,
            hash_ids=hash_column(hashes.flat(), hashes.offsets()),
        )
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=True,
            has_sessions=False,
            block_size_tokens=BLOCK_SIZE_TOKENS,
            notes=("no session ids in Mooncake traces",),
        )
