"""``fcctl plan`` (:func:`fcctl.api.plan`): from a trace to one decision, in one call.

The steps are the commands' own libraries, run in order, each writing its ``--json`` document
into the plan directory (atomically, one file each):

1. ``analyze.json``: :func:`fcctl.api.analyze`;
2. ``replay.json``: :func:`fcctl.api.replay` of the three layouts the decision chooses among
   (memory-only, tiered, flat: not flat-fcfs, an ablation) with the automatic load sweep
   (``rates="auto"``) plus the user's operating point (``rate`` or ``concurrency``) and sizes;
3. ``recommend.json``: :func:`fcctl.api.recommend_thresholds` at the *target rate*: the user's
   rate; else, for a concurrency plan, the rate flat served (central achieved rate) at the
   highest concurrency that no policy saturated (else the lowest), at the node's sizes; else
   the replay's divergence rate; else the highest rate the sweep ran that no policy saturated
   (else its lowest);
4. ``emit/NAME/`` with ``emit=True``: the drop-in package with the recommended thresholds;
5. ``report.html``: :func:`fcctl.reports.html_report.make_report` over the three documents.

``plan.json`` records, per step, a fingerprint of what the step read (the path, size and
modification time of every file the trace reader reads: the file, a directory's files, or
exactly the parts a dataset's directory or glob expands to; the parameters, fcctl's version,
and the documents of the steps it depends on) and a digest of what it wrote. With
``resume=True`` a step whose fingerprint is unchanged and whose output is there with the digest
recorded (so whole: a truncated or edited document is a changed step) is not run again;
everything after a changed step runs. The summary is built from the documents, so it reads the
same whether a step ran or was reused.

While a plan runs, each finished step is recorded at once in ``plan.partial.json`` (written
atomically; ``plan.json`` goes when the first step runs and comes back, complete, at the end),
so an interrupted or failed plan keeps the steps it finished and ``resume=True`` continues it.
One plan at a time writes a directory: a second one meets the first's lock (``flock`` on the
directory) and is refused at once. A plan that meets bad input, or fails before finishing a
step, removes the directory it created.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fcctl.common.errors import FcctlInputError, InputError, RunFailed
from fcctl.common.inputfile import parse_json, read_regular_text
from fcctl.common.outdir import (
    OutDirError,
    machine_failure,
    make_dirs,
    remove_made,
    write_text_atomic,
)
from fcctl.common.progress import Progress

if TYPE_CHECKING:  # fcctl plan --help stays light: the results load with the steps
    from fcctl.analyzers.recommend import RecommendResult
    from fcctl.analyzers.replay import RateResult, ReplayResult, SessionSampling, Verdict

MARKER = "plan.json"
#: The steps an unfinished plan has recorded so far (module docstring).
PARTIAL = "plan.partial.json"
#: The layouts a plan decides among (analyzers/replay/decision.CANDIDATES).
PLAN_POLICIES = ("memory-only", "tiered", "flat")
STEPS: tuple[str, ...] = ("analyze", "replay", "recommend", "emit", "report")
FILES = {
    "analyze": "analyze.json",
    "replay": "replay.json",
    "recommend": "recommend.json",
    "emit": "emit",
    "report": "report.html",
}
#: Rough shares of the whole plan's time per step (for the overall time-left estimate before a
#: step has run; measured on the whole Claude Code trace, docs/benchmarks.md "plan").
STEP_WEIGHTS = {"analyze": 0.15, "replay": 0.45, "recommend": 0.35, "emit": 0.01, "report": 0.04}


@dataclass(frozen=True)
class PlanStep:
    """One step: ``status`` is ``ran``, ``reused`` (resume: inputs unchanged) or ``skipped``;
    ``digest``: :func:`content_digest` of its output as written."""

    name: str
    path: str | None
    status: str
    seconds: float
    fingerprint: str | None
    digest: str | None = None


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` did, and the decision (field names are ``plan.json``'s keys)."""

    schema_version: int
    out_dir: str
    decision: Mapping[str, Any]
    summary: tuple[str, ...]
    steps: tuple[PlanStep, ...]
    documents: Mapping[str, Any] = field(default_factory=dict, metadata={"json": False})


