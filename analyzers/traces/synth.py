"""Seeded synthetic traces in the canonical schema, written as partitioned Parquet, streaming.

A trace of ``requests`` requests from ``sessions`` sessions of a :class:`Profile`:

* **Shared system prompts.** Each session kind has a small pool of system prompts (global
  block ids, shared by every session that picks the prompt; popularity Zipf-like). A session's
  prompt is its first ``floor(prompt_tokens / block)`` blocks.
* **Sessions grow by appended turns.** Turn 0's input is the prompt plus the first user
  content; turn ``k`` resends turn ``k-1``'s input, its output, and new content (a user message,
  or a tool result for agents): its ``hash_ids`` are turn ``k-1``'s plus new blocks. Only full
  blocks are hashed (``floor(input_tokens / block_size_tokens)``), as in the Claude Code trace.
* **Compaction.** When a session's context would pass ``max_context_tokens`` it is compacted,
  as Claude Code does: the context restarts from the prompt plus a ``compact_tokens`` summary
  (new blocks), and grows again from there.
* **Interleaved in time.** Sessions start as a Poisson process whose rate keeps
  ``mean_concurrent_sessions`` sessions active on average (rate = concurrency / mean session
  duration, both from the profile's parameters); turn ``k`` arrives ``response_s(k-1) +
  think_s(k)`` after turn ``k-1``, with ``response_s = prefill_s + output / decode rate``.
  Requests are in time order (``order == "time"``), ties by session.
* **Exact totals.** Turns per session are ``1 + multinomial(requests - sessions, w)`` with
  ``w`` lognormal weights of the session's kind, so the trace has exactly ``requests`` requests
  and every session at least one.

Every token count, gap and weight is lognormal with the median and ``sigma`` (of the log) given
in the profile; :data:`PROFILES` holds ``chat``, ``agent`` and ``mixed``, and docs/synth.md
says where each number comes from.

**Streaming.** Sessions are drawn in start order, a fixed number at a time; their requests
wait in a buffer until the next session's start, after which nothing earlier can arrive, and
are then emitted in time order. A partition is written as soon as it is full
(``partition_rows`` requests, or ``partition_accesses`` block accesses, whichever comes first),
so memory holds the active sessions' pending requests and one partition, whatever the trace's
length; the per-session plan is a few arrays of ``sessions`` numbers (about 40 bytes each).

**Determinism.** For the same arguments the files are the same bytes: one
``numpy.random.default_rng(SeedSequence(seed))`` per purpose, consumed in session order,
independent of the partition sizes (which only decide where the stream is cut).

**Output** (:func:`write_synth`): ``DIR/part-00000.parquet``, ... in request order, each a
canonical table (:data:`analyzers.traces.schema.SCHEMA`) with the *global* ``request_index`` and
``parent_request``, the ``fcctl.trace`` metadata of :mod:`fcctl.analyzers.traces.trace_metadata`
(format ``synth``) and :data:`PARTITION_KEY` (the part's place in the dataset); and
``DIR/synth.json``, the manifest (arguments, profile, per-part rows and accesses, totals).
Part 0 alone is a valid canonical file for ``fcctl analyze``; later parts start at a
``request_index`` above 0 and are read as a dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit

from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import dumps
from fcctl.common.outdir import atomic_out_dir
from fcctl.common.version import fcctl_version

from .schema import COLUMNS, SCHEMA, SourceTrace, Trace
from .trace_metadata import (
    PartitionMetadata,
    partition_metadata,
    trace_metadata,
)

MANIFEST = "synth.json"
SYNTH_FORMAT = "synth"
SCHEMA_VERSION = 1
DEFAULT_BLOCK_SIZE_TOKENS = 64
DEFAULT_PARTITION_ROWS = 65_536
#: A partition is also cut at this many block accesses: 32 M ids are 256 MiB in memory.
DEFAULT_PARTITION_ACCESSES = 1 << 25
#: Sessions drawn per step. Fixed (not tied to the partition size) so that the random streams,
#: hence the bytes, do not depend on where partitions are cut.
_SESSION_BATCH = 512


@dataclass(frozen=True)
class Lognormal:
    """A lognormal distribution by its median and the standard deviation of its log."""

    median: float
    sigma: float

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class SessionKind:
    """One kind of session: what its prompts, turns and gaps look like (tokens, seconds)."""

    name: str
    session_share: float  # share of sessions of this kind
    turns_weight: Lognormal  # relative turns per session (scaled to the requested total)
    system_prompts: int  # prompts in this kind's shared pool
    prompt_tokens: Lognormal
    prompt_zipf: float  # popularity of pool prompt j is proportional to (j + 1) ** -prompt_zipf
    first_tokens: Lognormal  # turn 0's content after the prompt
    append_tokens: Lognormal  # new content per later turn (user message or tool result)
    output_tokens: Lognormal
    think_s: Lognormal  # client gap between a response's end and the next request
    prefill_s: float  # fixed part of a response's time
    decode_tokens_per_s: float
    max_context_tokens: int  # compaction threshold
    compact_tokens: int  # summary that replaces the history on compaction


@dataclass(frozen=True)
class Profile:
    """A workload: session kinds and how many sessions run at once."""

    name: str
    kinds: tuple[SessionKind, ...]
    mean_concurrent_sessions: float

    def mean_session_duration_s(self, mean_turns: float) -> float:
        """Mean span of a session of ``mean_turns`` turns (seconds), weighted over kinds."""
        total = 0.0
        for k in self.kinds:
            gap = k.think_s.mean + k.prefill_s + k.output_tokens.mean / k.decode_tokens_per_s
            total += k.session_share * max(mean_turns - 1.0, 0.0) * gap
        return total


CHAT = SessionKind(
    name="chat",
    session_share=1.0,
    turns_weight=Lognormal(3.0, 0.9),
    system_prompts=16,
    prompt_tokens=Lognormal(1_000, 0.5),
    prompt_zipf=1.1,
    first_tokens=Lognormal(300, 1.5),
    append_tokens=Lognormal(150, 1.0),
    output_tokens=Lognormal(250, 0.8),
    think_s=Lognormal(30.0, 1.0),
    prefill_s=0.5,
    decode_tokens_per_s=50.0,
    max_context_tokens=128_000,
    compact_tokens=2_000,
)
AGENT = SessionKind(
    name="agent",
    session_share=1.0,
    turns_weight=Lognormal(45.0, 0.92),
    system_prompts=8,
    prompt_tokens=Lognormal(15_000, 0.1),
    prompt_zipf=1.0,
    first_tokens=Lognormal(8_000, 1.5),
    append_tokens=Lognormal(450, 1.5),
    output_tokens=Lognormal(216, 1.19),
    think_s=Lognormal(10.0, 2.0),
    prefill_s=2.0,
    decode_tokens_per_s=50.0,
    max_context_tokens=200_000,
    compact_tokens=10_000,
)
PROFILES: dict[str, Profile] = {
    "chat": Profile("chat", (CHAT,), mean_concurrent_sessions=256.0),
    "agent": Profile("agent", (AGENT,), mean_concurrent_sessions=64.0),
    "mixed": Profile(
        "mixed",
        (
            dataclasses.replace(CHAT, session_share=0.8),
            dataclasses.replace(AGENT, session_share=0.2),
        ),
        mean_concurrent_sessions=256.0,
    ),
}


def profile_named(name: str) -> Profile:
    """The profile called ``name``; :class:`FcctlInputError` naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise FcctlInputError(
            f"profile: must be one of {', '.join(PROFILES)}; got {name!r}", parameter="profile"
        ) from None


