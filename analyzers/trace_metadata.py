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
    """The Parquet key-value metadata that describes ``trace``."""
    return {
        METADATA_KEY: json.dumps(
            {
                "schema_version": METADATA_VERSION,
                "format": trace.format,
                "order": trace.order,
                "has_hashes": trace.has_hashes,
                "has_sessions": trace.has_sessions,
                "block_size_tokens": trace.block_size_tokens,
                "path": trace.path,
                "notes": list(trace.notes),
            }
        )
    }


def parse_trace_metadata(raw: str) -> TraceMetadata:
    """The :class:`TraceMetadata` stored as ``raw``; :class:`TraceMetadataError` if malformed."""
    try:
        info = json.loads(raw)
    except ValueError:
        raise TraceMetadataError("not JSON") from None
    if not isinstance(info, dict) or any(k not in info for k in _REQUIRED):
        raise TraceMetadataError("not an object with the trace description")
    if info["order"] not in _ORDERS:
        raise TraceMetadataError(f"order must be one of {_ORDERS}")
    return TraceMetadata(
        path=info["path"],
        format=info["format"],
        order=cast(Order, info["order"]),
        has_hashes=info["has_hashes"],
        has_sessions=info["has_sessions"],
        block_size_tokens=info["block_size_tokens"],
        notes=tuple(info.get("notes", ())),
    )
