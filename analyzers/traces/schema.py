"""The canonical trace table every reader produces and every analyzer consumes.

One row per request, in *analysis order* (``request_index`` 0..n-1):

===================  ==============  ===========================================================
column               dtype           meaning
===================  ==============  ===========================================================
request_index        Int64           position in analysis order (see ``Trace.order``)
session_id           String, null    session the request belongs to; null when the trace has none
turn                 Int32, null     turn number within the session (0-based when derived)
parent_request       Int64, null     ``request_index`` of the request this one continues
timestamp_s          Float64         arrival, seconds (trace start, or session start when
                                     ``Trace.order == "session"``)
input_tokens         Int64           prompt tokens (>= 0)
output_tokens        Int64           generated tokens (>= 0)
block_size_tokens    Int32           tokens per hashed block
hash_ids             List(UInt64),   prefix block hashes in prompt order; null when the trace
                     null            carries none (Azure)
===================  ==============  ===========================================================

Optional columns (:data:`OPTIONAL_COLUMNS`), present only when the source format has them;
every analysis works without them, and a table holds each in every row or not at all:

===================  ==============  ===========================================================
column               dtype           meaning
===================  ==============  ===========================================================
type                 String, null    the request's kind as the trace labels it (Bailian/Qwen
                                     ``type``: text, search, image, file, thinking, coder, ...)
think_time_s         Float64, null   the client's think time before this request, seconds: the
                                     gap between the response to the session's previous request
                                     and this request's send (:data:`THINK_TIME_DEFINITION`);
                                     finite and >= 0; null where the trace does not record it
                                     (a session's first request, formats without it)
===================  ==============  ===========================================================

Analysis order: requests by timestamp (stable) for ``order == "time"``; for ``order ==
"session"`` (per-session clocks, Claude Code) sessions in file order, requests within a session
by time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import polars as pl

SCHEMA: dict[str, pl.DataType] = {
    "request_index": pl.Int64(),
    "session_id": pl.String(),
    "turn": pl.Int32(),
    "parent_request": pl.Int64(),
    "timestamp_s": pl.Float64(),
    "input_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
    "block_size_tokens": pl.Int32(),
    "hash_ids": pl.List(pl.UInt64()),
}
COLUMNS: tuple[str, ...] = tuple(SCHEMA)
OPTIONAL_COLUMNS: dict[str, pl.DataType] = {"type": pl.String(), "think_time_s": pl.Float64()}

#: How a reader derives ``think_time_s`` from a trace that records the server's time per
#: request (Claude Code's ``api_time``), the rule Dynamo 1.6.1's offline replay paces by
#: (docs/simulator.md, "Dynamo 1.6.1 on the Claude Code sessions"): this request's ``t`` minus
#: the session's previous request's ``t``, minus that previous request's ``api_time`` (the
#: whole difference where it has none), floored at 0 (the trace rounds times to about 1 s, so
#: the difference can fall a little under ``api_time``). Null for a session's first request.
THINK_TIME_DEFINITION = "t - previous t - previous api_time (whole difference without it), >= 0"


def first_bad_think_time(think_time_s: pl.Series) -> int | None:
    """Row of the first ``think_time_s`` that is set and not finite >= 0 (NaN is bad, null is
    not: null means "not recorded")."""
    bad = (~(think_time_s.is_finite() & (think_time_s >= 0))).fill_null(False)
    hits = np.flatnonzero(bad.to_numpy())
    return int(hits[0]) if len(hits) else None


def think_time_rule(value: float) -> str:
    return f"must be a finite number of seconds >= 0 (or null); got {value!r}"


# The largest |timestamp_s| any reader, ``convert`` or the Parquet reader accepts: 2**53 s (285
# million years) keeps whole seconds exact in a float64 and every day index (``--partition-by
# day``) far inside Int64, so what ``convert`` writes is always what ``analyze`` reads back.
MAX_ABS_TIMESTAMP_S = float(2**53)


def first_bad_timestamp(timestamp_s: np.ndarray) -> int | None:
    """Row of the first ``timestamp_s`` that is not finite or beyond :data:`MAX_ABS_TIMESTAMP_S`."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(timestamp_s) <= MAX_ABS_TIMESTAMP_S)  # NaN compares False: bad too
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else None


def timestamp_rule(value: float) -> str:
    return f"must be a finite number of seconds within +-2**53; got {value!r}"


def table_columns(columns: Iterable[str]) -> list[str]:
    """The columns of a canonical table: :data:`COLUMNS`, then the optional ones in ``columns``.

    ``columns`` is a frame's column names; the result is the order they are written in.
    """
    present = set(columns)
    return [*COLUMNS, *(name for name in OPTIONAL_COLUMNS if name in present)]


Order = Literal["time", "session"]


@dataclass(frozen=True)
class SourceTrace:
    """The trace a canonical Parquet file was converted from, as its metadata records it."""

    path: str
    format: str


@dataclass(frozen=True)
class Trace:
    """A parsed trace: the canonical table plus what the reader knows about it.

    ``path`` and ``format`` are the file read and the reader that read it (``"parquet"`` for
    canonical Parquet). ``converted_from`` is, for a canonical Parquet file, the trace that
    ``fcctl convert`` read to write it (``None`` otherwise, and for a Parquet file without
    fcctl metadata): show both, they are different files. :attr:`source` is the original in
    either case.
    """

    path: str
    format: str
    requests: pl.DataFrame
    order: Order = "time"
    has_hashes: bool = True
    has_sessions: bool = False
    block_size_tokens: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    converted_from: SourceTrace | None = None
    #: The share of the original's sessions this trace keeps (:mod:`.sampling`); 1: all.
    session_sample_rate: float = 1.0

    @property
    def source(self) -> SourceTrace:
        """The original trace: what it was converted from, or this file itself."""
        return self.converted_from or SourceTrace(self.path, self.format)

    @property
    def num_requests(self) -> int:
        return self.requests.height
