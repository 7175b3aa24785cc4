"""``run_iobench``: write both layouts of one workload, measure fio and cold restores, verify.

Order of a run (``--repeat N`` repeats steps 3-4 N times and reports medians):

1. Build the workload (trace or synthetic) and check the directory and free space.
2. Write the flat session files and the eviction buckets (identical KV bytes, see
   ``iobench.pattern``).
3. fio: the sequential reference over the same files, then a replay of each layout's exact
   read sequence.
4. For each concurrency: a cold restore of every session with one layout, then with the other
   (flat first in even repeats, eviction first in odd ones, so drift hits both), every byte
   verified.
5. Remove everything written (unless ``keep``), also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fcctl.iobench import fio as fio_mod
from fcctl.iobench.eviction import DEFAULT_BUCKET_BYTES, EvictionLayout, write_eviction_layout
from fcctl.iobench.flat import FlatLayout, flat_bytes_needed, write_flat_layout
from fcctl.iobench.restore import (
    RunResult,
    SessionRestore,
    allocate_buffers,
    eviction_restores,
    flat_restores,
    run_restore,
)
from fcctl.iobench.safety import interrupts_raise, prepare_workspace
from fcctl.iobench.workload import Workload, load_trace_workload, synthetic_workload
from fcctl.layout.errors import LayoutError
from fcctl.layout.geometry import model_geometry

from fcctl.common.errors import FcctlInputError

SCHEMA_VERSION = 1
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
GiB = 2**30
LAYOUTS = ("flat", "eviction")


@dataclass(frozen=True)
class IobenchConfig:
    """Every knob of a run; sizes in bytes. See ``fcctl iobench --help`` for the flags."""

    directory: Path | None = None
    force: bool = False
    keep: bool = False
    layout: str = "both"
    trace: Path | None = None
    trace_format: str | None = None
    scale: float = 1.0
    size_limit_bytes: int = 2 * GiB
    sessions: int = 16
    tokens: int = 1024
    turns: int = 4
    model: str = "llama-3.1-8b"
    model_config: Path | None = None
    tp: int | None = None
    kv_dtype: str | None = None
    block_tokens: int = 16
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    memory_tier_bytes: int | None = None
    concurrency: tuple[int, ...] = (1, 4, 16)
    repeat: int = 1
    engine: str | None = None
    engine_threads: int | None = None
    gap_bytes: int = 64 * 1024
    max_command_bytes: int | None = None
    fio: bool = True
    fio_runtime_s: float = 1.5
    # Restore destinations: "host" memory, "gpu" (CuPy device arrays), or "auto" (gpu for the
    # kvikio engine when CuPy sees a GPU, else host).
    buffers: str = "auto"

    def __post_init__(self) -> None:
        if self.layout not in ("flat", "eviction", "both"):
            raise FcctlInputError(f"--layout: must be flat, eviction or both; got {self.layout!r}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise FcctlInputError(
                f"--concurrency: each value must be >= 1; got {self.concurrency!r}"
            )
        if not self.scale > 0:  # also NaN; checked here so a synthetic run refuses it too
            raise FcctlInputError(f"--scale: must be > 0; got {self.scale!r}")
        if self.repeat < 1:
            raise FcctlInputError(f"--repeat: must be >= 1; got {self.repeat!r}")
        if self.size_limit_bytes < 1:
            raise FcctlInputError(f"--size-limit: must be > 0; got {self.size_limit_bytes!r}")
        if self.engine_threads is not None and self.engine_threads < 1:
            raise FcctlInputError(f"--threads: must be >= 1; got {self.engine_threads!r}")
        if self.max_command_bytes is not None and (
            self.max_command_bytes < 4096 or self.max_command_bytes % 4096
        ):
            raise FcctlInputError(
                f"--max-command: must be a multiple of 4096 bytes; got {self.max_command_bytes!r}"
            )
        if self.buffers not in ("auto", "host", "gpu"):
            raise FcctlInputError(f"--buffers: must be auto, host or gpu; got {self.buffers!r}")
        if self.fio_runtime_s <= 0:
            raise FcctlInputError(f"--fio-runtime: must be > 0; got {self.fio_runtime_s!r}")

    @property
    def layouts(self) -> tuple[str, ...]:
        return LAYOUTS if self.layout == "both" else (self.layout,)


@dataclass(frozen=True)
class LayoutRuns:
    """One (layout, concurrency) cell: medians over the repeats, sums for verification."""

    layout: str
    concurrency: int
    read_commands: int
    bytes_requested: int
    bytes_read: int
    restore_bytes_per_s: float
    restore_p50_s: float
    restore_p99_s: float
    verified_bytes: int
    mismatched_blocks: int
    samples_bytes_per_s: tuple[float, ...]
    repeats: int = 1  # runs summarized; verified_bytes sums over them

    @property
    def read_amplification(self) -> float:
        return self.bytes_read / self.bytes_requested if self.bytes_requested else 1.0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "read_commands": self.read_commands,
            "bytes_requested": self.bytes_requested,
            "bytes_read": self.bytes_read,
            "read_amplification": self.read_amplification,
            "restore_bytes_per_s": self.restore_bytes_per_s,
            "restore_s": {"p50": self.restore_p50_s, "p99": self.restore_p99_s},
            "verified_bytes": self.verified_bytes,
            "mismatched_blocks": self.mismatched_blocks,
        }


def summarize(runs: list[RunResult]) -> LayoutRuns:
    first = runs[0]
    return LayoutRuns(
        layout=first.layout,
        concurrency=first.concurrency,
        read_commands=first.read_commands,
        bytes_requested=first.bytes_requested,
        bytes_read=first.bytes_read,
        restore_bytes_per_s=statistics.median(r.restore_bytes_per_s for r in runs),
        restore_p50_s=statistics.median(r.restore_p50_s for r in runs),
        restore_p99_s=statistics.median(r.restore_p99_s for r in runs),
        verified_bytes=sum(r.verified_bytes for r in runs),
        mismatched_blocks=sum(r.mismatched_blocks for r in runs),
        samples_bytes_per_s=tuple(r.restore_bytes_per_s for r in runs),
        repeats=len(runs),
    )


@dataclass(frozen=True)
class FioSummary:
    available: bool
    reason: str = ""
    version: str = ""
    ioengine: str | None = None
    seq_read_bytes_per_s: float | None = None
    best_job: str | None = None
    replay_bytes_per_s: dict[str, float | None] = field(default_factory=dict)
    samples: tuple[dict[str, Any], ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "seq_read_bytes_per_s": self.seq_read_bytes_per_s,
            "replay_bytes_per_s": {k: self.replay_bytes_per_s.get(k) for k in LAYOUTS},
        }


@dataclass(frozen=True)
class IobenchResult:
    engine_name: str
    o_direct: bool
    gds: bool | None
    engine_reason: str
    workload: Workload
    fio: FioSummary
    layouts: dict[str, tuple[LayoutRuns, ...]]
    provenance: dict[str, Any]
    mismatch_examples: tuple[str, ...] = ()

    @property
    def mismatched_blocks(self) -> int:
        return sum(r.mismatched_blocks for runs in self.layouts.values() for r in runs)

    def run(self, layout: str, concurrency: int) -> LayoutRuns | None:
        return next((r for r in self.layouts.get(layout, ()) if r.concurrency == concurrency), None)

    def to_json_dict(self) -> dict[str, Any]:
        wl = self.workload
        return {
            "schema_version": SCHEMA_VERSION,
            # gds: did reads go through GPUDirect Storage; false for posix, which never does.
            "engine": {
                "name": self.engine_name,
                "o_direct": self.o_direct,
                "gds": bool(self.gds),
            },
            "workload": {
                "sessions": len(wl.sessions),
                "layers": wl.geometry.layers,
                "block_tokens": wl.block_tokens,
                "bytes": wl.bytes,
            },
            "fio": self.fio.to_json_dict(),
            "layouts": {k: [r.to_json_dict() for r in self.layouts.get(k, ())] for k in LAYOUTS},
            "provenance": self.provenance,
        }


class BenchFailed(RuntimeError):
    """The run itself failed (a disk error, a file changed under it): not the user's input.

    The CLI prints it as one line with exit status 1, like a verification failure.
    """


@contextmanager
def _failing(phase: str) -> Iterator[None]:
    """Turn an I/O error or a short/corrupt read during ``phase`` into :class:`BenchFailed`.

    ``LayoutError`` here means a file the benchmark itself wrote and checked no longer reads
    back (truncated, overwritten): a failed run (exit 1), not bad input (exit 2).
    """
    try:
        yield
    except (OSError, LayoutError) as e:
        what = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        where = f" ({e.filename})" if isinstance(e, OSError) and e.filename else ""
        raise BenchFailed(f"{phase} failed: {what}{where}") from e


# ----------------------------------------------------------------------------- helpers


def build_workload(config: IobenchConfig, *, progress: bool = False) -> Workload:
    geometry = model_geometry(
        config.model, config_path=config.model_config, tp=config.tp, kv_dtype=config.kv_dtype
    )
    if config.trace is not None:
        if not Path(config.trace).exists():
            raise FcctlInputError(f"--trace: file not found; got {str(config.trace)!r}")
        return load_trace_workload(
            Path(config.trace),
            geometry,
            trace_format=config.trace_format,
            block_tokens=config.block_tokens,
            sessions=config.sessions,
            scale=config.scale,
            size_limit_bytes=config.size_limit_bytes,
            progress=progress,
        )
    return synthetic_workload(
        geometry,
        block_tokens=config.block_tokens,
        sessions=config.sessions,
        tokens=config.tokens,
        turns=config.turns,
        size_limit_bytes=config.size_limit_bytes,
    )


def bytes_needed(workload: Workload, layouts: tuple[str, ...]) -> int:
    total = 0
    if "flat" in layouts:
        total += flat_bytes_needed(workload)
    if "eviction" in layouts:
        total += workload.bytes
    # fio iologs: about 80 bytes per read command, at most one command per piece per layout.
    total += 80 * workload.blocks * workload.geometry.layers * len(layouts)
    return total


def check_engine_name(requested: str | None) -> None:
    from fcctl.layout.engines import ENGINES

    if requested is not None and requested not in ENGINES:
        raise FcctlInputError(f"--engine: must be one of {', '.join(ENGINES)}; got {requested!r}")


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
            raise EngineUnavailable(f"--engine {requested}: cannot read here: {why}")
        return requested, f"requested with --engine ({why})"
    ok, why = probe_engine("kvikio", directory=directory)
    if ok:
        return "kvikio", f"kvikio can read here ({why})"
    _, posix_why = probe_engine("posix", directory=directory)
    return "posix", f"kvikio cannot read here: {why}. posix: {posix_why}"


def _filesystem_of(path: Path) -> dict[str, str]:
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
    return {"device": best[0], "mount": best[1], "type": best[2]}


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Progress:
    """A rich progress display on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self._p = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,.0f}/{task.total:,.0f} {task.fields[unit]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    @contextmanager
    def task(self, description: str, total: float, unit: str, per_unit: float = 1) -> Iterator[Any]:
        """Yield ``advance(n)``; ``n`` is divided by ``per_unit`` for display (bytes -> MiB)."""
        if self._p is None:
            yield lambda n=1: None
            return
        tid = self._p.add_task(description, total=total / per_unit, unit=unit)
        try:
            yield lambda n=1: self._p.advance(tid, n / per_unit)
        finally:
            self._p.remove_task(tid)

    def __enter__(self) -> _Progress:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()


def _log(progress: bool, message: str) -> None:
    if progress:
        print(f"iobench: {message}", file=sys.stderr)


def _iolog_streams(
    restores: list[SessionRestore], streams: int
) -> list[list[tuple[str, int, int]]]:
    logs: list[list[tuple[str, int, int]]] = [[] for _ in range(streams)]
    for i, r in enumerate(restores):
        for plan in r.plans:
            logs[i % streams].extend((c.file, c.offset, c.length) for c in plan.commands)
    return [log for log in logs if log]


def _fio_round(
    fio_bin: str,
    ioengine: str,
    files: list[str],
    restores: dict[str, list[SessionRestore]],
    workdir: Path,
    config: IobenchConfig,
    streams: int,
    round_index: int = 0,
) -> dict[str, Any]:
    # fio refuses a request larger than a file. The reference reads the files that hold the
    # largest request (the buckets and most session files), so one small session file does not
    # shrink every request; only when no file is that large do the requests get smaller.
    largest_request = max(fio_mod.SEQ_REQUEST_BYTES)
    sized = {f: os.path.getsize(f) for f in files}
    big = [f for f in files if sized[f] >= largest_request]
    seq_files = big or files
    smallest = min(sized[f] for f in seq_files)
    sizes = [b for b in fio_mod.SEQ_REQUEST_BYTES if b <= smallest]
    if not sizes:
        sizes = [max(4096, 1 << (smallest.bit_length() - 1))]
    seq = fio_mod.seq_read_jobs(
        fio_bin, seq_files, ioengine=ioengine, runtime_s=config.fio_runtime_s, request_bytes=sizes
    )
    best = max(seq, key=lambda j: j.read_bytes_per_s)
    out: dict[str, Any] = {
        "seq_read_bytes_per_s": best.read_bytes_per_s,
        "best_job": best.name,
        "seq_jobs": {j.name: j.read_bytes_per_s for j in seq},
        "replay": {},
    }
    # Alternate which layout's replay goes first, so drift between the two hits both.
    names = list(restores) if round_index % 2 == 0 else list(reversed(restores))
    for name in names:
        rs = restores[name]
        paths = []
        for k, log in enumerate(_iolog_streams(rs, streams)):
            p = workdir / f"{name}-{k:03d}.iolog"
            fio_mod.write_iolog(p, log)
            paths.append(p)
        job = fio_mod.replay(fio_bin, paths, ioengine=ioengine, iodepth=8)
        out["replay"][name] = job.read_bytes_per_s
    return out


# ----------------------------------------------------------------------------- main entry


def run_iobench(config: IobenchConfig, *, progress: bool = False) -> IobenchResult:
    """Run the whole benchmark described by ``config`` (see the module docstring)."""
    from fcctl.layout.engines import open_engine

    started = _utc_now()
    workload = build_workload(config, progress=progress)
    layouts = config.layouts
    if "eviction" in layouts and config.bucket_bytes < workload.block_bytes:
        raise FcctlInputError(
            f"--bucket-size: must hold at least one block of {workload.block_bytes} bytes "
            f"(all layers of {workload.block_tokens} tokens); got {config.bucket_bytes!r}"
        )
    check_engine_name(config.engine)
    run_notes: list[str] = []
    n_sessions = len(workload.sessions)
    over = [c for c in config.concurrency if c > n_sessions]
    if over:
        # A run cannot restore more sessions at once than there are; say so rather than let a
        # "concurrency 16" row of an 8-session workload pass for 16 concurrent restores.
        run_notes.append(
            f"concurrency {', '.join(map(str, over))} > {n_sessions} sessions: "
            f"those runs restore all {n_sessions} sessions at once"
        )
        _log(progress, run_notes[-1])
    workspace = prepare_workspace(
        config.directory,
        force=config.force,
        keep=config.keep,
        bytes_needed=bytes_needed(workload, layouts),
    )
    engine = None
    try:
        with interrupts_raise():
            engine_name, engine_reason = choose_engine(config.engine, str(workspace.root))
            _log(progress, f"engine {engine_name}: {engine_reason}")
            # Before writing anything: --buffers gpu without a GPU is refused at once.
            gpu = _use_gpu_buffers(config.buffers, engine_name)
            fs_type = _filesystem_of(workspace.root)["type"]
            if fs_type in MEMORY_FILESYSTEMS:
                # Cold reads of a memory filesystem are memory copies: say it before anyone
                # reads the figures as a disk's.
                run_notes.append(
                    f"{workspace.root} is on {fs_type} (memory, not a disk): the figures measure "
                    "memory copies"
                )
                _log(progress, f"warning: {run_notes[-1]}")
            with _Progress(progress) as bar:
                with _failing("writing the layouts"):
                    written = _write_layouts(workload, config, workspace.root, bar)
                with _failing("planning the restores"):
                    restores, files = _restore_sets(workload, config, written)
                engine_opts: dict[str, Any] = {}
                if config.engine_threads is not None:
                    engine_opts["threads"] = config.engine_threads
                engine = open_engine(engine_name, **engine_opts)
                with _failing("restoring"):
                    raw, fio_rounds, fio = _measure(
                        workload, config, restores, files, engine, gpu, workspace.root / "fio", bar
                    )
    finally:
        if engine is not None:
            engine.close()
        workspace.cleanup()

    summaries = {
        name: tuple(summarize(raw[(name, c)]) for c in config.concurrency) for name in layouts
    }
    all_runs = [r for rs in raw.values() for r in rs]
    o_direct = all(r.o_direct for r in all_runs)
    fio_summary = _fio_summary(fio_rounds, fio["reason"], fio["ioengine"], layouts)
    provenance = {
        "fcctl_version": _version(),
        "host": platform.node(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "directory": str(workspace.root),
        "kept": config.keep,
        "filesystem": _filesystem_of(workspace.root if config.keep else workspace.root.parent),
        "started_utc": started,
        "finished_utc": _utc_now(),
        "engine_reason": engine_reason,
        "engine_notes": sorted({n for r in all_runs for n in r.notes}),
        "settings": {
            "model": workload.geometry.name,
            "tp": workload.geometry.tp,
            "source": workload.source,
            "scale": workload.scale,
            "turns_per_session": [s.turns for s in workload.sessions],
            "piece_bytes": workload.piece_bytes,
            "block_bytes": workload.block_bytes,
            "bucket_bytes": config.bucket_bytes,
            "memory_tier_bytes": getattr(written.get("eviction"), "memory_tier_bytes", None),
            "gap_bytes": config.gap_bytes,
            "max_command_bytes": config.max_command_bytes,
            "engine_threads": config.engine_threads,
            "restore_buffers": "gpu" if gpu else "host",
            "concurrency": list(config.concurrency),
            "repeat": config.repeat,
            "cold": "fsync + posix_fadvise(DONTNEED) on every file before each run"
            + (", O_DIRECT reads" if o_direct else ""),
            "verification": "every byte read is checked after the timed region; verified_bytes "
            "and mismatched_blocks (block x layer pieces) sum over the repeats",
        },
        "restore_bytes_per_s_samples": {
            f"{name}@{r.concurrency}": list(r.samples_bytes_per_s)
            for name, rs in summaries.items()
            for r in rs
        },
        "fio": {
            "reason": fio_summary.reason,
            "version": fio_summary.version,
            "ioengine": fio_summary.ioengine,
            "best_job": fio_summary.best_job,
            "rounds": list(fio_summary.samples),
            "note": "replay: iolog v2, read_iolog, replay_no_stall=1, direct=1, one job per "
            "stream of sessions (streams = max concurrency), iodepth 8 each",
        },
        "notes": [*workload.notes, *run_notes, *fio["notes"]],
    }
    return IobenchResult(
        engine_name=engine_name,
        o_direct=o_direct,
        gds=next((r.gds for r in all_runs if r.gds is not None), None),
        engine_reason=engine_reason,
        workload=workload,
        fio=fio_summary,
        layouts=summaries,
        provenance=provenance,
        mismatch_examples=tuple(x for r in all_runs for x in r.mismatch_examples)[:5],
    )


def _write_layouts(
    workload: Workload, config: IobenchConfig, root: Path, bar: _Progress
) -> dict[str, FlatLayout | EvictionLayout]:
    written: dict[str, FlatLayout | EvictionLayout] = {}
    total = workload.bytes * len(config.layouts)
    with bar.task("writing layouts", total=total, unit="MiB", per_unit=2**20) as advance:
        if "flat" in config.layouts:
            written["flat"] = write_flat_layout(workload, root / "flat", on_bytes=advance)
        if "eviction" in config.layouts:
            written["eviction"] = write_eviction_layout(
                workload,
                root / "eviction",
                bucket_bytes=config.bucket_bytes,
                memory_tier_bytes=config.memory_tier_bytes,
                on_bytes=advance,
            )
    return written


def _restore_sets(
    workload: Workload, config: IobenchConfig, written: dict[str, FlatLayout | EvictionLayout]
) -> tuple[dict[str, list[SessionRestore]], dict[str, list[str]]]:
    """Per layout: every session's restore plans, and the files a cold run must drop."""
    restores: dict[str, list[SessionRestore]] = {}
    files: dict[str, list[str]] = {}
    for name, layout in written.items():
        if isinstance(layout, FlatLayout):
            restores[name] = flat_restores(
                workload,
                layout,
                gap_bytes=config.gap_bytes,
                max_command_bytes=config.max_command_bytes,
            )
            files[name] = [str(p) for p in layout.session_files]
        else:
            restores[name] = eviction_restores(workload, layout)
            files[name] = [str(p) for p in layout.bucket_files]
    return restores, files


def _measure(
    workload: Workload,
    config: IobenchConfig,
    restores: dict[str, list[SessionRestore]],
    files: dict[str, list[str]],
    engine: Any,
    gpu: bool,
    fio_dir: Path,
    bar: _Progress,
) -> tuple[dict[tuple[str, int], list[RunResult]], list[dict[str, Any]], dict[str, Any]]:
    """The repeats: a fio round, then each concurrency's restore of each layout in turn."""
    from fcctl.layout.engines import drop_file_cache

    buffers = {name: allocate_buffers(rs, gpu=gpu) for name, rs in restores.items()}
    all_files = [f for name in config.layouts for f in files[name]]
    fio_bin, ioengine, fio_reason, notes = _fio_setup(config, all_files)
    fio_dir.mkdir(exist_ok=True)
    fio_rounds: list[dict[str, Any]] = []
    raw: dict[tuple[str, int], list[RunResult]] = {}
    total_runs = config.repeat * len(config.concurrency) * len(config.layouts)
    with bar.task("restore runs", total=total_runs, unit="runs") as advance:
        for round_index in range(config.repeat):
            if fio_bin and ioengine:
                try:
                    fio_rounds.append(
                        _fio_round(
                            fio_bin,
                            ioengine,
                            all_files,
                            restores,
                            fio_dir,
                            config,
                            streams=min(max(config.concurrency), len(workload.sessions)),
                            round_index=round_index,
                        )
                    )
                except (fio_mod.FioError, OSError) as e:
                    fio_bin, fio_reason = None, f"fio failed: {e}"
                    print(f"iobench: fio reference skipped: {fio_reason}", file=sys.stderr)
            # Layouts alternate run by run, and the one that goes first swaps every repeat
            # (flat, eviction | eviction, flat | ...), so drift and any warm-up hit both.
            layouts = config.layouts if round_index % 2 == 0 else config.layouts[::-1]
            for conc in config.concurrency:
                for name in layouts:

                    def drop(_files: list[str] = files[name]) -> None:
                        for f in _files:
                            drop_file_cache(f)

                    run = run_restore(
                        name,
                        restores[name],
                        buffers[name],
                        engine,
                        concurrency=conc,
                        piece_bytes=workload.piece_bytes,
                        drop_cache=drop,
                    )
                    raw.setdefault((name, conc), []).append(run)
                    advance(1)
    return raw, fio_rounds, {"reason": fio_reason, "ioengine": ioengine, "notes": notes}


def _fio_setup(
    config: IobenchConfig, files: list[str]
) -> tuple[str | None, str | None, str, list[str]]:
    """``(fio binary, ioengine, why not, notes)``; None, None when fio cannot run here."""
    if not config.fio:
        return None, None, "--no-fio given", []
    fio_bin = fio_mod.find_fio()
    if fio_bin is None:
        reason = "fio is not installed; apt-get install fio"
        print(f"iobench: fio reference skipped: {reason}", file=sys.stderr)
        return None, None, reason, []
    try:
        ioengine, why = fio_mod.pick_ioengine(fio_bin, files[0])
    except (fio_mod.FioError, OSError) as e:
        print(f"iobench: fio reference skipped: {e}", file=sys.stderr)
        return None, None, str(e), []
    return fio_bin, ioengine, "", [f"fio: {why}"] if why else []


def _use_gpu_buffers(choice: str, engine_name: str) -> bool:
    if choice == "host":
        return False
    try:
        import cupy

        ok = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception as e:  # no CuPy or no driver: say so only when GPU buffers were demanded
        if choice == "gpu":
            raise FcctlInputError(f"--buffers gpu: CuPy cannot use a GPU here ({e})") from None
        return False
    if choice == "gpu" and not ok:
        raise FcctlInputError("--buffers gpu: CuPy sees no GPU here")
    return ok and (choice == "gpu" or engine_name == "kvikio")


def _version() -> str:
    try:
        from fcctl import __version__

        return __version__
    except ImportError:  # iobench is usable without the CLI package
        return "unknown"


def _fio_summary(
    rounds: list[dict[str, Any]],
    reason: str,
    ioengine: str | None,
    layouts: tuple[str, ...],
) -> FioSummary:
    if not rounds:
        return FioSummary(
            available=False,
            reason=reason or "fio did not run",
            replay_bytes_per_s=dict.fromkeys(LAYOUTS),
        )
    fio_bin = fio_mod.find_fio()
    replay = {
        k: (statistics.median(r["replay"][k] for r in rounds) if k in layouts else None)
        for k in LAYOUTS
    }
    best = max(rounds, key=lambda r: r["seq_read_bytes_per_s"])
    return FioSummary(
        available=True,
        reason=reason,
        version=fio_mod.fio_version(fio_bin) if fio_bin else "",
        ioengine=ioengine,
        seq_read_bytes_per_s=statistics.median(r["seq_read_bytes_per_s"] for r in rounds),
        best_job=best["best_job"],
        replay_bytes_per_s=replay,
        samples=tuple(rounds),
    )
