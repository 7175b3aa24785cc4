"""``replay_trace``: every policy at every rate, on the fast store (or the reference one)."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import collect_provenance, utc_now
from fcctl.layout.geometry import KvGeometry
from fcctl.layout.placement import PlacementRule

from ..reuse.bounded import default_memory_budget
from ..summary import KvSummary, TraceSummary
from ..traces.fingerprint import trace_fingerprint
from ..traces.schedule import check_rate, check_rates
from ..traces.schema import Trace
from .decision import (
    DEFAULT_MARGIN_PP,
    DEFAULT_TTFT_MARGIN,
    Decision,
    PolicyFigures,
    check_margins,
    decide,
    divergence_rate,
)
from .engine import DEFAULT_ROUTER, ROUTERS, Simulation
from .hardware import Hardware, hardware_document, with_values
from .load import ThinkTime
from .operating import Window, operating_point
from .parallel import Execution, SimTask, SimulationDisplay, open_runner
from .policies import DEFAULT_POLICIES, POLICIES
from .result import (
    SCHEMA_VERSION,
    Percentiles,
    PlacementSettings,
    PolicyResult,
    PrefetchStats,
    RateResult,
    RejectedRequests,
    ReplayResult,
    TtftStats,
)
from .store import FastStore
from .sweep import (
    MAX_DOUBLINGS,
    MAX_REFINEMENTS,
    SIZE_FIELDS,
    START_FRACTION,
    GiB,
    auto_rate_steps,
    capacity_estimate,
    size_points,
    working_set_bytes,
)
from .workload import Workload, build_workload

DEFAULT_RATES: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
DEFAULT_SEED = 0
CANCEL_MODES = ("discard", "credit")


@dataclass(frozen=True)
class ReplayConfig:
    """What to replay: policies (registry names), rates (requests/s), geometry, hardware."""

    geometry: KvGeometry
    hardware: Hardware
    policies: tuple[str, ...] = DEFAULT_POLICIES
    rates: tuple[float, ...] = DEFAULT_RATES
    placement: PlacementRule = field(default_factory=PlacementRule)
    seed: int = DEFAULT_SEED
    keep_tables: bool = False  # per-request tables for --out
    decision_margin_pp: float = DEFAULT_MARGIN_PP
    decision_ttft_margin: float = DEFAULT_TTFT_MARGIN
    #: Sessions kept active (analyzers/replay/load.py); set, it replaces ``rates`` as the load
    #: axis; None in it means every session at t = 0 (``all``).
    concurrency: tuple[int | None, ...] | None = None
    think_time: ThinkTime = field(default_factory=ThinkTime)
    #: What a cancelled tiered prefetch's bytes become: ``discard`` (thrown away, recomputed)
    #: or ``credit`` (the blocks read are delivered).
    cancel: str = "discard"
    #: Which worker a request goes to (engine.ROUTERS; docs/simulator.md "Routers").
    router: str = DEFAULT_ROUTER
    #: Sweep the offered rate from light load to saturation (analyzers/replay/sweep.py)
    #: instead of ``rates``; ``operating_rate``: the user's own rate, run too, reported first.
    auto_rates: bool = False
    operating_rate: float | None = None
    slo_ttft_p99_s: float | None = None
    #: Size sweeps: hardware field -> values besides ``hardware``'s (sweep.SIZE_FIELDS);
    #: ``host_memory_auto`` adds the trace's working-set capacities to host memory.
    size_lists: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    host_memory_auto: bool = False


def check_policies(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in order, each a registered policy, no repeats."""
    out: list[str] = []
    for n in names:
        if n not in POLICIES:
            raise FcctlInputError(
                f"policies: unknown policy (known: {', '.join(POLICIES)}); got {n!r}",
                parameter="policies",
            )
        if n not in out:
            out.append(n)
    if not out:
        raise FcctlInputError("policies: name at least one policy", parameter="policies")
    return tuple(out)


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.shape[0] else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.shape[0] else None


def _percentiles(values: np.ndarray) -> Percentiles:
    return Percentiles(_mean(values), _pct(values, 50), _pct(values, 99), int(values.shape[0]))


