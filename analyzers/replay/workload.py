"""A trace as the simulator reads it: per-request arrays, dense block ids, sessions, workers.

* Blocks: ``hash_ids`` flattened to dense ids
(:func:`fcctl.analyzers.reuse.stack.flatten_accesses`).
  Every block, the partial last one too, is one ``block_bytes`` unit.
* Sessions: the trace's ids (first appearance order); a trace without ids gets the inferred
  sessions of ``fcctl analyze`` (:func:`fcctl.analyzers.reuse.sessions.infer_sessions`). A request's
  turn is its position in its session (0-based) and its previous reply is the output of the
  session's previous request (the inferred parent for inferred sessions).
* Workers: each request's *home* worker is its session's (session ordinal modulo the worker
  count; inferred sessions for traces without ids), what the ``sticky`` router uses; the
  engine's router (kv-aware by default) chooses the worker at arrival.
* Load: ``closed_loop`` (per-session clocks, Claude Code): sessions start on
  :func:`fcctl.analyzers.traces.schedule.schedule_sessions_by_rate` (by session ordinal); each
  turn keeps its gap to the previous turn's arrival and cannot arrive before the previous
  turn's first token plus its decode (the simulator applies that). Otherwise arrivals are the
  trace's times scaled to the rate (:func:`fcctl.analyzers.traces.schedule.time_scaled`).
* The trace itself is not kept: what a result states about it (path, format, duration,
  fingerprint) is taken once when the workload is built, so a workload shipped to worker
  processes carries the arrays the simulator reads and nothing of the trace's table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit

from fcctl.common.errors import FcctlInputError
from fcctl.layout.geometry import KvGeometry

from ..reuse.sessions import infer_sessions
from ..reuse.stack import flatten_accesses
from ..summary import TraceSummary
from ..traces.fingerprint import trace_fingerprint
from ..traces.schedule import (
    natural_rate_per_s,
    schedule_sessions_by_rate,
    session_ordinals,
    time_scaled,
)
from ..traces.schema import Trace


@njit(cache=True)
def _served_accesses(  # pragma: no cover - numba
    block: np.ndarray, offsets: np.ndarray, served: np.ndarray, num_blocks: int
) -> tuple[int, int]:
    """(block accesses of the served requests, distinct blocks among them)."""
    seen = np.zeros(max(num_blocks, 1), dtype=np.bool_)
    accesses = 0
    distinct = 0
    for r in range(served.shape[0]):
        if not served[r]:
            continue
        for i in range(offsets[r], offsets[r + 1]):
            accesses += 1
            b = block[i]
            if not seen[b]:
                seen[b] = True
                distinct += 1
    return accesses, distinct


@dataclass(frozen=True, eq=False)
class Workload:
    """Per-request arrays in analysis order (``request_index``); tokens, seconds, blocks; and
    what a result states about the trace it was built from (``path`` ... ``fingerprint``)."""

    path: str
    format: str
    #: The longest session's span on per-session clocks, else the first to last request's
    #: (seconds; None for fewer than two requests).
    duration_s: float | None
    fingerprint: str | None
    geometry: KvGeometry
    block_tokens: int
    block_bytes: int  # node bytes of one block, all layers and tp ranks
    block: np.ndarray  # int32 dense block id per access
    offsets: np.ndarray  # int64, requests + 1
    num_blocks: int
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    session: np.ndarray  # int64 session ordinal
    sessions: int
    sessions_inferred: bool
    turn: np.ndarray  # int64, 0-based position in the session
    prev_request: np.ndarray  # int64, -1 for a session's first request
    worker: np.ndarray  # int64
    timestamps_s: np.ndarray  # the trace's own (per-session clocks for closed_loop)
    closed_loop: bool
    workers: int
    #: The client's think time before each request (float64 seconds, NaN where the trace
    #: records none; canonical ``think_time_s``); None: the trace records none at all.
    think_time_s: np.ndarray | None = None

    @property
    def requests(self) -> int:
        return int(self.input_tokens.shape[0])

    @property
    def block_accesses(self) -> int:
        return int(self.block.shape[0])

    @property
    def ideal_hit_share(self) -> float | None:
        """``fcctl analyze``'s reuse access share: re-accesses / all block accesses."""
        if self.block_accesses == 0:
            return None
        return (self.block_accesses - self.num_blocks) / self.block_accesses

    def served_ideal_hit_share(self, served: np.ndarray) -> float | None:
        """The ideal over the requests that ran (``served``: bool per request): re-accesses
        among their block accesses / their accesses (docs/simulator.md, "Shares over what was
        served"). A block counts as re-accessed only after a *served* access to it: a request
        that was rejected never put its blocks on a GPU, so the first served access to a block
        first touched by a rejected request is a miss for every layout, ideal included."""
        # Distinct blocks by marking, in one compiled pass over the served requests' accesses
        # (linear; no access-sized mask or copy: this runs once a simulation).
        accesses, distinct = _served_accesses(
            self.block, self.offsets, np.asarray(served, dtype=np.bool_), self.num_blocks
        )
        if accesses == 0:
            return None
        if accesses == self.block_accesses:
            return self.ideal_hit_share
        return (accesses - distinct) / accesses

    @property
    def max_request_blocks(self) -> int:
        return int(np.diff(self.offsets).max()) if self.requests else 0

    def trace_summary(self) -> TraceSummary:
        """The shared ``trace`` object of a result (:mod:`fcctl.analyzers.summary`)."""
        return TraceSummary(
            path=self.path,
            format=self.format,
            requests=self.requests,
            sessions=self.sessions,
            sessions_inferred=self.sessions_inferred,
            block_size_tokens=self.block_tokens,
            block_accesses=self.block_accesses,
            distinct_blocks=self.num_blocks,
            duration_s=self.duration_s,
            fingerprint=self.fingerprint,
        )

    def blocks_of(self, r: int) -> np.ndarray:
        return self.block[self.offsets[r] : self.offsets[r + 1]]

    def natural_rate_per_s(self) -> float | None:
        return None if self.closed_loop else natural_rate_per_s(self.timestamps_s)

    def base_arrivals(self, rate: float, seed: int) -> np.ndarray:
        """Arrival per request for open loop; for closed loop, each session's first arrival at
        its scheduled start and every later turn at start + its own offset (the simulator
        then pushes turns back behind their predecessor's output)."""
        if not self.closed_loop:
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                arrivals = time_scaled(self.timestamps_s, rate)
        else:
            schedule = schedule_sessions_by_rate(self.sessions, self.requests, rate, seed=seed)
            first = np.full(self.sessions, np.inf)
            np.minimum.at(first, self.session, self.timestamps_s)
            arrivals = schedule.start_s[self.session] + (self.timestamps_s - first[self.session])
        # Huge timestamps (or a tiny rate) overflow to inf once scaled; the event loop would
        # then fail deep inside with a traceback, so refuse here, naming the trace and the rate.
        bad = np.flatnonzero(~np.isfinite(arrivals))
        if bad.shape[0]:
            r = int(bad[0])
            raise FcctlInputError(
                f"{self.path}: request {r}: arrival time at `rates` {rate!r} must be finite "
                f"after time scaling (timestamp_s {float(self.timestamps_s[r])!r}, first "
                f"{float(self.timestamps_s.min())!r}); got {float(arrivals[r])!r}"
            )
        return arrivals


