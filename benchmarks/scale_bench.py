"""Benchmark ``fcctl analyze`` at scale: a synthetic 1 B-access agent dataset (issue #10 §6).

Usage (figures recorded in docs/benchmarks.md, "Scale: 1 B accesses")::

    python3 benchmarks/scale_bench.py --workdir /tmp/scale --markdown --dask-partition-rows 16384
    python3 benchmarks/scale_bench.py --requests 69000 --sessions 1000 \\
        --slice-accesses 20000000 --skip-dask                          # a quick run

What runs, in this order. This process imports neither numba nor polars and stays small (a
child's ``ru_maxrss`` includes the RSS of the parent it was forked from); every heavy step is
a child process, the timed ones first:

1. the dataset: ``fcctl synth --profile agent --requests N --sessions S --seed 0`` into
   ``WORKDIR/dataset`` (reused when its ``synth.json`` has the same arguments and every part is
   there), timed; bytes on disk;
2. the timed run: ``fcctl analyze WORKDIR/dataset --json`` at the default budget
   (``bounded.default_memory_budget()``, or ``--memory-budget``): wall time, peak RSS of the
   child from ``os.wait4`` (its ``ru_maxrss``), cross-checked by sampling ``/proc`` every
   0.2 s; the plan it chose from the JSON (``trace.sample_rate``, ``trace.sampling``);
3. the slice: the dataset's first requests up to ``--slice-accesses`` block accesses (default
   100 M), written as a dataset of its own (a prefix of the same stream, so the same sessions
   and prompts), cut as ``fcctl convert --partition-by session-hash --partitions 16`` cuts
   (``partitioned.write_partitioned``) into ``WORKDIR/slice``; ``fcctl analyze SLICE
   --sample-rate R --json`` (R: the rate step 2 chose) and ``--sample-rate 1 --json``
   (exact), timed; their
   ``memory_tier`` and ``reuse_distance.stack_blocks`` side by side, and every figure of
   ``trace.sampling.exact_figures`` compared for equality: a difference prints ``FAIL`` and
   the script exits 1;
4. the Dask engine, when ``fcctl.analyzers.reuse.dask_engine`` and dask are importable (else
   reported as not run): ``fcctl analyze DIR --engine dask --json`` on the 1 B dataset at the
   local run's budget (not with ``--dask-on slice``), at each ``--dask-memory-budget``, and on
   a copy cut into parts of ``--dask-partition-rows`` requests (the same trace: synth's bytes
   do not depend on the cut); then ``--sample-rate R`` on the slice: wall time (a full-size run
   is stopped after ``--dask-timeout``), peak RSS of the process tree (the CLI and its
   LocalCluster workers, summed over ``/proc`` at each sample) and of its largest process, and
   its figures against the local run's of the same trace (exact figures must be equal; the
   sampled ones are compared too, the engine's docstring says bit for bit). A refusal (exit 2)
   or failure is reported and the next run tried; a crash, or no Dask run that finished,
   exits 1;
5. the error, in a child with the library (after the timed runs): the exact LRU stack counts
   of the slice (``stack.flatten_accesses`` + ``reuse_pass``, what analyze runs) against
   ``shards.sampled_stack(ids, rate=R)`` with the exact head the analysis used (its JSON's
   ``exact_below_blocks``), with ``bounded.head_blocks(R)`` (``ceil(1024 / R)``) and with none
   (pure SHARDS), each with the exact distinct-block count as the bounded analysis gives it;
   ``shards.shards_error`` over analyze's default capacities and the 33-point grid of
   ``benchmarks/shards_error.py`` (1 GiB..4 TiB, 8 MiB blocks of llama-3.1-8b), and the
   relative error of the p50/p90/p99 stack distance.

Goals (issue #10): 1 B accesses under 8 GiB peak RSS and under 10 minutes on 2 cores; under
1 pp mean absolute hit-share error at the rate the default budget picks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import REPO, GiB
from recommend_bench import TreeSampler

FCCTL = [sys.executable, "-m", "fcctl"]
GOAL_RSS_GIB = 8.0
GOAL_WALL_S = 600.0
GOAL_ERROR_PP = 1.0
#: ``fcctl synth``'s default part size (parts are also cut at 32 Mi accesses), said explicitly
#: so that a kept dataset is reused only when cut the same way.
SYNTH_PARTITION_ROWS = 65_536
#: The slice is cut as ``fcctl convert --partition-by session-hash --partitions 16`` would.
SLICE_PARTITIONS = 16


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """One timed child process."""

    cmd: list[str]
    wall_s: float
    maxrss_gib: float  # os.wait4 ru_maxrss: the child's own peak (or its largest descendant's)
    tree_peak_gib: float  # /proc: the process tree's RSS summed at each 0.2 s sample, the peak
    process_peak_gib: float  # /proc: the largest VmHWM of any process of the tree
    processes: int  # most processes seen in the tree at once
    stdout: str
    returncode: int
    timed_out: bool
    load_before: str
    load_after: str


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def run_child(cmd: list[str], log: Path, *, timeout_s: float | None = None) -> ChildRun:
    """Run ``cmd`` (stderr to ``log``); time it and measure its memory (see :class:`ChildRun`).

    The child leads a process group of its own, so a timeout ends it and everything it
    started (a LocalCluster's workers) and nothing else.
    """
    load_before = _loadavg()
    with tempfile.TemporaryFile() as out, log.open("wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=REPO, start_new_session=True)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        expired = threading.Event()
        kill = threading.Timer(30.0, lambda: _signal_group(proc.pid, signal.SIGKILL))

        def _expire() -> None:
            # SIGTERM first: fcctl closes its cluster on the way out; SIGKILL 30 s later.
            expired.set()
            _signal_group(proc.pid, signal.SIGTERM)
            kill.start()

        timer = threading.Timer(timeout_s, _expire) if timeout_s else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if timer is not None:
            timer.cancel()
            kill.cancel()
        sampler.stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    return ChildRun(
        cmd=cmd,
        wall_s=wall,
        maxrss_gib=usage.ru_maxrss / 2**20,  # KiB on Linux
        tree_peak_gib=sampler.peak_tree_kib / 2**20,
        process_peak_gib=sampler.peak_process_kib / 2**20,
        processes=sampler.max_processes,
        stdout=text,
        returncode=proc.returncode,
        timed_out=expired.is_set(),
        load_before=load_before,
        load_after=_loadavg(),
    )


def checked(run: ChildRun, log: Path) -> ChildRun:
    """``run`` when it succeeded; otherwise exit naming the command and its log's tail."""
    if run.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise SystemExit(
            f"{' '.join(run.cmd)} failed with exit status {run.returncode}; "
            f"{log}:\n  " + "\n  ".join(tail)
        )
    return run


# --- the dataset and the slice ---------------------------------------------------------------


def _synth_matches(directory: Path, want: dict[str, object]) -> bool:
    """Whether ``directory`` holds a complete ``fcctl synth`` output with these arguments."""
    try:
        manifest = json.loads((directory / "synth.json").read_text())
    except (OSError, ValueError):
        return False
    if any(manifest.get(k) != v for k, v in want.items()):
        return False
    return all(
        (directory / p["file"]).is_file() and (directory / p["file"]).stat().st_size == p["bytes"]
        for p in manifest["parts"]
    )


def bytes_on_disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def slice_worker(src: Path, dest: Path, target_accesses: int) -> None:
    """Child mode: write the first requests of ``src`` up to ``target_accesses`` accesses.

    The parts of an ``fcctl synth`` dataset are consecutive request ranges, so the first
    parts, cut at the request where the accesses reach the target, are the trace's first
    requests with their global indices 0..n-1 and parents among them: a canonical trace,
    written as a dataset partitioned by session hash into ``dest``.
    """
    import polars as pl

    from fcctl.analyzers.traces.canonical import read_canonical
    from fcctl.analyzers.traces.partitioned import write_partitioned

    manifest = json.loads((src / "synth.json").read_text())
    first = read_canonical(src / manifest["parts"][0]["file"])  # part 0 is a canonical file
    frames, total = [first.requests], manifest["parts"][0]["block_accesses"]
    for part in manifest["parts"][1:]:
        if total >= target_accesses:
            break
        frame = pl.read_parquet(src / part["file"]).select(first.requests.columns)
        frames.append(frame.cast(first.requests.schema))
        total += part["block_accesses"]
    frame = pl.concat(frames)
    del frames
    cum = frame["hash_ids"].list.len().cast(pl.Int64).cum_sum().to_numpy()
    n = min(int((cum < target_accesses).sum()) + 1, frame.height)
    accesses = int(cum[n - 1])
    note = (
        f"the first {n:,} requests ({accesses:,} block accesses) of {src} "
        "(benchmarks/scale_bench.py slice)"
    )
    trace = dataclasses.replace(first, requests=frame.head(n), notes=(*first.notes, note))
    del frame
    written = write_partitioned(
        trace, dest, by="session-hash", partitions=SLICE_PARTITIONS, force=True
    )
    print(json.dumps({"requests": n, "block_accesses": accesses, "parts": len(written.parts)}))


# --- the error against the exact result ------------------------------------------------------


def error_worker(slice_dir: Path, rate: float, head: int, model: str) -> None:
    """Child mode: exact stack counts of the slice against the SHARDS estimate at ``rate``.

    Three exact heads: ``head`` (the analysis's ``exact_below_blocks``), ``head_blocks(rate)``
    (``ceil(1024 / rate)``, the least the analysis uses) and none (pure SHARDS).
    """
    from shards_error import DENSE_CAPACITIES_BYTES

    from fcctl.analyzers.reuse.bounded import head_blocks
    from fcctl.analyzers.reuse.memory_tier import DEFAULT_MEMORY_CAPACITIES_BYTES
    from fcctl.analyzers.reuse.shards import block_ids, sampled_stack, shards_error
    from fcctl.analyzers.reuse.stack import flatten_accesses, reuse_pass
    from fcctl.analyzers.traces.dataset import open_dataset
    from fcctl.layout.geometry import model_geometry

    trace = open_dataset(slice_dir).load_trace()
    block_bytes = model_geometry(model).bytes_per_block(trace.block_size_tokens)
    start = time.perf_counter()
    acc = flatten_accesses(trace.requests)
    exact = reuse_pass(acc, trace.requests["timestamp_s"].to_numpy())
    exact_s = time.perf_counter() - start
    del acc
    ids = block_ids(trace.requests)
    del trace
    grids = {
        "default": [c // block_bytes for c in DEFAULT_MEMORY_CAPACITIES_BYTES],
        "dense": [c // block_bytes for c in DENSE_CAPACITIES_BYTES],
    }
    rows = []
    heads = {"analysis": head, "head_blocks(R)": head_blocks(rate), "pure SHARDS": 0}
    if heads["head_blocks(R)"] == head:
        del heads["head_blocks(R)"]
    for label, k in heads.items():
        start = time.perf_counter()
        sampled = sampled_stack(ids, rate=rate, exact_below_blocks=k)
        sampled = sampled.with_distinct_blocks(exact.num_blocks)
        sampled_s = time.perf_counter() - start
        row: dict[str, object] = {
            "estimator": label,
            "exact_below_blocks": sampled.exact_below_blocks,
            "sampled_accesses": sampled.sampled_accesses,
            "sampled_s": sampled_s,
        }
        for grid, caps in grids.items():
            e = shards_error(exact.stack_count, exact.num_accesses, sampled, caps)
            row[f"{grid}_mean_pp"] = e.mean_abs_error_pp
            row[f"{grid}_max_pp"] = e.max_abs_error_pp
            if grid == "default":
                row["capacities_blocks"] = list(e.capacities_blocks)
                row["exact_hit_share"] = list(e.exact_hit_share)
                row["sampled_hit_share"] = list(e.sampled_hit_share)
                row["percentiles"] = {
                    f"p{int(q)}": {
                        "exact": e.exact_percentiles[q],
                        "sampled": e.sampled_percentiles[q],
                        "rel_error": e.percentile_rel_error[q],
                    }
                    for q in e.percentile_rel_error
                }
        rows.append(row)
    print(
        json.dumps(
            {
                "accesses": exact.num_accesses,
                "distinct_blocks": exact.num_blocks,
                "block_bytes": block_bytes,
                "exact_s": exact_s,
                "rate": rate,
                "rows": rows,
            }
        )
    )


# --- comparing analyze documents -------------------------------------------------------------

#: ``trace`` keys that say how the figures were made or where the files are, not what the
#: figures are (a copy of the trace cut into other parts has another path and file count).
_TRACE_PLAN_KEYS = ("sampled", "sample_rate", "sampling", "path", "dataset")


def _get(doc: dict, dotted: str) -> object:
    value: object = doc
    for key in dotted.split("."):
        assert isinstance(value, dict)
        value = value.get(key)
    return value


#: The figures every engine and plan computes exactly (``bounded.EXACT_FIGURES`` less the
#: memory tier's head), for comparing two documents neither of which is sampled.
PARTITIONING_FIGURES = (
    "trace",
    "once_only_block_share",
    "reuse_access_share",
    "reuse_distance.requests",
    "reuse_distance.seconds",
    "sessions",
    "request_sizes",
)


def exact_differences(a: dict, b: dict) -> list[str]:
    """The exact figures (``trace.sampling.exact_figures``) in which ``a`` and ``b`` differ.

    The list is the sampled document's (either's when both are; :data:`PARTITIONING_FIGURES`
    when neither is). ``trace`` is compared without the keys that describe the plan; the
    memory-tier entry compares the points at or below every sampled document's
    ``exact_below_blocks``.
    """
    plans = [d["trace"]["sampling"] for d in (a, b) if d["trace"].get("sampling")]
    figures = plans[0]["exact_figures"] if plans else list(PARTITIONING_FIGURES)
    head = min((p["exact_below_blocks"] for p in plans), default=0)
    diffs = []
    for entry in figures:
        name = entry.split(" ")[0]
        x: object  # the two documents' values of this figure, compared for equality only
        y: object
        if name == "trace":
            x, y = (
                {k: v for k, v in d["trace"].items() if k not in _TRACE_PLAN_KEYS} for d in (a, b)
            )
        elif name == "memory_tier":
            x, y = (
                [
                    {k: v for k, v in p.items() if k != "sampled"}
                    for p in d["memory_tier"]
                    if p["capacity_blocks"] <= head
                ]
                for d in (a, b)
            )
        else:
            x, y = _get(a, name), _get(b, name)
        if x != y:
            diffs.append(entry)
    return diffs


# --- the run ---------------------------------------------------------------------------------


def _gib(x: float) -> str:
    return f"{x:.2f}"


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, help="keep (and reuse) the generated data here")
    ap.add_argument("--requests", type=int, default=690_000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--profile", default="agent")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slice-accesses", type=int, default=100_000_000)
    ap.add_argument(
        "--memory-budget",
        help="analyze's --memory-budget (default: analyze's, bounded.default_memory_budget())",
    )
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--dask-on", choices=("full", "slice"), default="full")
    ap.add_argument(
        "--dask-memory-budget",
        action="append",
        help="also run Dask on the full dataset at this budget (repeatable)",
    )
    ap.add_argument(
        "--dask-partition-rows",
        type=int,
        help="also run Dask on a copy of the dataset cut into parts of this many requests",
    )
    ap.add_argument(
        "--dask-timeout",
        type=float,
        default=1200.0,
        help="seconds before a Dask run on the full dataset is stopped",
    )
    ap.add_argument("--markdown", action="store_true", help="also print rows for the docs")
    ap.add_argument("--save", type=Path, help="write every figure as JSON here")
    args = ap.parse_args()

    temp = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="scale-bench-")) if temp else args.workdir
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _run(args, work)
    finally:
        if temp:
            shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path) -> int:
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    machine = f"{os.cpu_count()} CPUs, {mem_total / GiB:.1f} GiB"
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "analyzers", "fcctl"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    code = f"{head or '?'}" + (f" + {len([d for d in dirty if d])} changed file(s)" * any(dirty))
    print(
        f"{started}; {machine}; code {code}; workdir {work}; load average {_loadavg()}",
        flush=True,
    )
    budget = ["--memory-budget", args.memory_budget] if args.memory_budget else []
    model = ["--model", args.model]
    report: dict[str, object] = {"started": started, "machine": machine, "code": code}

    # 1. the dataset
    data = work / "dataset"
    want = {
        "profile": args.profile,
        "requests": args.requests,
        "sessions": args.sessions,
        "seed": args.seed,
        "block_size_tokens": 64,
        "partition_rows": SYNTH_PARTITION_ROWS,
    }
    synth_cmd = [
        *FCCTL,
        "synth",
        "--profile",
        args.profile,
        "--requests",
        str(args.requests),
        "--sessions",
        str(args.sessions),
        "--seed",
        str(args.seed),
        "--partition-rows",
        str(SYNTH_PARTITION_ROWS),
        "-o",
        str(data),
    ]
    if _synth_matches(data, want):
        synth_s = None
        print(f"dataset: reusing {data} (synth.json has the same arguments)", flush=True)
    else:
        force = ["--force"] if (data / "synth.json").exists() else []
        if data.exists() and not force:
            shutil.rmtree(data)
        log = logs / "synth.log"
        synth = checked(run_child([*synth_cmd, *force], log), log)
        synth_s = synth.wall_s
        print(f"dataset: {' '.join(synth_cmd[2:])}: {synth.wall_s:.1f} s", flush=True)
    manifest = json.loads((data / "synth.json").read_text())
    disk = bytes_on_disk(data)
    accesses = int(manifest["block_accesses"])
    print(
        f"  {accesses:,} block accesses, {args.requests:,} requests, {len(manifest['parts'])} "
        f"parts, {disk / 2**20:.0f} MiB on disk",
        flush=True,
    )
    report["dataset"] = {
        "command": " ".join(["fcctl", *synth_cmd[3:]]),
        "synth_s": synth_s,
        "block_accesses": accesses,
        "parts": len(manifest["parts"]),
        "bytes": disk,
    }

    # 2. the timed run
    log = logs / "analyze.log"
    cmd = [*FCCTL, "analyze", str(data), "--json", *model, *budget]
    print(f"timed: {' '.join(cmd[2:])} ...", flush=True)
    full = checked(run_child(cmd, log), log)
    doc = json.loads(full.stdout)
    trace = doc["trace"]
    sampling = trace.get("sampling") or {}
    rate = trace.get("sample_rate")
    print(
        f"  {full.wall_s:.1f} s, peak RSS {full.maxrss_gib:.2f} GiB (wait4; /proc tree "
        f"{full.tree_peak_gib:.2f}); load {full.load_before} -> {full.load_after}",
        flush=True,
    )
    print(
        f"  sampled {trace['sampled']}, rate {rate}, block passes "
        f"{sampling.get('block_passes')}, exact below {sampling.get('exact_below_blocks')} "
        f"blocks, {sampling.get('sampled_accesses')} sampled accesses, budget "
        f"{(sampling.get('memory_budget_bytes') or 0) / GiB:.2f} GiB",
        flush=True,
    )
    report["local"] = {
        "command": " ".join(["fcctl", *cmd[3:]]),
        "wall_s": full.wall_s,
        "peak_rss_gib": full.maxrss_gib,
        "tree_peak_rss_gib": full.tree_peak_gib,
        "load": [full.load_before, full.load_after],
        "sampled": trace["sampled"],
        "sample_rate": rate,
        "sampling": sampling,
        "memory_tier": doc["memory_tier"],
        "stack_blocks": doc["reuse_distance"]["stack_blocks"],
    }

    # 3. the slice: sampled at the chosen rate against exact, through the CLI
    slice_dir = work / "slice"
    slice_meta = work / "slice.json"
    slice_want = {"source": want, "target_accesses": args.slice_accesses}
    meta = json.loads(slice_meta.read_text()) if slice_meta.exists() else {}
    if meta.get("made_from") != slice_want or not (slice_dir / "dataset.json").exists():
        if slice_dir.exists() and not (slice_dir / "dataset.json").exists():
            shutil.rmtree(slice_dir)  # an older benchmark's slice, in this workdir
        log = logs / "slice.log"
        made = checked(
            run_child(
                [
                    sys.executable,
                    __file__,
                    "_slice",
                    str(data),
                    str(slice_dir),
                    str(args.slice_accesses),
                ],
                log,
            ),
            log,
        )
        meta = {"made_from": slice_want, **json.loads(made.stdout)}
        slice_meta.write_text(json.dumps(meta))
    print(
        f"slice: first {meta['requests']:,} requests, {meta['block_accesses']:,} accesses, "
        f"{meta['parts']} parts by session hash ({bytes_on_disk(slice_dir) / 2**20:.0f} MiB)",
        flush=True,
    )
    slice_rate = rate if rate is not None else 1.0
    runs = {}
    for label, r in (("sampled", slice_rate), ("exact", 1.0)):
        log = logs / f"slice-{label}.log"
        cmd = [*FCCTL, "analyze", str(slice_dir), "--json", *model, "--sample-rate", f"{r:g}"]
        runs[label] = checked(run_child(cmd, log), log)
        print(
            f"  {' '.join(cmd[2:])}: {runs[label].wall_s:.1f} s, {runs[label].maxrss_gib:.2f} GiB",
            flush=True,
        )
    s_doc, e_doc = (json.loads(runs[k].stdout) for k in ("sampled", "exact"))
    diffs = exact_differences(s_doc, e_doc)
    failed = bool(diffs)
    for entry in diffs:
        print(f"FAIL: slice at rate {slice_rate:g} and exact differ in {entry}", flush=True)
    report["slice"] = {
        **meta,
        "bounded_s": runs["sampled"].wall_s,
        "bounded_rss_gib": runs["sampled"].maxrss_gib,
        "exact_s": runs["exact"].wall_s,
        "exact_rss_gib": runs["exact"].maxrss_gib,
        "exact_figures_equal": not diffs,
        "exact_figures_checked": (s_doc["trace"].get("sampling") or {}).get("exact_figures"),
        "differences": diffs,
        "memory_tier": [
            {
                "capacity_bytes": a["capacity_bytes"],
                "sampled": a["sampled"],
                "lru_hit_share_sampled": a["lru_hit_share"],
                "lru_hit_share_exact": b["lru_hit_share"],
            }
            for a, b in zip(s_doc["memory_tier"], e_doc["memory_tier"], strict=True)
        ],
        "stack_blocks_sampled": s_doc["reuse_distance"]["stack_blocks"],
        "stack_blocks_exact": e_doc["reuse_distance"]["stack_blocks"],
    }

    # 4. Dask
    dask_report = _dask(args, work, want, slice_dir, doc, s_doc, slice_rate, model, logs)
    report["dask"] = dask_report
    failed = failed or bool((dask_report or {}).get("failed"))

    # 5. the error, in the library, after the timed runs
    if rate is not None:
        log = logs / "error.log"
        head = str(sampling["exact_below_blocks"])
        cmd = [sys.executable, __file__, "_error", str(slice_dir), f"{rate!r}", head, args.model]
        err = checked(run_child(cmd, log), log)
        report["error"] = json.loads(err.stdout)
    else:
        report["error"] = None
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    report["load_end"] = _loadavg()
    _print_table(report)
    if args.markdown:
        _print_markdown(report)
    if args.save:
        args.save.write_text(json.dumps(report, indent=1))
    print(f"\nfinished {report['finished']}; load average {report['load_end']}")
    return 1 if failed else 0


