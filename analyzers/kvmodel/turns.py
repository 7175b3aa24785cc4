"""Sessions' turns in whole KV pages, in arrival order: the one definition iobench, the replay
simulator and the recommender read.

Two sources:

* **synthetic** (:func:`synthetic_turns`): N equal sessions of T tokens each, appended in K
  turns of (nearly) equal size (the first ``pages % K`` turns take one page more); turns arrive
  round-robin (turn 0 of every session, then turn 1, ...).
* **trace** (:func:`trace_turns`): the first N sessions that have at least two requests (all
  sessions with a request when fewer qualify), in order of first appearance. Each request is a
  turn; it appends the *growth* of the prompt over the session's previous request (the first
  request appends its whole prompt; a shrinking prompt appends nothing). Token counts are
  multiplied by ``scale``, and further down-scaled so the KV bytes fit ``size_limit_bytes``.
  Turns arrive in timestamp order across sessions (per-session clocks interleave as if the
  sessions ran side by side).

Only whole pages are stored, as vLLM and SGLang offload only full blocks
(:func:`pages_from_tokens`): a turn's scaled new tokens are added to the session's unstored
remainder and the turn appends ``floor(remainder / block_tokens)`` pages; a turn that fills no
page appends nothing and carries its tokens to the next. A trace turn that appends no page is
not a stored turn.

Pure: no file I/O, no KV geometry (the caller passes bytes per token where a size limit needs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fcctl.common.errors import FcctlInputError

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class SessionTurns:
    """One session: ``turn_blocks[t]`` whole pages appended by its ``t``-th stored turn."""

    index: int
    session_id: str
    turn_blocks: tuple[int, ...]

    @property
    def blocks(self) -> int:
        return sum(self.turn_blocks)

    @property
    def turns(self) -> int:
        return len(self.turn_blocks)

    def turn_first_block(self, turn: int) -> int:
        """Index of the first page ``turn`` appends (the pages before it are its prefix)."""
        return sum(self.turn_blocks[:turn])


@dataclass(frozen=True)
class TurnSchedule:
    """Sessions and the order their turns arrive; ``arrivals`` holds every stored turn once."""

    block_tokens: int
    sessions: tuple[SessionTurns, ...]
    # (session index, turn index) in arrival order.
    arrivals: tuple[tuple[int, int], ...]
    source: str = "synthetic"
    scale: float = 1.0
    notes: tuple[str, ...] = ()

    @property
    def blocks(self) -> int:
        return sum(s.blocks for s in self.sessions)


def check_positive(name: str, value: int) -> None:
    """``value`` must be an int >= 1 (a bool is not one); ``name`` is the parameter."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FcctlInputError(f"{name}: must be an integer >= 1; got {value!r}", parameter=name)


