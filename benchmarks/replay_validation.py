"""The replay's regimes, each result with its operating point, and Dynamo's offline replay on
shared configurations (issue #15 item 12).

Usage (figures recorded in docs/simulator.md, "Results on the public traces")::

    python3 benchmarks/replay_validation.py --quick --workdir /tmp/rv
    python3 benchmarks/replay_validation.py --workdir /tmp/rv --json-out /tmp/rv/validation.json \\
        --dynamo-python /tmp/dynvenv/bin/python

Every fcctl point is ``fcctl replay --out DIR`` in a child process (``--jobs 1``); the row it
gives states the operating point it was measured at, from ``replay.json`` and the per-request
tables:

* offered and achieved rate (central window), ``saturated``, sessions active mean/max;
* the **active working set**: at time t, the sum over the sessions active at t (first arrival
  to last decode end, as ``sessions_active``) of the session's largest prompt, in blocks, times
  the block's bytes (one copy); requests rejected (never run) do not count. Reported as its
  time-weighted mean over the span (first arrival to last decode end) and its maximum, and
  against the node's GPU KV (workers x per-GPU KV x tp) and GPU KV + host memory;
* prefill utilisation mean/max, SSD read utilisation, staging configured/peak, requests
  rejected;

next to the outcome: ``gpu_hit_share_served`` and ``gpu_hit_share`` (over the requests that ran,
and over all with the rejected ones as misses: docs/simulator.md §6.0), the ideal likewise, TTFT
mean/p99 (steady-state window),
cancelled prefetches, read amplification.

Regimes (Claude Code, whole trace converted to Parquet once; ``--quick``: 10 % of its sessions
by ``--sample-sessions 0.1`` and fewer points):

* ``rates``: the node preset (``h200-8x``, ``llama-3.1-8b``) at 0.1 ... 4 requests/s,
  per-session clocks with the trace's think times;
* ``concurrency``: the node preset, closed loop of 8, 32, 128 and all sessions;
* ``staging``: the node preset, ``tiered`` with every session active at once (concurrency
  ``all``, Dynamo's replay of this trace) and 16 GiB, 64 GiB, 256 GiB and 1 TiB of staging
  (one run per size: ``--out`` names a size list's per-request tables by load only, so the
  sizes would overwrite each other's);
* ``host-scope``: node vs worker host memory, when ``fcctl replay --help`` lists
  ``--host-scope`` (skipped otherwise, and the output says so);
* ``paper-shaped``: one worker, DeepSeek-sized KV per token, 5 GB/s of SSD per worker
  (``benchmarks/presets/paper-single-instance.toml``, each number's source in it;
  ``benchmarks/presets/deepseek-v3-long-context.json``: DeepSeek-V3's geometry with a 1 M-token
  context, fp8 KV), all four policies at 0.05 ... 1 requests/s.

Dynamo (``--dynamo-python``, PyPI ``ai-dynamo`` 1.6.1 installed with ``--no-deps``): the Mooncake
conversation trace at its own rate, ``h200-8x`` capacities and ``llama-3.1-8b`` KV, three shared
configurations, each side its own run: the ideal (one worker, a GPU cache holding every block,
arrivals 20x slower), GPU-only with round-robin routing, GPU + host (round-robin). Units: fcctl's
``gpu_hit_share`` counts blocks (a partial last block counts whole); its token share is
``1 - recomputed_tokens / input tokens``; Dynamo's ``prefix_cache_reused_ratio`` counts reused
input tokens in full blocks; TTFT in seconds on both sides (Dynamo reports ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from _common import REPO, dynamo_command, dynamo_engine, run_child

TRACES = REPO.parent / "shared/traces"
CLAUDE = TRACES / "weka_kv_cache_tester/claude_code_traces.jsonl.gz"
MOONCAKE = TRACES / "mooncake/conversation_trace.jsonl"
PRESETS = REPO / "benchmarks/presets"
PAPER_SHAPED = [
    "--hardware",
    str(PRESETS / "paper-single-instance.toml"),
    "--model-config",
    str(PRESETS / "deepseek-v3-long-context.json"),
    "--kv-dtype",
    "fp8",
]
NODE = ["--hardware", "h200-8x", "--model", "llama-3.1-8b"]
CANDIDATES = "memory-only,tiered,flat"
ALL_POLICIES = "memory-only,tiered,flat,flat-fcfs"
GiB = 1 << 30
FCCTL = [sys.executable, "-m", "fcctl"]


@dataclass(frozen=True)
class Point:
    """One ``fcctl replay`` run: a regime's load point (or several, in one list flag)."""

    regime: str
    label: str
    args: list[str]
    policies: str = CANDIDATES


