"""Session sampling error (issue #19): a sampled replay's figures against the unsampled run's.

For each trace, at one offered rate, for each schedule seed: the full replay (every policy),
then the replay of the sessions ``--sample-sessions R`` keeps at each rate R (the same load per
node, analyzers/replay/sampling.py). Errors per policy: GPU hit share (absolute, percentage
points), mean and p99 TTFT (relative), SSD read bytes (relative, the sample's bytes x
``scale_to_full``). The table gives the median over seeds; the last line the largest over
policies and traces per rate. Runs no longer state these figures (issue #36 item 17): a sampled
replay states the error measured across its own replicas (docs/simulator.md, "Sampling per
replica"); this benchmark measures the error against the unsampled run, as documentation.
``--compare-rate-scaling`` also runs, at seed 0, the method not chosen: the offered rate
times the realised request fraction on the same node.

    python benchmarks/sample_error.py --trace cc=/tmp/hs/cc.parquet:0.5 \\
        --trace synth=/tmp/hs/syn100m:2 --seeds 0,1,2 --compare-rate-scaling --markdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from fcctl import api
from fcctl.analyzers.traces.dataset import is_dataset_spec, read_dataset
from fcctl.analyzers.traces.sampling import sample_trace
from fcctl.analyzers.traces.schema import Trace

POLICIES = ("memory-only", "tiered", "flat", "flat-fcfs")
FIGURES = ("hit_pp", "ttft_mean_rel", "ttft_p99_rel", "ssd_read_rel")


def _load(path: str) -> Trace:
    return read_dataset(path) if is_dataset_spec(path) else api.read_trace(path)


def _figures(result: Any) -> dict[str, dict[str, float]]:
    out = {}
    for name, p in result.rates[0].policies.items():
        out[name] = {
            "hit": 100 * (p.gpu_hit_share or 0.0),
            "ttft_mean": p.ttft_s.mean or 0.0,
            "ttft_p99": p.ttft_s.p99 or 0.0,
            "ssd_read": float(p.ssd_read_bytes),
        }
    return out


def _rel(a: float, b: float) -> float | None:
    return abs(a - b) / abs(b) if b else None


def _errors(full: dict[str, float], sampled: dict[str, float], scale: float) -> dict[str, Any]:
    return {
        "hit_pp": abs(sampled["hit"] - full["hit"]),
        "ttft_mean_rel": _rel(sampled["ttft_mean"], full["ttft_mean"]),
        "ttft_p99_rel": _rel(sampled["ttft_p99"], full["ttft_p99"]),
        "ssd_read_rel": _rel(sampled["ssd_read"] * scale, full["ssd_read"]),
    }


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    rates = [float(r) for r in args.sample_rates.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    doc: dict[str, Any] = {"rates": rates, "seeds": seeds, "traces": {}}
    for spec in args.trace:
        label, rest = spec.split("=", 1)
        path, offered = rest.rsplit(":", 1)
        rate = float(offered)
        t0 = time.perf_counter()
        trace = _load(path)
        entry: dict[str, Any] = {"path": path, "offered_rate": rate, "runs": []}
        entry["requests"] = trace.num_requests
        entry["read_s"] = time.perf_counter() - t0
        for seed in seeds:
            t0 = time.perf_counter()
            full = _figures(api.replay(trace, rates=[rate], policies=POLICIES, seed=seed))
            full_s = time.perf_counter() - t0
            print(f"{label} seed {seed}: full {full_s:.0f} s", flush=True)
            for f in rates:
                t0 = time.perf_counter()
                res = api.replay(
                    trace, rates=[rate], policies=POLICIES, seed=seed, sample_sessions=f
                )
                s = res.sampling
                assert s is not None and s.scale_to_full is not None
                sampled = _figures(res)
                entry["runs"].append(
                    {
                        "seed": seed,
                        "sample_rate": f,
                        "method": "same-node-load",
                        "full_s": full_s,
                        "sampled_s": time.perf_counter() - t0,
                        "sessions": [s.sessions.kept, s.sessions.total],
                        "requests": [s.requests.kept, s.requests.total],
                        "full": full,
                        "sampled": sampled,
                        "errors": {
                            n: _errors(full[n], sampled[n], s.scale_to_full) for n in POLICIES
                        },
                    }
                )
                if args.compare_rate_scaling and seed == seeds[0] and f == 0.1:
                    piece, kept = sample_trace(trace, f)
                    scaled = rate * kept.request_fraction
                    other = _figures(
                        api.replay(piece, rates=[scaled], policies=POLICIES, seed=seed)
                    )
                    entry["runs"].append(
                        {
                            "seed": seed,
                            "sample_rate": f,
                            "method": "rate-x-fraction",
                            "offered_rate": scaled,
                            "sampled": other,
                            "errors": {
                                n: _errors(full[n], other[n], 1 / kept.request_fraction)
                                for n in POLICIES
                            },
                        }
                    )
        doc["traces"][label] = entry
    return doc


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """Median over seeds per (trace, method, rate, policy, figure); max over the rest per rate."""
    table: dict[str, Any] = {}
    worst: dict[float, dict[str, float]] = {}
    for label, entry in doc["traces"].items():
        for method in ("same-node-load", "rate-x-fraction"):
            for f in doc["rates"]:
                runs = [r for r in entry["runs"] if r["method"] == method and r["sample_rate"] == f]
                if not runs:
                    continue
                for n in POLICIES:
                    row = {k: _median([r["errors"][n][k] for r in runs]) for k in FIGURES}
                    table[f"{label}|{method}|{f}|{n}"] = row
                    if method != "same-node-load":
                        continue
                    w = worst.setdefault(f, dict.fromkeys(FIGURES, 0.0))
                    for k in FIGURES:
                        value = row[k]
                        if value is not None:
                            w[k] = max(w[k], value)
    return {"table": table, "worst": {str(k): v for k, v in worst.items()}}


def markdown(doc: dict[str, Any], summary: dict[str, Any]) -> str:
    lines = [
        "| trace | method | sample | sessions kept | policy | hit share pp | TTFT mean | TTFT p99"
        " | SSD read bytes |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    for key, row in summary["table"].items():
        label, method, f, n = key.split("|")
        runs = doc["traces"][label]["runs"]
        kept = next(r for r in runs if str(r["sample_rate"]) == f and "sessions" in r)
        sessions = f"{kept['sessions'][0]:,} of {kept['sessions'][1]:,}"
        lines.append(
            f"| {label} | {method} | {f} | {sessions} | {n} | {row['hit_pp']:.2f} | "
            f"{pct(row['ttft_mean_rel'])} | {pct(row['ttft_p99_rel'])} | "
            f"{pct(row['ssd_read_rel'])} |"
        )
    lines.append("")
    lines.append("| sample rate | hit share pp | TTFT mean | TTFT p99 | SSD read bytes |")
    lines.append("|---:|---:|---:|---:|---:|")
    for f, w in summary["worst"].items():
        lines.append(
            f"| {f} | {w['hit_pp']:.2f} | {pct(w['ttft_mean_rel'])} | "
            f"{pct(w['ttft_p99_rel'])} | {pct(w['ssd_read_rel'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace",
        action="append",
        required=True,
        help="LABEL=PATH:RATE (a trace file or dataset, and the offered rate in requests/s)",
    )
    parser.add_argument("--sample-rates", default="0.5,0.1,0.01")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--compare-rate-scaling", action="store_true")
    parser.add_argument("--json-out")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    doc = run(args)
    doc["summary"] = summarise(doc)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
    if args.markdown:
        print(markdown(doc, doc["summary"]))
    else:
        print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