@dataclass(frozen=True)
class SynthPart:
    """One written partition: file name, first global ``request_index``, rows, accesses."""

    file: str
    first_request_index: int
    requests: int
    block_accesses: int
    bytes: int


@dataclass(frozen=True)
class SynthResult:
    """What :func:`write_synth` wrote (the manifest ``synth.json`` holds the same)."""

    schema_version: int
    fcctl_version: str
    format: str
    profile: str
    seed: int
    requests: int
    sessions: int
    block_size_tokens: int
    partition_rows: int
    partition_accesses: int
    block_accesses: int
    duration_s: float
    parts: tuple[SynthPart, ...]
    profile_parameters: dict[str, object]


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FcctlInputError(
            f"{name}: must be an integer >= {minimum}; got {value!r}", parameter=name
        )
    return value


# ---------------------------------------------------------------------------------------------
# The plan (O(sessions)) and one batch of sessions.


@dataclass(frozen=True, eq=False)
class _Plan:
    kind: np.ndarray  # int8, kind index per session
    turns: np.ndarray  # int64
    start_s: np.ndarray  # float64, non-decreasing
    prompt: np.ndarray  # int64, global prompt index
    prompt_tokens: np.ndarray  # int64, per global prompt
    prompt_first_id: np.ndarray  # int64, first block id of each global prompt
    pool_blocks: int  # ids 0..pool_blocks-1 belong to prompts


