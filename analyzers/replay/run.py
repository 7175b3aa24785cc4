"""``replay_trace``: every policy at every load and size point, on the fast store (or the
reference one).

The settings are two typed objects: a :class:`~.spec.RunSpec` (one simulation's) and a
:class:`~.loadplan.LoadPlan` (the sweep). :class:`ReplayConfig` is the flat keywords of both
together, as a notebook or a test writes them; :meth:`ReplayConfig.split` makes the pair.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import collect_provenance, utc_now
from fcctl.layout.geometry import KvGeometry
from fcctl.layout.placement import PlacementRule

from ..reuse.bounded import default_memory_budget
from ..summary import KvSummary
from ..traces.schema import Trace
from .amplify import (
    amplified_bytes,
    amplify_within_budget,
    amplify_workload,
    check_amplify,
    copies_for,
)
from .decision import (
    DEFAULT_MARGIN_PP,
    DEFAULT_TTFT_MARGIN,
    Decision,
    PolicyFigures,
    decide,
    divergence_rate,
)
from .engine import Simulation
from .hardware import Hardware, hardware_document
from .load import ThinkTime
from .loadplan import DEFAULT_RATES, LoadPlan, LoadPoint, SizeSweep
from .operating import Window, operating_point
from .parallel import (
    Execution,
    Runner,
    SimTask,
    SimulationDisplay,
    budget_bytes,
    default_jobs,
    open_runner,
)
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
from .session_sweep import GROWTH_MULTIPLES, MAX_SESSION_POINTS
from .spec import DEFAULT_ROUTER, DEFAULT_SEED, RunSpec, StoreFactory
from .store import FastStore
from .sweep import (
    MAX_AUTO_POINTS,
    SIZE_FIELDS,
    START_FRACTION,
    GiB,
    capacity_estimate,
    size_points,
    working_set_bytes,
)
from .workload import Workload, build_workload


@dataclass(frozen=True)
class ReplayConfig:
    """The flat keywords of a :class:`~.spec.RunSpec` and a :class:`~.loadplan.LoadPlan`
    together (their docstrings say what each field means); :meth:`split` checks them."""

    geometry: KvGeometry
    hardware: Hardware
    policies: tuple[str, ...] = DEFAULT_POLICIES
    rates: tuple[float, ...] = DEFAULT_RATES
    placement: PlacementRule = field(default_factory=PlacementRule)
    seed: int = DEFAULT_SEED
    keep_tables: bool = False
    decision_margin_pp: float = DEFAULT_MARGIN_PP
    decision_ttft_margin: float = DEFAULT_TTFT_MARGIN
    concurrency: tuple[int | None, ...] | None = None
    think_time: ThinkTime = field(default_factory=ThinkTime)
    cancel: str = "discard"
    router: str = DEFAULT_ROUTER
    auto_rates: bool = False
    operating_rate: float | None = None
    slo_ttft_p99_s: float | None = None
    size_lists: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    host_memory_auto: bool = False

    @property
    def spec(self) -> RunSpec:
        """One simulation's settings (checked)."""
        return RunSpec(
            geometry=self.geometry,
            hardware=self.hardware,
            placement=self.placement,
            seed=self.seed,
            cancel=self.cancel,
            router=self.router,
            think_time=self.think_time,
            keep_tables=self.keep_tables,
        )

    @property
    def plan(self) -> LoadPlan:
        """The sweep (checked)."""
        return LoadPlan(
            policies=self.policies,
            rates=self.rates,
            concurrency=self.concurrency,
            auto_rates=self.auto_rates,
            operating_rate=self.operating_rate,
            slo_ttft_p99_s=self.slo_ttft_p99_s,
            size_lists=self.size_lists,
            host_memory_auto=self.host_memory_auto,
            decision_margin_pp=self.decision_margin_pp,
            decision_ttft_margin=self.decision_ttft_margin,
        )

    def split(self) -> tuple[RunSpec, LoadPlan]:
        return self.spec, self.plan


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


