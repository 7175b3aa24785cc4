"""iobench's result: a tree of frozen dataclasses whose field names are the ``--json`` keys.

Serialised by :mod:`fcctl.common.jsonio` (fields marked :data:`NOT_JSON` are for the renderer
and the CLI only). Every key is documented in docs/benchmarks.md. Rates are bytes per second,
times seconds, sizes bytes (one tensor-parallel rank's).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fcctl.common.provenance import Provenance

from .config import LAYOUT_NAMES
from .errors import VerificationFailed
from .restore import RunResult

SCHEMA_VERSION = 1
NOT_JSON = {"json": False}


@dataclass(frozen=True)
class RestoreTimes:
    """Per-session restore time (first read to last), seconds; medians over the repeats."""

    p50: float
    p99: float


@dataclass(frozen=True)
class LayoutRuns:
    """One (layout, concurrency) cell: medians over the repeats, sums for verification."""

    concurrency: int
    read_commands: int
    bytes_requested: int
    bytes_read: int
    read_amplification: float  # bytes_read / bytes_requested
    restore_bytes_per_s: float
    restore_s: RestoreTimes
    verified_bytes: int
    mismatched_blocks: int
    # Sessions really restored at once: the concurrency asked for, or the session count when
    # that is lower (a "16" row of a 4-session workload ran 4).
    concurrency_ran: int
    # Bytes whose stored layer checksum the engine checked inside the timed region, summed
    # over the repeats (0 for the eviction layout, whose buckets store none, and with
    # verification off).
    checksum_verified_bytes: int
    layout: str = field(default="", metadata=NOT_JSON)
    samples_bytes_per_s: tuple[float, ...] = field(default=(), metadata=NOT_JSON)
    repeats: int = field(default=1, metadata=NOT_JSON)  # runs summarized; sums are over them


def summarize(runs: Sequence[RunResult]) -> LayoutRuns:
    """The repeats of one (layout, concurrency) cell: medians of rates and times, sums of checks."""
    if not runs:
        raise ValueError("summarize: needs at least one run")
    first = runs[0]
    sessions = len(first.restore_s)
    return LayoutRuns(
        concurrency=first.concurrency,
        read_commands=first.read_commands,
        bytes_requested=first.bytes_requested,
        bytes_read=first.bytes_read,
        read_amplification=first.read_amplification,
        restore_bytes_per_s=statistics.median(r.restore_bytes_per_s for r in runs),
        restore_s=RestoreTimes(
            p50=statistics.median(r.restore_p50_s for r in runs),
            p99=statistics.median(r.restore_p99_s for r in runs),
        ),
        verified_bytes=sum(r.verified_bytes for r in runs),
        mismatched_blocks=sum(r.mismatched_blocks for r in runs),
        concurrency_ran=min(first.concurrency, sessions) if sessions else first.concurrency,
        checksum_verified_bytes=sum(r.checksum_verified_bytes for r in runs),
        layout=first.layout,
        samples_bytes_per_s=tuple(r.restore_bytes_per_s for r in runs),
        repeats=len(runs),
    )


@dataclass(frozen=True)
class FioRound:
    """One repeat's fio figures: the best sequential job, every job, each layout's replay."""

    seq_read_bytes_per_s: float
    best_job: str
    seq_jobs: Mapping[str, float]
    replay: Mapping[str, float]


@dataclass(frozen=True)
class FioProvenance:
    """What fio was and did, for ``provenance.fio``."""

    reason: str
    version: str
    ioengine: str | None
    best_job: str | None
    rounds: tuple[FioRound, ...]
    note: str = (
        "replay: iolog v2, read_iolog, replay_no_stall=1, direct=1, one job per "
        "stream of sessions (streams = max concurrency), iodepth 8 each"
    )


@dataclass(frozen=True)
class FioSummary:
    """fio's reference figures (medians over repeats); all None when fio did not run."""

    available: bool
    seq_read_bytes_per_s: float | None = None
    # Every layout of LAYOUT_NAMES; None for one not run (or when fio did not run).
    replay_bytes_per_s: Mapping[str, float | None] = field(
        default_factory=lambda: dict.fromkeys(LAYOUT_NAMES)
    )
    reason: str = field(default="", metadata=NOT_JSON)
    version: str = field(default="", metadata=NOT_JSON)
    ioengine: str | None = field(default=None, metadata=NOT_JSON)
    best_job: str | None = field(default=None, metadata=NOT_JSON)
    rounds: tuple[FioRound, ...] = field(default=(), metadata=NOT_JSON)

    def provenance(self) -> FioProvenance:
        return FioProvenance(self.reason, self.version, self.ioengine, self.best_job, self.rounds)


@dataclass(frozen=True)
class EngineInfo:
    """The engine that really ran the restores."""

    name: str
    o_direct: bool  # every restore read ran O_DIRECT
    gds: bool  # reads went through GPUDirect Storage; false for posix, which never does
    # True for an engine that can do GDS (kvikio): the table then says GDS yes or no (compat).
    gds_capable: bool = field(default=False, metadata=NOT_JSON)


