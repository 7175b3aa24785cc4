"""``fcctl plan`` (:func:`fcctl.api.plan`): from a trace to one decision, in one call.

The steps are the commands' own libraries, run in order, each writing its ``--json`` document
into the plan directory (atomically, one file each):

1. ``analyze.json``: :func:`fcctl.api.analyze`;
2. ``replay.json``: :func:`fcctl.api.replay` of the three layouts the decision chooses among
   (memory-only, tiered, flat: not flat-fcfs, an ablation) with the automatic load sweep
   (``rates="auto"``) plus the user's operating point (``rate`` or ``concurrency``) and sizes;
3. ``recommend.json``: :func:`fcctl.api.recommend_thresholds` at the *target rate*: the user's
   rate; else, at a concurrency, the rate flat achieved there; else the replay's divergence
   rate; else the highest rate the sweep ran that no policy saturated (else its lowest);
4. ``emit/NAME/`` with ``emit=True``: the drop-in package with the recommended thresholds;
5. ``report.html``: :func:`fcctl.reports.html_report.make_report` over the three documents.

``plan.json`` records, per step, a fingerprint of what the step read (the trace file's path,
size and modification time, the parameters, fcctl's version, and the documents of the steps it
depends on). With ``resume=True`` a step whose fingerprint is unchanged and whose file is there
is not run again; everything after a changed step runs. The summary is built from the
documents, so it reads the same whether a step ran or was reused.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fcctl.common.errors import FcctlInputError, InputError
from fcctl.common.outdir import OutDirError
from fcctl.common.progress import Progress

if TYPE_CHECKING:  # fcctl plan --help stays light: the results load with the steps
    from fcctl.analyzers.recommend import RecommendResult
    from fcctl.analyzers.replay import RateResult, ReplayResult, SessionSampling

MARKER = "plan.json"
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
    """One step: ``status`` is ``ran``, ``reused`` (resume: inputs unchanged) or ``skipped``."""

    name: str
    path: str | None
    status: str
    seconds: float
    fingerprint: str | None


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` did, and the decision (field names are ``plan.json``'s keys)."""

    schema_version: int
    out_dir: str
    decision: Mapping[str, Any]
    summary: tuple[str, ...]
    steps: tuple[PlanStep, ...]
    documents: Mapping[str, Any] = field(default_factory=dict, metadata={"json": False})


def file_identity(source: str | Path) -> dict[str, Any]:
    """What a re-run compares: the trace's resolved path, size and modification time (every
    file of a directory dataset)."""
    p = Path(source)
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    out = []
    for q in files:
        try:
            st = q.stat()
        except OSError:
            continue
        out.append([str(q.resolve()), st.st_size, st.st_mtime_ns])
    return {"files": out}


def fingerprint(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check_plan_dir(out: Path, *, resume: bool, force: bool) -> dict[str, Any]:
    """The earlier ``plan.json`` to resume from (``{}`` for a fresh plan)."""
    if out.exists() and not out.is_dir():
        raise OutDirError(f"-o {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        marker = out / MARKER
        if not marker.is_file():
            raise OutDirError(
                f"-o {out}: directory is not empty and holds no {MARKER}: not an fcctl plan "
                "(give an empty or new directory)"
            )
        if not (resume or force):
            raise OutDirError(
                f"-o {out}: holds an earlier plan (pass --resume to reuse its unchanged steps, "
                "or --force to run every step again)"
            )
        if resume:
            try:
                doc = json.loads(marker.read_text())
            except (OSError, ValueError):
                return {}
            return doc if isinstance(doc, dict) else {}
    return {}


def target_rate(replay: ReplayResult, rate: float | None) -> tuple[float, str]:
    """The recommender's rate and why (module docstring, step 3)."""
    if rate is not None:
        return rate, "your operating point"
    op = replay.operating_point
    if op is not None and op.concurrency is not None:
        flat = op.policies.get("flat")
        got = flat.achieved_rate.central if flat is not None else None
        if got:
            return float(got), f"the rate flat achieved at {op.concurrency} sessions"
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


def _load_label(p: RateResult) -> str:
    if p.rate is not None:
        return f"{p.rate:.3g} req/s"
    return f"{p.concurrency:,} sessions"


def decision_of(replay: ReplayResult) -> dict[str, Any]:
    """The plan's decision: at the user's operating point when there is one, else across the
    loads swept at the node's sizes (the layout named at the most loads, with where it leads)."""
    op = replay.operating_point
    first_sizes = replay.divergence[0].get("sizes") if replay.divergence else None
    points = [p for p in replay.rates if first_sizes is None or p.sizes == first_sizes]
    by_load = [(_load_label(p), p.decision.best) for p in points]
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
) -> list[str]:
    """The terminal summary, decision first."""
    at = f" at {decision['at']}" if decision["at"] else ""
    lines = [f"decision{at}: {decision['best']} ({decision['why']})"]
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
        lines.append(f"  analyze (no load): {verdict['layout']}")
    if replay.sampling:
        lines.insert(1, _sampled_line(replay.sampling))
    return lines


class PlanRunner:
    """Runs the steps, reusing those whose fingerprint is unchanged (``resume``)."""

    def __init__(self, out: Path, earlier: Mapping[str, Any], resume: bool, progress: Progress):
        self.out = out
        self.earlier = {s["name"]: s for s in earlier.get("steps", []) if isinstance(s, dict)}
        self.resume = resume
        self.changed = False
        self.steps: list[PlanStep] = []
        self.progress = progress

    def step(self, name: str, fingerprint: str, run: Callable[[Path], object]) -> bool:
        """Run ``name`` unless resuming over the same fingerprint; True when it ran."""
        path = self.out / FILES[name]
        before = self.earlier.get(name, {})
        if (
            self.resume
            and not self.changed
            and before.get("fingerprint") == fingerprint
            and path.exists()
        ):
            self.steps.append(PlanStep(name, str(path), "reused", 0.0, fingerprint))
            return False
        self.changed = True
        start = time.perf_counter()
        run(path)
        self.steps.append(
            PlanStep(name, str(path), "ran", time.perf_counter() - start, fingerprint)
        )
        return True


def read_document(path: Path) -> Any:
    """A step's JSON document."""
    return json.loads(path.read_text())


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
    doc: Mapping[str, Any] = json.loads(path.read_text())
    return doc


__all__ = [
    "FILES",
    "MARKER",
    "PLAN_POLICIES",
    "STEP_WEIGHTS",
    "PlanResult",
    "PlanRunner",
    "PlanStep",
    "check_plan_dir",
    "decision_of",
    "file_identity",
    "fingerprint",
    "read_document",
    "read_plan",
    "read_result",
    "summary_lines",
    "target_rate",
]
