"""The workload a benchmark writes to disk and restores (:class:`IoWorkload`): a session
schedule and the KV geometry. Named apart from the replay's ``Workload`` (the simulator's
per-request arrays), which is another thing.

The sessions' turns (token growth per turn, whole pages, arrival order) are derived by
:mod:`fcctl.analyzers.kvmodel.turns`, the one definition the replay simulator shares; this module
adds the KV geometry (bytes per piece and block, one rank's) and the size limit. All sizes are
one rank's bytes (one GPU's restore).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fcctl.analyzers.kvmodel.turns import SessionTurns, TurnSchedule, synthetic_turns, trace_turns
from fcctl.common.errors import FcctlInputError
from fcctl.layout.geometry import KvGeometry

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class IoWorkload:
    """A :class:`TurnSchedule` laid out with one model's KV geometry."""

    geometry: KvGeometry
    schedule: TurnSchedule

    @property
    def block_tokens(self) -> int:
        return self.schedule.block_tokens

    @property
    def sessions(self) -> tuple[SessionTurns, ...]:
        return self.schedule.sessions

    @property
    def arrivals(self) -> tuple[tuple[int, int], ...]:
        """(session index, turn index) in arrival order; every stored turn appears once."""
        return self.schedule.arrivals

    @property
    def source(self) -> str:
        return self.schedule.source

    @property
    def scale(self) -> float:
        return self.schedule.scale

    @property
    def notes(self) -> tuple[str, ...]:
        return self.schedule.notes

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
        return self.schedule.blocks

    @property
    def bytes(self) -> int:
        """KV bytes of the whole workload (one rank); both layouts store exactly these."""
        return self.blocks * self.block_bytes

    def session_bytes(self, session: int) -> int:
        return self.sessions[session].blocks * self.block_bytes


def synthetic_io_workload(
    geometry: KvGeometry,
    *,
    block_tokens: int,
    sessions: int,
    tokens: int,
    turns: int,
    size_limit_bytes: int | None = None,
) -> IoWorkload:
    """``sessions`` equal sessions of ``tokens`` tokens appended in ``turns`` turns."""
    schedule = synthetic_turns(
        block_tokens=block_tokens, sessions=sessions, tokens=tokens, turns=turns
    )
    wl = IoWorkload(geometry, schedule)
    if size_limit_bytes is not None and wl.bytes > size_limit_bytes:
        raise FcctlInputError(
            f"size_limit_bytes: the synthetic workload needs {wl.bytes} bytes "
            f"({sessions} sessions x {tokens // block_tokens} pages x {wl.block_bytes} bytes); "
            "raise `size_limit_bytes` or shrink `sessions` or `tokens`; "
            f"got {size_limit_bytes!r}",
            parameter="size_limit_bytes",
        )
    return wl


def trace_io_workload(
    requests: pl.DataFrame,
    geometry: KvGeometry,
    *,
    block_tokens: int,
    sessions: int,
    scale: float = 1.0,
    size_limit_bytes: int,
    source: str = "trace",
) -> IoWorkload:
    """Sessions from a canonical trace table (rules: :mod:`fcctl.analyzers.kvmodel.turns`)."""
    schedule = trace_turns(
        requests,
        block_tokens=block_tokens,
        sessions=sessions,
        bytes_per_token=geometry.bytes_per_token_per_rank,
        size_limit_bytes=size_limit_bytes,
        scale=scale,
        source=source,
    )
    return IoWorkload(geometry, schedule)


def load_trace_io_workload(
    path: Path,
    geometry: KvGeometry,
    *,
    trace_format: str | None,
    block_tokens: int,
    sessions: int,
    scale: float,
    size_limit_bytes: int,
    progress: bool = False,
) -> IoWorkload:
    """Read ``path`` with :func:`fcctl.analyzers.traces.readers.read_trace`, build the workload."""
    from fcctl.analyzers.traces.readers import read_trace

    trace = read_trace(path, trace_format, progress=progress)
    return trace_io_workload(
        trace.requests,
        geometry,
        block_tokens=block_tokens,
        sessions=sessions,
        scale=scale,
        size_limit_bytes=size_limit_bytes,
        source=str(path),
    )