def _lognormal(rng: np.random.Generator, dist: Lognormal, size: int) -> np.ndarray:
    return dist.median * np.exp(dist.sigma * rng.standard_normal(size))


def _plan(profile: Profile, requests: int, sessions: int, block: int, seed: int) -> _Plan:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    shares = np.array([k.session_share for k in profile.kinds], dtype=np.float64)
    kind = rng.choice(len(profile.kinds), size=sessions, p=shares / shares.sum()).astype(np.int8)
    weights = np.empty(sessions)
    for i, k in enumerate(profile.kinds):
        sel = kind == i
        weights[sel] = _lognormal(rng, k.turns_weight, int(sel.sum()))
    turns = 1 + rng.multinomial(requests - sessions, weights / weights.sum())
    duration = profile.mean_session_duration_s(requests / sessions)
    # Poisson starts at the rate that keeps the target number of sessions active on average
    # (Little's law); a duration of 0 (one turn per session) just spaces sessions by 1 s.
    session_rate = profile.mean_concurrent_sessions / duration if duration > 0 else 1.0
    gaps = rng.exponential(1.0 / session_rate, size=sessions)
    gaps[0] = 0.0
    start = np.cumsum(gaps)
    prompt = np.empty(sessions, dtype=np.int64)
    tokens: list[np.ndarray] = []
    base = 0
    for i, k in enumerate(profile.kinds):
        pool = np.arange(k.system_prompts, dtype=np.float64)
        pop = (pool + 1.0) ** -k.prompt_zipf
        sel = kind == i
        prompt[sel] = base + rng.choice(k.system_prompts, size=int(sel.sum()), p=pop / pop.sum())
        tokens.append(np.maximum(_lognormal(rng, k.prompt_tokens, k.system_prompts), 1.0))
        base += k.system_prompts
    prompt_tokens = np.concatenate(tokens).astype(np.int64)
    blocks = prompt_tokens // block
    first = np.zeros(blocks.shape[0], dtype=np.int64)
    np.cumsum(blocks[:-1], out=first[1:])
    return _Plan(kind, turns, start, prompt, prompt_tokens, first, int(blocks.sum()))