def ttft_stats(table: pl.DataFrame, window: Window) -> TtftStats:
    """TTFT over the steady-state window, split by whether the request read from SSD."""
    arrival = table["arrival_s"].to_numpy()
    ttft = table["ttft_s"].to_numpy()
    inside = (arrival >= window.start_s) & (arrival <= window.end_s)
    from_ssd = table["ssd_blocks"].to_numpy() > 0
    w = ttft[inside]
    return TtftStats(
        _mean(w),
        _pct(w, 50),
        _pct(w, 99),
        _percentiles(ttft[inside & from_ssd]),
        _percentiles(ttft[inside & ~from_ssd]),
        (window.start_s, window.end_s),
        int(w.shape[0]),
    )


def prefetch_stats(table: pl.DataFrame) -> PrefetchStats:
    """Prefetch time of the requests that read from SSD, split into waiting and reading."""
    reads = table.filter(pl.col("prefetch_s").is_not_null())
    pf = reads["prefetch_s"].to_numpy()
    # A read cancelled before it started spent all its prefetch time waiting.
    started = reads["read_start_s"].fill_null(reads["arrival_s"] + reads["prefetch_s"])
    wait = (started - reads["arrival_s"]).to_numpy()
    return PrefetchStats(_mean(pf), _mean(wait), _mean(pf - wait), _pct(pf, 99))


def summarize(
    sim: Simulation, keep_table: bool, *, offered_rate: float | None = None
) -> PolicyResult:
    """The :class:`PolicyResult` of a finished simulation (definitions in docs/simulator.md)."""
    full = sim.request_table()
    w = sim.w
    rejected = full.filter(pl.col("rejected").is_not_null())
    table = full.filter(pl.col("rejected").is_null())  # the requests that ran
    if table.height == 0:
        reasons = ", ".join(sorted(set(rejected["rejected"].to_list())))
        raise FcctlInputError(
            f"{w.trace.path}: every request was rejected ({reasons}): one worker's GPU KV pool "
            f"holds {sim.pool_blocks:,} blocks of {sim.block_bytes:,} bytes and the model's "
            f"context is {sim.max_context or 'unbounded'} tokens; give a larger `gpu_kv_bytes`, "
            "`tp` or a model with a longer context"
        )
    ttft = table["ttft_s"].to_numpy()
    if np.isnan(ttft).any():
        raise RuntimeError(f"{sim.policy.name}: {int(np.isnan(ttft).sum())} requests never ran")
    delivered = int(table["delivered_blocks"].sum())
    ssd_blocks = int(table["ssd_blocks"].sum())
    ssd_read = int(table["ssd_read_bytes"].sum())
    ssd_delivered = ssd_blocks * sim.block_bytes
    accesses = w.block_accesses
    # Bytes over the GPUs' links: every rank receives its rank's bytes of each copied block.
    copied = int(table["copy_blocks"].sum()) * sim.rank_block_bytes * sim.tp
    direct = ssd_read if getattr(sim.policy, "reads_into_gpu", False) else 0
    t_end = float(table["end_s"].to_numpy().max())
    op = operating_point(
        table,
        workers=sim.workers,
        offered_rate=offered_rate,
        closed_loop=sim.closed_loop,
        ssd_read_used_s=sim.ssd_link.used_s["read"],
        ssd_write_used_s=sim.ssd_link.used_s["write"],
        pcie_bytes=copied + direct,
        pcie_bytes_per_s=sim.copy_bytes_per_s,
        staging_bytes=getattr(sim.policy, "staging_bytes", None),
        staging_peak_bytes=sim.staging.peak,
        staging_integral=sim.staging.integral(t_end),
        worker_prefill_busy_s=sim.prefill_busy_s,
        rejected_arrival_s=rejected["arrival_s"].to_numpy(),
        unloaded_arrival_s=sim.unloaded_arrivals(),
    )
    return PolicyResult(
        gpu_hit_share=delivered / accesses if accesses else None,
        ideal_hit_share=w.ideal_hit_share,
        ttft_s=ttft_stats(table, op.window),
        ssd_read_bytes=ssd_read,
        read_amplification=ssd_read / ssd_delivered if ssd_delivered else None,
        prefetch_s=prefetch_stats(table),
        cancelled_prefetches=int(table["cancelled"].sum()),
        recomputed_tokens=int(table["recomputed_tokens"].sum()),
        **sim.policy.peaks(),
        requests=w.requests,
        block_accesses=accesses,
        delivered_blocks=delivered,
        delivered_from={
            "gpu": int(table["gpu_blocks"].sum()),
            "host": int(table["host_blocks"].sum()),
            "ssd": ssd_blocks,
        },
        ssd_read_commands=int(table["ssd_read_commands"].sum()),
        ssd_delivered_bytes=ssd_delivered,
        ssd_write_bytes=sim.ssd_write_bytes,
        drive_writes_per_day=(
            sim.ssd_write_bytes / sim.hw.ssd_bytes / (op.span_s / 86400.0)
            if op.span_s > 0 and sim.hw.ssd_bytes > 0
            else None
        ),
        makespan_s=float(
            table["first_token_s"].to_numpy().max() - table["arrival_s"].to_numpy().min()
        ),
        offered_rate=offered_rate,
        achieved_rate=op.achieved_rate,
        saturated=op.saturated,
        saturated_by=op.saturated_by,
        concurrency=sim.concurrency,
        utilisation=op.utilisation,
        staging=op.staging,
        sessions_active=op.sessions_active,
        queue_depth=op.queue_depth,
        details=sim.policy.extra(),
        rejected_requests=RejectedRequests(
            rejected.height,
            {str(k): int(v) for k, v in sorted(rejected["rejected"].value_counts().iter_rows())}
            if rejected.height
            else {},
        ),
        table=full if keep_table else None,
    )


