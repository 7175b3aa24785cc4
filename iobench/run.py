"""``run_iobench``: write both layouts of one workload, measure fio and cold restores, verify.

Order of a run (``repeat N`` repeats steps 3-4 N times and reports medians):

1. Build the workload (trace or synthetic) and check the directory and free space.
2. Write the flat session files and the eviction buckets (identical KV bytes, see
   ``iobench.pattern``).
3. fio: the sequential reference over the same files, then a replay of each layout's exact
   read sequence (:mod:`fcctl.iobench.fio_reference`).
4. For each concurrency: a cold restore of every session with one layout, then with the other
   (flat first in even repeats, eviction first in odd ones, so drift hits both), every byte
   verified.
5. Remove everything written (unless ``keep``), also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import collect_provenance, utc_now
from fcctl.layout.engines import ReadEngine
from fcctl.layout.errors import LayoutError

from . import fio as fio_mod
from .config import IobenchConfig
from .errors import BenchFailed
from .fio_reference import FioSetup, fio_round, fio_setup, fio_summary
from .layouts import LAYOUTS, WrittenLayout
from .restore import (
    BufferPool,
    RunResult,
    SessionRestore,
    allocate_pool,
    run_restore,
)
from .result import (
    SCHEMA_VERSION,
    ChecksumInfo,
    EngineInfo,
    Filesystem,
    FioRound,
    IobenchResult,
    LayoutRuns,
    RunSettings,
    WorkloadSummary,
    compare,
    summarize,
)
from .safety import first_interrupt_raises, prepare_workspace
from .sizing import (
    IOLOG_BYTES_PER_COMMAND,
    check_fits_machine,
    check_synthetic_size,
    workload_size,
)
from .workload import IoWorkload, load_trace_io_workload, synthetic_io_workload

MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


class RestoreRunner(Protocol):
    """How one cold run of one layout at one concurrency is executed (:func:`run_restore`)."""

    def __call__(
        self,
        layout_name: str,
        restores: Sequence[SessionRestore],
        pool: BufferPool,
        engine: ReadEngine,
        *,
        concurrency: int,
        piece_bytes: int,
        drop_cache: Callable[[], None] | None = None,
    ) -> RunResult: ...


@dataclass(frozen=True)
class RunHooks:
    """Documented plug points of a run, for tests and embedders.

    ``restore_runner`` executes each cold restore run; a wrapper around :func:`run_restore` can
    record the run order or damage a file on disk before a run, to check what a run reports.
    ``on_phase(phase, root)`` is called as each phase of :data:`PHASES` starts, with the run's
    directory (a test fills the disk there to check what a full disk mid-run reports).
    """

    restore_runner: RestoreRunner = run_restore
    on_phase: Callable[[str, Path], None] | None = None


# The phases a run's failure names (exit 1): "writes failed: ...", "fio failed: ...".
PHASES = ("writes", "fio", "restores")
# errno values that mean the filesystem is full, named as such in the failure.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass
class _Measured:
    """What the repeats measured: every run per (layout, concurrency), fio's rounds."""

    runs: dict[tuple[str, int], list[RunResult]] = field(default_factory=dict)
    fio_rounds: list[FioRound] = field(default_factory=list)
    fio_reason: str = ""
    pool_bytes: int = 0  # the restore buffer pool (iobench.restore.BufferPool)


@contextmanager
def _failing(phase: str) -> Iterator[None]:
    """Turn an I/O error or a short/corrupt read during ``phase`` into :class:`BenchFailed`.

    ``LayoutError`` here means a file the benchmark itself wrote and checked no longer reads
    back (truncated, overwritten): a failed run (exit 1), not bad input (exit 2).
    """
    try:
        yield
    except (OSError, LayoutError) as e:
        raise BenchFailed(failure_message(phase, e)) from e


def _os_error(e: BaseException) -> OSError | None:
    """``e`` or the OSError under it (the core wraps some I/O errors in a LayoutError)."""
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return e


def failure_message(phase: str, e: OSError | LayoutError) -> str:
    """``"<phase> failed: ..."``; a full filesystem is said as such, with the errno's name."""
    where = f" ({e.filename})" if isinstance(e, OSError) and e.filename else ""
    os_error = _os_error(e)
    if os_error is not None and os_error.errno in _NO_SPACE:
        name = errno.errorcode[os_error.errno]
        where = f" ({os_error.filename})" if os_error.filename else where
        return (
            f"{phase} failed: the filesystem is out of space ({name}: {os_error.strerror})"
            f"{where}; free space or pass another `directory`"
        )
    what = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return f"{phase} failed: {what}{where}"