@njit(cache=True)
def _sessions_kernel(  # pragma: no cover - numba
    turn_offsets: np.ndarray,
    start_s: np.ndarray,
    prompt_tokens: np.ndarray,
    prompt_first_id: np.ndarray,
    max_context: np.ndarray,
    compact: np.ndarray,
    prefill_s: np.ndarray,
    decode_rate: np.ndarray,
    content: np.ndarray,
    output: np.ndarray,
    think: np.ndarray,
    block: int,
    id_base: int,
    t_out: np.ndarray,
    input_out: np.ndarray,
    prompt_lo: np.ndarray,
    prompt_n: np.ndarray,
    own_lo: np.ndarray,
    own_n: np.ndarray,
) -> int:
    """Turn-by-turn context growth, compaction, times and block-id ranges of a batch.

    Per session s (turns ``turn_offsets[s] .. turn_offsets[s+1]-1``): ``content`` is turn 0's
    first content or a later turn's appended content (tokens), ``output`` its output tokens,
    ``think`` the gap before it. A request's ``hash_ids`` are ``prompt_n`` ids from
    ``prompt_lo`` then ``own_n`` ids from ``own_lo``: within a compaction epoch a session's own
    blocks are one contiguous id range that each turn extends. Returns the next free id.
    """
    for s in range(turn_offsets.shape[0] - 1):
        p_tokens = prompt_tokens[s]
        p_blocks = p_tokens // block
        epoch_lo = id_base
        epoch_n = 0
        ctx = 0
        t = start_s[s]
        for j in range(turn_offsets[s], turn_offsets[s + 1]):
            if j == turn_offsets[s]:
                ctx = p_tokens + content[j]
            else:
                t += prefill_s[s] + output[j - 1] / decode_rate[s] + think[j]
                ctx = ctx + output[j - 1] + content[j]
                if ctx > max_context[s]:
                    # Compaction: a new history (summary + this turn), new block ids.
                    epoch_lo += epoch_n
                    epoch_n = 0
                    ctx = p_tokens + compact[s] + content[j]
            full = ctx // block
            n_own = full - p_blocks if full > p_blocks else 0
            t_out[j] = t
            input_out[j] = ctx
            prompt_lo[j] = prompt_first_id[s]
            prompt_n[j] = full if full < p_blocks else p_blocks
            own_lo[j] = epoch_lo
            own_n[j] = n_own
            epoch_n = n_own
        id_base = epoch_lo + epoch_n
    return id_base