def build_workload(trace: Trace, geometry: KvGeometry, workers: int) -> Workload:
    """The :class:`Workload` of ``trace`` for ``workers`` GPUs (rules in the module docstring)."""
    if not trace.has_hashes:
        raise FcctlInputError(
            f"{trace.path}: replay needs per-request block hashes (hash_ids); this trace "
            f"({trace.format}) has sizes only"
        )
    if workers < 1:
        raise FcctlInputError(f"gpus: must be >= 1; got {workers!r}", parameter="gpus")
    req = trace.requests
    n = req.height
    if n == 0:
        raise FcctlInputError(f"{trace.path}: the trace has no requests")
    block_tokens = int(trace.block_size_tokens or req["block_size_tokens"][0])
    acc = flatten_accesses(req)
    input_tokens = req["input_tokens"].to_numpy().astype(np.int64)
    output_tokens = req["output_tokens"].to_numpy().astype(np.int64)
    timestamps = req["timestamp_s"].to_numpy().astype(np.float64)
    has_ids = req["session_id"].null_count() < n
    if has_ids and req["session_id"].null_count() == 0:
        session, n_sessions = session_ordinals(req)
        session = session.astype(np.int64)
        inferred = False
        # Previous request of the same session, in analysis order.
        order = np.lexsort((np.arange(n), session))
        prev = np.full(n, -1, dtype=np.int64)
        same = session[order[1:]] == session[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
        worker = session % workers
    else:
        if has_ids:
            raise FcctlInputError(
                f"{trace.path}: field 'session_id': replay needs an id on every request or on "
                f"none; {req['session_id'].null_count()} of {n} have none"
            )
        sess32, prev, n_sessions = infer_sessions(acc, input_tokens, block_tokens)
        session = sess32.astype(np.int64)
        prev = prev.astype(np.int64)
        inferred = True
        worker = session % workers
    turn = np.zeros(n, dtype=np.int64)
    for_order = np.flatnonzero(prev >= 0)
    # Turn = depth in the chain of previous requests; parents come first in analysis order.
    for r in for_order:
        turn[r] = turn[prev[r]] + 1
    return Workload(
        path=trace.path,
        format=trace.format,
        duration_s=trace_duration_s(trace),
        fingerprint=trace_fingerprint(trace),
        geometry=geometry,
        block_tokens=block_tokens,
        block_bytes=geometry.bytes_per_block(block_tokens),
        block=acc.block,
        offsets=acc.request_offsets,
        num_blocks=acc.num_blocks,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        session=session,
        sessions=int(n_sessions),
        sessions_inferred=inferred,
        turn=turn,
        prev_request=prev,
        worker=worker.astype(np.int64),
        timestamps_s=timestamps,
        closed_loop=trace.order == "session" and not inferred,
        workers=workers,
        think_time_s=client_think_times(req),
    )


def client_think_times(requests: pl.DataFrame) -> np.ndarray | None:
    """The table's ``think_time_s`` as float64 with NaN for null; None without the column or a
    value in it."""
    if "think_time_s" not in requests.columns or requests["think_time_s"].null_count() == (
        requests.height
    ):
        return None
    return requests["think_time_s"].cast(pl.Float64).fill_null(math.nan).to_numpy()


def trace_duration_s(trace: Trace) -> float | None:
    """``Workload.duration_s`` of ``trace``."""
    req = trace.requests
    if req.height < 2:
        return None
    if trace.order == "session" and req["session_id"].null_count() == 0:
        spans = req.group_by("session_id").agg(
            (pl.col("timestamp_s").max() - pl.col("timestamp_s").min()).alias("span")
        )
        return float(spans["span"].to_numpy().max())
    t = req["timestamp_s"].to_numpy()
    return float(t.max() - t.min())


def requests_frame(w: Workload) -> pl.DataFrame:
    """Per-request identity columns for the per-request Parquet tables."""
    return pl.DataFrame(
        {
            "request_index": np.arange(w.requests, dtype=np.int64),
            "session_index": w.session,
            "turn": w.turn,
            "worker": w.worker,
            "input_tokens": w.input_tokens,
            "output_tokens": w.output_tokens,
            "blocks": np.diff(w.offsets),
        }
    )