def served_shares(
    w: Workload, full: pl.DataFrame, delivered: int
) -> tuple[float | None, float | None]:
    """``gpu_hit_share_served`` and ``ideal_hit_share_served`` (docs/simulator.md §6.0): over
    the requests that ran, since a layout cannot deliver hits to a request that never ran."""
    ran = full["rejected"].is_null()
    accesses = int(full.filter(ran)["blocks"].sum())
    hit = delivered / accesses if accesses else None
    if bool(ran.all()):
        return hit, w.ideal_hit_share
    return hit, w.served_ideal_hit_share(ran.to_numpy())


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
            f"{w.path}: every request was rejected ({reasons}): one worker's GPU KV pool "
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
    served_hit, served_ideal = served_shares(w, full, delivered)
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
        gpu_hit_share_served=served_hit,
        ideal_hit_share_served=served_ideal,
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
        spread=None,  # over replicas: replicas.with_spread adds it
    )


def simulate(
    workload: Workload,
    spec: RunSpec | ReplayConfig,
    policy: str,
    rate: float | None,
    *,
    concurrency: int | None = None,
    store_factory: StoreFactory = FastStore,
    progress: Callable[[int], None] | None = None,
    release: bool = False,
) -> PolicyResult:
    """One policy at one load point: ``rate`` requests/s offered, or ``concurrency`` sessions
    active (analyzers/replay/load.py), with ``spec``'s settings (a :class:`ReplayConfig`'s
    :attr:`~ReplayConfig.spec` when given one).

    ``release``: collect the finished simulation before returning, for a caller that runs many
    in one process (the recommender). It is a web of reference cycles (policy <-> simulation,
    event callbacks) around arrays of the trace's size, which the cyclic GC otherwise frees
    only when it next reaches its oldest generation (measured: a worker's RSS grew from 1.4 to
    4.5 GiB over 50 simulations without). Off by default: a full collection costs tens of
    milliseconds, which a replay of a few load points does not need to spend.
    """
    if (rate is None) == (concurrency is None):
        raise ValueError("simulate: give a rate or a concurrency, not both")
    run_spec = spec.spec if isinstance(spec, ReplayConfig) else spec
    sim = Simulation(
        workload,
        run_spec,
        POLICIES[policy],
        rate=rate or 0.0,
        concurrency=concurrency,
        store_factory=store_factory,
        progress=progress,
    )
    sim.run()
    result = summarize(sim, run_spec.keep_tables, offered_rate=rate)
    if release:
        del sim
        gc.collect()
    return result


