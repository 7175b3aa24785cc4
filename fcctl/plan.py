"""``fcctl plan``: from a trace to one decision, at the user's operating point, in one call.

The steps are the commands' own libraries, run in order, each writing its ``--json`` document
into the plan directory (atomically, one file each):

1. ``analyze.json``: :func:`fcctl.api.analyze`;
2. ``replay.json``: :func:`fcctl.api.replay` with the automatic load sweep (``rates="auto"``)
   plus the user's operating point (``rate`` or ``concurrency``) and sizes;
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fcctl.common.errors import FcctlInputError
from fcctl.common.jsonio import dumps
from fcctl.common.outdir import OutDirError, write_text_atomic
from fcctl.common.progress import Progress
from fcctl.common.version import __version__

if TYPE_CHECKING:
    from fcctl.analyzers.replay import Hardware

MARKER = "plan.json"
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


def _file_identity(source: str | Path) -> dict[str, Any]:
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


def _fingerprint(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_dir(out: Path, *, resume: bool, force: bool) -> dict[str, Any]:
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


def target_rate(replay_doc: Mapping[str, Any], rate: float | None) -> tuple[float, str]:
    """The recommender's rate and why (module docstring, step 3)."""
    if rate is not None:
        return rate, "your operating point"
    op = replay_doc.get("operating_point")
    if op and op.get("concurrency") is not None:
        got = (op["policies"].get("flat") or {}).get("achieved_rate", {}).get("central")
        if got:
            return float(got), f"the rate flat achieved at {op['concurrency']} sessions"
    if replay_doc.get("divergence_rate"):
        return float(replay_doc["divergence_rate"]), "the divergence rate"
    points = [p for p in replay_doc.get("rates", []) if p.get("rate") is not None]
    calm = [p["rate"] for p in points if not any(q["saturated"] for q in p["policies"].values())]
    if calm:
        return float(max(calm)), "the highest rate the sweep ran that no policy saturated"
    if points:
        return float(min(p["rate"] for p in points)), "the lowest rate the sweep ran"
    raise FcctlInputError("plan: the replay ran no rate to recommend thresholds at")


def _load_label(p: Mapping[str, Any]) -> str:
    if p.get("rate") is not None:
        return f"{p['rate']:.3g} req/s"
    return f"{p['concurrency']:,} sessions"