#: Notes and warnings of a run; the CLI shows them on stderr (fcctl.errors.library_log_shown).
log = logging.getLogger(__name__)


def _log(progress: bool, message: str) -> None:
    if progress:
        log.info("iobench: %s", message)


# ----------------------------------------------------------------------------- checks


def build_io_workload(config: IobenchConfig, *, progress: bool = False) -> IoWorkload:
    """The workload ``config`` describes: a trace's sessions or synthetic ones."""
    geometry = config.geometry
    if config.trace is not None:
        if not Path(config.trace).exists():
            raise FcctlInputError(
                f"trace: file not found; got {str(config.trace)!r}", parameter="trace"
            )
        return load_trace_io_workload(
            Path(config.trace),
            geometry,
            trace_format=config.trace_format,
            block_tokens=config.block_tokens,
            sessions=config.sessions,
            scale=config.scale,
            size_limit_bytes=config.size_limit_bytes,
            progress=progress,
        )
    # From the flags alone, before a session is built: --sessions 100000000 is refused with
    # what it would need, not after allocating it.
    check_synthetic_size(geometry, config)
    return synthetic_io_workload(
        geometry,
        block_tokens=config.block_tokens,
        sessions=config.sessions,
        tokens=config.tokens,
        turns=config.turns,
        size_limit_bytes=config.size_limit_bytes,
    )


def bytes_needed(workload: IoWorkload, layouts: Sequence[str]) -> int:
    """Bytes the run writes: each layout's files and the fio iologs (at most one command per
    piece per layout)."""
    total = sum(LAYOUTS[name].bytes_needed(workload) for name in layouts)
    return total + IOLOG_BYTES_PER_COMMAND * workload.blocks * workload.geometry.layers * len(
        layouts
    )


def check_engine_name(requested: str | None) -> None:
    from fcctl.layout.engines import ENGINES

    if requested is not None and requested not in ENGINES:
        raise FcctlInputError(
            f"engine: must be one of {', '.join(ENGINES)}; got {requested!r}", parameter="engine"
        )


def choose_engine(requested: str | None, directory: str | None = None) -> tuple[str, str]:
    """``(engine, why)``: the requested one if it works, else kvikio if it works, else posix.

    The probes read a small file in ``directory`` (the benchmark's own directory, so "O_DIRECT
    works" is said of the filesystem the benchmark reads, not of the temp dir).
    """
    from fcctl.layout.engines import EngineUnavailable, probe_engine

    check_engine_name(requested)
    if requested is not None:
        ok, why = probe_engine(requested, directory=directory)
        if not ok:
            raise EngineUnavailable(
                f"engine: {requested} cannot read here: {why}", parameter="engine"
            )
        return requested, f"requested with --engine ({why})"
    _, posix_why = probe_engine("posix", directory=directory)
    if importlib.util.find_spec("kvikio") is None:
        # Not asked for: no install hint (it belongs to --engine kvikio's refusal).
        return "posix", f"kvikio is not installed. posix: {posix_why}"
    ok, why = probe_engine("kvikio", directory=directory)
    if ok:
        return "kvikio", f"kvikio can read here ({why})"
    return "posix", f"kvikio cannot read here: {why}. posix: {posix_why}"


