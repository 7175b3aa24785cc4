"""What a reader knew about a trace, as stored in a canonical Parquet file's metadata.

:func:`fcctl.analyzers.canonical.write_canonical` writes it and the ``"parquet"`` reader reads
it back; both import it from here (neither imports the other). The value under
:data:`METADATA_KEY` is one JSON object: ``schema_version``, ``format``, ``order``,
``has_hashes``, ``has_sessions``, ``block_size_tokens``, ``path`` of the source trace and
``notes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

from fcctl.analyzers.schema import Order, Trace

METADATA_KEY = "fcctl.trace"
METADATA_VERSION = 1
_REQUIRED = ("format", "order", "has_hashes", "has_sessions", "block_size_tokens", "path")
_ORDERS: tuple[Order, ...] = ("time", "session")


class TraceMetadataError(ValueError):
    """The stored metadata is not the JSON object :func:`parse_trace_metadata` expects."""


@dataclass(frozen=True)
class TraceMetadata:
    """The trace description stored beside the canonical table (see the module docstring)."""

    path: str
    format: str
    order: Order
    has_hashes: bool
    has_sessions: bool
    block_size_tokens: int
    notes: tuple[str, ...] = ()


def trace_metadata(trace: Trace) -> dict[str, str]:
    """The Parquet key-value metadata that describes ``trace``.

    ``path`` and ``format`` are those of the original trace (:attr:`Trace.source`), so a
    Parquet file converted again still names the trace it all came from.
    """
    source = trace.source
    return {
        METADATA_KEY: json.dumps(
            {
                "schema_version": METADATA_VERSION,
                "format": source.format,
                "order": trace.order,
                "has_hashes": trace.has_hashes,
                "has_sessions": trace.has_sessions,
                "block_size_tokens": trace.block_size_tokens,
                "path": source.path,
                "notes": list(trace.notes),
            }
        )
    }


def parse_trace_metadata(raw: str) -> TraceMetadata:
    """The :class:`TraceMetadata` stored as ``raw``; :class:`TraceMetadataError` if malformed.

    Every field is checked for its type (a ``has_hashes`` of ``"yes"`` is an error, not true).
    """
    try:
        info = json.loads(raw)
    except ValueError:
        raise TraceMetadataError("must be a JSON object; got text that is not JSON") from None
    if not isinstance(info, dict):
        raise TraceMetadataError(f"must be a JSON object; got {type(info).__name__}")
    missing = [k for k in _REQUIRED if k not in info]
    if missing:
        raise TraceMetadataError(f"missing field(s) {', '.join(map(repr, missing))}")
    version = info.get("schema_version", METADATA_VERSION)
    if version != METADATA_VERSION or type(version) is not int:
        raise TraceMetadataError(
            f"field 'schema_version' must be {METADATA_VERSION} (this fcctl reads that one); "
            f"got {version!r}"
        )
    if info["order"] not in _ORDERS:
        raise TraceMetadataError(f"field 'order' must be one of {_ORDERS}; got {info['order']!r}")
    for name in ("path", "format"):
        if not isinstance(info[name], str):
            raise TraceMetadataError(f"field {name!r} must be a string; got {info[name]!r}")
    for name in ("has_hashes", "has_sessions"):
        if type(info[name]) is not bool:
            raise TraceMetadataError(f"field {name!r} must be true or false; got {info[name]!r}")
    block = info["block_size_tokens"]
    if type(block) is not int or block < 0:
        raise TraceMetadataError(
            f"field 'block_size_tokens' must be an integer >= 0; got {block!r}"
        )
    notes = info.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise TraceMetadataError(f"field 'notes' must be a list of strings; got {notes!r}")
    return TraceMetadata(
        path=info["path"],
        format=info["format"],
        order=cast(Order, info["order"]),
        has_hashes=info["has_hashes"],
        has_sessions=info["has_sessions"],
        block_size_tokens=block,
        notes=tuple(notes),
    )
