"""A trace's fingerprint: which trace a result was measured on, so results can be reconciled.

``sha256:<hex>`` of, in this order (every integer little-endian, 8 bytes):

1. the text ``fcctl-trace-v1`` and a newline;
2. the number of requests, then the number of block accesses (all ``hash_ids`` elements);
3. ``timestamp_s`` (float64), ``input_tokens`` and ``output_tokens`` (int64), one value per
   request in the canonical table's order (a null timestamp or count is written as 0);
4. ``session_id``: each id's UTF-8 bytes followed by the byte 0x1F, a null id as 0x1E alone;
5. ``hash_ids``: per request its length (int64), then every hash (uint64) in order; a null list
   has length -1.

The same requests give the same fingerprint whatever format they were read from (a JSONL file,
its ``fcctl convert`` Parquet, a dataset of its parts read whole), since only the canonical
columns enter it; any change to a time, a size, a session or a block hash changes it.
``fcctl report`` refuses to combine documents whose fingerprints differ.
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl

from .schema import Trace

PREFIX = "sha256:"


def _int64(series: pl.Series) -> bytes:
    return series.fill_null(0).cast(pl.Int64).to_numpy().astype("<i8", copy=False).tobytes()


def request_fingerprint(requests: pl.DataFrame) -> str:
    """The fingerprint of a canonical request table (module docstring)."""
    h = hashlib.sha256(b"fcctl-trace-v1\n")
    n = requests.height
    hashes = requests["hash_ids"]
    lengths = hashes.list.len()
    accesses = int(lengths.fill_null(0).sum() or 0)
    h.update(np.array([n, accesses], dtype="<i8").tobytes())
    ts = requests["timestamp_s"].fill_null(0.0).cast(pl.Float64).to_numpy()
    h.update(ts.astype("<f8", copy=False).tobytes())
    h.update(_int64(requests["input_tokens"]))
    h.update(_int64(requests["output_tokens"]))
    for sid in requests["session_id"].cast(pl.String).to_list():
        h.update(b"\x1e" if sid is None else sid.encode() + b"\x1f")
    lens = lengths.fill_null(-1).cast(pl.Int64).to_numpy()
    flat = hashes.explode().drop_nulls().cast(pl.UInt64).to_numpy()
    offsets = np.concatenate([[0], np.cumsum(np.maximum(lens, 0))])
    lens_le = lens.astype("<i8", copy=False)
    flat_le = flat.astype("<u8", copy=False)
    for r in range(n):
        h.update(lens_le[r : r + 1].tobytes())
        h.update(flat_le[offsets[r] : offsets[r + 1]].tobytes())
    return PREFIX + h.hexdigest()


def trace_fingerprint(trace: Trace) -> str | None:
    """The fingerprint of ``trace`` (None when its table lacks the canonical columns, as the
    bounded analysis's request table does)."""
    need = {"timestamp_s", "input_tokens", "output_tokens", "session_id", "hash_ids"}
    if not need <= set(trace.requests.columns):
        return None
    return request_fingerprint(trace.requests)