@njit(cache=True)
def _fill_ids(  # pragma: no cover - numba
    prompt_lo: np.ndarray, prompt_n: np.ndarray, own_lo: np.ndarray, own_n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of the ``hash_ids`` lists: each request's two id ranges."""
    n = prompt_lo.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + prompt_n[i] + own_n[i]
    values = np.empty(offsets[n], dtype=np.uint64)
    for i in range(n):
        o = offsets[i]
        for k in range(prompt_n[i]):
            values[o + k] = prompt_lo[i] + k
        o += prompt_n[i]
        for k in range(own_n[i]):
            values[o + k] = own_lo[i] + k
    return offsets, values


_PENDING = ("t", "session", "turn", "input", "output", "prompt_lo", "prompt_n", "own_lo", "own_n")


class _Generator:
    """Draws sessions batch by batch and yields requests in time order (column dicts)."""

    def __init__(
        self, profile: Profile, requests: int, sessions: int, block: int, seed: int
    ) -> None:
        self.profile = profile
        self.block = block
        self.plan = _plan(profile, requests, sessions, block, seed)
        # A batch draws every turn of _SESSION_BATCH sessions at once: with few sessions and
        # many requests one batch is the whole trace, so its size is checked first.
        starts = np.arange(0, sessions, _SESSION_BATCH)
        biggest = int(np.add.reduceat(self.plan.turns, starts).max())
        what = f"a batch of {_SESSION_BATCH} sessions draws all its turns at once:"
        _check_memory("requests", biggest, _BATCH_BYTES_PER_REQUEST, requests, what)
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
        self.next_id = self.plan.pool_blocks
        self.next_session = 0
        self.pending: dict[str, np.ndarray] = {
            k: np.zeros(0, dtype=np.float64 if k == "t" else np.int64) for k in _PENDING
        }
        kinds = profile.kinds
        self._per_kind = {
            name: np.array([getattr(k, name) for k in kinds], dtype=np.float64)
            for name in ("max_context_tokens", "compact_tokens", "prefill_s", "decode_tokens_per_s")
        }

    def _draw(self, dists: list[Lognormal], kind_of_turn: np.ndarray) -> np.ndarray:
        med = np.array([d.median for d in dists])[kind_of_turn]
        sig = np.array([d.sigma for d in dists])[kind_of_turn]
        return med * np.exp(sig * self.rng.standard_normal(kind_of_turn.shape[0]))

    def _batch(self) -> None:
        """Draw the next sessions and append their requests to the pending buffer."""
        plan, kinds = self.plan, self.profile.kinds
        lo = self.next_session
        hi = min(lo + _SESSION_BATCH, plan.turns.shape[0])
        self.next_session = hi
        turns = plan.turns[lo:hi]
        offsets = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(turns, out=offsets[1:])
        n = int(offsets[-1])
        kind_s = plan.kind[lo:hi].astype(np.int64)
        kind_t = np.repeat(kind_s, turns)
        first_turn = np.zeros(n, dtype=bool)
        first_turn[offsets[:-1]] = True
        first = self._draw([k.first_tokens for k in kinds], kind_t)
        append = self._draw([k.append_tokens for k in kinds], kind_t)
        content = np.floor(np.where(first_turn, first, append)).astype(np.int64)
        output = np.maximum(np.floor(self._draw([k.output_tokens for k in kinds], kind_t)), 1)
        think = self._draw([k.think_s for k in kinds], kind_t)
        prompt = plan.prompt[lo:hi]
        out = {k: np.empty(n, dtype=np.float64 if k == "t" else np.int64) for k in _PENDING}
        pk = self._per_kind
        self.next_id = _sessions_kernel(
            offsets,
            plan.start_s[lo:hi],
            plan.prompt_tokens[prompt],
            plan.prompt_first_id[prompt],
            pk["max_context_tokens"][kind_s].astype(np.int64),
            pk["compact_tokens"][kind_s].astype(np.int64),
            pk["prefill_s"][kind_s],
            pk["decode_tokens_per_s"][kind_s],
            content,
            output.astype(np.int64),
            think,
            self.block,
            self.next_id,
            out["t"],
            out["input"],
            out["prompt_lo"],
            out["prompt_n"],
            out["own_lo"],
            out["own_n"],
        )
        out["session"] = np.repeat(np.arange(lo, hi, dtype=np.int64), turns)
        out["turn"] = np.arange(n, dtype=np.int64) - np.repeat(offsets[:-1], turns)
        out["output"] = output.astype(np.int64)
        self.pending = {k: np.concatenate([self.pending[k], out[k]]) for k in _PENDING}

    def chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """Requests in time order (ties: session, then turn), a batch's worth at a time."""
        total = self.plan.turns.shape[0]
        while self.next_session < total:
            self._batch()
            # Sessions not drawn yet start at or after this time; their requests come later
            # (ties go to the earlier session, which is already drawn).
            horizon = self.plan.start_s[self.next_session] if self.next_session < total else np.inf
            ready = self.pending["t"] <= horizon
            if not ready.any():
                continue
            take = {k: v[ready] for k, v in self.pending.items()}
            self.pending = {k: v[~ready] for k, v in self.pending.items()}
            order = np.lexsort((take["turn"], take["session"], take["t"]))
            yield {k: v[order] for k, v in take.items()}


def _frame(
    rows: dict[str, np.ndarray],
    first_index: int,
    last_request: np.ndarray,
    kind_names: np.ndarray,
    block: int,
) -> pl.DataFrame:
    """The canonical table of ``rows`` (a partition), global indexes from ``first_index``."""
    n = rows["t"].shape[0]
    index = np.arange(first_index, first_index + n, dtype=np.int64)
    session = rows["session"]
    # Rows are in time order, so a session's turns appear in order: each row's parent is the
    # session's previous row, in this partition or (last_request) in an earlier one.
    order = np.argsort(session, kind="stable")
    by_session = session[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = by_session[1:] != by_session[:-1]
    parent_sorted = np.empty(n, dtype=np.int64)
    parent_sorted[1:] = index[order][:-1]
    parent_sorted[starts] = last_request[by_session[starts]]
    parent = np.empty(n, dtype=np.int64)
    parent[order] = parent_sorted
    ends = np.ones(n, dtype=bool)
    ends[:-1] = starts[1:]
    last_request[by_session[ends]] = index[order][ends]
    offsets, values = _fill_ids(rows["prompt_lo"], rows["prompt_n"], rows["own_lo"], rows["own_n"])
    hashes = pl.from_arrow(
        pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.uint64()))
    )
    assert isinstance(hashes, pl.Series)  # from_arrow of an Array (not a Table) is a Series
    frame = pl.DataFrame(
        {
            "request_index": index,
            "_session": session,
            "turn": rows["turn"].astype(np.int32),
            "parent_request": parent,
            "timestamp_s": rows["t"],
            "input_tokens": rows["input"],
            "output_tokens": rows["output"],
            "block_size_tokens": np.full(n, block, dtype=np.int32),
        }
    ).with_columns(
        pl.concat_str(
            [
                pl.Series(kind_names[session]),
                pl.lit("-"),
                pl.col("_session").cast(pl.String).str.zfill(9),
            ]
        ).alias("session_id"),
        pl.when(pl.col("parent_request") >= 0)
        .then(pl.col("parent_request"))
        .alias("parent_request"),
        hashes.alias("hash_ids"),
    )
    return frame.select(COLUMNS).cast(SCHEMA)  # type: ignore[arg-type]