def _dask(
    args: argparse.Namespace,
    work: Path,
    want: dict[str, object],
    slice_dir: Path,
    local_doc: dict,
    slice_doc: dict,
    slice_rate: float,
    model: list[str],
    logs: Path,
) -> dict[str, object] | None:
    """The Dask engine's runs and their figures against the local ones (None: skipped).

    See the module docstring (step 4) for which runs; each is compared with the local document
    of the same trace: the 1 B run, or the slice's run at the same rate.
    """
    if args.skip_dask:
        print("dask: skipped (--skip-dask)", flush=True)
        return None
    missing = [
        m
        for m in ("dask", "distributed", "fcctl.analyzers.reuse.dask_engine")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        print(f"dask: not run: {', '.join(missing)} not importable", flush=True)
        return {"ran": False, "reason": f"{', '.join(missing)} not importable", "runs": []}
    local_budget = str((local_doc["trace"].get("sampling") or {}).get("memory_budget_bytes"))
    if args.memory_budget:
        local_budget = args.memory_budget
    data = work / "dataset"
    attempts: list[tuple[str, Path, dict, str, list[str]]] = []
    if args.dask_on == "full":
        attempts.append(("full", data, local_doc, local_budget, []))
        attempts += [("full", data, local_doc, b, []) for b in args.dask_memory_budget or []]
        if args.dask_partition_rows:
            rows = args.dask_partition_rows
            copy = work / f"dataset-rows-{rows}"
            if not _synth_matches(copy, {**want, "partition_rows": rows}):
                log = logs / f"synth-rows-{rows}.log"
                cmd = [*FCCTL, "synth", "--force", "--partition-rows", str(rows), "-o", str(copy)]
                for k in ("profile", "requests", "sessions", "seed"):
                    cmd += [f"--{k}", str(want[k])]
                made = checked(run_child(cmd, log), log)
                print(f"dask: the same trace in parts of {rows:,} rows: {made.wall_s:.1f} s")
            attempts.append((f"full, parts of {rows:,} rows", copy, local_doc, local_budget, []))
    rate = ["--sample-rate", f"{slice_rate:g}"]
    attempts.append(("slice", slice_dir, slice_doc, local_budget, rate))
    runs = []
    for n, (label, target, reference, budget, extra) in enumerate(attempts):
        log = logs / f"dask-{n}.log"
        cmd = [*FCCTL, "analyze", str(target), "--engine", "dask", "--json", *model]
        cmd += ["--memory-budget", budget, *extra]
        print(f"dask: {' '.join(cmd[2:])} ...", flush=True)
        full = label.startswith("full")
        run = run_child(cmd, log, timeout_s=args.dask_timeout if full else None)
        row: dict[str, object] = {
            "on": label,
            "memory_budget": budget,
            "command": " ".join(["fcctl", *cmd[3:]]),
            "wall_s": run.wall_s,
            "tree_peak_rss_gib": run.tree_peak_gib,
            "process_peak_rss_gib": run.process_peak_gib,
            "processes": run.processes,
            "load": [run.load_before, run.load_after],
            "log": str(log),
        }
        runs.append(row)
        if run.timed_out or run.returncode != 0:
            # The engine's refusal or failure is a figure of this benchmark, not its end.
            lines = log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
            row["outcome"] = (
                f"stopped after {run.wall_s:.0f} s (--dask-timeout)"
                if run.timed_out
                else f"exit status {run.returncode} after {run.wall_s:.0f} s: {lines[-1][:400]}"
            )
            row["crashed"] = not run.timed_out and run.returncode != 2
            tag = "FAIL: " if row["crashed"] else ""
            print(f"  {tag}not run to the end: {row['outcome']}", flush=True)
            continue
        dask_doc = json.loads(run.stdout)
        diffs = exact_differences(dask_doc, reference)
        same_sampled = all(
            _get(dask_doc, k) == _get(reference, k)
            for k in ("memory_tier", "reuse_distance.stack_blocks")
        )
        sampling = dask_doc["trace"].get("sampling") or {}
        row.update(
            outcome="ok",
            sampled=dask_doc["trace"]["sampled"],
            sample_rate=dask_doc["trace"].get("sample_rate"),
            exact_below_blocks=sampling.get("exact_below_blocks"),
            differences=diffs,
            sampled_figures_equal=same_sampled,
        )
        for entry in diffs:
            print(f"FAIL: dask and local differ in {entry} ({label})", flush=True)
        print(
            f"  {run.wall_s:.1f} s, process tree {run.tree_peak_gib:.2f} GiB (largest process "
            f"{run.process_peak_gib:.2f}, {run.processes} processes); exact figures "
            + ("equal" if not diffs else "DIFFER")
            + "; memory tier and stack distances "
            + ("equal" if same_sampled else "differ"),
            flush=True,
        )
    ok = [r for r in runs if r["outcome"] == "ok"]
    return {
        "ran": bool(ok),
        "reason": "" if ok else "no Dask run finished",
        "runs": runs,
        "failed": not ok
        or any(r["differences"] for r in ok)
        or any(r.get("crashed") for r in runs),
    }


def _dask_rows(dk: dict | None) -> list[tuple[str, str, str]]:
    """(figure, value, note) rows of the Dask runs."""
    if dk is None:
        return [("Dask", "skipped", "")]
    if not dk["runs"]:
        return [("Dask", "not run", dk["reason"])]
    rows = []
    for r in dk["runs"]:
        name = f"Dask, {r['on']} dataset, --memory-budget {r['memory_budget']}"
        if r["outcome"] != "ok":
            rows.append((f"{name}: wall s", f"{r['wall_s']:.1f}", r["outcome"]))
            continue
        same = "yes" if not r["differences"] else "NO: " + ", ".join(r["differences"])
        rows += [
            (f"{name}: wall s", f"{r['wall_s']:.1f}", f"rate {r['sample_rate']}"),
            (
                "  peak RSS GiB, process tree summed / largest process",
                f"{r['tree_peak_rss_gib']:.2f} / {r['process_peak_rss_gib']:.2f}",
                f"{r['processes']} processes",
            ),
            ("  exact figures equal the local run's", same, ""),
            (
                "  memory tier, stack distances equal the local run's",
                "yes" if r["sampled_figures_equal"] else "no",
                "",
            ),
        ]
    return rows


def _print_table(r: dict) -> None:
    ds, loc, sl, err, dk = r["dataset"], r["local"], r["slice"], r["error"], r["dask"]
    s = loc["sampling"]
    print(f"\n{'figure':66}{'value':>18}  goal")
    rows = [
        ("block accesses", f"{ds['block_accesses']:,}", ""),
        ("dataset on disk, MiB", f"{ds['bytes'] / 2**20:.0f}", ""),
        (
            "fcctl synth, s",
            "reused" if ds["synth_s"] is None else f"{ds['synth_s']:.1f}",
            "",
        ),
        (
            "fcctl analyze (1 B), wall s",
            f"{loc['wall_s']:.1f}",
            f"< {GOAL_WALL_S:.0f}: {_met(loc['wall_s'] < GOAL_WALL_S)}",
        ),
        (
            "fcctl analyze (1 B), peak RSS GiB (os.wait4 ru_maxrss)",
            _gib(loc["peak_rss_gib"]),
            f"< {GOAL_RSS_GIB:.0f}: {_met(loc['peak_rss_gib'] < GOAL_RSS_GIB)}",
        ),
        ("  same, /proc sampled every 0.2 s", _gib(loc["tree_peak_rss_gib"]), ""),
        ("  M accesses/s", f"{ds['block_accesses'] / loc['wall_s'] / 1e6:.2f}", ""),
        ("  budget GiB", _gib((s.get("memory_budget_bytes") or 0) / GiB), ""),
        ("  sample rate / block passes", f"{loc['sample_rate']} / {s.get('block_passes')}", ""),
        ("  exact below (blocks)", f"{s.get('exact_below_blocks', 0):,}", ""),
        ("  sampled accesses", f"{s.get('sampled_accesses', 0):,}", ""),
        (
            f"slice ({sl['block_accesses'] / 1e6:.0f} M accesses): bounded s / exact s",
            f"{sl['bounded_s']:.1f} / {sl['exact_s']:.1f}",
            f"ratio {sl['bounded_s'] / sl['exact_s']:.2f}",
        ),
        (
            "  peak RSS GiB bounded / exact",
            f"{_gib(sl['bounded_rss_gib'])} / {_gib(sl['exact_rss_gib'])}",
            "",
        ),
        (
            "  exact figures identical",
            "yes" if sl["exact_figures_equal"] else "NO",
            "" if sl["exact_figures_equal"] else "FAIL: " + ", ".join(sl["differences"]),
        ),
    ]
    if err is not None:
        for row in err["rows"]:
            p = row["percentiles"]
            rel = " / ".join(
                "-" if p[q]["rel_error"] is None else f"{100 * p[q]['rel_error']:.1f}%"
                for q in ("p50", "p90", "p99")
            )
            name = f"  error, {row['estimator']} (head {row['exact_below_blocks']:,})"
            rows += [
                (
                    f"{name}: default caps mean / max pp",
                    f"{row['default_mean_pp']:.3f} / {row['default_max_pp']:.3f}",
                    f"< {GOAL_ERROR_PP:g} pp mean: {_met(row['default_mean_pp'] < GOAL_ERROR_PP)}",
                ),
                (
                    f"{name}: dense grid mean / max pp",
                    f"{row['dense_mean_pp']:.3f} / {row['dense_max_pp']:.3f}",
                    f"< {GOAL_ERROR_PP:g} pp mean: {_met(row['dense_mean_pp'] < GOAL_ERROR_PP)}",
                ),
                (f"{name}: p50 / p90 / p99 rel", rel, ""),
            ]
        rows.append(("  exact pass on the slice, in process, s", f"{err['exact_s']:.1f}", ""))
    rows += _dask_rows(dk)
    for name, value, goal in rows:
        print(f"{name:66}{value:>18}  {goal}")
    print("\nslice memory tier, sampled at the chosen rate against exact (CLI):")
    for p in sl["memory_tier"]:
        a, b = p["lru_hit_share_sampled"], p["lru_hit_share_exact"]
        tag = "sampled" if p["sampled"] else "exact"
        print(
            f"  {p['capacity_bytes'] / GiB:>6.0f} GiB  {a:.6f}  exact {b:.6f}  "
            f"diff {100 * (a - b):+.3f} pp ({tag})"
        )
    a, b = sl["stack_blocks_sampled"], sl["stack_blocks_exact"]
    print(
        "  stack_blocks p50/p90/p99: "
        + ", ".join(f"{a[q]:,.0f} vs {b[q]:,.0f}" for q in ("p50", "p90", "p99"))
    )


def _print_markdown(r: dict) -> None:
    ds, loc, sl, err, dk = r["dataset"], r["local"], r["slice"], r["error"], r["dask"]
    s = loc["sampling"]
    synth = "reused" if ds["synth_s"] is None else f"{ds['synth_s']:.1f}"
    rows = [
        ("`fcctl synth`, wall s", synth, ""),
        ("dataset on disk", f"{ds['bytes'] / 2**20:.0f} MiB, {ds['parts']} parts", ""),
        (
            "`fcctl analyze DIR --json`, wall s",
            f"**{loc['wall_s']:.0f}**",
            f"< 600: {_met(loc['wall_s'] < GOAL_WALL_S)}",
        ),
        (
            "peak RSS GiB (`os.wait4` of the child)",
            f"**{loc['peak_rss_gib']:.2f}**",
            f"< 8: {_met(loc['peak_rss_gib'] < GOAL_RSS_GIB)}",
        ),
        (
            "plan (from the JSON)",
            f"rate {loc['sample_rate']}, {s.get('block_passes')} block passes, exact below "
            f"{s.get('exact_below_blocks', 0):,} blocks, {s.get('sampled_accesses', 0):,} "
            f"sampled accesses, budget {(s.get('memory_budget_bytes') or 0) / GiB:.2f} GiB",
            "",
        ),
        (
            f"slice ({sl['block_accesses']:,} accesses): `--sample-rate "
            f"{loc['sample_rate']}` / `--sample-rate 1`, wall s",
            f"{sl['bounded_s']:.1f} / {sl['exact_s']:.1f}",
            f"ratio {sl['bounded_s'] / sl['exact_s']:.2f}",
        ),
        (
            "slice: peak RSS GiB, sampled / exact",
            f"{sl['bounded_rss_gib']:.2f} / {sl['exact_rss_gib']:.2f}",
            "",
        ),
        ("slice: exact figures identical", "yes" if sl["exact_figures_equal"] else "**NO**", ""),
    ]
    rows += _dask_rows(dk)
    print("\n<!-- benchmarks/scale_bench.py --markdown -->")
    print(f"| {ds['block_accesses']:,} accesses, `{ds['command']}` | figure | goal |")
    print("|---|---:|---|")
    for name, value, goal in rows:
        print(f"| {name} | {value} | {goal} |")
    print("\n| slice memory tier | sampled | exact | difference pp |")
    print("|---|---:|---:|---:|")
    for p in sl["memory_tier"]:
        a, b = p["lru_hit_share_sampled"], p["lru_hit_share_exact"]
        tag = "" if p["sampled"] else " (exact head)"
        print(
            f"| {p['capacity_bytes'] / GiB:.0f} GiB{tag} | {a:.4f} | {b:.4f} | "
            f"{100 * (a - b):+.3f} |"
        )
    a, b = sl["stack_blocks_sampled"], sl["stack_blocks_exact"]
    for q in ("p50", "p90", "p99"):
        print(f"| stack distance {q}, blocks | {a[q]:,.0f} | {b[q]:,.0f} | |")
    if err is not None:
        print(
            "\n| estimator on the slice | exact head (blocks) | default caps mean / max pp | "
            "dense grid mean / max pp | p50 / p90 / p99 rel. error |"
        )
        print("|---|---:|---:|---:|---|")
        for row in err["rows"]:
            p = row["percentiles"]
            rel = " / ".join(
                "-" if p[q]["rel_error"] is None else f"{100 * p[q]['rel_error']:.1f}%"
                for q in ("p50", "p90", "p99")
            )
            print(
                f"| {row['estimator']} | {row['exact_below_blocks']:,} | "
                f"{row['default_mean_pp']:.3f} / {row['default_max_pp']:.3f} | "
                f"{row['dense_mean_pp']:.3f} / {row['dense_max_pp']:.3f} | {rel} |"
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_slice":
        slice_worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_error":
        error_worker(Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main())