@dataclass
class Plan:
    """What a run covers: the points, the sampling, the Dynamo configurations."""

    points: list[Point] = field(default_factory=list)
    sample: float | None = None
    skipped: list[str] = field(default_factory=list)


def has_host_scope() -> bool:
    """Whether this fcctl's ``replay`` takes ``--host-scope`` (being added in parallel)."""
    text = subprocess.run(
        [sys.executable, "-m", "fcctl", "replay", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    return "--host-scope" in text


def plan(quick: bool) -> Plan:
    p = Plan(sample=0.1 if quick else None)
    rates = ["0.1", "1", "4"] if quick else ["0.1", "0.25", "0.5", "1", "2", "4"]
    p.points.append(Point("rates", "node", [*NODE, "--rates", ",".join(rates)]))
    conc = ["8", "all"] if quick else ["8", "32", "128", "all"]
    p.points.append(Point("concurrency", "node", [*NODE, "--concurrency", ",".join(conc)]))
    staging = ["16GiB", "1TiB"] if quick else ["16GiB", "64GiB", "256GiB", "1TiB"]
    for s in staging:
        p.points.append(
            Point(
                "staging",
                s,
                [*NODE, "--concurrency", "all", "--staging", s],
                policies="tiered",
            )
        )
    if has_host_scope():
        for scope in ("node", "worker"):
            p.points.append(
                Point(
                    "host-scope",
                    scope,
                    [*NODE, "--concurrency", "32", "--host-scope", scope],
                    policies="memory-only,tiered",
                )
            )
    else:
        p.skipped.append(
            "host-scope: `fcctl replay --help` has no --host-scope in this checkout; axis skipped"
        )
    paper_rates = ["0.1", "1"] if quick else ["0.05", "0.1", "0.25", "0.5", "1"]
    p.points.append(
        Point(
            "paper-shaped",
            "single instance",
            [*PAPER_SHAPED, "--rates", ",".join(paper_rates)],
            policies=ALL_POLICIES,
        )
    )
    return p


# --- running and reading fcctl -------------------------------------------------------------


def run_fcctl(trace: Path, point: Point, out: Path, sample: float | None) -> dict[str, Any]:
    """One ``fcctl replay --out`` in a child; ``replay.json`` with the wall time and command."""
    cmd = [sys.executable, "-m", "fcctl", "replay", str(trace), "--jobs", "1"]
    cmd += ["--policies", point.policies, *point.args]
    if sample is not None:
        cmd += ["--sample-sessions", f"{sample:g}"]
    cmd += ["--out", str(out), "--force"]
    wall, rss, _ = run_child(cmd)
    doc = json.loads((out / "replay.json").read_text())
    shown = " ".join(a if a.startswith("-") or "/" not in a else _short(a) for a in cmd[3:])
    doc["_run"] = {"command": "fcctl " + shown, "wall_s": wall, "peak_rss_gib": rss}
    return doc


def _short(path: str) -> str:
    """A path as the docs show it: relative to the repository, or its file name."""
    p = Path(path)
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return p.name


def active_working_set(table: pl.DataFrame, block_bytes: int) -> tuple[float, float]:
    """(time-weighted mean, max) bytes of the active working set (module docstring)."""
    served = table.filter(pl.col("rejected").is_null() & pl.col("end_s").is_not_null())
    if served.height == 0:
        return 0.0, 0.0
    sessions = served.group_by("session_index").agg(
        pl.col("arrival_s").min().alias("t0"),
        pl.col("end_s").max().alias("t1"),
        (pl.col("blocks").max() * block_bytes).cast(pl.Float64).alias("kv"),
    )
    events = (
        pl.concat(
            [
                sessions.select(pl.col("t0").alias("t"), pl.col("kv").alias("d")),
                sessions.select(pl.col("t1").alias("t"), (-pl.col("kv")).alias("d")),
            ]
        )
        .group_by("t")
        .agg(pl.col("d").sum())
        .sort("t")
        .with_columns(pl.col("d").cum_sum().alias("w"))
    )
    t = events["t"].to_numpy()
    w = events["w"].to_numpy()
    span = float(t[-1] - t[0])
    w_max = float(w.max())
    if not span:
        return w_max, w_max
    mean = float((w[:-1] * (t[1:] - t[:-1])).sum()) / span
    return mean, w_max


def rows_of(doc: dict[str, Any], out: Path, point: Point) -> list[dict[str, Any]]:
    """One row per load point and policy: the operating point and the outcome."""
    hw = doc["hardware"]
    gpus = hw["gpus"]["value"]
    block_bytes = doc["kv"]["block_bytes"]
    rows = []
    for entry in doc["rates"]:
        sizes = entry["sizes"]
        load = f"rate{entry['rate']:g}" if entry["rate"] is not None else f"c{entry['concurrency']}"
        gpu_total = gpus * sizes["gpu_kv_bytes"] * doc["kv"]["tp"]
        host = sizes["host_memory_bytes"]
        for name, p in entry["policies"].items():
            table = pl.read_parquet(out / f"requests-{name}-{load}.parquet")
            ws_mean, ws_max = active_working_set(table, block_bytes)
            u = p["utilisation"]
            rows.append(
                {
                    "regime": point.regime,
                    "label": point.label,
                    "policy": name,
                    "offered_rate": p["offered_rate"],
                    "concurrency": p["concurrency"],
                    "achieved_rate_central": p["achieved_rate"]["central"],
                    "achieved_rate_whole": p["achieved_rate"]["whole"],
                    "saturated": p["saturated"],
                    "saturated_by": p.get("saturated_by"),
                    "sessions_active_mean": p["sessions_active"]["mean"],
                    "sessions_active_max": p["sessions_active"]["max"],
                    "working_set_mean_bytes": ws_mean,
                    "working_set_max_bytes": ws_max,
                    "gpu_kv_bytes_node": gpu_total,
                    "host_memory_bytes": host,
                    "gpu_over_working_set": gpu_total / ws_mean if ws_mean else None,
                    "gpu_host_over_working_set": (gpu_total + host) / ws_mean if ws_mean else None,
                    "prefill_utilisation_mean": u["prefill_mean"],
                    "prefill_utilisation_max": u["prefill_max"],
                    "ssd_read_utilisation": u["ssd_read"],
                    "staging_bytes": p["staging"]["bytes"],
                    "staging_peak_bytes": p["staging"]["peak_bytes"],
                    "rejected_share": p["rejected_requests"]["count"] / p["requests"],
                    "gpu_hit_share_served": p["gpu_hit_share_served"],
                    "ideal_hit_share_served": p["ideal_hit_share_served"],
                    "gpu_hit_share": p["gpu_hit_share"],
                    "ideal_hit_share": p["ideal_hit_share"],
                    "delivered_from": p["delivered_from"],
                    "ttft_mean_s": p["ttft_s"]["mean"],
                    "ttft_p99_s": p["ttft_s"]["p99"],
                    "prefetch_mean_s": p["prefetch_s"]["mean"],
                    "cancelled_prefetches": p["cancelled_prefetches"],
                    "read_amplification": p["read_amplification"],
                }
            )
    return rows


# --- rendering ---------------------------------------------------------------------------


def _f(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if x is None else format(x * scale, fmt)


def _load(r: dict[str, Any]) -> str:
    if r["concurrency"] is not None:
        return f"c={r['concurrency']}"
    return f"{r['offered_rate']:g}/s"


def _shares(r: dict[str, Any], key: str) -> str:
    """A share over served requests, then over all ("/ all") where requests were rejected."""
    served = _f(r[f"{key}_served"], ".2f", 100)
    return served if not r["rejected_share"] else f"{served}/{_f(r[key], '.2f', 100)}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table: the operating point, then the outcome, a row per load point and policy."""
    head = (
        "| point | load | policy | achieved req/s | sat | sessions mean/max | working set "
        "mean/max GiB | GPU, GPU+host / WS | prefill mean/max % | SSD read % | staging "
        "cfg/peak GiB | rejected % | hit % served/all | ideal % served/all | TTFT mean/p99 s | "
        "prefetch s | "
        "cancelled | read amp |"
    )
    lines = [head, "|" + "---|" * 3 + "---:|" * 15]
    for r in rows:
        sat = (r.get("saturated_by") or "yes") if r["saturated"] else "no"
        lines.append(
            f"| {r['label']} | {_load(r)} | {r['policy']} | "
            f"{_f(r['achieved_rate_central'], '.3g')} | {sat} | "
            f"{r['sessions_active_mean']:.1f}/{r['sessions_active_max']} | "
            f"{r['working_set_mean_bytes'] / GiB:,.0f}/{r['working_set_max_bytes'] / GiB:,.0f} | "
            f"{_f(r['gpu_over_working_set'], '.2f')}, {_f(r['gpu_host_over_working_set'], '.2f')}"
            f" | {_f(r['prefill_utilisation_mean'], '.1f', 100)}/"
            f"{_f(r['prefill_utilisation_max'], '.1f', 100)} | "
            f"{_f(r['ssd_read_utilisation'], '.2f', 100)} | "
            f"{_f(r['staging_bytes'], ',.0f', 1 / GiB)}/"
            f"{_f(r['staging_peak_bytes'], ',.1f', 1 / GiB)} | "
            f"{_f(r['rejected_share'], '.1f', 100)} | {_shares(r, 'gpu_hit_share')} | "
            f"{_shares(r, 'ideal_hit_share')} | {_f(r['ttft_mean_s'], '.2f')}/"
            f"{_f(r['ttft_p99_s'], '.2f')} | {_f(r['prefetch_mean_s'], '.2f')} | "
            f"{r['cancelled_prefetches']:,} | {_f(r['read_amplification'], '.2f')} |"
        )
    return "\n".join(lines)


# --- Dynamo --------------------------------------------------------------------------------


def mooncake_facts(path: Path, block_tokens: int) -> dict[str, Any]:
    """Input tokens, distinct blocks, and the ideal reuse in Dynamo's unit (tokens of the
    longest prefix of full blocks seen before, capped at input - 1, over all input tokens)."""
    seen: set[int] = set()
    tokens = reused = 0
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            req = json.loads(line)
            n, ids = int(req["input_length"]), req["hash_ids"]
            tokens += n
            k = 0
            while k < len(ids) and ids[k] in seen:
                k += 1
            full = min(k, n // block_tokens)
            reused += min(full * block_tokens, n - 1)
            seen.update(ids)
    return {
        "input_tokens": tokens,
        "distinct_blocks": len(seen),
        "ideal_token_share": reused / tokens,
    }


def dynamo_comparison(python: str, work: Path) -> dict[str, Any]:
    """The three shared configurations, fcctl and Dynamo each run once on them."""
    from fcctl.analyzers.replay import PRESETS as HW
    from fcctl.layout.geometry import model_geometry

    hw = HW["h200-8x"]
    geom = model_geometry("llama-3.1-8b")
    block_tokens = 512  # the Mooncake traces' hash block
    block_bytes = geom.bytes_per_token * block_tokens
    facts = mooncake_facts(MOONCAKE, block_tokens)
    probe = json.loads(
        run_child([*FCCTL, "replay", str(MOONCAKE), "--json", "--rates", "1", *NODE])[2]
    )
    natural = probe["load"]["natural_rate_per_s"]
    slow = 20.0  # the ideal: arrivals 20x slower, so requests sharing a prefix do not overlap
    gpu_blocks = hw.gpu_kv_bytes // block_bytes
    host_blocks = hw.host_memory_bytes // hw.gpus // block_bytes
    all_blocks = facts["distinct_blocks"] + 1
    one_big_gpu = ["--gpus", "1", "--gpu-kv", str(all_blocks * block_bytes * 2)]
    round_robin = ["--router", "round-robin", "--rates", f"{natural:.10g}"]
    worker_host = ["--host-scope", "worker"] if has_host_scope() else []
    configs: dict[str, dict[str, Any]] = {
        "ideal": {
            "fcctl": [*one_big_gpu, "--host-memory", "0", "--rates", f"{natural / slow:.10g}"],
            "dynamo": {
                "engine": dynamo_engine(
                    block_tokens=block_tokens,
                    bytes_per_token=geom.bytes_per_token,
                    gpu_blocks=all_blocks * 2,
                ),
                "num_workers": 1,
                "router_mode": "round_robin",
                "arrival_speedup_ratio": 1 / slow,
            },
        },
        "gpu-only round-robin": {
            "fcctl": [*round_robin, "--host-memory", "0"],
            "dynamo": {
                "engine": dynamo_engine(
                    block_tokens=block_tokens,
                    bytes_per_token=geom.bytes_per_token,
                    gpu_blocks=gpu_blocks,
                ),
                "num_workers": hw.gpus,
                "router_mode": "round_robin",
            },
        },
        "gpu + host round-robin": {
            "fcctl": [*round_robin, *worker_host],
            "dynamo": {
                "engine": dynamo_engine(
                    block_tokens=block_tokens,
                    bytes_per_token=geom.bytes_per_token,
                    gpu_blocks=gpu_blocks,
                    host_blocks=host_blocks,
                    host_to_gpu_bytes_per_s=hw.host_to_gpu_effective_bytes_per_s,
                ),
                "num_workers": hw.gpus,
                "router_mode": "round_robin",
            },
        },
    }
    results: dict[str, Any] = {"natural_rate_per_s": natural, "facts": facts, "configs": {}}
    for name, c in configs.items():
        flags = [*NODE, "--policies", "memory-only", "--json", *c["fcctl"]]
        wall, _, text = run_child([sys.executable, "-m", "fcctl", "replay", str(MOONCAKE), *flags])
        f_doc = json.loads(text)
        p = f_doc["rates"][0]["policies"]["memory-only"]
        settings = {**c["dynamo"], "trace_block_size": block_tokens}
        dwall, _, dtext = run_child(dynamo_command(python, MOONCAKE, settings))
        s = json.loads(dtext)["summary"]
        results["configs"][name] = {
            "fcctl_command": "fcctl replay conversation_trace.jsonl " + " ".join(flags),
            "fcctl_wall_s": wall,
            "dynamo_settings": settings,
            "dynamo_wall_s": dwall,
            "fcctl": {
                "achieved_rate_whole": p["achieved_rate"]["whole"],
                # Dynamo counts only what it served: compare on the served share.
                "block_share": p["gpu_hit_share_served"],
                "ideal_block_share": p["ideal_hit_share_served"],
                "block_share_all": p["gpu_hit_share"],
                "ideal_block_share_all": f_doc["ideal_hit_share"],
                "token_share": 1 - p["recomputed_tokens"] / facts["input_tokens"],
                "ttft_mean_s": p["ttft_s"]["mean"],
                "ttft_p99_s": p["ttft_s"]["p99"],
                "prefill_utilisation_mean": p["utilisation"]["prefill_mean"],
                "rejected": p["rejected_requests"]["count"],
            },
            "dynamo": {
                "achieved_rate": s["request_throughput_rps"],
                "token_share": s["prefix_cache_reused_ratio"],
                "ttft_mean_s": s["mean_ttft_ms"] / 1e3,
                "ttft_p99_s": s["p99_ttft_ms"] / 1e3,
                "completed_requests": s["completed_requests"],
            },
        }
        print(f"dynamo comparison: {name} done (fcctl {wall:.0f} s, Dynamo {dwall:.0f} s)")
    return results


def dynamo_markdown(d: dict[str, Any]) -> str:
    lines = [
        f"Mooncake conversation trace, {d['facts']['input_tokens']:,} input tokens, "
        f"{d['facts']['distinct_blocks']:,} distinct 512-token blocks; own rate "
        f"{d['natural_rate_per_s']:.4f} req/s; h200-8x capacities, llama-3.1-8b KV "
        f"(131,072 B/token). Analytic ideal in Dynamo's unit (full blocks of the longest "
        f"prefix seen before, capped at input - 1): {100 * d['facts']['ideal_token_share']:.2f}% "
        "of input tokens.",
        "",
        "| configuration | fcctl req/s | Dynamo req/s | fcctl blocks % | fcctl tokens % | "
        "Dynamo tokens % | fcctl TTFT mean/p99 s | Dynamo TTFT mean/p99 s | fcctl prefill % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in d["configs"].items():
        f, y = c["fcctl"], c["dynamo"]
        lines.append(
            f"| {name} | {f['achieved_rate_whole']:.3f} | {y['achieved_rate']:.3f} | "
            f"{100 * f['block_share']:.2f} | {100 * f['token_share']:.2f} | "
            f"{100 * y['token_share']:.2f} | {f['ttft_mean_s']:.3f}/{f['ttft_p99_s']:.2f} | "
            f"{y['ttft_mean_s']:.3f}/{y['ttft_p99_s']:.2f} | "
            f"{100 * f['prefill_utilisation_mean']:.1f} |"
        )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10%% of sessions, fewer points")
    ap.add_argument("--regimes", default=None, help="comma-separated subset of the regimes")
    ap.add_argument("--workdir", type=Path, default=None, help="Parquet and --out dirs here")
    ap.add_argument("--json-out", type=Path, default=None, help="every row, one JSON file")
    ap.add_argument("--dynamo-python", default=None, help="interpreter with ai-dynamo 1.6.1")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="replay-validation-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    parquet = work / "claude_code.parquet"
    if not parquet.exists():
        subprocess.run(
            [sys.executable, "-m", "fcctl", "convert", str(CLAUDE), "-o", str(parquet)],
            cwd=REPO,
            check=True,
            stderr=subprocess.DEVNULL,
        )
    p = plan(args.quick)
    wanted = set(args.regimes.split(",")) if args.regimes else None
    doc: dict[str, Any] = {
        "schema_version": 1,
        "quick": args.quick,
        "sample_sessions": p.sample,
        "commit": commit,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "skipped": p.skipped,
        "runs": [],
        "rows": [],
    }
    for note in p.skipped:
        print(f"SKIPPED {note}", flush=True)
    regime = None
    for i, point in enumerate(p.points):
        if wanted is not None and point.regime not in wanted:
            continue
        out = work / f"out-{i:02d}-{point.regime}"
        if out.exists():
            shutil.rmtree(out)
        run = run_fcctl(parquet, point, out, p.sample)
        rows = rows_of(run, out, point)
        doc["runs"].append({"regime": point.regime, "label": point.label, **run["_run"]})
        doc["rows"] += rows
        if point.regime != regime:
            regime = point.regime
            print(f"\n### {regime}\n", flush=True)
        print(f"`{run['_run']['command']}` ({run['_run']['wall_s']:.0f} s)\n")
        print(markdown(rows) + "\n", flush=True)
    if args.dynamo_python and (wanted is None or "dynamo" in wanted):
        d = dynamo_comparison(args.dynamo_python, work)
        doc["dynamo"] = d
        print("\n### Dynamo 1.6.1 offline replay vs fcctl (memory-only)\n")
        print(dynamo_markdown(d) + "\n")
    elif not args.dynamo_python:
        print("\nSKIPPED dynamo: no --dynamo-python given")
    doc["wall_s"] = time.perf_counter() - started
    print(f"\nbenchmark wall time {doc['wall_s']:.0f} s (commit {commit})")
    if args.json_out:
        args.json_out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
