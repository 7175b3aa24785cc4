"""The sessions a benchmark writes and restores: their turns, in whole KV pages, in arrival order.

Two sources:

* **synthetic** (``--sessions N --tokens T --turns K``): N equal sessions of T tokens each,
  appended in K turns of (nearly) equal size; turns arrive round-robin (turn 0 of every
  session, then turn 1, ...).
* **trace** (``--trace``): the first N sessions that have at least two requests (all sessions
  with a request when fewer qualify). Each request is a turn; it appends the *growth* of the
  prompt over the session's previous request (the first request appends its whole prompt;
  a shrinking prompt appends nothing). Token counts are multiplied by ``scale``, and further
  down-scaled so the workload fits ``size_limit_bytes``. Turns arrive in timestamp order
  across sessions (per-session clocks interleave as if the sessions ran side by side).

Only whole pages are stored, as vLLM and SGLang offload only full blocks: a turn's scaled new
tokens are added to the session's unstored remainder and the turn appends
``floor(remainder / block_tokens)`` pages; a turn that fills no page appends nothing and
carries its tokens to the next. All sizes are one rank's bytes (one GPU's restore).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fcctl.layout.geometry import KvGeometry

from fcctl.common.errors import FcctlInputError


@dataclass(frozen=True)
class SessionSpec:
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
        return sum(self.turn_blocks[:turn])


@dataclass(frozen=True)
class Workload:
    geometry: KvGeometry
    block_tokens: int
    sessions: tuple[SessionSpec, ...]
    # (session index, turn index) in arrival order; every stored turn appears once.
    arrivals: tuple[tuple[int, int], ...]
    source: str = "synthetic"
    scale: float = 1.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def piece_bytes(self) -> int:
        """One block at one layer, one rank: the unit a layer-wise restore reads."""
        return self.geometry.bytes_per_block_per_layer(self.block_tokens)

    @property
    def block_bytes(self) -> int:
        """One block, all layers, one rank: what the eviction baseline stores as one object."""
        return self.geometry.layers * self.piece_bytes

    @property
    def blocks(self) -> int:
        return sum(s.blocks for s in self.sessions)

    @property
    def bytes(self) -> int:
        """KV bytes of the whole workload (one rank); both layouts store exactly these."""
        return self.blocks * self.block_bytes

    def session_bytes(self, session: int) -> int:
        return self.sessions[session].blocks * self.block_bytes


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FcctlInputError(f"{name}: must be an integer >= 1; got {value!r}")


def synthetic_workload(
    geometry: KvGeometry,
    *,
    block_tokens: int,
    sessions: int,
    tokens: int,
    turns: int,
    size_limit_bytes: int | None = None,
) -> Workload:
    """``sessions`` equal sessions of ``tokens`` tokens appended in ``turns`` turns."""
    _check_positive("--block-tokens", block_tokens)
    _check_positive("--sessions", sessions)
    _check_positive("--tokens", tokens)
    _check_positive("--turns", turns)
    blocks = tokens // block_tokens
    if blocks < turns:
        raise FcctlInputError(
            f"--tokens: {turns} turns need at least {turns * block_tokens} tokens "
            f"({turns} whole pages of {block_tokens}); got {tokens!r}"
        )
    # The first ``blocks % turns`` turns take one page more.
    per_turn = tuple(blocks // turns + (t < blocks % turns) for t in range(turns))
    specs = tuple(SessionSpec(i, f"synthetic-{i:04d}", per_turn) for i in range(sessions))
    arrivals = tuple((s, t) for t in range(turns) for s in range(sessions))
    notes: list[str] = []
    if tokens % block_tokens:
        notes.append(
            f"{tokens % block_tokens} tokens per session do not fill a page and are not stored"
        )
    wl = Workload(geometry, block_tokens, specs, arrivals, "synthetic", 1.0, tuple(notes))
    if size_limit_bytes is not None and wl.bytes > size_limit_bytes:
        raise FcctlInputError(
            f"--size-limit: the synthetic workload needs {wl.bytes} bytes "
            f"({sessions} sessions x {blocks} pages x {wl.block_bytes} bytes); "
            "raise --size-limit or shrink --sessions/--tokens; "
            f"got --size-limit {size_limit_bytes!r}"
        )
    return wl


def _pages_from_tokens(turn_tokens: Sequence[float], block_tokens: int) -> list[int]:
    """Whole pages per turn with the unstored remainder carried forward (see module doc)."""
    pages: list[int] = []
    carried = 0.0
    for n in turn_tokens:
        carried += n
        full = int(carried // block_tokens)
        pages.append(full)
        carried -= full * block_tokens
    return pages


def trace_workload(
    requests,  # polars DataFrame with the canonical columns (analyzers.schema)
    geometry: KvGeometry,
    *,
    block_tokens: int,
    sessions: int,
    scale: float = 1.0,
    size_limit_bytes: int,
    source: str = "trace",
) -> Workload:
    """Sessions from a canonical trace table (see the module docstring for the rules)."""
    import polars as pl

    _check_positive("--block-tokens", block_tokens)
    _check_positive("--sessions", sessions)
    if not (scale > 0):
        raise FcctlInputError(f"--scale: must be > 0; got {scale!r}")
    if size_limit_bytes < 1:
        raise FcctlInputError(f"--size-limit: must be > 0; got {size_limit_bytes!r}")
    df = requests.filter(pl.col("session_id").is_not_null())
    if df.height == 0:
        raise FcctlInputError(
            f"{source}: the trace has no session ids; use --sessions/--tokens/--turns"
        )
    df = df.with_row_index("_row").sort(["session_id", "timestamp_s", "_row"])
    df = df.with_columns(
        (pl.col("input_tokens") - pl.col("input_tokens").shift(1).over("session_id"))
        .fill_null(pl.col("input_tokens"))
        .clip(lower_bound=0)
        .alias("_new_tokens"),
        pl.col("_row").min().over("session_id").alias("_first_row"),
        pl.len().over("session_id").alias("_requests"),
    )
    order = (
        df.group_by("session_id")
        .agg(pl.col("_first_row").first(), pl.col("_requests").first())
        .sort("_first_row")
    )
    multi = order.filter(pl.col("_requests") >= 2)
    chosen = (multi if multi.height >= 1 else order).head(sessions)["session_id"].to_list()
    rank = {sid: i for i, sid in enumerate(chosen)}
    picked = df.filter(pl.col("session_id").is_in(chosen))
    raw_tokens = int(picked["_new_tokens"].sum())
    if raw_tokens == 0:
        raise FcctlInputError(f"{source}: the chosen sessions have no input tokens")
    fit = size_limit_bytes / (raw_tokens * geometry.bytes_per_token_per_rank)
    effective = min(scale, fit)

    specs: list[SessionSpec] = []
    stamps: list[tuple[float, int, int]] = []
    for sid in chosen:
        rows = picked.filter(pl.col("session_id") == sid)
        pages = _pages_from_tokens(
            (rows["_new_tokens"].cast(pl.Float64) * effective).to_list(), block_tokens
        )
        times = rows["timestamp_s"].to_list()
        kept = [(p, ts) for p, ts in zip(pages, times, strict=True) if p > 0]
        if not kept:
            continue
        idx = len(specs)
        specs.append(SessionSpec(idx, str(sid), tuple(p for p, _ in kept)))
        stamps.extend((ts, rank[sid], t) for t, (_, ts) in enumerate(kept))
    if not specs:
        raise FcctlInputError(
            f"{source}: scaled by {effective:.3g} no session fills a single page of {block_tokens} "
            "tokens; raise --size-limit or --scale"
        )
    session_of_rank = {rank[s.session_id]: s.index for s in specs}
    arrivals = tuple((session_of_rank[r], t) for _, r, t in sorted(stamps))
    notes = [f"{len(specs)} sessions from {source}; token counts scaled by {effective:.4g}"]
    if effective < scale:
        notes.append(
            f"down-scaled from --scale {scale:g} to fit --size-limit {size_limit_bytes} bytes"
        )
    return Workload(
        geometry, block_tokens, tuple(specs), arrivals, str(source), effective, tuple(notes)
    )


def load_trace_workload(
    path: Path,
    geometry: KvGeometry,
    *,
    trace_format: str | None,
    block_tokens: int,
    sessions: int,
    scale: float,
    size_limit_bytes: int,
    progress: bool = False,
) -> Workload:
    """Read ``path`` with :func:`analyzers.readers.read_trace` and build the workload from it."""
    from fcctl.analyzers.readers import read_trace

    trace = read_trace(path, trace_format, progress=progress)
    return trace_workload(
        trace.requests,
        geometry,
        block_tokens=block_tokens,
        sessions=sessions,
        scale=scale,
        size_limit_bytes=size_limit_bytes,
        source=str(path),
    )