@dataclass(frozen=True)
class ChecksumInfo:
    """Whether the flat restores checked the session files' layer checksums in the timed region.

    ``verified``: every flat read of every run was checked (its rates include that cost).
    ``off_reason``: why not, when not (``--no-verify-checksums``; reads into GPU memory the
    engine cannot check); null when verified or when the flat layout did not run.
    """

    requested: bool
    verified: bool
    off_reason: str | None = None


@dataclass(frozen=True)
class WorkloadSummary:
    sessions: int
    layers: int
    block_tokens: int
    bytes: int  # KV bytes of the whole workload; each layout stores exactly these
    # The factor a trace workload's token counts were multiplied by (--scale, then down to
    # fit --size-limit); 1.0 for a synthetic workload.
    scale: float = 1.0
    source: str = field(default="", metadata=NOT_JSON)
    model: str = field(default="", metadata=NOT_JSON)


@dataclass(frozen=True)
class Ratio:
    """``ratio`` of two layouts' (or a layout's and fio's) figures at ``concurrency``."""

    concurrency: int
    ratio: float | None


@dataclass(frozen=True)
class Comparisons:
    """The headline comparisons, computed once (the table, Parquet and benchmark read them).

    * ``eviction_over_flat_read_commands``: at the lowest concurrency both layouts ran.
    * ``flat_over_eviction_restore_time``: per concurrency both ran; the same bytes on both
      sides, so the eviction rate over the flat rate (below 1: flat is faster).
    * ``flat_over_fio_seq``: flat's restore rate at its highest concurrency over fio's best
      sequential read.
    """

    eviction_over_flat_read_commands: Ratio | None
    flat_over_eviction_restore_time: tuple[Ratio, ...]
    flat_over_fio_seq: Ratio | None


def compare(layouts: Mapping[str, Sequence[LayoutRuns]], fio: FioSummary) -> Comparisons:
    """The :class:`Comparisons` of one run's layout cells and fio figures."""
    flat = {r.concurrency: r for r in layouts.get("flat", ())}
    evic = {r.concurrency: r for r in layouts.get("eviction", ())}
    common = sorted(set(flat) & set(evic))
    commands = None
    if common:
        c = common[0]
        commands = Ratio(c, evic[c].read_commands / max(1, flat[c].read_commands))
    times = tuple(
        Ratio(
            c,
            evic[c].restore_bytes_per_s / flat[c].restore_bytes_per_s
            if flat[c].restore_bytes_per_s
            else None,
        )
        for c in common
    )
    best = fio.seq_read_bytes_per_s
    over_fio = None
    if best and flat:
        c = max(flat)
        over_fio = Ratio(c, flat[c].restore_bytes_per_s / best)
    return Comparisons(commands, times, over_fio)


@dataclass(frozen=True)
class Filesystem:
    device: str
    mount: str
    type: str


@dataclass(frozen=True)
class RunSettings:
    """Every setting of the run, for ``provenance.settings``."""

    model: str
    tp: int
    source: str
    scale: float
    turns_per_session: tuple[int, ...]
    piece_bytes: int
    block_bytes: int
    bucket_bytes: int
    memory_tier_bytes: int | None
    gap_bytes: int
    max_command_bytes: int | None
    engine_threads: int | None
    restore_buffers: str
    concurrency: tuple[int, ...]
    repeat: int
    cold: str
    verify_checksums: bool
    free_margin_bytes: int | None
    restore_buffer_pool_bytes: int
    verification: str = (
        "flat layer checksums are checked by the engine inside the timed region (unless "
        "--no-verify-checksums; see checksums); every byte read is checked against the block "
        "pattern after the timed region; verified_bytes and mismatched_blocks (block x layer "
        "pieces) sum over the repeats"
    )


@dataclass(frozen=True)
class IobenchResult:
    """The whole run; ``dumps(result)`` is the ``--json`` document."""

    schema_version: int
    engine: EngineInfo
    workload: WorkloadSummary
    fio: FioSummary
    # Every layout of LAYOUT_NAMES, in that order; an empty tuple for a layout not run.
    layouts: Mapping[str, tuple[LayoutRuns, ...]]
    comparisons: Comparisons
    checksums: ChecksumInfo
    provenance: Provenance
    engine_reason: str = field(default="", metadata=NOT_JSON)
    mismatch_examples: tuple[str, ...] = field(default=(), metadata=NOT_JSON)
    # Where the files were written (they are still there with --keep).
    directory: Path | None = field(default=None, metadata=NOT_JSON)

    @property
    def mismatched_blocks(self) -> int:
        return sum(r.mismatched_blocks for runs in self.layouts.values() for r in runs)

    def run(self, layout: str, concurrency: int) -> LayoutRuns | None:
        """The cell of ``layout`` at ``concurrency``, or None when it was not run."""
        return next((r for r in self.layouts.get(layout, ()) if r.concurrency == concurrency), None)

    def check_verified(self) -> None:
        """Raise :class:`VerificationFailed` when any piece read back wrong."""
        if self.mismatched_blocks:
            first = "; ".join(self.mismatch_examples[:1]) or "unknown"
            raise VerificationFailed(
                f"verification failed: {self.mismatched_blocks} block pieces read back wrong "
                f"(first: {first})",
                mismatched_blocks=self.mismatched_blocks,
            )
