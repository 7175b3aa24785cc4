"""The simulator's speed before and after a change, and proof that its results did not move
(issue #33 item 8; docs/benchmarks.md, "Simulator speed").

Usage::

    python3 benchmarks/sim_speed.py --base COMMIT [--trace PATH] [--reps 3]
        [--cases flat@c710,tiered@c710,...]

Exports ``COMMIT`` with ``git archive`` to a temporary folder (no worktree, nothing in the
repository changes) and runs the same child in two processes, one importing fcctl from that
copy and one from this checkout (``PYTHONPATH``). Each child reads the trace, builds the
workload once (as the recommender does) and runs every case ``--reps`` times with
:func:`~fcctl.analyzers.replay.simulate` (``release=True``, as a worker process runs it); it
reports each run's seconds and the result of the first run as canonical JSON (every field of
the :class:`~fcctl.analyzers.replay.result.PolicyResult`, as ``--json`` writes it).

A case is ``POLICY@cN`` (N sessions active, a closed loop) or ``POLICY@rX`` (X requests/s
offered). The script prints, per case, the median seconds of each side, their ratio
(before / after), and whether the two results are identical byte for byte; it exits 1 if any
differs. The first run of a child may pay numba's compilation when its cache is cold: the
median of three keeps it out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# ../shared from the main checkout, ../../shared from a worktree under /work/wt.
DEFAULT_TRACE = (
    next(
        (
            p
            for p in (REPO.parent / "shared", REPO.parents[1] / "shared")
            if (p / "traces").is_dir()
        ),
        REPO.parent / "shared",
    )
    / "traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz"
)
# The points the plan runs most (brief of issue #33 item 8): each policy with every
# session active and with a few, and flat at the rate the recommend step replays.
DEFAULT_CASES = (
    "memory-only@c710,tiered@c710,flat@c710,memory-only@c44,tiered@c44,flat@c44,flat@r1.1"
)


def _canonical(result: Any) -> str:
    """One result as JSON text that two runs agree on exactly when every figure is equal."""
    from fcctl.common.jsonio import to_jsonable

    return json.dumps(to_jsonable(result), sort_keys=True)


def child(trace_path: Path, cases: list[str], reps: int) -> None:
    """Time ``cases`` on the fcctl this process imports; print one JSON document."""
    import fcctl
    from fcctl.analyzers.replay import RunSpec, load_hardware, simulate, simulation_workload
    from fcctl.analyzers.traces.readers import read_trace
    from fcctl.layout.geometry import model_geometry

    trace = read_trace(trace_path, None)
    geometry, node = model_geometry("llama-3.1-8b"), load_hardware(None)
    workload = simulation_workload(trace, geometry, node)
    del trace
    spec = RunSpec(geometry=geometry, hardware=node)
    out: dict[str, Any] = {"fcctl": str(Path(fcctl.__file__).resolve().parent), "cases": {}}
    for case in cases:
        policy, rate, concurrency = parse_case(case)
        seconds = []
        canonical = ""
        for rep in range(reps):
            t = time.perf_counter()
            result = simulate(workload, spec, policy, rate, concurrency=concurrency, release=True)
            seconds.append(time.perf_counter() - t)
            text = _canonical(result)
            if rep == 0:
                canonical = text
            elif text != canonical:  # a simulation is deterministic: a second run must agree
                raise SystemExit(f"{case}: run {rep} differs from run 0 in one process")
        out["cases"][case] = {"seconds": seconds, "result": canonical}
        print(f"  {case}: {', '.join(f'{s:.2f}' for s in seconds)} s", file=sys.stderr)
    print(json.dumps(out))


def parse_case(case: str) -> tuple[str, float | None, int | None]:
    """``POLICY@cN`` or ``POLICY@rX`` as (policy, rate, concurrency); ValueError naming the
    rule and the value otherwise."""
    from fcctl.analyzers.replay import POLICIES

    policy, _, point = case.partition("@")
    try:
        if policy in POLICIES and point[:1] == "c" and int(point[1:]) > 0:
            return policy, None, int(point[1:])
        if policy in POLICIES and point[:1] == "r" and float(point[1:]) > 0:
            return policy, float(point[1:]), None
    except ValueError:
        pass
    raise ValueError(
        f"--cases: each case must be POLICY@cN (N > 0 sessions) or POLICY@rX (X > 0 "
        f"requests/s), POLICY one of {', '.join(POLICIES)}; got {case!r}"
    )


def _export(commit: str, dest: Path) -> None:
    """``commit``'s tree under ``dest`` (``git archive``: symlinks kept, repository untouched)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True
    ).stdout
    tar = dest / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="tar")
    tar.unlink()


def _run_side(tree: Path, trace: Path, cases: str, reps: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, __file__, "--child", "--trace", str(trace), "--cases", cases]
    cmd += ["--reps", str(reps)]
    proc = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
    doc: dict[str, Any] = json.loads(proc.stdout)
    if Path(doc["fcctl"]) != (tree / "fcctl").resolve():  # the timing must be of that tree
        raise SystemExit(f"child imported fcctl from {doc['fcctl']}, not {tree}")
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="commit to compare with (the code before the change)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.trace, args.cases.split(","), args.reps)
        return 0
    if not args.base:
        ap.error("--base: a commit to compare with is required")
    try:
        for case in args.cases.split(","):
            parse_case(case)
    except ValueError as e:
        ap.error(str(e))
    if args.reps < 1:
        ap.error(f"--reps: must be at least 1; got {args.reps!r}")
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        base_tree = Path(tmp)
        _export(args.base, base_tree)
        print(f"before: {args.base} (exported to {base_tree})", file=sys.stderr)
        before = _run_side(base_tree, args.trace, args.cases, args.reps)
    print(f"after: {REPO}", file=sys.stderr)
    after = _run_side(REPO, args.trace, args.cases, args.reps)
    lines, same = compare(before["cases"], after["cases"], args.reps)
    print("\n".join(lines))
    return 0 if same else 1


def compare(before: dict[str, Any], after: dict[str, Any], reps: int) -> tuple[list[str], bool]:
    """The table's lines (per case: medians, ratio before / after, whether the results are
    identical) and whether every case's results are."""
    header = f"{'case':<18} {'before s':>9} {'after s':>9} {'ratio':>7}  identical"
    lines = [f"{header}  (median of {reps})"]
    same_everywhere = True
    for case, b in before.items():
        a = after[case]
        mb, ma = statistics.median(b["seconds"]), statistics.median(a["seconds"])
        same = a["result"] == b["result"]
        same_everywhere &= same
        spread_b = f"{min(b['seconds']):.2f}-{max(b['seconds']):.2f}"
        spread_a = f"{min(a['seconds']):.2f}-{max(a['seconds']):.2f}"
        lines.append(
            f"{case:<18} {mb:>9.2f} {ma:>9.2f} {mb / ma:>6.2f}x  {'yes' if same else 'NO':<9}"
            f"  (before {spread_b}, after {spread_a})"
        )
    return lines, same_everywhere


if __name__ == "__main__":
    sys.exit(main())