def simulate(
    workload: Workload,
    config: ReplayConfig,
    policy: str,
    rate: float | None,
    *,
    concurrency: int | None = None,
    store_factory: Callable[..., Any] = FastStore,
    progress: Callable[[int], None] | None = None,
    release: bool = False,
) -> PolicyResult:
    """One policy at one load point: ``rate`` requests/s offered, or ``concurrency`` sessions
    active (analyzers/replay/load.py).

    ``release``: collect the finished simulation before returning, for a caller that runs many
    in one process (the recommender). It is a web of reference cycles (policy <-> simulation,
    event callbacks) around arrays of the trace's size, which the cyclic GC otherwise frees
    only when it next reaches its oldest generation (measured: a worker's RSS grew from 1.4 to
    4.5 GiB over 50 simulations without). Off by default: a full collection costs tens of
    milliseconds, which a replay of a few load points does not need to spend.
    """
    if (rate is None) == (concurrency is None):
        raise ValueError("simulate: give a rate or a concurrency, not both")
    sim = Simulation(
        workload,
        config.hardware,
        POLICIES[policy],
        rate=rate or 0.0,
        seed=config.seed,
        store_factory=store_factory,
        progress=progress,
        options={
            "placement_rule": config.placement,
            "concurrency": concurrency,
            "think_time": config.think_time,
            "cancel": config.cancel,
            "router": config.router,
        },
    )
    sim.run()
    result = summarize(sim, config.keep_tables, offered_rate=rate)
    if release:
        del sim
        gc.collect()
    return result


def run_task(
    workload: Workload, task: SimTask, progress: Callable[[int], None] | None = None
) -> PolicyResult:
    """One :class:`~.parallel.SimTask` on ``workload`` (what a runner's workers call): a
    simulation that frees its own cycles, since a worker runs many."""
    return simulate(
        workload,
        task.config,
        task.policy,
        task.rate,
        concurrency=task.concurrency,
        progress=progress,
        release=True,
    )


#: Simulator state per serving instance, bytes (an upper estimate: heap, store rows, flags and
#: the per-instance Python objects), for the --gpus check against the memory budget.
WORKER_STATE_BYTES = 64 << 10