def decision_of(replay_doc: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's decision: at the user's operating point when there is one, else across the
    loads swept at the node's sizes (the layout named at the most loads, with where it leads)."""
    op = replay_doc.get("operating_point")
    first_sizes = (replay_doc.get("divergence") or [{}])[0].get("sizes")
    points = [
        p
        for p in replay_doc.get("rates", [])
        if first_sizes is None or p.get("sizes") == first_sizes
    ]
    by_load = [(_load_label(p), p["decision"]["best"]) for p in points]
    if op is not None:
        d = op["decision"]
        return {
            "best": d["best"],
            "at": _load_label(op),
            "why": d["why"],
            "margin_pp": d["margin_pp"],
            "ttft_ratio": d["ttft_ratio"],
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
    return {"best": best, "at": None, "why": why, "margin_pp": None, "ttft_ratio": None,
            "by_load": by_load}  # fmt: skip


def summary_lines(docs: Mapping[str, Any], decision: Mapping[str, Any]) -> list[str]:
    """The terminal summary, decision first."""
    at = f" at {decision['at']}" if decision["at"] else ""
    lines = [f"decision{at}: {decision['best']} ({decision['why']})"]
    loads = ", ".join(f"{load}: {best}" for load, best in decision["by_load"])
    if loads:
        lines.append(f"  per load: {loads}")
    replay = docs.get("replay") or {}
    div = replay.get("divergence_rate")
    if replay.get("load", {}).get("axis") == "concurrency":
        c = replay.get("divergence_concurrency")
        lines.append(f"  divergence: {'none' if c is None else f'{c:,} sessions'}")
    else:
        lines.append(f"  divergence rate: {'none' if div is None else f'{div:.3g} req/s'}")
    rec = (docs.get("recommend") or {}).get("recommendation")
    if rec:
        matters = "matter" if rec.get("matters") else "do not matter here"
        lines.append(
            f"  thresholds ({matters}): short-reply {rec['short_reply_tokens']:,}, "
            f"agent-context {rec['agent_context_tokens']:,} tokens at {rec['rate']:.3g} req/s"
        )
    verdict = (docs.get("analyze") or {}).get("verdict")
    if verdict:
        lines.append(f"  analyze (no load): {verdict['layout']}")
    return lines


class _Runner:
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


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def plan(
    source: str | Path,
    out: str | Path,
    *,
    format: str | None = None,
    rate: float | None = None,
    concurrency: str | int | Sequence[int | str] | None = None,
    think_time: str = "original",
    hardware: Hardware | None = None,
    host_memory_sweep: Sequence[Any] = (),
    host_memory_auto: bool = False,
    model: str = "llama-3.1-8b",
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    slo_ttft_p99_s: float | None = None,
    emit: bool = False,
    emit_name: str = "flatcake_store",
    jobs: int | None = None,
    resume: bool = False,
    force: bool = False,
    progress: Progress | bool = False,
) -> PlanResult:
    """Analyze, replay at the automatic loads and the user's point, recommend thresholds,
    optionally emit, and write one report into ``out`` (module docstring). ``hardware``: a
    :func:`fcctl.api.hardware` node (default the h200-8x preset). Other parameters as
    :func:`fcctl.api.replay`."""
    from fcctl import api
    from fcctl.analyzers.recommend import thresholds_source, thresholds_toml
    from fcctl.analyzers.recommend.emit import check_name, emit_package
    from fcctl.common.jsonio import write_json_file
    from fcctl.reports.html_report import make_report

    out = Path(out)
    if emit:
        check_name(emit_name)
    earlier = _check_dir(out, resume=resume, force=force)
    node = hardware if hardware is not None else api.hardware()
    identity = _file_identity(source)
    common = {"format": format, "model": model, "model_config": model_config, "tp": tp,
              "kv_dtype": kv_dtype, "version": __version__}  # fmt: skip
    bar = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    out.mkdir(parents=True, exist_ok=True)
    docs: dict[str, Any] = {}
    with bar:
        runner = _Runner(out, earlier, resume, bar)
        with bar.task("plan", total=100, unit="%") as overall:
            done = 0.0

            def advance(name: str) -> None:
                nonlocal done
                done += 100 * STEP_WEIGHTS[name]
                overall.update(done)

            overall.describe("plan: analyze")
            fp = _fingerprint("analyze", identity, common)
            runner.step("analyze", fp, lambda p: write_json_file(api.analyze(
                source, format=format, model=model, model_config=model_config, tp=tp,
                kv_dtype=kv_dtype, progress=bar), p))  # fmt: skip
            docs["analyze"] = _read(out / FILES["analyze"])
            advance("analyze")

            overall.describe("plan: replay")
            replay_params = {
                "rate": rate, "concurrency": concurrency, "think_time": think_time,
                "hardware": dumps(node), "host_memory_sweep": list(map(str, host_memory_sweep)),
                "host_memory_auto": host_memory_auto, "slo": slo_ttft_p99_s,
            }  # fmt: skip
            fp = _fingerprint("replay", identity, common, replay_params)
            trace_cache: list[Any] = []

            def trace() -> Any:
                if not trace_cache:
                    trace_cache.append(api.read_trace(source, format=format, progress=bar))
                return trace_cache[0]

            runner.step("replay", fp, lambda p: write_json_file(api.replay(
                trace(), rates=None if concurrency is not None else "auto", rate=rate,
                concurrency=concurrency, think_time=think_time, hardware=node, model=model,
                model_config=model_config, tp=tp, kv_dtype=kv_dtype,
                host_memory_sweep=host_memory_sweep, host_memory_auto=host_memory_auto,
                slo_ttft_p99_s=slo_ttft_p99_s, progress=bar), p))  # fmt: skip
            docs["replay"] = _read(out / FILES["replay"])
            advance("replay")

            overall.describe("plan: recommend-thresholds")
            target, target_why = target_rate(docs["replay"], rate)
            fp = _fingerprint("recommend", identity, common, replay_params["hardware"], target)
            rec_result: list[Any] = []

            def recommend(p: Path) -> None:
                rec_result[:] = [api.recommend_thresholds(
                    trace(), rates=(target,), model=model, model_config=model_config, tp=tp,
                    kv_dtype=kv_dtype, hardware=node, jobs=jobs, progress=bar)]  # fmt: skip
                write_json_file(rec_result[0], p)

            runner.step("recommend", fp, recommend)
            docs["recommend"] = _read(out / FILES["recommend"])
            advance("recommend")

            if emit:

                def do_emit(p: Path) -> None:
                    if not rec_result:  # the recommendation was reused: its object is needed
                        recommend(out / FILES["recommend"])
                    result = rec_result[0]
                    rec = result.recommendation
                    emit_package(
                        p, name=emit_name, short_reply_tokens=rec.short_reply_tokens,
                        agent_context_tokens=rec.agent_context_tokens,
                        source=thresholds_source(result), toml_text=thresholds_toml(result),
                        force=True,
                    )  # fmt: skip

                emit_fp = _fingerprint("emit", fp, emit_name, __version__)
                runner.step("emit", emit_fp, do_emit)
            advance("emit")

            overall.describe("plan: report")
            inputs = [out / FILES[s] for s in ("analyze", "replay", "recommend")]
            fp = _fingerprint("report", [_fingerprint(docs[s]) for s in docs], __version__)
            runner.step("report", fp, lambda p: make_report(inputs, p, force=True))
            advance("report")
    decision = decision_of(docs["replay"])
    lines = summary_lines(docs, decision)
    lines.insert(
        len(lines) - 1 if docs.get("analyze", {}).get("verdict") else len(lines),
        f"  (thresholds measured at {target:.3g} req/s: {target_why})",
    )
    result = PlanResult(1, str(out), decision, tuple(lines), tuple(runner.steps), docs)
    write_text_atomic(out / MARKER, dumps(result) + "\n")
    return result


def read_plan(out: str | Path) -> Mapping[str, Any]:
    """An earlier plan's ``plan.json`` (for tools and tests)."""
    path = Path(out) / MARKER
    if not path.is_file():
        raise FcctlInputError(f"{out}: no {MARKER}: not an fcctl plan directory")
    doc: Mapping[str, Any] = json.loads(path.read_text())
    return doc


__all__ = ["PlanResult", "PlanStep", "decision_of", "plan", "read_plan", "target_rate"]
