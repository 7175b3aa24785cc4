"""Per-session KV size, turns and largest input; session inference from prefix chains.

* **per-session KV size** = distinct blocks the session references x block_size_tokens x
  KV bytes per token (``KvGeometry.bytes_per_token``), summarised as p50/p90/p99/max/mean.
* **max_context_bytes** = the session's largest single input x KV bytes per token: the KV of
  its largest request, which is what one restore of that session reads (``kv_bytes`` counts
  every distinct block the session ever references, across branches and rewrites, so it can
  be far larger than any one context).
* **turns** = requests in the session; **max_input_tokens** = its largest single input.

Traces without session ids (Mooncake) get *inferred* sessions. A request's *full-block
prefix* is its ``hash_ids`` minus a trailing partial block (``min(len(hash_ids),
input_tokens // block_size_tokens)`` blocks). Request ``q`` continues an earlier request ``r``
when ``q``'s ``hash_ids`` start with all of ``r``'s full-block prefix (at least one block) and
are longer than it; among several such ``r`` the longest prefix wins, ties go to the latest.
The issue's "beyond a shared prefix" is made concrete as: each request is continued at most
once. When a second request matches a request that something else already continued, the two
diverge after that request's prefix, so the prefix is shared (a system prompt, a few-shot
header) rather than one conversation's history, and the second request starts a new session.
Otherwise, too, ``q`` starts a new session. Each request registers its prefix under its tip block
(the block at position k-1), so a lookup is O(1) and a request costs O(its blocks); a
candidate's whole prefix is compared before it is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
from numba import njit

from .metrics import Percentiles
from .stack import Accesses


@njit(cache=True)
def _infer(  # pragma: no cover - numba
    block: np.ndarray, offsets: np.ndarray, full_blocks: np.ndarray, num_blocks: int
) -> tuple[np.ndarray, np.ndarray, int]:
    n_req = offsets.shape[0] - 1
    tip_len = np.zeros(num_blocks, dtype=np.int64)
    tip_req = np.full(num_blocks, -1, dtype=np.int64)
    session = np.empty(n_req, dtype=np.int32)
    parent = np.full(n_req, -1, dtype=np.int64)
    continued = np.zeros(n_req, dtype=np.bool_)
    n_sessions = 0
    for q in range(n_req):
        o = offsets[q]
        length = offsets[q + 1] - o
        best = -1
        # Longest first: the first verified match is the longest. q must be longer than k.
        for j in range(length - 2, -1, -1):
            bj = block[o + j]
            k = tip_len[bj]
            if k != j + 1:
                continue
            r = tip_req[bj]
            ro = offsets[r]
            same = True
            for x in range(k):
                if block[ro + x] != block[o + x]:
                    same = False
                    break
            if same:
                best = r
                break
        if best >= 0 and not continued[best]:
            continued[best] = True
            session[q] = session[best]
            parent[q] = best
        else:
            session[q] = n_sessions
            n_sessions += 1
        k = full_blocks[q]
        if k >= 1:
            tip = block[o + k - 1]
            tip_len[tip] = k
            tip_req[tip] = q  # a later request with the same prefix replaces: ties -> latest
    return session, parent, n_sessions


def infer_sessions(
    acc: Accesses, input_tokens: np.ndarray, block_size_tokens: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(session index per request, request continued or -1, number of sessions)."""
    lens = np.diff(acc.request_offsets)
    if block_size_tokens > 0:
        full = np.minimum(lens, np.asarray(input_tokens, dtype=np.int64) // block_size_tokens)
    else:
        full = lens
    session, parent, n = _infer(
        acc.block, acc.request_offsets, full.astype(np.int64), acc.num_blocks
    )
    return session, parent, int(n)


def session_index_from_ids(session_id: pl.Series) -> tuple[np.ndarray, list[str], int]:
    """Dense session index per request (order of first appearance) and the ids.

    A request with a null id in a trace that has sessions forms a session of its own.
    """
    filled = (
        pl.DataFrame({"s": session_id})
        .with_row_index("i")
        .select(
            pl.coalesce(pl.col("s"), pl.lit("\x00request-") + pl.col("i").cast(pl.String)).alias(
                "s"
            )
        )["s"]
    )
    uniq = filled.unique(maintain_order=True)
    idx = filled.replace_strict(uniq, pl.int_range(uniq.len(), eager=True), return_dtype=pl.Int32)
    return idx.to_numpy(), uniq.to_list(), uniq.len()


@njit(cache=True)
def _distinct_per_session(  # pragma: no cover - numba
    block: np.ndarray,
    offsets: np.ndarray,
    order: np.ndarray,
    session: np.ndarray,
    n_sessions: int,
    num_blocks: int,
) -> np.ndarray:
    # Requests visited grouped by session: a block counts once per session when its
    # last-seen session differs. O(accesses), no sort of the access stream.
    seen = np.full(num_blocks, -1, dtype=np.int32)
    out = np.zeros(n_sessions, dtype=np.int64)
    for t in range(order.shape[0]):
        r = order[t]
        s = session[r]
        for i in range(offsets[r], offsets[r + 1]):
            b = block[i]
            if seen[b] != s:
                seen[b] = s
                out[s] += 1
    return out


def distinct_blocks_per_session(acc: Accesses, session: np.ndarray, n_sessions: int) -> np.ndarray:
    order = np.argsort(session, kind="stable").astype(np.int64)
    return _distinct_per_session(
        acc.block, acc.request_offsets, order, session.astype(np.int32), n_sessions, acc.num_blocks
    )


@dataclass(frozen=True)
class Summary:
    """p50/p90/p99 (numpy linear interpolation), max and mean."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    mean: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        if values.shape[0] == 0:
            return cls(None, None, None, None, None)
        p = Percentiles.of(values)
        return cls(p.p50, p.p90, p.p99, float(values.max()), float(values.mean()))


_NOT_JSON = {"json": False}


@dataclass(frozen=True, eq=False)
class SessionMetrics:
    """Per-session figures; the JSON ``sessions`` object holds kv_bytes, max_context_bytes,
    turns, max_input_tokens (count and inferred are in the JSON ``trace`` object; the tables go
    to ``--out``)."""

    count: int = field(metadata=_NOT_JSON)
    inferred: bool = field(metadata=_NOT_JSON)
    kv_bytes: Summary  # distinct blocks x block bytes: all the KV the session ever references
    max_context_bytes: Summary  # largest input x bytes per token: what one restore reads
    turns: Percentiles
    max_input_tokens: Percentiles
    table: pl.DataFrame = field(metadata=_NOT_JSON)  # one row per session
    session_of_request: np.ndarray = field(metadata=_NOT_JSON)  # int32 per request


def session_metrics(
    acc: Accesses,
    requests: pl.DataFrame,
    *,
    has_sessions: bool,
    block_size_tokens: int,
    bytes_per_token: int,
) -> SessionMetrics:
    """Sessions from ids (``has_sessions``) or inferred from prefix chains."""
    if has_sessions:
        session, ids, n = session_index_from_ids(requests.get_column("session_id"))
    else:
        input_tokens = requests.get_column("input_tokens").to_numpy()
        session, _, n = infer_sessions(acc, input_tokens, block_size_tokens)
        ids = [f"inferred-{i}" for i in range(n)]
    distinct = distinct_blocks_per_session(acc, session, n)
    return session_summary(
        requests,
        session,
        ids,
        n,
        distinct,
        block_size_tokens=block_size_tokens,
        bytes_per_token=bytes_per_token,
        inferred=not has_sessions,
    )


def session_summary(
    requests: pl.DataFrame,
    session: np.ndarray,
    ids: list[str],
    n: int,
    distinct: np.ndarray,
    *,
    block_size_tokens: int,
    bytes_per_token: int,
    inferred: bool,
) -> SessionMetrics:
    """The per-session figures, given each request's session and each session's distinct blocks.

    ``session``: dense session index per request; ``ids``: the ``n`` sessions' ids;
    ``distinct``: distinct blocks per session (however counted: one pass, or summed over
    hash buckets of blocks, which partition the (session, block) pairs).
    """
    input_tokens = requests.get_column("input_tokens").to_numpy()
    ts = requests.get_column("timestamp_s").to_numpy()
    turns = np.bincount(session, minlength=n).astype(np.int64)
    max_input = np.zeros(n, dtype=np.int64)
    np.maximum.at(max_input, session, input_tokens.astype(np.int64))
    first_ts = np.full(n, np.inf)
    np.minimum.at(first_ts, session, ts)
    last_ts = np.full(n, -np.inf)
    np.maximum.at(last_ts, session, ts)
    kv_bytes = distinct * block_size_tokens * bytes_per_token
    max_context_bytes = max_input * bytes_per_token
    table = pl.DataFrame(
        {
            "session_index": np.arange(n, dtype=np.int64),
            "session_id": ids,
            "turns": turns,
            "distinct_blocks": distinct,
            "kv_bytes": kv_bytes,
            "max_input_tokens": max_input,
            "max_context_bytes": max_context_bytes,
            "first_timestamp_s": first_ts,
            "last_timestamp_s": last_ts,
        }
    )
    return SessionMetrics(
        count=n,
        inferred=inferred,
        kv_bytes=Summary.of(kv_bytes.astype(np.float64)),
        max_context_bytes=Summary.of(max_context_bytes.astype(np.float64)),
        turns=Percentiles.of(turns),
        max_input_tokens=Percentiles.of(max_input),
        table=table,
        session_of_request=session,
    )
