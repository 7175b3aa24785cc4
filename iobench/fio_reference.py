"""fio as the device's reference, run by iobench beside its restores (fio itself: iobench.fio).

Per repeat (:func:`fio_round`): fio's sequential direct reads over the benchmark's own files,
then a replay of each layout's exact read commands as iolog files, one fio job per stream of
sessions. :func:`fio_summary` takes medians over the repeats.
"""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fcctl.layout.alignment import PAGE_BYTES

from . import fio as fio_mod
from .config import LAYOUT_NAMES
from .restore import SessionRestore
from .result import FioRound, FioSummary

#: Warnings of a run; the CLI shows them on stderr (fcctl.errors.library_log_shown).
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FioSetup:
    """The fio binary and ioengine to run, or why fio does not run here (``fio_bin`` None)."""

    fio_bin: str | None
    ioengine: str | None
    reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def runnable(self) -> bool:
        return bool(self.fio_bin and self.ioengine)


def _skipped(reason: str) -> None:
    log.warning("iobench: fio reference skipped: %s", reason)


def fio_setup(enabled: bool, files: Sequence[str]) -> FioSetup:
    """Find fio and an ioengine that reads ``files[0]`` here; say why not when it cannot run."""
    if not enabled:
        return FioSetup(None, None, "--no-fio given")
    fio_bin = fio_mod.find_fio()
    if fio_bin is None:
        reason = "fio is not installed; apt-get install fio"
        _skipped(reason)
        return FioSetup(None, None, reason)
    try:
        ioengine, why = fio_mod.pick_ioengine(fio_bin, files[0])
    except (fio_mod.FioError, OSError) as e:
        _skipped(str(e))
        return FioSetup(None, None, str(e))
    return FioSetup(fio_bin, ioengine, "", (f"fio: {why}",) if why else ())


def iolog_streams(
    restores: Sequence[SessionRestore], streams: int
) -> list[list[tuple[str, int, int]]]:
    """Sessions dealt round-robin into ``streams`` command lists (empty ones dropped)."""
    logs: list[list[tuple[str, int, int]]] = [[] for _ in range(streams)]
    for i, r in enumerate(restores):
        for plan in r.plans:
            logs[i % streams].extend((c.file, c.offset, c.length) for c in plan.commands)
    return [log for log in logs if log]


def seq_request_sizes(files: Sequence[str]) -> tuple[list[str], list[int]]:
    """``(files, request sizes)`` for the sequential reference.

    fio refuses a request larger than a file. The reference reads the files that hold the
    largest request (the buckets and most session files), so one small session file does not
    shrink every request; only when no file is that large do the requests get smaller.
    """
    largest_request = max(fio_mod.SEQ_REQUEST_BYTES)
    sized = {f: os.path.getsize(f) for f in files}
    seq_files = [f for f in files if sized[f] >= largest_request] or list(files)
    smallest = min(sized[f] for f in seq_files)
    sizes = [b for b in fio_mod.SEQ_REQUEST_BYTES if b <= smallest]
    if not sizes:
        # O_DIRECT reads whole pages: never below one.
        sizes = [max(PAGE_BYTES, 1 << (smallest.bit_length() - 1))]
    return seq_files, sizes


def fio_round(
    setup: FioSetup,
    files: Sequence[str],
    restores: Mapping[str, Sequence[SessionRestore]],
    workdir: Path,
    *,
    runtime_s: float,
    streams: int,
    round_index: int = 0,
    on_phase: Callable[[str], None] | None = None,
) -> FioRound:
    """One repeat: the sequential jobs, then each layout's replay (order alternating).

    ``on_phase(what)`` names each step as it starts (the progress bar shows it: fio runs for
    ``9 x runtime_s`` seconds and more, which must not look like a hang).
    """
    if setup.fio_bin is None or setup.ioengine is None:
        raise ValueError(f"fio_round: fio cannot run here ({setup.reason})")

    def phase(what: str) -> None:
        if on_phase is not None:
            on_phase(what)

    phase("sequential reference reads")
    seq_files, sizes = seq_request_sizes(files)
    seq = fio_mod.seq_read_jobs(
        setup.fio_bin,
        seq_files,
        ioengine=setup.ioengine,
        runtime_s=runtime_s,
        request_bytes=sizes,
    )
    best = max(seq, key=lambda j: j.read_bytes_per_s)
    replay: dict[str, float] = {}
    # Alternate which layout's replay goes first, so drift between the two hits both.
    names = list(restores) if round_index % 2 == 0 else list(restores)[::-1]
    for name in names:
        phase(f"replaying the {name} layout's reads")
        paths = []
        for k, log in enumerate(iolog_streams(restores[name], streams)):
            p = workdir / f"{name}-{k:03d}.iolog"
            fio_mod.write_iolog(p, log)
            paths.append(p)
        job = fio_mod.replay(setup.fio_bin, paths, ioengine=setup.ioengine, iodepth=8)
        replay[name] = job.read_bytes_per_s
    return FioRound(
        seq_read_bytes_per_s=best.read_bytes_per_s,
        best_job=best.name,
        seq_jobs={j.name: j.read_bytes_per_s for j in seq},
        replay=replay,
    )


def fio_summary(
    rounds: Sequence[FioRound], reason: str, ioengine: str | None, layouts: Sequence[str]
) -> FioSummary:
    """Medians over the repeats' rounds; ``available`` False when there is none."""
    if not rounds:
        return FioSummary(available=False, reason=reason or "fio did not run")
    fio_bin = fio_mod.find_fio()
    replay = {
        k: (statistics.median(r.replay[k] for r in rounds) if k in layouts else None)
        for k in LAYOUT_NAMES
    }
    best = max(rounds, key=lambda r: r.seq_read_bytes_per_s)
    return FioSummary(
        available=True,
        seq_read_bytes_per_s=statistics.median(r.seq_read_bytes_per_s for r in rounds),
        replay_bytes_per_s=replay,
        reason=reason,
        version=fio_mod.fio_version(fio_bin) if fio_bin else "",
        ioengine=ioengine,
        best_job=best.best_job,
        rounds=tuple(rounds),
    )