def generate(
    profile: Profile,
    requests: int,
    sessions: int,
    *,
    seed: int = 0,
    block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    partition_accesses: int = DEFAULT_PARTITION_ACCESSES,
) -> Iterator[pl.DataFrame]:
    """The trace as canonical tables, one partition at a time, in ``request_index`` order.

    A partition has at most ``partition_rows`` rows and, unless one request alone has more,
    at most ``partition_accesses`` block accesses. Raises :class:`FcctlInputError` for
    impossible arguments (``sessions > requests``, counts < 1).
    """
    requests = _check_int(requests, "requests", 1)
    sessions = _check_int(sessions, "sessions", 1)
    seed = _check_int(seed, "seed", 0)
    block = _check_int(block_size_tokens, "block_size_tokens", 1)
    partition_rows = _check_int(partition_rows, "partition_rows", 1)
    partition_accesses = _check_int(partition_accesses, "partition_accesses", 1)
    if sessions > requests:
        raise FcctlInputError(
            f"sessions: must be <= requests ({requests}), every session has a request; "
            f"got {sessions!r}",
            parameter="sessions",
        )
    _check_memory("sessions", sessions, _PLAN_BYTES_PER_SESSION, sessions, "the plan's")
    return _frames(profile, requests, sessions, seed, block, partition_rows, partition_accesses)


#: Bytes the plan holds per session (kind, turns, start, prompt, weights, gaps and temporaries).
_PLAN_BYTES_PER_SESSION = 96
#: Bytes one batch holds per request (the pending columns, the draws and the sorted copy).
_BATCH_BYTES_PER_REQUEST = 40 * 8


def _check_memory(name: str, count: int, bytes_each: int, got: int, what: str) -> None:
    """Refuse a size derived from the input that would not fit the memory budget, before the
    allocation (numpy would otherwise try it, and fail or swap, many GiB later)."""
    # Lazy: the budget lives with the bounded analysis; traces/ must not import it at load.
    from ..reuse.bounded import default_memory_budget

    budget = default_memory_budget()
    if count * bytes_each > budget:
        raise FcctlInputError(
            f"{name}: {what} {count:,} {name} need about {count * bytes_each:,} bytes "
            f"({bytes_each} each), over the memory budget of {budget:,} bytes; got {got!r}",
            parameter=name,
        )


def _frames(
    profile: Profile,
    requests: int,
    sessions: int,
    seed: int,
    block: int,
    partition_rows: int,
    partition_accesses: int,
) -> Iterator[pl.DataFrame]:
    gen = _Generator(profile, requests, sessions, block, seed)
    last_request = np.full(sessions, -1, dtype=np.int64)
    kind_names = np.array([profile.kinds[k].name for k in range(len(profile.kinds))])[gen.plan.kind]
    buffer: dict[str, np.ndarray] | None = None
    written = 0

    def cut(rows: dict[str, np.ndarray]) -> int:
        """Rows of the next partition: within both limits, at least one."""
        blocks = np.cumsum(rows["prompt_n"] + rows["own_n"])
        by_accesses = int(np.searchsorted(blocks, partition_accesses, side="right"))
        return max(1, min(partition_rows, by_accesses, rows["t"].shape[0]))

    for chunk in gen.chunks():
        buffer = (
            chunk if buffer is None else {k: np.concatenate([buffer[k], chunk[k]]) for k in chunk}
        )
        while buffer["t"].shape[0] > 0:
            k = cut(buffer)
            if k == buffer["t"].shape[0] and k < partition_rows:
                # Might still fill up: wait for more rows unless this is the access limit.
                blocks = int((buffer["prompt_n"] + buffer["own_n"]).sum())
                if blocks <= partition_accesses:
                    break
            part = {name: v[:k] for name, v in buffer.items()}
            buffer = {name: v[k:] for name, v in buffer.items()}
            yield _frame(part, written, last_request, kind_names, block)
            written += k
    while buffer is not None and buffer["t"].shape[0] > 0:
        k = cut(buffer)
        part = {name: v[:k] for name, v in buffer.items()}
        buffer = {name: v[k:] for name, v in buffer.items()}
        yield _frame(part, written, last_request, kind_names, block)
        written += k
    if written != requests:  # the plan's turns add up to requests; anything else is a bug
        raise RuntimeError(f"synth: generated {written} requests; expected {requests}")