def workers_of(geometry: KvGeometry, hardware: Hardware) -> int:
    """Serving instances on the node: one per ``tp`` GPUs."""
    if hardware.gpus < geometry.tp:
        raise FcctlInputError(
            f"gpus: {hardware.gpus} GPUs cannot hold one instance of tp {geometry.tp}",
            parameter="gpus",
        )
    workers = hardware.gpus // geometry.tp
    # Each instance costs the simulator per-worker state (event heap, store rows, busy flags)
    # before the first event: check the count against the memory budget before allocating,
    # so `--gpus 10000000` is a one-line refusal, not a multi-GiB allocation.
    budget = default_memory_budget()
    cap = max(1, budget // WORKER_STATE_BYTES)
    if workers > cap:
        raise FcctlInputError(
            f"gpus: {hardware.gpus} GPUs make {workers:,} instances of tp {geometry.tp}; the "
            f"simulator holds at most {cap:,} ({WORKER_STATE_BYTES:,} bytes each within the "
            f"memory budget of {budget:,} bytes); got {hardware.gpus!r}",
            parameter="gpus",
        )
    return workers


def simulation_workload(trace: Trace, geometry: KvGeometry, hardware: Hardware) -> Workload:
    """The :class:`Workload` of ``trace`` on ``hardware`` (:func:`workers_of` instances), built
    once for many simulations, without what the simulator does not read.

    The simulator reads the trace's frame only for the load schedule (session ids and times);
    the block hashes, flattened into the workload's dense block ids already, are most of its
    memory, so the workload keeps the trace without its ``hash_ids`` column.
    """
    w = build_workload(trace, geometry, workers_of(geometry, hardware))
    light = replace(trace, requests=trace.requests.drop("hash_ids"))
    return replace(w, trace=light)


def decision_of(
    policies: Mapping[str, PolicyResult],
    margin_pp: float = DEFAULT_MARGIN_PP,
    ttft_margin: float = DEFAULT_TTFT_MARGIN,
) -> Decision:
    """The decision at one load point (:func:`.decision.decide` on the policies' figures)."""
    figures = {}
    for name, p in policies.items():
        if p.gpu_hit_share is None or p.ttft_s.mean is None:
            return Decision("none", None, None, None, "no block accesses: nothing to compare")
        figures[name] = PolicyFigures(p.gpu_hit_share, p.ttft_s.mean, p.ssd_read_bytes, p.saturated)
    return decide(figures, margin_pp=margin_pp, ttft_margin=ttft_margin)


def _size_points(
    config: ReplayConfig, workload: Workload, notes: list[str]
) -> tuple[dict[str, int], ...]:
    """The size points of the run: the node's sizes first, then every swept combination."""
    lists = {f: tuple(v) for f, v in config.size_lists.items()}
    for name, values in lists.items():
        if name not in SIZE_FIELDS:
            raise FcctlInputError(f"size_lists: not a size field: {name!r}", parameter=name)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise FcctlInputError(
                    f"{name}: sizes must be whole bytes >= 0; got {v!r}", parameter=name
                )
    if config.host_memory_auto:
        ws = working_set_bytes(workload)
        found = [c for c in ws.capacity_bytes if c is not None]
        lists["host_memory_bytes"] = (*lists.get("host_memory_bytes", ()), *found)
        shown = ", ".join(
            f"{100 * s:g} % at {c / GiB:,.0f} GiB" if c is not None else f"{100 * s:g} %: none"
            for s, c in zip(ws.shares, ws.capacity_bytes, strict=True)
        )
        notes.append(
            "host memory auto: the LRU working set of the trace's own order (share of the "
            f"ideal hit share served: {shown}) beside the node's "
            f"{config.hardware.host_memory_bytes / GiB:,.0f} GiB"
        )
    base = {f: int(getattr(config.hardware, f)) for f in SIZE_FIELDS}
    return size_points(base, lists)


def _lowest_named(results: Sequence[RateResult]) -> int | None:
    """The lowest concurrency whose decision names a layout (None: none does, or rate mode)."""
    named = [
        r.concurrency for r in results if r.concurrency is not None and r.decision.best != "none"
    ]
    return min(named) if named else None


def _duration(trace: Trace) -> float | None:
    req = trace.requests
    if req.height < 2:
        return None
    if trace.order == "session" and req["session_id"].null_count() == 0:
        import polars as pl

        spans = req.group_by("session_id").agg(
            (pl.col("timestamp_s").max() - pl.col("timestamp_s").min()).alias("span")
        )
        return float(spans["span"].to_numpy().max())
    t = req["timestamp_s"].to_numpy()
    return float(t.max() - t.min())


def replay_trace(
    trace: Trace,
    config: ReplayConfig,
    *,
    progress: Progress | None = None,
    store_factory: Callable[..., Any] = FastStore,
    execution: Execution | None = None,
) -> ReplayResult:
    """Replay ``trace`` under every policy of ``config`` at every rate.

    ``execution``: where the simulations run (:mod:`.parallel`; default one after another
    here). A batch is every policy at every load point and size point known in advance; the
    auto sweep's rounds follow one another, each a batch over the size points. The result is
    the same wherever they run."""
    execution = execution or Execution()
    started = utc_now()
    check_margins(config.decision_margin_pp, config.decision_ttft_margin)
    if config.router not in ROUTERS:
        raise FcctlInputError(
            f"router: one of {', '.join(ROUTERS)}; got {config.router!r}", parameter="router"
        )
    if config.cancel not in CANCEL_MODES:
        raise FcctlInputError(
            f"cancel: one of {', '.join(CANCEL_MODES)}; got {config.cancel!r}", parameter="cancel"
        )
    policies = check_policies(config.policies)
    # Without the trace's hash lists: worker processes get the workload, not the hashes.
    workload = simulation_workload(trace, config.geometry, config.hardware)
    points: list[tuple[float | None, int | None]] = []
    if config.concurrency is not None:
        if not config.concurrency:
            raise FcctlInputError("concurrency: give at least one value", parameter="concurrency")
        if config.auto_rates or config.operating_rate is not None:
            raise FcctlInputError(
                "concurrency: the load axis is rates or concurrency, not both",
                parameter="concurrency",
            )
        points = [(None, workload.sessions if c is None else c) for c in config.concurrency]
    else:
        if not config.auto_rates:
            points = [(r, None) for r in check_rates(config.rates, "rates")]
        if config.operating_rate is not None:
            op_rate = check_rate(config.operating_rate, "rate")
            points = [(op_rate, None)] + [p for p in points if p[0] != op_rate]
        if config.slo_ttft_p99_s is not None and not (
            math.isfinite(config.slo_ttft_p99_s) and config.slo_ttft_p99_s > 0
        ):
            raise FcctlInputError(
                f"slo_ttft_p99_s: must be a finite number of seconds > 0; got "
                f"{config.slo_ttft_p99_s!r}",
                parameter="slo_ttft_p99_s",
            )
        if not workload.closed_loop and config.think_time.mode != "original":
            raise FcctlInputError(
                f"think_time: {trace.path}: a trace on one clock replayed at a rate keeps its "
                f"timestamps (time-scaled), so only 'original' applies; use concurrency to "
                f"replay its sessions in a closed loop; got {str(config.think_time)!r}",
                parameter="think_time",
            )
    notes: list[str] = []
    if workload.sessions_inferred:
        notes.append("sessions inferred from prefix chains (the trace has no session ids)")
    if config.concurrency is not None:
        notes.append(
            "concurrency: a closed loop of sessions; N active at once, the next starting when "
            "one ends ('all': every session at t = 0); each turn arrives its think time "
            f"({config.think_time}) after the previous turn's arrival, never before that "
            "turn's output"
        )
    elif workload.closed_loop:
        notes.append(
            "per-session clocks: sessions start as a seeded Poisson process at the rate; each "
            "turn waits for the previous turn's first token plus its decode"
        )
    else:
        natural = workload.natural_rate_per_s()
        notes.append(
            f"absolute times scaled to each rate (the trace's own rate: {natural:.4g} requests/s)"
            if natural
            else "all requests arrive at once"
        )
    if workload.closed_loop and config.think_time.mode != "original":
        notes.append(f"think time between a session's turns: {config.think_time}")
    sizes = _size_points(config, workload, notes)
    capacity = None
    if config.auto_rates and config.concurrency is None:
        capacity = capacity_estimate(workload, config.hardware.prefill_tokens_per_s)
    results: list[RateResult] = []
    per_size = len(points) + (MAX_DOUBLINGS + MAX_REFINEMENTS if capacity else 0)
    total = len(sizes) * per_size * len(policies) * workload.requests
    prog = progress or Progress(enabled=False)
    margins = (config.decision_margin_pp, config.decision_ttft_margin)
    operating: RateResult | None = None
    divergence: list[dict[str, Any]] = []
    configs = []
    for sizes_here in sizes:
        changed = {f: v for f, v in sizes_here.items() if v != getattr(config.hardware, f)}
        cfg = config
        if changed:
            cfg = replace(config, hardware=with_values(config.hardware, changed, "size sweep"))
        configs.append(cfg)
    if store_factory is not FastStore:  # another store (the reference) runs here, as given
        execution = Execution()
    with (
        prog.task("replaying", total=total, unit="requests") as task,
        open_runner(workload, run_task, execution) as runner,
    ):
        display = SimulationDisplay(prog, task, workload.requests, workload.requests)

        def run_points(wanted: Sequence[tuple[int, float | None, int | None]]) -> list[RateResult]:
            """The load points ``(size point, rate, concurrency)``, every policy at each, in
            one batch of independent simulations."""
            tasks = [SimTask(configs[k], name, r, c) for k, r, c in wanted for name in policies]
            found: dict[int, PolicyResult] = {}

            def done(i: int, result: PolicyResult) -> None:
                found[i] = result
                display.done(i)

            display.start(tasks)
            if store_factory is FastStore:
                runner.run(tasks, done, display.advance)
            else:
                for i, t in enumerate(tasks):
                    result = simulate(
                        workload,
                        t.config,
                        t.policy,
                        t.rate,
                        concurrency=t.concurrency,
                        store_factory=store_factory,
                    )
                    done(i, result)
            display.finish()
            out = []
            for j, (k, r, c) in enumerate(wanted):
                per_policy = {name: found[j * len(policies) + n] for n, name in enumerate(policies)}
                out.append(
                    RateResult(r, per_policy, decision_of(per_policy, *margins), c, dict(sizes[k]))
                )
            return out

        fixed = run_points([(k, r, c) for k in range(len(sizes)) for r, c in points])
        here_of = {k: fixed[k * len(points) : (k + 1) * len(points)] for k in range(len(sizes))}
        swept: dict[int, tuple[list[RateResult], str]] = {}
        if capacity:
            # Every size point's auto sweep advances one round at a time, together: a round's
            # points of every size point run as one batch (sweep.auto_rate_steps).
            steps = {
                k: auto_rate_steps(capacity, slo_ttft_p99_s=config.slo_ttft_p99_s)
                for k in range(len(sizes))
            }
            wanted = {k: next(s) for k, s in steps.items()}
            while wanted:
                ran = run_points([(k, r, None) for k, rs in wanted.items() for r in rs])
                following: dict[int, list[float]] = {}
                at = 0
                for k, rs in wanted.items():
                    try:
                        following[k] = steps[k].send(ran[at : at + len(rs)])
                    except StopIteration as finished:
                        swept[k] = finished.value
                    at += len(rs)
                wanted = following
        for k, sizes_here in enumerate(sizes):
            here = list(here_of[k])
            if k == 0 and config.operating_rate is not None and here:
                operating = here[0]
            if capacity:
                points_swept, why = swept[k]
                if k == 0:
                    paced = (
                        " (the sessions' own think times pace the load: --concurrency or "
                        "--think-time push it further)"
                        if workload.closed_loop and "stopped growing" in why
                        else ""
                    )
                    notes.append(
                        f"rates auto: from {capacity * START_FRACTION:.3g} req/s (1/16 of the "
                        f"{capacity:.3g} req/s the workers prefill with every reused block "
                        f"cached), doubling until {why}{paced}"
                    )
                here += [p for p in points_swept if not (operating and p.rate == operating.rate)]
            here.sort(key=lambda p: (p is not operating, p.rate or 0, p.concurrency or 0))
            results += here
            divergence.append(
                {
                    "sizes": dict(sizes_here),
                    "rate": divergence_rate(
                        [(p.rate, p.decision) for p in here if p.rate is not None]
                    ),
                    "concurrency": _lowest_named(here),
                }
            )
        task.update(total)
        engine = runner.facts
    g = config.geometry
    return ReplayResult(
        schema_version=SCHEMA_VERSION,
        trace=TraceSummary(
            path=trace.path,
            format=trace.format,
            requests=workload.requests,
            sessions=workload.sessions,
            sessions_inferred=workload.sessions_inferred,
            block_size_tokens=workload.block_tokens,
            block_accesses=workload.block_accesses,
            distinct_blocks=workload.num_blocks,
            duration_s=_duration(trace),
            fingerprint=trace_fingerprint(trace),
        ),
        kv=KvSummary(g.name, g.bytes_per_token, workload.block_bytes, g.tp, g.dtype_bytes),
        hardware=hardware_document(config.hardware),
        workers=workload.workers,
        placement=PlacementSettings(
            config.placement.short_reply_tokens, config.placement.agent_context_tokens
        ),
        load={
            "axis": "rate" if config.concurrency is None else "concurrency",
            "closed_loop": workload.closed_loop or config.concurrency is not None,
            "think_time": str(config.think_time),
            "cancel": config.cancel,
            "router": config.router,
            "seed": config.seed,
            "natural_rate_per_s": workload.natural_rate_per_s(),
        },
        ideal_hit_share=workload.ideal_hit_share,
        rates=tuple(results),
        operating_point=operating,
        divergence_rate=divergence[0]["rate"] if divergence else None,
        divergence_concurrency=divergence[0]["concurrency"] if divergence else None,
        divergence=tuple(divergence),
        decision_margins={
            "margin_pp": config.decision_margin_pp,
            "ttft_margin": config.decision_ttft_margin,
        },
        notes=tuple(notes),
        provenance=collect_provenance(started, extra={"engine": engine}),
    )