def file_identity(source: str | Path, format: str | None = None) -> dict[str, Any]:
    """What a re-run compares: the resolved path, size and modification time of every file the
    trace reader reads for ``source`` (a dataset's parts as the dataset reader expands its
    directory or glob; every file of a Claude Code directory; else the file). A source the
    readers would refuse (missing, matching nothing, not a regular file) is refused here, before
    the plan touches the disk."""
    from fcctl.analyzers.traces.dataset import dataset_files, is_dataset_input
    from fcctl.analyzers.traces.readers import check_file

    p = Path(source)
    if is_dataset_input(source, format):  # analyze's, replay's and convert's own rule
        files = dataset_files(source)  # the reader's own expansion: one source of truth
    elif p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
    else:
        check_file(p)
        files = [p]
    out = []
    for q in files:
        st = q.stat()
        out.append([str(q.resolve()), st.st_size, st.st_mtime_ns])
    return {"files": out}


def content_digest(path: Path) -> str | None:
    """sha256 of a step's output: a file's bytes, or a directory's relative file names and
    bytes in name order; None when it is not there."""
    h = hashlib.sha256()
    if path.is_file():
        files = [(path, "")]
    elif path.is_dir():
        files = sorted((q, q.relative_to(path).as_posix()) for q in path.rglob("*") if q.is_file())
    else:
        return None
    for q, name in files:
        h.update(f"{name}\0{q.stat().st_size}\0".encode())
        with q.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def fingerprint(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check_plan_dir(out: Path, *, resume: bool, force: bool) -> dict[str, Any]:
    """The earlier plan to resume from: the records of an unfinished plan's ``plan.partial.json``
    (newer than its ``plan.json``, if any), else ``plan.json``'s (``{}`` for a fresh plan)."""
    shown = f"out: {out}"
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{shown}: exists and is not a directory", parameter="out")
    if out.is_dir() and any(out.iterdir()):
        recorded = [out / name for name in (PARTIAL, MARKER) if (out / name).is_file()]
        if not recorded:
            raise OutDirError(
                f"{shown}: directory is not empty and holds no {MARKER}: not an fcctl plan "
                "(give an empty or new directory)",
                parameter="out",
            )
        if not (resume or force):
            earlier = (
                f"holds an unfinished plan ({PARTIAL}): pass --resume to continue it"
                if recorded[0].name == PARTIAL
                else "holds an earlier plan: pass --resume to reuse its unchanged steps"
            )
            raise OutDirError(
                f"{shown}: {earlier}, or --force to run every step again", parameter="out"
            )
        try:
            doc = parse_json(read_regular_text(recorded[0], "plan record"), str(recorded[0]))
        except FcctlInputError:
            return {}  # unreadable: nothing is known of the earlier steps, so every one runs
        return doc if isinstance(doc, dict) else {}
    return {}


@dataclass
class PlanDirectory:
    """A plan directory held by this run (:func:`plan_directory`)."""

    out: Path
    #: The earlier plan's document (:func:`check_plan_dir`).
    earlier: Mapping[str, Any]
    #: Folders this run created for it (the directory itself among them when it was new).
    made: list[Path]
    #: Whether a step's output has been recorded in this run.
    recorded: bool = False


@contextmanager
def plan_directory(out: Path, *, resume: bool, force: bool) -> Iterator[PlanDirectory]:
    """Create ``out`` if needed, take its lock (``flock``, held until the block ends, released
    when the process ends however it ends) and check it (:func:`check_plan_dir`).

    A second plan into the same directory is refused at once, so two never mix their steps.
    A directory this run created is removed, with the folders made for it, when the block meets
    bad input (an :class:`InputError`: nothing is left for it, whatever step found it) or fails
    before any step was recorded; otherwise (interrupted, the machine failed) the finished
    steps stay, recorded for ``--resume``.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutDirError(f"out: {out}: exists and is not a directory", parameter="out")
    made: list[Path] = []
    try:
        made = make_dirs(out)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        remove_made(made)
        raise OutDirError(
            f"out: {out}: cannot create or open it ({e.strerror}: {e.filename})", parameter="out"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutDirError(
                f"out: {out}: another fcctl plan is writing into this directory; wait for it "
                "to finish (then --resume) or give another directory",
                parameter="out",
            ) from None
        held = PlanDirectory(out, {}, made)
        try:
            held.earlier = check_plan_dir(out, resume=resume, force=force)
            yield held
        except BaseException as e:
            # Bad input leaves nothing; an interrupted or failed run keeps what it recorded.
            if made and (isinstance(e, InputError) or not held.recorded):
                shutil.rmtree(out, ignore_errors=True)
                remove_made(made)
            raise
    finally:
        os.close(fd)


def target_rate(replay: ReplayResult, rate: float | None) -> tuple[float, str]:
    """The recommender's rate and why (module docstring, step 3)."""
    if rate is not None:
        return rate, "your operating point"
    if replay.load.get("axis") == "concurrency":
        return _concurrency_target(replay)
    if replay.divergence_rate:
        return float(replay.divergence_rate), "the divergence rate"
    points = [p.rate for p in replay.rates if p.rate is not None]
    calm = [
        p.rate
        for p in replay.rates
        if p.rate is not None and not any(q.saturated for q in p.policies.values())
    ]
    if calm:
        return float(max(calm)), "the highest rate the sweep ran that no policy saturated"
    if points:
        return float(min(points)), "the lowest rate the sweep ran"
    raise FcctlInputError("plan: the replay ran no rate to recommend thresholds at")


def node_memory_tiers(host_memory_bytes: int) -> tuple[int, ...] | None:
    """The memory tiers ``plan``'s analyze step measures: the node's host memory with a quarter,
    half and twice it around it, so the load-free verdict is stated at the node's own size and
    the table shows how near it the answer turns; None (analyze's defaults) for a node without
    host memory."""
    if host_memory_bytes <= 0:
        return None
    return tuple(sorted({max(1, host_memory_bytes * k // 4) for k in (1, 2, 4, 8)}))


def _concurrency_target(replay: ReplayResult) -> tuple[float, str]:
    """A concurrency plan's rate: what flat served at the highest concurrency no policy
    saturated (else the lowest), at the node's own sizes. The recommender offers rates, and
    flat is the layout whose thresholds it tunes, so its served rate there is the load the
    team's sessions really put on the node; the highest calm point is the heaviest load the
    node still serves as offered, where the thresholds matter most."""
    base = replay.rates[0].sizes if replay.rates else None
    points = [p for p in replay.rates if p.concurrency is not None and p.sizes == base]
    calm = [p for p in points if not any(q.saturated for q in p.policies.values())]
    chosen = max(calm, key=lambda p: p.concurrency or 0) if calm else None
    today = replay.operating_point
    if today is not None and today.concurrency is not None:
        # The automatic sessions sweep's operating point: every session of the trace active,
        # today's load, where the team runs the thresholds now.
        chosen = today
    if chosen is None and points:
        chosen = min(points, key=lambda p: p.concurrency or 0)
    if chosen is None:
        raise FcctlInputError("plan: the replay ran no concurrency to recommend thresholds at")
    name = "flat" if "flat" in chosen.policies else next(iter(chosen.policies))
    got = chosen.policies[name].achieved_rate
    # A window of length 0 (a handful of requests) has no central rate: the whole run's then.
    served = got.served
    over = "in the steady-state window" if got.central else "over the whole run"
    if not served:
        raise FcctlInputError(
            f"plan: {name} served no request at {chosen.concurrency:,} sessions to recommend "
            "thresholds at"
        )
    which = (
        "today's load, all of the trace's sessions active"
        if chosen is today
        else "the concurrency swept"
        if len(points) == 1
        else "the highest concurrency swept that no policy saturated"
        if calm
        else "the lowest concurrency swept (every one saturated)"
    )
    return float(served), (
        f"the rate {name} served {over} at {chosen.concurrency:,} sessions active, {which}"
    )


def _load_label(p: RateResult) -> str:
    """A load point by the load it achieved, the offered rate as detail (analyzers/replay/
    achieved): a rate the trace's pacing never reached is not shown as a load."""
    from fcctl.analyzers.replay.achieved import load_label

    return load_label(p)


def _node_points(replay: ReplayResult) -> list[RateResult]:
    """The load points at the node's own sizes, lightest first (by sessions, else by the rate
    offered: a point offered beyond what the node serves comes after the last it kept up with,
    so a layout's capacity is never read past a load it failed)."""
    base = replay.rates[0].sizes if replay.rates else None
    points = [p for p in replay.rates if p.sizes == base]
    return sorted(points, key=lambda p: (p.concurrency or 0, p.rate or 0.0))


def _holders(v: Verdict, load: float) -> frozenset[str]:
    """The candidates whose capacity at SLO (the Verdict's median) reaches ``load``."""
    return frozenset(n for n, c in v.capacity.items() if c.censored or c.median >= load)


def _decided_at(v: Verdict, load: float) -> str:
    """The Verdict's rule read at a heavier load: while the same layouts hold the SLO there as at
    its operating point, its decision stands; when fewer do, the one that holds it furthest (the
    capacity rule); when none does, ``none``."""
    holders = _holders(v, load)
    if holders == _holders(v, v.load):
        return v.best
    if not holders:
        return "none"
    return max(holders, key=lambda n: v.capacity[n].median)


def growth_lines(replay: ReplayResult) -> list[str]:
    """The growth answer (issue #33, item 3), rendered from the run's one decision
    (``replay.decision``, analyzers/replay/verdict.py): the range swept (in multiples of
    today's load where the replay has one), each policy's capacity at SLO in the Verdict's
    words (in sessions too on the sessions axis), and the first heavier load swept at which the
    Verdict's capacities change the decision (:func:`_decided_at`). [] without a Verdict."""
    from fcctl.analyzers.replay.verdict import capacity_words

    v = replay.decision
    points = _node_points(replay)
    if v is None or not v.loads_swept:
        return []
    by_sessions = replay.load.get("axis") == "concurrency" and len(points) == len(v.loads_swept)
    sessions = replay.trace.sessions
    today = replay.operating_point
    # Today's load in the Verdict's unit: its operating point is today's when one was given.
    base = v.load if today is not None and v.operating_point == "given" else None

    def times(i: int) -> float | None:
        if by_sessions and sessions and today is not None:
            return (points[i].concurrency or 0) / sessions
        return v.loads_swept[i] / base if base else None

    def where(i: int) -> str:
        m = times(i)
        at = "" if m is None else f"{m:.2g}x today's load, "
        n = points[i].concurrency or 0
        cc = f"{n:,} session{'' if n == 1 else 's'}, " if by_sessions else ""
        return f"{at}{cc}{v.loads_swept[i]:.3g} {v.load_unit}"

    # The ends of the range: by sessions on that axis, else by load achieved (an offered rate
    # past what the node serves can be served less than a lighter one).
    swept = range(len(v.loads_swept))
    low, high = (
        (0, len(points) - 1)
        if by_sessions
        else (min(swept, key=v.loads_swept.__getitem__), max(swept, key=v.loads_swept.__getitem__))
    )
    span = f"swept {where(low)} to {where(high)}"
    ref = "today's load" if base is not None else f"{v.load:.3g} {v.load_unit}"
    change = next(
        (i for i, x in enumerate(v.loads_swept) if x > v.load and _decided_at(v, x) != v.best),
        None,
    )
    if change is None:
        holds = "" if _holders(v, v.load) else "; no layout holds the SLO at it"
        holds += _slo_out_of_reach(v, points)
        said = f"the decision at {ref} ({v.best}) does not change within it{holds}"
    else:
        said = (
            f"the decision at {ref} ({v.best}) changes at {where(change)}: "
            f"{_decided_at(v, v.loads_swept[change])}"
        )

    def nearest(name: str, load: float) -> str:
        """On the sessions axis, the point whose own served load is the capacity's."""
        if not by_sessions or load <= 0:
            return ""
        own = [p.policies[name].achieved_rate for p in points]
        i = min(range(len(own)), key=lambda k: abs((own[k].served or 0) - load))
        n = points[i].concurrency or 0
        return f", about {n:,} session{'' if n == 1 else 's'}"

    caps = [
        f"{n} {capacity_words(c, v.load_unit, v.loads_swept)}{nearest(n, c.median)}"
        for n, c in v.capacity.items()
    ]
    return [
        f"  growth: {span}; {said}",
        f"  capacity at SLO (p99 TTFT <= {v.slo_ttft_p99_s:g} s, staging cancels <= "
        f"{100 * v.max_cancel_share:g} %): " + "; ".join(caps),
    ]


def _slo_out_of_reach(v: Verdict, points: Sequence[RateResult]) -> str:
    """When every layout misses the SLO already at the lightest load swept, in most draws and
    in its own run (its p99 over the steady-state window above the bound), the words that say
    no load is light enough for a capacity at this SLO (so the decision fell to TTFT at the
    operating point) and the flag that sets a reachable bound; "" otherwise. The p99 figures
    stay where they are defined (the decision's, the per-load table), not restated here."""
    if not points or not v.capacity or not all(c.below_lowest for c in v.capacity.values()):
        return ""
    lightest = points[0].policies
    p99 = [lightest[n].ttft_s.p99 for n in v.capacity if n in lightest]
    if not p99 or any(x is None or x <= v.slo_ttft_p99_s for x in p99):
        return ""  # a layout's own run held it there: only the draws' median missed
    return (
        "; every layout misses it already at the lightest load swept, so no capacity exists "
        "at this SLO: --slo-ttft-p99 sets the team's bound"
    )


def longest_context_preset() -> tuple[str, int]:
    """The model preset with the longest context (ties: the least KV per token, the one that
    fits a worker's pool soonest), and that context in tokens."""
    from fcctl.layout.geometry import preset_geometry, preset_names

    def context(name: str) -> int:
        info = preset_geometry(name).info
        return info.max_context_tokens if info is not None else 0

    name = max(preset_names(), key=lambda n: (context(n), -preset_geometry(n).bytes_per_token))
    return name, context(name)


def model_lines(replay: ReplayResult) -> list[str]:
    """A line naming the preset to use when the model's context rejects more than
    ``REJECTED_SHARE_STATED`` of the requests (issue #33, item 4); [] otherwise."""
    from fcctl.reports.replay_report import REJECTED_SHARE_STATED, rejected_share

    rejected = rejected_share(replay)
    too_long = rejected.reasons.get("exceeds_max_context", 0) if rejected is not None else 0
    if (
        rejected is None
        or not rejected.requests
        or too_long / rejected.requests <= (REJECTED_SHARE_STATED)
    ):
        return []
    name, tokens = longest_context_preset()
    if name == replay.kv.model:
        return []
    return [
        f"  model: {replay.kv.model}'s context rejects {100 * too_long / rejected.requests:.3g} % "
        f"of the requests; --model {name} ({tokens:,} tokens of context, the longest preset) "
        'serves requests up to that length (docs/simulator.md, "Choosing the model")'
    ]


def decision_of(replay: ReplayResult) -> dict[str, Any]:
    """The plan's decision: at the user's operating point when there is one, else across the
    loads swept at the node's sizes (the layout named at the most loads, with where it leads)."""
    op = replay.operating_point
    first_sizes = replay.divergence[0].get("sizes") if replay.divergence else None
    points = [p for p in replay.rates if first_sizes is None or p.sizes == first_sizes]
    by_load = [(_load_label(p), p.decision.best) for p in points]
    if replay.decision is not None:  # the run's one decision: its fields, plus the detail
        from fcctl.common.jsonio import to_jsonable

        v = replay.decision
        return {
            **to_jsonable(v),
            "at": f"{v.load:.3g} {v.load_unit}",
            "why": v.reason,
            "margin_pp": None,
            "ttft_ratio": None,
            "by_load": by_load,
        }
    if op is not None:
        d = op.decision
        return {
            "best": d.best,
            "at": _load_label(op),
            "why": d.why,
            "margin_pp": d.margin_pp,
            "ttft_ratio": d.ttft_ratio,
            "by_load": by_load,
        }
    named = [b for _, b in by_load if b != "none"]
    if not named:
        best = "none"
        why = "no layout leads the others at any load swept"
    else:
        best = max(set(named), key=named.count)
        loads = [load for load, b in by_load if b == best]
        why = f"{best} leads at {', '.join(loads)} of the loads swept"
    return {
        "best": best,
        "at": None,
        "why": why,
        "margin_pp": None,
        "ttft_ratio": None,
        "by_load": by_load,
    }


def _sampled_line(sampling: SessionSampling) -> str:
    error = sampling.measured_error
    stated = (
        "error not measured at this rate"
        if isinstance(error, str)
        else f"measured error up to {error.gpu_hit_share_abs_pp:.2g} pp hit share"
    )
    return (
        f"  sampled: {100 * sampling.sample_sessions:.3g} % of sessions "
        f"({sampling.sessions.kept:,} of {sampling.sessions.total:,}) in replay and thresholds; "
        f"{stated}"
    )


def summary_lines(
    replay: ReplayResult,
    recommend: RecommendResult | None,
    analyze_doc: Mapping[str, Any] | None,
    decision: Mapping[str, Any],
    first_lines: Sequence[str] = (),
) -> list[str]:
    """The terminal summary: the decision block first, then the requests the replay rejected
    (if any), then ``first_lines`` (plan's model and growth lines), then the detail."""
    from fcctl.reports.replay_report import REJECTED_SHARE_STATED, rejected_share

    at = f" at {decision['at']}" if decision["at"] else ""
    rejected = rejected_share(replay)
    excluded = (
        f"; the figures exclude the {100 * rejected.share:.3g} % of requests rejected"
        if rejected is not None and rejected.share > REJECTED_SHARE_STATED
        else ""
    )
    lines = [f"decision{at}: {decision['best']} ({decision['why']}{excluded})"]
    if replay.decision is not None:  # the same words as replay's summary and the report
        from fcctl.analyzers.replay import verdict_sentences

        head, *detail = verdict_sentences(replay.decision).splitlines()
        lines = [head + excluded, *detail]
    # What the figures exclude, then the model and growth answers: the first lines after the
    # decision block (issue #33 items 3-4), before the per-load detail.
    if rejected is not None:
        lines.append(f"  {rejected.line()}")
    if replay.sampling:
        lines.append(_sampled_line(replay.sampling))
    lines += first_lines
    loads = ", ".join(f"{load}: {best}" for load, best in decision["by_load"])
    if loads:
        lines.append(f"  per load: {loads}")
    div = replay.divergence_rate
    if replay.load.get("axis") == "concurrency":
        c = replay.divergence_concurrency
        lines.append(f"  divergence: {'none' if c is None else f'{c:,} sessions'}")
    else:
        lines.append(f"  divergence rate: {'none' if div is None else f'{div:.3g} req/s'}")
    rec = recommend.recommendation if recommend is not None else None
    if rec:
        matters = "matter" if rec.matters else "do not matter here"
        lines.append(
            f"  thresholds ({matters}): short-reply {rec.short_reply_tokens:,}, "
            f"agent-context {rec.agent_context_tokens:,} tokens at {rec.rate:.3g} req/s"
        )
    verdict = (analyze_doc or {}).get("verdict")
    if verdict:
        layout = verdict["layout"]
        ref = verdict.get("reference_capacity_bytes")
        at_size = f" at {ref / 2**30:,.4g} GiB host memory" if isinstance(ref, int) else ""
        differs = (
            "; load-free, so it can differ from the decision, measured under load"
            if layout in ("flat", "tiered") and layout != decision["best"]
            else ""
        )
        lines.append(f"  analyze (no load): {layout}{at_size}{differs}")
    return lines


class PlanRunner:
    """Runs the steps, reusing those whose fingerprint and output are unchanged (``resume``),
    and records each finished step in ``plan.partial.json`` (module docstring)."""

    def __init__(self, directory: PlanDirectory, resume: bool, progress: Progress):
        self.directory = directory
        self.out = directory.out
        self.earlier = {
            s["name"]: s
            for s in directory.earlier.get("steps", [])
            if isinstance(s, dict) and isinstance(s.get("name"), str)
        }
        # What the directory holds: the earlier records, each replaced as its step finishes.
        self.records: dict[str, Mapping[str, Any]] = dict(self.earlier)
        self.resume = resume
        self.changed = False
        self.unfinished = False
        self.steps: list[PlanStep] = []
        self.progress = progress

    def intact(self, name: str, path: Path, fingerprint: str) -> str | None:
        """The digest of ``path`` when it is the output the earlier run recorded for this
        ``fingerprint``, whole (a JSON document also parses as one object); else None."""
        before = self.earlier.get(name, {})
        if before.get("fingerprint") != fingerprint or before.get("digest") is None:
            return None
        digest = content_digest(path)
        if digest != before["digest"]:
            return None
        if path.suffix == ".json":
            try:
                doc = parse_json(read_regular_text(path, f"{name} document"), str(path))
            except FcctlInputError:
                return None
            if not isinstance(doc, dict):
                return None
        return digest

    def step(self, name: str, fingerprint: str, run: Callable[[Path], object]) -> bool:
        """Run ``name`` unless resuming over the same fingerprint and output; True when it
        ran."""
        path = self.out / FILES[name]
        digest = self.intact(name, path, fingerprint) if self.resume and not self.changed else None
        if digest is not None:
            self.steps.append(PlanStep(name, str(path), "reused", 0.0, fingerprint, digest))
            return False
        self.changed = True
        # The steps after this one run again in this run: their earlier outputs are stale
        # whether or not this run gets to them.
        for later in STEPS[STEPS.index(name) + 1 :]:
            self.records.pop(later, None)
        if not self.unfinished:
            # From here the directory is no longer the plan plan.json describes.
            self.record()
            (self.out / MARKER).unlink(missing_ok=True)
            self.unfinished = True
        start = time.perf_counter()
        try:
            run(path)
        except Exception as e:
            words = machine_failure(e)
            if words is None:
                raise
            raise RunFailed(
                f"{self.out}: {words} while the {name} step wrote {FILES[name]} "
                f"({e.strerror if isinstance(e, OSError) else e}); the steps finished before it "
                "stay, recorded: --resume continues the plan"
            ) from None
        step = PlanStep(
            name, str(path), "ran", time.perf_counter() - start, fingerprint, content_digest(path)
        )
        self.steps.append(step)
        self.records[name] = to_record(step)
        # Kept from here: a signal between the two lines below must not remove a directory
        # whose partial record (written when this step began) lets --resume continue it.
        self.directory.recorded = True
        self.record()
        return True

    def record(self) -> None:
        """Write ``plan.partial.json``: what each step's output in the directory is."""
        doc = {"schema_version": 1, "complete": False, "steps": list(self.records.values())}
        write_text_atomic(self.out / PARTIAL, json.dumps(doc, indent=2) + "\n")

    def finish(self, plan_json: str) -> None:
        """Write ``plan.json`` (the complete plan) and drop the partial record."""
        write_text_atomic(self.out / MARKER, plan_json)
        (self.out / PARTIAL).unlink(missing_ok=True)


def to_record(step: PlanStep) -> dict[str, Any]:
    """A step as ``plan.json`` and ``plan.partial.json`` list it."""
    return {f: getattr(step, f) for f in PlanStep.__dataclass_fields__}


def read_document(path: Path) -> Any:
    """A step's JSON document."""
    return parse_json(read_regular_text(path, "plan step document"), str(path))


_Result = TypeVar("_Result")


def read_result(
    doc: Mapping[str, Any], path: Path, from_json: Callable[[Mapping[str, Any]], _Result]
) -> _Result:
    """A step's document (read from ``path``) as its result class; a document that is not one
    (edited, or another version's) is one line naming the file."""
    try:
        return from_json(doc)
    except InputError as e:
        raise FcctlInputError(f"{path}: {e}") from None


def read_plan(out: str | Path) -> Mapping[str, Any]:
    """An earlier plan's ``plan.json`` (for tools and tests)."""
    path = Path(out) / MARKER
    if not path.is_file():
        raise FcctlInputError(f"{out}: no {MARKER}: not an fcctl plan directory")
    doc: Mapping[str, Any] = parse_json(read_regular_text(path, "plan record"), str(path))
    return doc


__all__ = [
    "FILES",
    "MARKER",
    "PARTIAL",
    "PLAN_POLICIES",
    "STEP_WEIGHTS",
    "PlanDirectory",
    "PlanResult",
    "PlanRunner",
    "PlanStep",
    "check_plan_dir",
    "content_digest",
    "decision_of",
    "file_identity",
    "fingerprint",
    "growth_lines",
    "longest_context_preset",
    "model_lines",
    "node_memory_tiers",
    "plan_directory",
    "read_document",
    "read_plan",
    "read_result",
    "summary_lines",
    "target_rate",
    "to_record",
]