def filesystem_of(path: Path) -> Filesystem:
    """The mount holding ``path`` (longest matching mount point in /proc/mounts)."""
    best = ("", "", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                mnt = mnt.replace("\\040", " ")
                if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(
                    mnt
                ) >= len(best[1]):
                    best = (dev, mnt, fstype)
    except OSError:
        pass
    return Filesystem(device=best[0], mount=best[1], type=best[2])


def use_gpu_buffers(choice: str, engine_name: str) -> bool:
    """Restore into GPU memory? ``gpu`` demands it (refused without a GPU), ``auto`` for kvikio."""
    if choice == "host":
        return False
    try:
        import cupy

        ok = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception as e:  # no CuPy or no driver: say so only when GPU buffers were demanded
        if choice == "gpu":
            raise FcctlInputError(
                f"buffers: CuPy cannot use a GPU here ({e}); got 'gpu'", parameter="buffers"
            ) from None
        return False
    if choice == "gpu" and not ok:
        raise FcctlInputError("buffers: CuPy sees no GPU here; got 'gpu'", parameter="buffers")
    return ok and (choice == "gpu" or engine_name == "kvikio")


def _check_buckets(workload: IoWorkload, config: IobenchConfig) -> None:
    if "eviction" in config.layouts and config.bucket_bytes < workload.block_bytes:
        raise FcctlInputError(
            f"bucket_bytes: must hold at least one block of {workload.block_bytes} bytes "
            f"(all layers of {workload.block_tokens} tokens); got {config.bucket_bytes!r}",
            parameter="bucket_bytes",
        )


def _concurrency_notes(workload: IoWorkload, config: IobenchConfig) -> list[str]:
    n_sessions = len(workload.sessions)
    over = [c for c in config.concurrency if c > n_sessions]
    if not over:
        return []
    # A run cannot restore more sessions at once than there are; say so rather than let a
    # "concurrency 16" row of an 8-session workload pass for 16 concurrent restores.
    return [
        f"concurrency {', '.join(map(str, over))} > {n_sessions} sessions: "
        f"those runs restore all {n_sessions} sessions at once"
    ]


def _memory_filesystem_notes(root: Path) -> list[str]:
    fs_type = filesystem_of(root).type
    if fs_type not in MEMORY_FILESYSTEMS:
        return []
    # Cold reads of a memory filesystem are memory copies: say it before anyone reads the
    # figures as a disk's.
    return [f"{root} is on {fs_type} (memory, not a disk): the figures measure memory copies"]


# ----------------------------------------------------------------------------- main entry


def run_iobench(
    config: IobenchConfig, *, progress: bool = False, hooks: RunHooks | None = None
) -> IobenchResult:
    """Run the whole benchmark described by ``config`` (see the module docstring)."""
    hooks = hooks or RunHooks()
    started = utc_now()
    workload = build_io_workload(config, progress=progress)
    _check_buckets(workload, config)
    check_engine_name(config.engine)
    check_fits_machine(workload_size(workload, config))
    run_notes = _concurrency_notes(workload, config)
    for note in run_notes:
        _log(progress, note)
    workspace = prepare_workspace(
        config.directory,
        force=config.force,
        keep=config.keep,
        bytes_needed=bytes_needed(workload, config.layouts),
        margin=config.free_margin_bytes,
    )
    engines: dict[str, ReadEngine] = {}
    # The first Ctrl-C or SIGTERM raises; later ones wait for the cleanup (iobench.safety).
    with first_interrupt_raises():
        try:
            engine_name, engine_reason = choose_engine(config.engine, str(workspace.root))
            _log(progress, f"engine {engine_name}: {engine_reason}")
            # Before writing anything: --buffers gpu without a GPU is refused at once.
            gpu = use_gpu_buffers(config.buffers, engine_name)
            for note in _memory_filesystem_notes(workspace.root):
                run_notes.append(note)
                _log(progress, f"warning: {note}")
            with Progress(progress) as bar:
                _phase(hooks, "writes", workspace.root)
                with _failing("writes"):
                    written = _write_layouts(workload, config, workspace.root, bar)
                with _failing("planning the restores"):
                    restores = {name: w.plan_restores(config) for name, w in written.items()}
                engines = _open_engines(engine_name, config)
                measured, setup = _measure(
                    workload, config, restores, written, engines, gpu, workspace.root, bar, hooks
                )
        finally:
            # Held from the first statement: a Ctrl-C while the engines close must not skip
            # the removal of the files.
            with workspace.hold_signals():
                for engine in engines.values():
                    engine.close()
                workspace.cleanup()
    workspace.raise_held()  # a Ctrl-C during the cleanup still ends the run as interrupted
    return _result(
        config,
        workload,
        measured,
        setup,
        written,
        engine_name=engine_name,
        engine_reason=engine_reason,
        gpu=gpu,
        root=workspace.root,
        started=started,
        run_notes=run_notes,
    )


def _phase(hooks: RunHooks, phase: str, root: Path) -> None:
    if hooks.on_phase is not None:
        hooks.on_phase(phase, root)


def _open_engines(engine_name: str, config: IobenchConfig) -> dict[str, ReadEngine]:
    """One engine per layout: flat verifies its layer checksums inside the timed region (unless
    --no-verify-checksums); the eviction buckets store no checksum, so their engine does not
    look for one (the baseline pays no verification cost)."""
    from fcctl.layout.engines import open_engine

    options: dict[str, int] = {}
    if config.engine_threads is not None:
        options["threads"] = config.engine_threads
    engines: dict[str, ReadEngine] = {}
    try:
        for name in config.layouts:
            verify = config.verify_checksums and name == "flat"
            engines[name] = open_engine(engine_name, verify=verify, **options)
    except BaseException:
        for engine in engines.values():
            engine.close()
        raise
    return engines


def _write_layouts(
    workload: IoWorkload, config: IobenchConfig, root: Path, bar: Progress
) -> dict[str, WrittenLayout]:
    written: dict[str, WrittenLayout] = {}
    total = workload.bytes * len(config.layouts)
    with bar.task("writing layouts", total=total, unit="MiB", per_unit=2**20) as task:
        for name in config.layouts:
            task.describe(f"writing the {name} layout")
            written[name] = LAYOUTS[name].write(workload, root / name, config, task.advance)
    return written


def _fio_round_or_skip(
    setup: FioSetup,
    all_files: Sequence[str],
    restores: Mapping[str, list[SessionRestore]],
    fio_dir: Path,
    config: IobenchConfig,
    workload: IoWorkload,
    round_index: int,
    on_phase: Callable[[str], None],
) -> FioRound | str:
    """One fio round, or why fio is skipped from now on. A full disk fails the run (exit 1):
    a reference measured on a filesystem that cannot hold its iologs is no reference."""
    try:
        return fio_round(
            setup,
            all_files,
            restores,
            fio_dir,
            runtime_s=config.fio_runtime_s,
            streams=min(max(config.concurrency), len(workload.sessions)),
            round_index=round_index,
            on_phase=on_phase,
        )
    except (fio_mod.FioError, OSError) as e:
        os_error = _os_error(e)
        if os_error is not None and os_error.errno in _NO_SPACE:
            raise BenchFailed(failure_message("fio", os_error)) from e
        reason = f"fio failed: {e}"
        log.warning("iobench: fio reference skipped: %s", reason)
        return reason


def _measure(
    workload: IoWorkload,
    config: IobenchConfig,
    restores: Mapping[str, list[SessionRestore]],
    written: Mapping[str, WrittenLayout],
    engines: Mapping[str, ReadEngine],
    gpu: bool,
    root: Path,
    bar: Progress,
    hooks: RunHooks,
) -> tuple[_Measured, FioSetup]:
    """The repeats: a fio round, then each concurrency's restore of each layout in turn."""
    from fcctl.layout.engines import drop_file_cache

    with _failing("restores"):
        # One pool for every layout and concurrency: memory is bounded by the pool, not by
        # the workload (iobench.restore.BufferPool).
        pool = allocate_pool(
            [r for rs in restores.values() for r in rs],
            concurrency=min(max(config.concurrency), len(workload.sessions)),
            gpu=gpu,
            budget_bytes=config.restore_buffer_budget_bytes,
        )
    all_files = [f for name in config.layouts for f in written[name].files]
    _phase(hooks, "fio", root)
    with _failing("fio"):
        setup = fio_setup(config.fio, all_files)
        fio_dir = root / "fio"
        fio_dir.mkdir(exist_ok=True)
    measured = _Measured(fio_reason=setup.reason, pool_bytes=pool.nbytes)
    fio_on = setup.runnable
    total_runs = config.repeat * len(config.concurrency) * len(config.layouts)
    with bar.task("restore runs", total=total_runs, unit="runs") as task:
        for round_index in range(config.repeat):
            if fio_on:
                got = _fio_round_or_skip(
                    setup,
                    all_files,
                    restores,
                    fio_dir,
                    config,
                    workload,
                    round_index,
                    lambda what: task.describe(f"fio: {what}"),
                )
                if isinstance(got, str):
                    fio_on, measured.fio_reason = False, got
                else:
                    measured.fio_rounds.append(got)
            if round_index == 0:
                _phase(hooks, "restores", root)
            # Layouts alternate run by run, and the one that goes first swaps every repeat
            # (flat, eviction | eviction, flat | ...), so drift and any warm-up hit both.
            layouts = config.layouts if round_index % 2 == 0 else config.layouts[::-1]
            for conc in config.concurrency:
                for name in layouts:
                    task.describe(f"restoring {name} at concurrency {conc}")

                    def drop(_files: tuple[str, ...] = written[name].files) -> None:
                        for f in _files:
                            drop_file_cache(f)

                    with _failing("restores"):
                        run = hooks.restore_runner(
                            name,
                            restores[name],
                            pool,
                            engines[name],
                            concurrency=conc,
                            piece_bytes=workload.piece_bytes,
                            drop_cache=drop,
                        )
                    measured.runs.setdefault((name, conc), []).append(run)
                    task.advance(1)
    return measured, setup


# How the core's engines begin the note of a read whose layer checksums were not checked.
_CHECKSUM_NOTE = "layer checksums not verified"


def _checksum_info(config: IobenchConfig, measured: _Measured) -> ChecksumInfo:
    """Whether every flat read was checked inside the timed region, and if not, why."""
    flat = [r for (name, _), rs in measured.runs.items() if name == "flat" for r in rs]
    if not flat:
        return ChecksumInfo(requested=config.verify_checksums, verified=False)
    if not config.verify_checksums:
        return ChecksumInfo(False, False, "--no-verify-checksums given")
    if all(r.checksums_verified for r in flat):
        return ChecksumInfo(True, True)
    why = sorted({n for r in flat for n in r.notes if n.startswith(_CHECKSUM_NOTE)})
    return ChecksumInfo(True, False, "; ".join(why) or "the engine did not check every read")


def _result(
    config: IobenchConfig,
    workload: IoWorkload,
    measured: _Measured,
    setup: FioSetup,
    written: Mapping[str, WrittenLayout],
    *,
    engine_name: str,
    engine_reason: str,
    gpu: bool,
    root: Path,
    started: str,
    run_notes: list[str],
) -> IobenchResult:
    """Medians, comparisons and provenance of what :func:`_measure` measured."""
    summaries: dict[str, tuple[LayoutRuns, ...]] = {
        name: tuple(summarize(measured.runs[(name, c)]) for c in config.concurrency)
        if name in config.layouts
        else ()
        for name in LAYOUTS
    }
    all_runs = [r for rs in measured.runs.values() for r in rs]
    checksums = _checksum_info(config, measured)
    o_direct = all(r.o_direct for r in all_runs)
    gds = next((r.gds for r in all_runs if r.gds is not None), None)
    fio = fio_summary(measured.fio_rounds, measured.fio_reason, setup.ioengine, config.layouts)
    eviction = written.get("eviction")
    settings = RunSettings(
        model=workload.geometry.name,
        tp=workload.geometry.tp,
        source=workload.source,
        scale=workload.scale,
        turns_per_session=tuple(s.turns for s in workload.sessions),
        piece_bytes=workload.piece_bytes,
        block_bytes=workload.block_bytes,
        bucket_bytes=config.bucket_bytes,
        memory_tier_bytes=eviction.memory_tier_bytes if eviction is not None else None,
        gap_bytes=config.gap_bytes,
        max_command_bytes=config.max_command_bytes,
        engine_threads=config.engine_threads,
        restore_buffers="gpu" if gpu else "host",
        concurrency=tuple(config.concurrency),
        repeat=config.repeat,
        verify_checksums=config.verify_checksums,
        free_margin_bytes=config.free_margin_bytes,
        restore_buffer_pool_bytes=measured.pool_bytes,
        cold="fsync + posix_fadvise(DONTNEED) on every file before each run"
        + (", O_DIRECT reads" if o_direct else ""),
    )
    provenance = collect_provenance(
        started,
        extra={
            "kernel": platform.release(),
            "directory": str(root),
            "kept": config.keep,
            "filesystem": filesystem_of(root if config.keep else root.parent),
            "engine_reason": engine_reason,
            # Checksum notes are said once, in ``checksums``.
            "engine_notes": sorted(
                {n for r in all_runs for n in r.notes if not n.startswith(_CHECKSUM_NOTE)}
            ),
            "settings": settings,
            "restore_bytes_per_s_samples": {
                f"{name}@{r.concurrency}": list(r.samples_bytes_per_s)
                for name, rs in summaries.items()
                for r in rs
            },
            "fio": fio.provenance(),
            "notes": [*workload.notes, *run_notes, *setup.notes],
        },
    )
    return IobenchResult(
        schema_version=SCHEMA_VERSION,
        engine=EngineInfo(
            name=engine_name, o_direct=o_direct, gds=bool(gds), gds_capable=gds is not None
        ),
        workload=WorkloadSummary(
            sessions=len(workload.sessions),
            layers=workload.geometry.layers,
            block_tokens=workload.block_tokens,
            bytes=workload.bytes,
            scale=workload.scale,
            source=workload.source,
            model=workload.geometry.name,
        ),
        fio=fio,
        layouts=summaries,
        comparisons=compare(summaries, fio),
        checksums=checksums,
        provenance=provenance,
        engine_reason=engine_reason,
        mismatch_examples=tuple(x for r in all_runs for x in r.mismatch_examples)[:5],
        directory=root,
    )