def even_turn_blocks(pages: int, turns: int) -> tuple[int, ...]:
    """``pages`` split over ``turns``; the first ``pages % turns`` turns take one page more."""
    return tuple(pages // turns + (t < pages % turns) for t in range(turns))


def synthetic_turns(*, block_tokens: int, sessions: int, tokens: int, turns: int) -> TurnSchedule:
    """``sessions`` equal sessions of ``tokens`` tokens appended in ``turns`` turns, round-robin."""
    check_positive("block_tokens", block_tokens)
    check_positive("sessions", sessions)
    check_positive("tokens", tokens)
    check_positive("turns", turns)
    pages = tokens // block_tokens
    if pages < turns:
        raise FcctlInputError(
            f"tokens: {turns} turns need at least {turns * block_tokens} tokens "
            f"({turns} whole pages of {block_tokens}); got {tokens!r}",
            parameter="tokens",
        )
    per_turn = even_turn_blocks(pages, turns)
    specs = tuple(SessionTurns(i, f"synthetic-{i:04d}", per_turn) for i in range(sessions))
    arrivals = tuple((s, t) for t in range(turns) for s in range(sessions))
    notes: tuple[str, ...] = ()
    if tokens % block_tokens:
        notes = (
            f"{tokens % block_tokens} tokens per session do not fill a page and are not stored",
        )
    return TurnSchedule(block_tokens, specs, arrivals, "synthetic", 1.0, notes)


def pages_from_tokens(turn_tokens: Sequence[float], block_tokens: int) -> list[int]:
    """Whole pages each turn appends, the unstored remainder carried to the next turn.

    >>> pages_from_tokens([40, 10, 0, 40], 16)
    [2, 1, 0, 2]
    """
    pages: list[int] = []
    carried = 0.0
    for n in turn_tokens:
        carried += n
        full = int(carried // block_tokens)
        pages.append(full)
        carried -= full * block_tokens
    return pages


def token_growth(requests: pl.DataFrame) -> pl.DataFrame:
    """Requests with a session id, sorted by (session, time, file row), with ``_new_tokens``.

    ``_new_tokens`` is the prompt's growth over the session's previous request (its whole
    prompt for the first, 0 for a shrinking one); ``_first_row`` is the session's first file
    row and ``_requests`` its request count (columns of the canonical schema,
    analyzers.traces.schema).
    """
    import polars as pl

    df = requests.filter(pl.col("session_id").is_not_null())
    df = df.with_row_index("_row").sort(["session_id", "timestamp_s", "_row"])
    return df.with_columns(
        (pl.col("input_tokens") - pl.col("input_tokens").shift(1).over("session_id"))
        .fill_null(pl.col("input_tokens"))
        .clip(lower_bound=0)
        .alias("_new_tokens"),
        pl.col("_row").min().over("session_id").alias("_first_row"),
        pl.len().over("session_id").alias("_requests"),
    )


def choose_sessions(growth: pl.DataFrame, sessions: int) -> list[object]:
    """The first ``sessions`` multi-request session ids by first appearance (any, if none is)."""
    import polars as pl

    order = (
        growth.group_by("session_id")
        .agg(pl.col("_first_row").first(), pl.col("_requests").first())
        .sort("_first_row")
    )
    multi = order.filter(pl.col("_requests") >= 2)
    return (multi if multi.height >= 1 else order).head(sessions)["session_id"].to_list()


def trace_turns(
    requests: pl.DataFrame,
    *,
    block_tokens: int,
    sessions: int,
    bytes_per_token: int,
    size_limit_bytes: int,
    scale: float = 1.0,
    source: str = "trace",
) -> TurnSchedule:
    """Sessions from a canonical trace table (see the module docstring for the rules).

    ``bytes_per_token`` (one rank's KV bytes per token) converts ``size_limit_bytes`` into the
    largest scale that fits.
    """
    import polars as pl

    check_positive("block_tokens", block_tokens)
    check_positive("sessions", sessions)
    if not (scale > 0):
        raise FcctlInputError(f"scale: must be > 0; got {scale!r}", parameter="scale")
    if size_limit_bytes < 1:
        raise FcctlInputError(
            f"size_limit_bytes: must be > 0; got {size_limit_bytes!r}", parameter="size_limit_bytes"
        )
    growth = token_growth(requests)
    if growth.height == 0:
        raise FcctlInputError(
            f"{source}: the trace has no session ids; use `sessions`, `tokens` and `turns`"
        )
    chosen = choose_sessions(growth, sessions)
    rank = {sid: i for i, sid in enumerate(chosen)}
    picked = growth.filter(pl.col("session_id").is_in(chosen))
    raw_tokens = int(picked["_new_tokens"].sum())
    if raw_tokens == 0:
        raise FcctlInputError(f"{source}: the chosen sessions have no input tokens")
    effective = min(scale, size_limit_bytes / (raw_tokens * bytes_per_token))

    specs: list[SessionTurns] = []
    stamps: list[tuple[float, int, int]] = []
    for sid in chosen:
        rows = picked.filter(pl.col("session_id") == sid)
        pages = pages_from_tokens(
            (rows["_new_tokens"].cast(pl.Float64) * effective).to_list(), block_tokens
        )
        times = rows["timestamp_s"].to_list()
        kept = [(p, ts) for p, ts in zip(pages, times, strict=True) if p > 0]
        if not kept:
            continue
        specs.append(SessionTurns(len(specs), str(sid), tuple(p for p, _ in kept)))
        stamps.extend((ts, rank[sid], t) for t, (_, ts) in enumerate(kept))
    if not specs:
        raise FcctlInputError(
            f"{source}: scaled by {effective:.3g} no session fills a single page of {block_tokens} "
            "tokens; raise `size_limit_bytes` or `scale`"
        )
    session_of_rank = {rank[s.session_id]: s.index for s in specs}
    arrivals = tuple((session_of_rank[r], t) for _, r, t in sorted(stamps))
    notes = [f"{len(specs)} sessions from {source}; token counts scaled by {effective:.4g}"]
    if effective < scale:
        notes.append(
            f"down-scaled from --scale {scale:g} to fit --size-limit {size_limit_bytes} bytes"
        )
    return TurnSchedule(block_tokens, tuple(specs), arrivals, str(source), effective, tuple(notes))
