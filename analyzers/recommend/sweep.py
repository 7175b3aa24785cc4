"""``recommend_thresholds``: sweep the placement thresholds with the replay simulator, pick a pair.

Every figure is a real run of ``fcctl replay``'s simulator (:func:`fcctl.analyzers.replay.simulate`)
on one :class:`~fcctl.analyzers.replay.Workload` built once from the trace (blocks, sessions,
turns, workers: the prefix structure), at the same rates and seed (the load schedule).

**What is simulated** (one *cell* = one policy at one rate, with a threshold pair for the flat
policies):

1. ``memory-only`` and ``tiered`` at every rate: they do not read the thresholds, so each runs
   once per rate, whatever the grid.
2. ``flat`` at every grid pair and rate.
3. After the pick: ``flat-fcfs`` at every rate with the recommended pair (the scheduling
   ablation beside it), and the misplacement changes (:data:`~.result.CHANGES`) with ``flat`` at
   the target rate.

**Reuse across the grid.** The thresholds enter the placement rule only through rules 4-6
(:mod:`fcctl.layout.placement`): for a later turn, ``context > agent_context_tokens`` ->
``agent_context``; else ``previous reply > short_reply_tokens`` -> ``long_reply``; else
``short_reply_chat``. Rules 1-3 (memory full, shared prefix, first turn) come first and do
not read them. So the per-request *threshold class* vector (:func:`threshold_classes`: the
rule's own ``PlacementRule.threshold_classes``) decides the whole simulation: two pairs with the
same vector make the same decision for every write, and the simulator is deterministic, so
their results are identical. Each distinct (policy, rate, vector) is simulated once and its
result reused for every pair that maps to it (placement reasons included, so even ``details``
agree).

**The pick** (:func:`pick`): at the target rate (the highest rate unless ``target_rate``), the
pair with the highest GPU hit share; ties (exactly equal shares) go to the lower p99 TTFT,
compared in whole milliseconds (a sub-millisecond p99 difference is no reason to pick a pair;
``objective="ttft-p99"`` swaps the two), then the lower mean TTFT, then fewer SSD bytes read,
then the smaller short-reply threshold, then the smaller agent-context threshold (when nothing
measured tells them apart, keep less in memory: host memory is the scarce tier).

**Do the thresholds matter?** (:func:`spread_of`) At the target rate, the grid's pairs are
compared on the decision's two figures (:mod:`fcctl.analyzers.replay.decision`): they *matter*
when the highest GPU hit share exceeds the lowest by more than ``margin_pp`` percentage points,
or the highest mean TTFT exceeds the lowest by more than ``ttft_margin`` (relative). When they do
not, the recommendation is the placement's default pair (:mod:`fcctl.layout.placement`), added
to the grid and simulated like every other pair if the grid lacks it, and no note suggests a
wider grid: a wider one moves nothing the margins can see.

**Grid extension** (:func:`extend_axis`). When the thresholds matter and the pick sits on an
edge of a *default* grid axis (its largest value, or its smallest above 0), that axis gains the
next power of two beyond the edge (double the largest; half the smallest, 1 -> 0), the new pairs
run at every rate, and the pick is made again; at most :data:`MAX_GRID_EXTENSIONS` values per
axis, each stated in a note. A grid the user gave is never extended (a note says the pick is on
its edge).

**Misplacement** (:data:`~.result.CHANGES`): the recommended pair with one threshold halved or
doubled, ``agent_context_tokens = 0`` (every later turn with a context is an agent turn: every
short chat goes to SSD), and both thresholds at :data:`ALL_MEMORY_TOKENS` (every later turn is a
short chat: every session's later turns go to memory, as memory permits; first turns and the
memory-full rule stay, they are not thresholds).

**Where the simulations run** (:func:`fcctl.analyzers.replay.open_runner`): here
(``jobs=1``), in ``jobs`` worker processes sharing the workload (``jobs=None``: the
CPUs within the memory budget), or as Dask tasks on the workload scattered once to every worker
(``engine="dask"``). Each batch (the grid with the baselines, a grid extension, the runs after
the pick) runs at once; results are identical wherever they run (each cell is independent and
deterministic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.common.provenance import collect_provenance, utc_now
from fcctl.layout.geometry import KvGeometry
from fcctl.layout.placement import (
    DEFAULT_AGENT_CONTEXT_TOKENS,
    DEFAULT_SHORT_REPLY_TOKENS,
    PlacementRule,
)

from ..replay import (
    DEFAULT_MARGIN_PP,
    DEFAULT_RATES,
    DEFAULT_SEED,
    DEFAULT_TTFT_MARGIN,
    Execution,
    Hardware,
    PolicyResult,
    RateResult,
    Runner,
    RunSpec,
    SimTask,
    SimulationDisplay,
    Workload,
    amplify_within_budget,
    check_amplify_value,
    check_execution,
    check_margins,
    decision_of,
    hardware_document,
    open_runner,
    run_task,
    simulation_workload,
)
from ..traces.schedule import check_rates
from ..traces.schema import Trace
from .grid import check_grid, default_grid
from .result import (
    CHANGES,
    SCHEMA_VERSION,
    GridCell,
    Misplacement,
    Recommendation,
    RecommendResult,
    RunFacts,
    Spread,
    TraceIdentity,
    Ttft,
)

OBJECTIVES: tuple[str, ...] = ("hit", "ttft-p99")
#: Both thresholds for "every session in memory": above any token count a trace holds.
ALL_MEMORY_TOKENS = 2**62
#: The policies of ``rates[].policies``, in replay's order; ``flat`` at the recommended pair.
RATE_POLICIES: tuple[str, ...] = ("memory-only", "tiered", "flat", "flat-fcfs")
_THRESHOLD_FREE = ("memory-only", "tiered")
Notes = tuple[str, ...]
#: Values a default grid axis may gain beyond its edge (module docstring, "Grid extension").
MAX_GRID_EXTENSIONS = 3


@dataclass(frozen=True)
class RecommendConfig:
    """What to sweep: geometry, hardware, rates (requests/s), grids (tokens; ``None``: the
    default grid of :mod:`.grid`), objective, target rate, seed, worker processes, and the
    margins within which pairs count as equal (percentage points of hit share; a fraction of
    mean TTFT: :mod:`fcctl.analyzers.replay.decision`)."""

    geometry: KvGeometry
    hardware: Hardware
    rates: tuple[float, ...] = DEFAULT_RATES
    short_reply_grid: tuple[int, ...] | None = None
    agent_context_grid: tuple[int, ...] | None = None
    objective: str = "hit"
    target_rate: float | None = None
    seed: int = DEFAULT_SEED
    jobs: int | None = 1
    decision_margin_pp: float = DEFAULT_MARGIN_PP
    decision_ttft_margin: float = DEFAULT_TTFT_MARGIN
    #: Where the simulations run (:class:`fcctl.analyzers.replay.Execution`): ``jobs`` worker
    #: processes here (None: the CPUs, within the memory budget), or ``engine="dask"`` on the
    #: cluster at ``scheduler`` (None: a local one).
    engine: str = "local"
    scheduler: str | None = None
    memory_budget_bytes: int | None = None
    #: Copies of every session swept on (:mod:`fcctl.analyzers.replay.amplify`); 1: as it is.
    amplify: int = 1

    @property
    def spec(self) -> RunSpec:
        """The settings every cell shares; a cell sets its own placement rule."""
        return RunSpec(geometry=self.geometry, hardware=self.hardware, seed=self.seed)


@dataclass(frozen=True)
class Cell:
    """One simulation: ``policy`` at ``rate`` with a threshold pair (tokens)."""

    policy: str
    rate: float
    short_reply_tokens: int
    agent_context_tokens: int


def threshold_classes(
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    prev_request: np.ndarray,
    short_reply_tokens: int,
    agent_context_tokens: int,
) -> np.ndarray:
    """Per request (int8), which of rules 3-6 decides its writes when rules 1-2 do not: the
    index of its reason in :data:`fcctl.layout.placement.THRESHOLD_REASONS`, as
    :meth:`PlacementRule.threshold_classes` decides it on the flat policy's signals (context =
    the request's input tokens, previous reply = the output tokens of the session's previous
    request, ``prev_request``; -1 for a first turn)."""
    later = prev_request >= 0
    reply = np.where(later, output_tokens[np.maximum(prev_request, 0)], 0)
    rule = PlacementRule(short_reply_tokens, agent_context_tokens)
    return rule.threshold_classes(later, input_tokens, reply)


class _Signals:
    """The three per-request arrays the thresholds are compared with (the parent keeps only
    these, not the whole workload)."""

    def __init__(self, w: Workload) -> None:
        self.input_tokens = w.input_tokens.copy()
        self.output_tokens = w.output_tokens.copy()
        self.prev_request = w.prev_request.copy()
        self._digests: dict[tuple[int, int], str] = {}

    def digest(self, short: int, agent: int) -> str:
        key = (short, agent)
        if key not in self._digests:
            classes = threshold_classes(
                self.input_tokens, self.output_tokens, self.prev_request, short, agent
            )
            self._digests[key] = hashlib.blake2b(classes.tobytes(), digest_size=16).hexdigest()
        return self._digests[key]

    def key(self, cell: Cell) -> tuple[str, float, str]:
        """Cells with equal keys have identical results (module docstring)."""
        if cell.policy in _THRESHOLD_FREE:
            return (cell.policy, cell.rate, "")
        return (
            cell.policy,
            cell.rate,
            self.digest(cell.short_reply_tokens, cell.agent_context_tokens),
        )


class _Runner:
    """Runs cells once each (by :meth:`_Signals.key`) on a replay runner (this process, worker
    processes or Dask: :func:`fcctl.analyzers.replay.open_runner`)."""

    def __init__(
        self,
        runner: Runner,
        config: RecommendConfig,
        signals: _Signals,
        display: SimulationDisplay,
        advance: Callable[[], None],
    ) -> None:
        self.signals = signals
        self.results: dict[tuple[str, float, str], PolicyResult] = {}
        self.advance = advance
        self.reused = 0
        self._spec = config.spec
        self._runner = runner
        self._display = display

    def _task(self, cell: Cell) -> SimTask:
        rule = PlacementRule(cell.short_reply_tokens, cell.agent_context_tokens)
        return SimTask(dataclasses.replace(self._spec, placement=rule), cell.policy, cell.rate)

    def run(self, cells: Iterable[Cell]) -> None:
        todo: dict[tuple[str, float, str], Cell] = {}
        for cell in cells:
            key = self.signals.key(cell)
            if key in self.results or key in todo:
                self.reused += 1
                self.advance()
            else:
                todo[key] = cell
        keys = list(todo)
        tasks = [self._task(todo[k]) for k in keys]

        def done(i: int, result: PolicyResult) -> None:
            self.results[keys[i]] = result
            self._display.done(i)

        self._display.start(tasks)
        self._runner.run(tasks, done, self._display.advance)
        self._display.finish()

    def get(self, cell: Cell) -> PolicyResult:
        return self.results[self.signals.key(cell)]

    @property
    def simulated(self) -> int:
        return len(self.results)


def _grid_cell(short: int, agent: int, rate: float, p: PolicyResult) -> GridCell:
    return GridCell(
        short, agent, rate, p.gpu_hit_share, Ttft(p.ttft_s.mean, p.ttft_s.p99), p.ssd_read_bytes
    )


def _num(x: float | None, missing: float) -> float:
    return missing if x is None else x


def pick(cells: Sequence[GridCell], objective: str) -> GridCell:
    """The recommended cell among ``cells`` (one rate) by the module docstring's rule."""
    if objective not in OBJECTIVES:
        raise FcctlInputError(
            f"objective: must be one of {', '.join(OBJECTIVES)}; got {objective!r}",
            parameter="objective",
        )
    if not cells:
        raise FcctlInputError("the threshold grid is empty")
    inf = float("inf")

    def key(c: GridCell) -> tuple[float, ...]:
        hit = -_num(c.gpu_hit_share, -inf)
        p99 = _num(c.ttft_s.p99, inf)
        p99 = round(p99, 3) if math.isfinite(p99) else p99
        first, second = (hit, p99) if objective == "hit" else (p99, hit)
        return (
            first,
            second,
            _num(c.ttft_s.mean, inf),
            c.ssd_read_bytes,
            c.short_reply_tokens,
            c.agent_context_tokens,
        )

    return min(cells, key=key)


