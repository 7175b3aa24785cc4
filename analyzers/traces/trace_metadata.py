"""What a reader knew about a trace, as stored in a canonical Parquet file's metadata.

:func:`fcctl.analyzers.traces.canonical.write_canonical` writes it and the ``"parquet"`` reader
reads
it back; both import it from here (neither imports the other). The value under
:data:`METADATA_KEY` is one JSON object: ``schema_version``, ``format``, ``order``,
``has_hashes``, ``has_sessions``, ``block_size_tokens``, ``path`` of the source trace and
``notes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

from .schema import Order, Trace

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
    except (ValueError, RecursionError):  # RecursionError: nesting past the parser's depth
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


# --- partitioned datasets -------------------------------------------------------------------

#: Key of a dataset part's place in its dataset (beside :data:`METADATA_KEY`).
PARTITION_KEY = "fcctl.partition"
#: How a writer cut the dataset: ``request-range`` (consecutive requests, ``fcctl synth``),
#: ``day`` (``floor(timestamp_s / 86400)``) or ``session-hash`` (a hash of ``session_id``),
#: the last two by ``fcctl convert --partition-by``.
PARTITION_BY = ("request-range", "day", "session-hash")


@dataclass(frozen=True)
class PartitionMetadata:
    """One part of a dataset written by fcctl (``fcctl convert -o DIR --partition-by``, synth).

    Every part of one dataset has the same ``dataset_id`` and ``dataset_requests``; its rows
    carry the *global* ``request_index`` (strictly increasing within the part) and
    ``parent_request``, and the parts' indices together are exactly 0..dataset_requests-1, so
    the dataset ordered by ``request_index`` is the single-file trace. ``partition`` numbers the
    part (0-based, in the writer's order), ``key`` is its partition value as text (the day
    number, the hash bucket; None for request ranges), ``requests`` and ``block_accesses`` are
    the part's rows and ``hash_ids`` elements.
    """

    dataset_id: str
    partition: int
    partition_by: str
    key: str | None
    requests: int
    block_accesses: int
    dataset_requests: int


def partition_metadata(part: PartitionMetadata) -> dict[str, str]:
    """The Parquet key-value metadata entry that stores ``part``."""
    return {
        PARTITION_KEY: json.dumps(
            {
                "schema_version": METADATA_VERSION,
                "dataset_id": part.dataset_id,
                "partition": part.partition,
                "partition_by": part.partition_by,
                "key": part.key,
                "requests": part.requests,
                "block_accesses": part.block_accesses,
                "dataset_requests": part.dataset_requests,
            }
        )
    }


def parse_partition_metadata(raw: str) -> PartitionMetadata:
    """The :class:`PartitionMetadata` stored as ``raw``; TraceMetadataError if malformed."""
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting past the parser's depth
        raise TraceMetadataError("must be a JSON object; got text that is not JSON") from None
    if not isinstance(info, dict):
        raise TraceMetadataError(f"must be a JSON object; got {type(info).__name__}")
    fields = ("dataset_id", "partition", "partition_by", "requests", "block_accesses")
    missing = [k for k in (*fields, "dataset_requests") if k not in info]
    if missing:
        raise TraceMetadataError(f"missing field(s) {', '.join(map(repr, missing))}")
    version = info.get("schema_version", METADATA_VERSION)
    if version != METADATA_VERSION or type(version) is not int:
        raise TraceMetadataError(
            f"field 'schema_version' must be {METADATA_VERSION}; got {version!r}"
        )
    if not isinstance(info["dataset_id"], str) or not info["dataset_id"]:
        raise TraceMetadataError(
            f"field 'dataset_id' must be a non-empty string; got {info['dataset_id']!r}"
        )
    if info["partition_by"] not in PARTITION_BY:
        raise TraceMetadataError(
            f"field 'partition_by' must be one of {PARTITION_BY}; got {info['partition_by']!r}"
        )
    key = info.get("key")
    if key is not None and not isinstance(key, str):
        raise TraceMetadataError(f"field 'key' must be a string or null; got {key!r}")
    for name, minimum in (
        ("partition", 0),
        ("requests", 1),
        ("block_accesses", 0),
        ("dataset_requests", 1),
    ):
        value = info[name]
        if type(value) is not int or value < minimum:
            raise TraceMetadataError(
                f"field {name!r} must be an integer >= {minimum}; got {value!r}"
            )
    if info["requests"] > info["dataset_requests"]:
        raise TraceMetadataError(
            f"field 'requests' ({info['requests']}) is more than 'dataset_requests' "
            f"({info['dataset_requests']})"
        )
    return PartitionMetadata(
        dataset_id=info["dataset_id"],
        partition=info["partition"],
        partition_by=info["partition_by"],
        key=key,
        requests=info["requests"],
        block_accesses=info["block_accesses"],
        dataset_requests=info["dataset_requests"],
    )