def _parameters(profile: Profile) -> dict[str, object]:
    return json.loads(dumps(profile))


def write_synth(
    out: str | Path,
    profile: Profile | str,
    requests: int,
    sessions: int,
    *,
    seed: int = 0,
    block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    partition_accesses: int = DEFAULT_PARTITION_ACCESSES,
    force: bool = False,
    on_part: Callable[[SynthPart], None] | None = None,
) -> SynthResult:
    """Generate the trace into directory ``out`` (atomically; see the module docstring).

    ``out`` must be absent or empty, or (with ``force``) an earlier ``fcctl synth`` output
    (it holds ``synth.json``). ``on_part`` is called after each partition is written.
    """
    prof = profile_named(profile) if isinstance(profile, str) else profile
    spec = (
        f"synth:{prof.name}?requests={requests}&sessions={sessions}&seed={seed}"
        f"&block_size_tokens={block_size_tokens}"
    )
    # The same arguments give the same bytes, so the id is the arguments' digest.
    dataset_id = hashlib.sha256(spec.encode()).hexdigest()[:32]
    parts: list[SynthPart] = []
    accesses = 0
    last_ts = 0.0
    frames = generate(
        prof,
        requests,
        sessions,
        seed=seed,
        block_size_tokens=block_size_tokens,
        partition_rows=partition_rows,
        partition_accesses=partition_accesses,
    )
    with atomic_out_dir(
        Path(out), force=force, marker=MANIFEST, command="fcctl synth", flag="-o"
    ) as tmp:
        for i, frame in enumerate(frames):
            name = f"part-{i:05d}.parquet"
            n_blocks = int(frame["hash_ids"].list.len().sum())
            first = int(frame["request_index"][0])
            trace = Trace(
                path=name,
                format=SYNTH_FORMAT,
                requests=frame,
                order="time",
                has_hashes=True,
                has_sessions=True,
                block_size_tokens=block_size_tokens,
                notes=(f"synthetic trace ({spec})",),
                converted_from=SourceTrace(path=spec, format=SYNTH_FORMAT),
            )
            metadata = trace_metadata(trace)
            metadata.update(
                partition_metadata(
                    PartitionMetadata(
                        dataset_id=dataset_id,
                        partition=i,
                        partition_by="request-range",
                        key=None,
                        requests=frame.height,
                        block_accesses=n_blocks,
                        dataset_requests=requests,
                    )
                )
            )
            path = tmp / name
            frame.write_parquet(path, compression="zstd", metadata=metadata)
            part = SynthPart(name, first, frame.height, n_blocks, os.path.getsize(path))
            parts.append(part)
            accesses += n_blocks
            last_ts = float(frame["timestamp_s"][-1])
            if on_part is not None:
                on_part(part)
            del frame, trace
        result = SynthResult(
            schema_version=SCHEMA_VERSION,
            fcctl_version=fcctl_version(),
            format=SYNTH_FORMAT,
            profile=prof.name,
            seed=seed,
            requests=requests,
            sessions=sessions,
            block_size_tokens=block_size_tokens,
            partition_rows=partition_rows,
            partition_accesses=partition_accesses,
            block_accesses=accesses,
            duration_s=last_ts,
            parts=tuple(parts),
            profile_parameters=_parameters(prof),
        )
        (tmp / MANIFEST).write_text(dumps(result) + "\n")
    return result