def misplacement_pairs(short: int, agent: int) -> list[tuple[str, int, int]]:
    """``(change, short_reply_tokens, agent_context_tokens)`` for every change, in order."""
    pairs = {
        "short_reply_tokens halved": (short // 2, agent),
        "short_reply_tokens doubled": (short * 2, agent),
        "agent_context_tokens halved": (short, agent // 2),
        "agent_context_tokens doubled": (short, agent * 2),
        "every short chat on SSD": (short, 0),
        "every session in memory": (ALL_MEMORY_TOKENS, ALL_MEMORY_TOKENS),
    }
    return [(c, *pairs[c]) for c in CHANGES]


def _notes(w: Workload) -> tuple[str, ...]:
    notes = []
    if w.sessions_inferred:
        notes.append("sessions inferred from prefix chains (the trace has no session ids)")
    if w.closed_loop:
        notes.append("per-session clocks: sessions start as a seeded Poisson process at the rate")
    if int((w.prev_request >= 0).sum()) == 0:
        notes.append("no session has a second request: the thresholds decide nothing here")
    return tuple(notes)


def spread_of(cells: Sequence[GridCell], margin_pp: float, ttft_margin: float) -> Spread:
    """How far apart ``cells`` (one rate) are on hit share and mean TTFT (module docstring)."""
    hits = [100.0 * c.gpu_hit_share for c in cells if c.gpu_hit_share is not None]
    ttfts = [c.ttft_s.mean for c in cells if c.ttft_s.mean is not None]
    hit_pp = max(hits) - min(hits) if hits else None
    ratio = None
    if ttfts and len(ttfts) == len(cells) and min(ttfts) > 0:
        ratio = max(ttfts) / min(ttfts)
    return Spread(len(cells), hit_pp, ratio, margin_pp, ttft_margin)


def matters(spread: Spread) -> bool:
    """Whether any two pairs are apart by more than the margins (a missing figure: True, the
    conservative answer, since nothing shows the pairs equal)."""
    if spread.pairs < 2:
        return False
    if spread.hit_share_pp is None or spread.ttft_mean_ratio is None:
        return True
    return spread.hit_share_pp > spread.margin_pp or spread.ttft_mean_ratio > 1 + spread.ttft_margin


def extend_axis(grid: tuple[int, ...], value: int) -> int | None:
    """The value a default axis gains when the pick ``value`` sits on its edge, or None."""
    if len(grid) < 2 or value not in (grid[0], grid[-1]):
        return None
    if value == grid[-1]:
        return max(1, 2 * value)
    return value // 2 if value > 0 else None


def _why(spread: Spread, objective: str) -> str:
    if not matters(spread):
        if spread.pairs < 2:
            return "one pair on the grid: the placement's default pair"
        return (
            f"the thresholds do not matter here: the {spread.pairs} pairs are within "
            f"{spread.margin_pp:g} pp of GPU hit share and {100 * spread.ttft_margin:g} % of mean "
            "TTFT of each other; the placement's default pair"
        )
    first = "GPU hit share" if objective == "hit" else "p99 TTFT"
    return f"the best of {spread.pairs} pairs by {first} at the target rate"


def _choose(
    runner: _Runner,
    grid: tuple[GridCell, ...],
    rates: tuple[float, ...],
    target: float,
    shorts: tuple[int, ...],
    agents: tuple[int, ...],
    config: RecommendConfig,
    task: Any,
) -> tuple[GridCell, Spread, tuple[GridCell, ...], tuple[int, ...], tuple[int, ...], Notes]:
    """The recommended cell (module docstring: the pick, whether the thresholds matter, grid
    extension), with the grid as it ends and the notes that say what changed it."""
    extendable = {
        "short-reply": config.short_reply_grid is None,
        "agent-context": config.agent_context_grid is None,
    }
    added: dict[str, list[int]] = {"short-reply": [], "agent-context": []}
    added_default = False
    while True:
        at_target = [g for g in grid if g.rate == target]
        spread = spread_of(at_target, config.decision_margin_pp, config.decision_ttft_margin)
        new_shorts, new_agents = shorts, agents
        if matters(spread):
            best = pick(at_target, config.objective)
            for name, axis, value in (
                ("short-reply", shorts, best.short_reply_tokens),
                ("agent-context", agents, best.agent_context_tokens),
            ):
                more = extend_axis(axis, value)
                if more is None or not extendable[name] or len(added[name]) >= MAX_GRID_EXTENSIONS:
                    continue
                added[name].append(more)
                if name == "short-reply":
                    new_shorts = tuple(sorted({*shorts, more}))
                else:
                    new_agents = tuple(sorted({*agents, more}))
        elif not added_default and (
            DEFAULT_SHORT_REPLY_TOKENS not in shorts or DEFAULT_AGENT_CONTEXT_TOKENS not in agents
        ):
            added_default = True
            new_shorts = tuple(sorted({*shorts, DEFAULT_SHORT_REPLY_TOKENS}))
            new_agents = tuple(sorted({*agents, DEFAULT_AGENT_CONTEXT_TOKENS}))
        else:
            key = (DEFAULT_SHORT_REPLY_TOKENS, DEFAULT_AGENT_CONTEXT_TOKENS)
            best = next(
                (g for g in at_target if (g.short_reply_tokens, g.agent_context_tokens) == key),
                None,
            ) or pick(at_target, config.objective)  # a one-pair grid without the default
        if (new_shorts, new_agents) == (shorts, agents):
            break
        have = {(g.short_reply_tokens, g.agent_context_tokens) for g in at_target}
        cells = [
            Cell("flat", r, cs, ca)
            for r in rates
            for cs in new_shorts
            for ca in new_agents
            if (cs, ca) not in have
        ]
        task.add_total(len(cells))
        runner.run(cells)
        shorts, agents = new_shorts, new_agents
        grid = tuple(
            _grid_cell(cs, ca, r, runner.get(Cell("flat", r, cs, ca)))
            for r in rates
            for cs in shorts
            for ca in agents
        )
    return (
        best,
        spread,
        grid,
        shorts,
        agents,
        _grid_notes(best, spread, shorts, agents, added, extendable, added_default),
    )


def _grid_notes(
    best: GridCell,
    spread: Spread,
    shorts: tuple[int, ...],
    agents: tuple[int, ...],
    added: dict[str, list[int]],
    extendable: dict[str, bool],
    added_default: bool,
) -> tuple[str, ...]:
    notes = []
    if added_default:
        notes.append(
            "the grid gained the placement's default pair, the recommendation when the "
            "thresholds do not matter"
        )
    for name, axis, value in (
        ("short-reply", shorts, best.short_reply_tokens),
        ("agent-context", agents, best.agent_context_tokens),
    ):
        if added[name]:
            values = ", ".join(f"{v:,}" for v in added[name])
            notes.append(
                f"the {name} grid was extended by {values} tokens: the pick sat on its edge "
                f"(at most {MAX_GRID_EXTENSIONS} values are added per threshold)"
            )
        if matters(spread) and extend_axis(axis, value) is not None:
            if not extendable[name]:
                notes.append(
                    f"the {name} threshold picked ({value:,}) is on the edge of the "
                    "given grid (a given grid is not extended)"
                )
            else:
                notes.append(
                    f"the {name} threshold picked ({value:,}) is still on the grid's "
                    f"edge after {MAX_GRID_EXTENSIONS} extensions"
                )
    return tuple(notes)


def _checked(config: RecommendConfig) -> tuple[Execution, tuple[float, ...], float]:
    """Where the cells run, the rates (the target among them) and the target rate."""
    if config.objective not in OBJECTIVES:
        raise FcctlInputError(
            f"objective: must be one of {', '.join(OBJECTIVES)}; got {config.objective!r}",
            parameter="objective",
        )
    if config.jobs is not None and (not isinstance(config.jobs, int) or config.jobs < 1):
        raise FcctlInputError(
            f"jobs: must be an integer >= 1; got {config.jobs!r}", parameter="jobs"
        )
    execution = Execution(config.engine, config.jobs, config.scheduler, config.memory_budget_bytes)
    check_execution(execution)
    check_margins(config.decision_margin_pp, config.decision_ttft_margin)
    check_amplify_value(config.amplify)
    rates = check_rates(config.rates, "rates")
    if config.target_rate is not None:
        target = check_rates([config.target_rate], "target_rate")[0]
        rates = tuple(sorted({*rates, target}))
    else:
        target = max(rates)
    return execution, rates, target


def _axes(
    config: RecommendConfig, signals: _Signals
) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """The grid's short-reply and agent-context values (tokens), and how they were chosen."""
    default_short, default_agent = default_grid(
        signals.input_tokens, signals.output_tokens, signals.prev_request
    )
    shorts = (
        check_grid(config.short_reply_grid, "short_reply_grid")
        if config.short_reply_grid is not None
        else default_short
    )
    agents = (
        check_grid(config.agent_context_grid, "agent_context_grid")
        if config.agent_context_grid is not None
        else default_agent
    )
    if config.short_reply_grid is None and config.agent_context_grid is None:
        grid_rule = "default (trace percentiles)"
    elif config.short_reply_grid is not None and config.agent_context_grid is not None:
        grid_rule = "given"
    else:
        grid_rule = "partly given, partly default (trace percentiles)"
    return shorts, agents, grid_rule


def _rate_results(
    runner: _Runner, rates: Sequence[float], s: int, a: int, config: RecommendConfig
) -> tuple[RateResult, ...]:
    """Every rate's policies (flat and flat-fcfs at the pair ``s``, ``a``) and decision."""
    out = []
    for r in rates:
        policies = {
            "memory-only": runner.get(Cell("memory-only", r, 0, 0)),
            "tiered": runner.get(Cell("tiered", r, 0, 0)),
            "flat": runner.get(Cell("flat", r, s, a)),
            "flat-fcfs": runner.get(Cell("flat-fcfs", r, s, a)),
        }
        margins = (config.decision_margin_pp, config.decision_ttft_margin)
        out.append(RateResult(r, policies, decision_of(policies, *margins)))
    return tuple(out)


def recommend_thresholds(
    trace: Trace, config: RecommendConfig, *, progress: Progress | None = None
) -> RecommendResult:
    """Sweep, pick and measure misplacement on ``trace`` (rules in the module docstring)."""
    started = utc_now()
    execution, rates, target = _checked(config)
    workload = simulation_workload(trace, config.geometry, config.hardware)
    workload = amplify_within_budget(
        workload, config.amplify, config.seed, execution.memory_budget_bytes
    )
    identity = TraceIdentity(trace.path, trace.format, workload.requests, workload.fingerprint)
    signals = _Signals(workload)
    shorts, agents, grid_rule = _axes(config, signals)
    ideal = workload.ideal_hit_share
    facts = RunFacts(
        trace_path=trace.path,
        trace_format=trace.format,
        requests=workload.requests,
        sessions=workload.sessions,
        sessions_inferred=workload.sessions_inferred,
        later_turns=int((workload.prev_request >= 0).sum()),
        model=config.geometry.name,
        hardware_name=config.hardware.name,
        objective=config.objective,
        target_rate=target,
        seed=config.seed,
        grid_rule=grid_rule,
        simulations_run=0,
        simulations_reused=0,
        jobs=1,
        notes=_notes(workload),
        amplify=config.amplify,
    )
    grid_cells = [Cell("flat", r, s, a) for r in rates for s in shorts for a in agents]
    base_cells = [Cell(p, r, 0, 0) for r in rates for p in _THRESHOLD_FREE]
    total = len(grid_cells) + len(base_cells) + len(rates) + len(CHANGES)
    prog = progress or Progress(enabled=False)
    with (
        prog.task("sweeping thresholds", total=total, unit="simulations") as task,
        open_runner(workload, run_task, execution) as cells,
    ):
        display = SimulationDisplay(prog, task, workload.requests, 1)
        runner = _Runner(cells, config, signals, display, lambda: task.advance(1))
        engine = cells.facts
        del workload, trace  # with worker processes or Dask only they hold them
        runner.run(base_cells + grid_cells)
        grid = tuple(
            _grid_cell(c.short_reply_tokens, c.agent_context_tokens, c.rate, runner.get(c))
            for c in grid_cells
        )
        best, spread, grid, shorts, agents, grid_notes = _choose(
            runner, grid, rates, target, shorts, agents, config, task
        )
        s, a = best.short_reply_tokens, best.agent_context_tokens
        changes = misplacement_pairs(s, a)
        fcfs_cells = [Cell("flat-fcfs", r, s, a) for r in rates]
        mis_cells = [Cell("flat", target, cs, ca) for _, cs, ca in changes]
        runner.run(fcfs_cells + mis_cells)
    misplacement = []
    for change, cs, ca in changes:
        p = runner.get(Cell("flat", target, cs, ca))
        misplacement.append(
            Misplacement(
                change, p.gpu_hit_share, Ttft(p.ttft_s.mean, p.ttft_s.p99), p.ssd_read_bytes, cs, ca
            )
        )
    return RecommendResult(
        schema_version=SCHEMA_VERSION,
        recommendation=Recommendation(
            short_reply_tokens=s,
            agent_context_tokens=a,
            rate=target,
            gpu_hit_share=best.gpu_hit_share,
            ttft_s=best.ttft_s,
            matters=matters(spread),
            spread=spread,
            why=_why(spread, config.objective),
        ),
        ideal_hit_share=ideal,
        rates=_rate_results(runner, rates, s, a, config),
        grid=grid,
        misplacement=tuple(misplacement),
        hardware=hardware_document(config.hardware),
        trace=identity,
        provenance=collect_provenance(started, extra={"engine": engine, "amplify": config.amplify}),
        run_facts=dataclasses.replace(
            facts,
            jobs=int(engine.get("jobs") or engine.get("workers") or 1),
            simulations_run=runner.simulated,
            simulations_reused=runner.reused,
            notes=facts.notes + grid_notes,
        ),
    )
