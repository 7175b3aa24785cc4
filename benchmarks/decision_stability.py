"""Decision stability (issue #33 item 5): the run's one decision for seeds 1, 2, 3 on whole traces.

For each trace, for each seed ``s``: ``--replicas R`` replays (seeds ``s .. s+R-1``, per-request
tables kept) at the given offered rates, then the decision of analyzers/replay/verdict.py with
``--draws B`` bootstrap draws seeded by ``s``. A trace given without rates (``NAME=PATH``)
runs ``plan``'s own replay step instead: the load axis the trace picks (sessions active for a
self-paced trace, offered rates otherwise), swept automatically, ``R`` replicas as the replay
runs them (replicas past the first at the points the decision reads). Prints, per seed, the
decision, each candidate's capacity at SLO with its 95 % interval, and the wall time; the last
line says whether every seed gave the same ``best``. The reference is the decision itself across
seeds (no other tool makes one), so the ratio printed is the count of seeds agreeing with seed
1's ``best``.

    python benchmarks/decision_stability.py \\
        --trace mooncake=/work/shared/traces/mooncake/conversation_trace.jsonl:1,2,4
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from fcctl import api
from fcctl.analyzers.replay.replicas import inputs_of
from fcctl.analyzers.replay.verdict import DEFAULT_SLO_TTFT_P99_S, decide_run, verdict_sentences

POLICIES = ("memory-only", "tiered", "flat")


def _trace_arg(text: str) -> tuple[str, str, list[float] | None]:
    """``NAME=PATH:RATE,...`` or ``NAME=PATH`` (plan's own sweep)."""
    name, rest = text.split("=", 1)
    path, _, rates = rest.rpartition(":")
    if not path or not rates.replace(",", "").replace(".", "").isdigit():
        return name, rest, None
    return name, path, [float(r) for r in rates.split(",")]


def _plan_sweep(path: str, seed: int, replicas: int, slo: float | None) -> tuple[object, str]:
    """The decision of plan's replay step at ``seed`` (its settings: both axes automatic, the
    SLO only when given, so the sweep stops where plan's does; the decision reads the default
    bound then)."""
    # Both axes "auto", as plan's replay step passes them (the trace then picks one).
    automatic: dict[str, Any] = {"rates": "auto", "concurrency": "auto"}
    r = api.replay(
        path, policies=POLICIES, replicas=replicas, seed=seed, slo_ttft_p99_s=slo, **automatic
    )
    where = ", ".join(n for n in r.notes if n.startswith(("replicas", "concurrency auto")))
    return r.decision, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trace",
        action="append",
        type=_trace_arg,
        required=True,
        help="NAME=PATH:RATE,RATE,... (offered req/s)",
    )
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--replicas", type=int, default=3)  # plan's default
    ap.add_argument("--draws", type=int, default=200)
    # None: plan's default (the sweep's stop rules without an SLO, the decision at 2 s).
    ap.add_argument("--slo-ttft-p99", type=float, default=None)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for name, path, rates in args.trace:
        bests = []
        for seed in seeds:
            t0 = time.perf_counter()
            if rates is None:
                verdict, where = _plan_sweep(path, seed, args.replicas, args.slo_ttft_p99)
                shape = f"plan's sweep; {where}"
            else:
                runs = [
                    api.replay(
                        path, policies=POLICIES, rates=rates, seed=seed + i, keep_tables=True
                    )
                    for i in range(args.replicas)
                ]
                inputs = inputs_of(runs, draws=args.draws, seed=seed)
                slo = args.slo_ttft_p99 or DEFAULT_SLO_TTFT_P99_S
                verdict = decide_run(inputs, slo_ttft_p99_s=slo)
                shape = f"{len(rates)} rates x {len(POLICIES)} policies"
            took = time.perf_counter() - t0
            bests.append(verdict.best)  # type: ignore[attr-defined]
            print(f"== {name} seed {seed}: {took:.1f} s ({args.replicas} replicas; {shape})")
            print(verdict_sentences(verdict))  # type: ignore[arg-type]
        agree = sum(b == bests[0] for b in bests)
        print(f"== {name}: best per seed {bests}; {agree}/{len(bests)} agree with seed {seeds[0]}")


if __name__ == "__main__":
    main()