def run_task(
    workload: Workload,
    task: SimTask,
    progress: Callable[[int], None] | None = None,
    *,
    store_factory: StoreFactory = FastStore,
) -> PolicyResult:
    """One :class:`~.parallel.SimTask` on ``workload`` (what a runner's workers call): a
    simulation that frees its own cycles, since a worker runs many. A concurrency above the
    workload's sessions runs on the workload amplified to reach it (:func:`.amplify.copies_for`,
    checked against the memory budget before the run by :func:`amplified_workload`)."""
    k = copies_for(task.concurrency, workload.sessions)
    if k > 1:
        workload = amplify_workload(workload, k, seed=task.spec.seed)
    return simulate(
        workload,
        task.spec,
        task.policy,
        task.rate,
        concurrency=task.concurrency,
        store_factory=store_factory,
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
    once for many simulations (it keeps none of the trace's table: worker processes get the
    arrays the simulator reads, not the block hashes)."""
    return build_workload(trace, geometry, workers_of(geometry, hardware))


def amplified_workload(
    workload: Workload, spec: RunSpec, plan: LoadPlan, memory_budget_bytes: int | None
) -> Workload:
    """``workload`` with ``plan.amplify`` copies of every session (seeded by ``spec.seed``),
    after checking against the memory budget (None: the default share of the machine's) both
    that and the largest amplification a concurrency point needs, before anything is built."""
    sessions = workload.sessions * plan.amplify
    most = max((copies_for(c, sessions) for c in plan.concurrency or ()), default=1)
    if most > 1:
        budget = budget_bytes(memory_budget_bytes)
        check_amplify(workload, plan.amplify * most, budget, parameter="concurrency")
    return amplify_within_budget(workload, plan.amplify, spec.seed, memory_budget_bytes)


def growth_within_budget(workload: Workload, plan: LoadPlan, execution: Execution) -> int | None:
    """The most copies (of :data:`.session_sweep.GROWTH_MULTIPLES`) the sessions sweep may
    amplify to: each worker process builds its own amplified workload (:func:`run_task`), so
    a multiple fits when that many of its :func:`.amplify.amplified_bytes` fit the memory
    budget; 1 when none does; None when the sweep does not grow."""
    if not (plan.sweeps_sessions and plan.amplify_growth):
        return None
    workers = 1
    if execution.engine == "local":
        workers = execution.jobs or default_jobs(workload, execution.memory_budget_bytes)
    budget = budget_bytes(execution.memory_budget_bytes) // max(1, workers)
    fits = 1
    for m in GROWTH_MULTIPLES:
        try:
            check_amplify(workload, m, budget)  # the workload is already amplified by plan.amplify
        except FcctlInputError:
            break
        fits = m
    return fits


def point_jobs(workload: Workload, plan: LoadPlan, execution: Execution) -> Execution:
    """``execution``, with worker processes chosen by default (``jobs`` None, local) capped at
    as many as the memory budget holds of the largest concurrency point's amplified workload:
    each worker builds its own copy of it (:func:`run_task`)."""
    most = max((copies_for(c, workload.sessions) for c in plan.concurrency or ()), default=1)
    if most == 1 or execution.engine != "local" or execution.jobs is not None:
        return execution
    fits = budget_bytes(execution.memory_budget_bytes) // amplified_bytes(workload, most)
    jobs = min(default_jobs(workload, execution.memory_budget_bytes), max(1, fits))
    return dataclasses.replace(execution, jobs=jobs)


def decision_of(
    policies: Mapping[str, PolicyResult],
    margin_pp: float = DEFAULT_MARGIN_PP,
    ttft_margin: float = DEFAULT_TTFT_MARGIN,
) -> Decision:
    """The decision at one load point (:func:`.decision.decide` on the policies' figures)."""
    figures = {}
    for name, p in policies.items():
        # Compared on the served share: rejected requests are misses for every layout alike.
        if p.gpu_hit_share_served is None or p.ttft_s.mean is None:
            return Decision("none", None, None, None, "no block accesses: nothing to compare")
        figures[name] = PolicyFigures(
            p.gpu_hit_share_served, p.ttft_s.mean, p.ssd_read_bytes, p.saturated
        )
    return decide(figures, margin_pp=margin_pp, ttft_margin=ttft_margin)


def check_load(spec: RunSpec, workload: Workload) -> None:
    """What only the workload can refuse: a think time on a trace replayed on one clock."""
    if not workload.closed_loop and spec.think_time.mode != "original":
        raise FcctlInputError(
            f"think_time: {workload.path}: a trace on one clock replayed at a rate keeps its "
            f"timestamps (time-scaled), so only 'original' applies; use concurrency to "
            f"replay its sessions in a closed loop; got {str(spec.think_time)!r}",
            parameter="think_time",
        )


def load_notes(spec: RunSpec, plan: LoadPlan, workload: Workload) -> list[str]:
    """The notes saying how the load was applied (the sweep's own note comes after the run)."""
    notes: list[str] = []
    if workload.sessions_inferred:
        notes.append("sessions inferred from prefix chains (the trace has no session ids)")
    if plan.axis == "concurrency":
        notes.append(
            "concurrency: a closed loop of sessions; N active at once, the next starting when "
            "one ends ('all': every session at t = 0); each turn arrives its think time "
            f"({spec.think_time}) after the previous turn's arrival, never before that "
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
    if workload.closed_loop and spec.think_time.mode != "original":
        notes.append(f"think time between a session's turns: {spec.think_time}")
    return notes


def size_points_of(
    plan: LoadPlan, hardware: Hardware, workload: Workload, notes: list[str]
) -> tuple[dict[str, int], ...]:
    """The size points of the run: the node's sizes first, then every swept combination
    (``host_memory_auto`` adds the working set's capacities, and says so in ``notes``)."""
    lists = dict(plan.size_lists)
    if plan.host_memory_auto:
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
            f"{hardware.host_memory_bytes / GiB:,.0f} GiB"
        )
    base = {f: int(getattr(hardware, f)) for f in SIZE_FIELDS}
    return size_points(base, lists)


def _lowest_named(results: Sequence[RateResult]) -> int | None:
    """The lowest concurrency whose decision names a layout (None: none does, or rate mode)."""
    named = [
        r.concurrency for r in results if r.concurrency is not None and r.decision.best != "none"
    ]
    return min(named) if named else None


class Batches:
    """Runs load points, every policy at each, as batches of independent simulations on a
    runner, with one progress line per simulation in flight."""

    def __init__(
        self,
        runner: Runner,
        display: SimulationDisplay,
        spec: RunSpec,
        sizes: Sequence[Mapping[str, int]],
        plan: LoadPlan,
        sessions: int,
    ) -> None:
        self._sessions = sessions  # of the workload the runner holds (already amplified)
        self._runner = runner
        self._display = display
        self._specs = [spec.with_sizes(s) for s in sizes]
        self._sizes = sizes
        self._plan = plan

    def run(self, wanted: Sequence[LoadPoint]) -> list[RateResult]:
        """The load points ``(size point, rate, concurrency)`` in order, each with its decision."""
        policies = self._plan.policies
        tasks = [SimTask(self._specs[k], p, r, c) for k, r, c in wanted for p in policies]
        found: dict[int, PolicyResult] = {}

        def done(i: int, result: PolicyResult) -> None:
            found[i] = result
            self._display.done(i)

        self._display.start(tasks)
        self._runner.run(tasks, done, self._display.advance)
        self._display.finish()
        out = []
        for j, (k, r, c) in enumerate(wanted):
            per_policy = {p: found[j * len(policies) + n] for n, p in enumerate(policies)}
            decision = decision_of(per_policy, *self._plan.margins)
            amplify = self._plan.amplify * copies_for(c, self._sessions)
            out.append(RateResult(r, per_policy, decision, c, dict(self._sizes[k]), amplify))
        return out


def replay_trace(
    trace: Trace,
    config: RunSpec | ReplayConfig,
    plan: LoadPlan | None = None,
    *,
    progress: Progress | None = None,
    store_factory: StoreFactory = FastStore,
    execution: Execution | None = None,
    workload: Workload | None = None,
) -> ReplayResult:
    """Replay ``trace`` under every policy of ``plan`` at every load and size point, each
    simulation with ``config``'s settings (a :class:`~.spec.RunSpec` and its ``plan``, or a
    :class:`ReplayConfig` holding both).

    ``execution``: where the simulations run (:mod:`.parallel`; default one after another
    here; a reference store always runs here). Each round of :meth:`LoadPlan.rounds` is one
    batch; the result is the same wherever they run. ``workload``: ``trace``'s
    :func:`simulation_workload` on this geometry and node, when the caller built it for several
    replays (None: built here)."""
    started = utc_now()
    spec, plan = config.split() if isinstance(config, ReplayConfig) else (config, plan)
    if plan is None:
        raise ValueError("replay_trace: give a LoadPlan with a RunSpec")
    if workload is None:
        workload = simulation_workload(trace, spec.geometry, spec.hardware)
    plan = plan.for_workload(workload.closed_loop)
    workload = amplified_workload(
        workload, spec, plan, (execution or Execution()).memory_budget_bytes
    )
    if plan.axis == "rate":
        check_load(spec, workload)
    notes = load_notes(spec, plan, workload)
    sizes = size_points_of(plan, spec.hardware, workload, notes)
    capacity = None
    if plan.sweeps_rates:
        capacity = capacity_estimate(workload, spec.hardware.prefill_tokens_per_s)
    per_size = len(plan.fixed_points(workload.sessions))
    per_size += MAX_AUTO_POINTS if capacity else 0
    per_size += MAX_SESSION_POINTS if plan.sweeps_sessions else 0
    total = len(sizes) * per_size * len(plan.policies) * workload.requests
    if store_factory.reference:
        execution = Execution()
    execution = point_jobs(workload, plan, execution or Execution())
    prog = progress or Progress(enabled=False)
    with (
        prog.task("replaying", total=total, unit="requests") as task,
        open_runner(
            workload,
            functools.partial(run_task, store_factory=store_factory),
            execution,
        ) as runner,
    ):
        display = SimulationDisplay(prog, task, workload.requests, workload.requests)
        batches = Batches(runner, display, spec, sizes, plan, workload.sessions)
        rounds = plan.rounds(
            len(sizes), workload.sessions, capacity, growth_within_budget(workload, plan, execution)
        )
        try:
            wanted = next(rounds)
            while True:
                wanted = rounds.send(batches.run(wanted))
        except StopIteration as finished:
            swept: tuple[SizeSweep, ...] = finished.value
        task.update(total)
        engine = runner.facts
    points = assemble_points(plan, sizes, swept, workload, capacity, notes)
    return replay_result(spec, plan, workload, points, notes, started, engine)


@dataclass(frozen=True)
class Points:
    """Every load point in the document's order, the user's own, and per size point the lowest
    load whose decision names a layout."""

    rates: tuple[RateResult, ...]
    operating: RateResult | None
    divergence: tuple[Mapping[str, Any], ...]


def assemble_points(
    plan: LoadPlan,
    sizes: Sequence[Mapping[str, int]],
    sweeps: Sequence[SizeSweep],
    workload: Workload,
    capacity: float | None,
    notes: list[str],
) -> Points:
    """Each size point's fixed and swept points, the user's own first, then by load; the auto
    sweep's note (from the node's size point) goes into ``notes``."""
    results: list[RateResult] = []
    operating: RateResult | None = None
    divergence: list[dict[str, Any]] = []
    for k, sweep in enumerate(sweeps):
        here = list(sweep.fixed)
        if k == 0 and plan.operating_rate is not None and here:
            operating = here[0]
        if capacity:
            if k == 0:
                paced = (
                    " (the sessions' own think times pace the load: --concurrency or "
                    "--think-time push it further)"
                    if workload.closed_loop and "stopped growing" in (sweep.why or "")
                    else ""
                )
                notes.append(
                    f"rates auto: from {capacity * START_FRACTION:.3g} req/s (1/16 of the "
                    f"{capacity:.3g} req/s the workers prefill with every reused block "
                    f"cached), doubling until {sweep.why}{paced}"
                )
            here += [p for p in sweep.swept if not (operating and p.rate == operating.rate)]
        if plan.sweeps_sessions:
            here += list(sweep.swept)
            if k == 0:
                operating = next((p for p in here if p.concurrency == workload.sessions), operating)
                notes.append(_sessions_note(workload.sessions, here, sweep.why))
        here.sort(key=lambda p: (p is not operating, p.rate or 0, p.concurrency or 0))
        results += here
        divergence.append(
            {
                "sizes": dict(sizes[k]),
                "rate": divergence_rate([(p.rate, p.decision) for p in here if p.rate is not None]),
                "concurrency": _lowest_named(here),
            }
        )
    return Points(tuple(results), operating, tuple(divergence))


def _sessions_note(sessions: int, points: Sequence[RateResult], why: str | None) -> str:
    """The concurrency sweep's note: what it ran, today's load and why it stopped."""
    ran = sorted(p.concurrency or 0 for p in points)
    span = f"{ran[0]:,}-{ran[-1]:,}" if ran else "no"
    return (
        f"concurrency auto: the trace's sessions pace themselves (per-session clocks, no global "
        f"arrival times), so the load is the sessions active at once: {span} sessions "
        f"({ran[0] / sessions:.2g}x-{ran[-1] / sessions:.2g}x today's load) until {why}; "
        f"today's load (the operating point) is all {sessions:,} of the trace's sessions active"
        if ran
        else f"concurrency auto: no point ran ({why})"
    )


def replay_result(
    spec: RunSpec,
    plan: LoadPlan,
    workload: Workload,
    points: Points,
    notes: Sequence[str],
    started: Any,
    engine: Mapping[str, Any],
) -> ReplayResult:
    """The :class:`ReplayResult` of a finished replay."""
    g = spec.geometry
    divergence = points.divergence
    return ReplayResult(
        schema_version=SCHEMA_VERSION,
        trace=workload.trace_summary(),
        kv=KvSummary(g.name, g.bytes_per_token, workload.block_bytes, g.tp, g.dtype_bytes),
        hardware=hardware_document(spec.hardware),
        workers=workload.workers,
        placement=PlacementSettings(
            spec.placement.short_reply_tokens, spec.placement.agent_context_tokens
        ),
        load={
            "axis": plan.axis,
            "closed_loop": workload.closed_loop or plan.axis == "concurrency",
            "think_time": str(spec.think_time),
            "cancel": spec.cancel,
            "router": spec.router,
            "seed": spec.seed,
            "natural_rate_per_s": workload.natural_rate_per_s(),
            "amplify": plan.amplify,
        },
        ideal_hit_share=workload.ideal_hit_share,
        rates=points.rates,
        operating_point=points.operating,
        divergence_rate=divergence[0]["rate"] if divergence else None,
        divergence_concurrency=divergence[0]["concurrency"] if divergence else None,
        divergence=divergence,
        decision_margins={
            "margin_pp": plan.decision_margin_pp,
            "ttft_margin": plan.decision_ttft_margin,
        },
        notes=tuple(notes),
        provenance=collect_provenance(started, extra={"engine": dict(engine)}),
    )
