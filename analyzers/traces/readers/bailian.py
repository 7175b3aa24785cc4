"""Alibaba Bailian / Qwen usage traces (alibaba-edu/qwen-bailian-usagetraces-anon), JSON Lines.

Fields per line: ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` (seconds),
``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` (16-token blocks, ids
global across the file). The Qwen coder and thinking traces (``qwen_coder_blksz_16.jsonl``,
``qwen_thinking_blksz_16.jsonl``) are this format with other ``type`` values.

Mapping: ``order == "time"``. A chat's session is the root of its ``parent_chat_id`` chain,
``session_id = str(root chat_id)``; when a parent is not in the file, the chain stops at that
missing parent's id (so its children still share one session). ``parent_request`` is the
``request_index`` of the parent chat when the parent is in the file, else null. ``turn``
comes from the field. ``type`` (a string, as given: text, search, image, file, thinking, ...)
becomes the optional canonical column ``type`` when any line has the field; a line without
it, or with null, has a null ``type``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    INT32_MAX,
    HashIdBuffer,
    build_frame,
    fail,
    finite_number,
    first_json_record,
    hash_column,
    integer,
    iter_json_lines,
    non_negative_int,
    optional_text,
    stable_time_order,
)

BLOCK_SIZE_TOKENS = 16


class BailianReader:
    name = "bailian"
    description = "Alibaba Bailian/Qwen JSONL: chat_id, parent_chat_id, timestamp (s), hash_ids"

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        return isinstance(record, dict) and "chat_id" in record and "parent_chat_id" in record

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        chat_ids: list[int] = []
        parents: list[int] = []
        timestamps: list[float] = []
        inputs: list[int] = []
        outputs: list[int] = []
        turns: list[int] = []
        kinds: list[str | None] = []
        typed = False
        row_of: dict[int, int] = {}
        line_of: list[int] = []
        hashes = HashIdBuffer()
        lines = iter_json_lines(path, progress=progress, max_line_bytes=max_line_bytes)
        for lineno, record in lines:
            place = f"line {lineno}"
            chat_id = integer(record, "chat_id", path, place)
            parent = integer(record, "parent_chat_id", path, place)
            if parent < -1:
                raise fail(
                    path, place, f"field 'parent_chat_id' must be -1 or a chat id; got {parent!r}"
                )
            if chat_id in row_of:
                raise fail(
                    path,
                    place,
                    f"field 'chat_id' must be unique; got {chat_id!r} again "
                    f"(first at line {line_of[row_of[chat_id]]})",
                )
            row_of[chat_id] = len(chat_ids)
            chat_ids.append(chat_id)
            parents.append(parent)
            line_of.append(lineno)
            timestamps.append(finite_number(record, "timestamp", path, place))
            inputs.append(non_negative_int(record, "input_length", path, place))
            outputs.append(non_negative_int(record, "output_length", path, place))
            turns.append(integer(record, "turn", path, place, maximum=INT32_MAX))
            kinds.append(optional_text(record, "type", path, place))
            typed = typed or "type" in record
            hashes.add(record, "hash_ids", path, place)

        roots = self._roots(path, chat_ids, parents, row_of, line_of)
        parent_rows = [row_of.get(p) if p != -1 else None for p in parents]
        frame = build_frame(
            path=path,
            timestamp_s=np.asarray(timestamps, dtype=np.float64),
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=BLOCK_SIZE_TOKENS,
            hash_ids=hash_column(hashes.flat(), hashes.offsets()),
            session_id=[str(r) for r in roots],
            turn=turns,
            parent_request=parent_rows,
            request_type=kinds if typed else None,
        )
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=True,
            has_sessions=True,
            block_size_tokens=BLOCK_SIZE_TOKENS,
            notes=("sessions are the roots of parent_chat_id chains",),
        )

    @staticmethod
    def _roots(
        path: Path,
        chat_ids: list[int],
        parents: list[int],
        row_of: dict[int, int],
        line_of: list[int],
    ) -> list[int]:
        """Root chat id of each row's parent chain (memoised; a cycle is an error)."""
        roots: list[int | None] = [None] * len(chat_ids)
        for start in range(len(chat_ids)):
            chain: list[int] = []
            row = start
            root: int | None = None
            on_chain: set[int] = set()
            while True:
                if roots[row] is not None:
                    root = roots[row]
                    break
                if row in on_chain:
                    raise fail(
                        path,
                        f"line {line_of[start]}",
                        f"field 'parent_chat_id' must not form a cycle; got chat {chat_ids[row]!r} "
                        "as its own ancestor",
                    )
                on_chain.add(row)
                chain.append(row)
                parent = parents[row]
                if parent == -1:
                    root = chat_ids[row]
                    break
                if parent not in row_of:
                    root = parent  # the chain leaves the file; its children share that root
                    break
                row = row_of[parent]
            for r in chain:
                roots[r] = root
        return roots  # type: ignore[return-value]
