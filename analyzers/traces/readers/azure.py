"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023/2024), CSV.

Header ``TIMESTAMP,ContextTokens,GeneratedTokens``; timestamps like
``2023-11-16 18:15:46.6805900`` (100 ns digits). ``timestamp_s`` is seconds since the earliest
request (the first row in the published files). No block hashes and no sessions: sizes and
arrival rate can be measured, KV reuse cannot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    build_frame,
    fail,
    null_hash_column,
    read_csv_text,
    show,
    stable_time_order,
)

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class AzureReader:
    name = "azure"
    description = "Azure LLM inference CSV: TIMESTAMP,ContextTokens,GeneratedTokens (no hashes)"

    def sniff(self, head: bytes) -> bool:
        first = head.split(b"\n", 1)[0].strip().lstrip(b"\xef\xbb\xbf")
        columns = [c.strip() for c in first.decode("utf-8", "replace").split(",")]
        return all(name in columns for name in HEADER)

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        table = read_csv_text(path, progress=progress, max_line_bytes=max_line_bytes)
        for name in HEADER:
            if name not in table.columns:
                raise fail(path, "header", f"missing column {name!r}; got {table.columns!r}")
        if table.height == 0:
            raise fail(path, None, "file is empty (header but no rows)")

        stamps = (
            table["TIMESTAMP"]
            .str.strip_chars()
            .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False)
        )
        self._first_bad(
            path, table["TIMESTAMP"], stamps, "TIMESTAMP", "a time like 2023-11-16 18:15:46.6805900"
        )
        tokens = {}
        for name in HEADER[1:]:
            parsed = table[name].str.strip_chars().cast(pl.Int64(), strict=False)
            self._first_bad(path, table[name], parsed, name, "a non-negative integer")
            negative = (parsed < 0).arg_true()
            if len(negative):
                row = int(negative[0])
                raise fail(
                    path,
                    f"row {row + 1}",
                    f"field {name!r} must be a non-negative integer; got {table[name][row]!r}",
                )
            tokens[name] = parsed.to_numpy()

        ns = stamps.dt.epoch("ns").to_numpy()
        seconds = (ns - ns.min()).astype(np.float64) / 1e9
        frame = build_frame(
            path=path,
            timestamp_s=seconds,
            input_tokens=tokens["ContextTokens"],
            output_tokens=tokens["GeneratedTokens"],
            block_size_tokens=0,
            hash_ids=null_hash_column(table.height),
        )
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=False,
            has_sessions=False,
            block_size_tokens=0,
            notes=(
                # (That reuse cannot be measured without hashes is the analyzer's note.)
                "timestamp_s counts from the earliest TIMESTAMP; no session ids",
            ),
        )

    @staticmethod
    def _first_bad(path: Path, raw: pl.Series, parsed: pl.Series, name: str, rule: str) -> None:
        bad = (parsed.is_null()).arg_true()
        if len(bad):
            row = int(bad[0])
            # A short row or an empty cell reads as null: say that rather than "got None".
            got = "an empty or missing cell" if raw[row] is None else show(raw[row])
            raise fail(path, f"row {row + 1}", f"field {name!r} must be {rule}; got {got}")
