"""Regenerate the plan, replay and analyze figures README.md and docs/benchmarks.md quote.

Every quoted figure sits behind a marker, ``<!-- fig:ID -->``, directly before its value (a
number or a word; before a fenced block, the whole block). FIGURES below says, for each ID, the
command that produces it and how the value is read from that command's output. A run executes
each command once, writes every value with its command and commit to docs/figures.md, and:

* ``--check``: exits 1 naming each figure whose quote differs from the regenerated value at the
  quote's own precision (``34.6`` is checked to one decimal, ``30`` to the unit), and each
  marker whose ID is not in FIGURES; docs/figures.md is left as it is.
* ``--update``: rewrites each quote in place at its own precision (the lead's step after the
  simulator changes: numbers are regenerated, never typed); the prose around them is a person's
  to re-read.

The samples' figures run by default (a few minutes on 2 cores); ``--fast`` keeps only the
commands that take seconds (what tests/test_figures.py checks); ``--whole`` adds the figures of
the whole public traces in ``$FCCTL_SHARED/traces`` (minutes each, one at a time).

    python3 benchmarks/figures.py                  # regenerate docs/figures.md
    python3 benchmarks/figures.py --check --whole  # every quote against a fresh run
    python3 benchmarks/figures.py --update         # rewrite the quotes from a fresh run

Dated sections of docs/benchmarks.md that record a measurement at a named commit are records,
not claims about the current tree; they carry no markers and are not regenerated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FCCTL_SHARED", REPO.parent / "shared"))
CLAUDE_CODE = "traces/weka_kv_cache_tester/claude_code_traces.jsonl.gz"
QUOTED_IN = ("README.md", "docs/benchmarks.md")
OUTPUT = "docs/figures.md"
GIB = 2**30
COSTS = ("fast", "sample", "whole")

#: A marker and what follows it: a fenced block (group "block") or a number or word.
MARKER = re.compile(r"<!-- fig:(?P<id>[a-z0-9.-]+) -->")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
WORD = re.compile(r"[A-Za-z][\w-]*")
FENCE = re.compile(r"\s*\n```[^\n]*\n(?P<body>.*?)\n```", re.S)


@dataclass(frozen=True)
class Command:
    """One command whose output several figures read. ``argv`` may hold ``{out}`` (a fresh
    folder for the command's outputs) and ``{shared}`` (the folder holding ``traces/``)."""

    argv: tuple[str, ...]
    cost: str  # one of COSTS

    def text(self) -> str:
        """The command as a reader types it (``fcctl ...``, ``python3 ...``)."""
        shown = {"out": "OUT", "shared": "../shared"}
        if self.argv[:3] == (*FCCTL, "fcctl"):
            words = ("fcctl", *self.argv[3:])
        else:
            words = ("python3", *self.argv[1:])
        return " ".join(w.format(**shown) for w in words)


@dataclass(frozen=True)
class Run:
    """What a command left: its stdout and its output folder."""

    stdout: str
    out: Path

    def doc(self, name: str | None = None) -> Any:
        """The JSON document on stdout (``name`` None) or in the output folder."""
        return json.loads(self.stdout if name is None else (self.out / name).read_text())


Value = float | str


@dataclass(frozen=True)
class Figure:
    id: str
    command: str
    how: str  # how the value is read, in words, for docs/figures.md
    extract: Callable[[Run], Value]
    block: bool = False  # the quote is a whole fenced block, compared line for line


FCCTL = (sys.executable, "-m")
COMMANDS: dict[str, Command] = {
    "analyze-cc-sample": Command(
        (*FCCTL, "fcctl", "analyze", "samples/claude_code_sample.jsonl.gz", "--json"), "fast"
    ),
    "plan-cc-sample": Command(
        (*FCCTL, "fcctl", "plan", "samples/claude_code_sample.jsonl.gz", "-o", "{out}"), "sample"
    ),
    "plan-quickstart": Command(
        (
            *FCCTL,
            "fcctl",
            "plan",
            "samples/mooncake_conversation_2k.jsonl",
            "-o",
            "{out}",
            "--rate",
            "3",
        ),
        "sample",
    ),
    "analyze-cc-whole": Command(
        (*FCCTL, "fcctl", "analyze", "{shared}/" + CLAUDE_CODE, "--json"), "whole"
    ),
    "context-shares-cc-whole": Command(
        (sys.executable, "benchmarks/model_context_shares.py", "{shared}/" + CLAUDE_CODE), "whole"
    ),
    "plan-cc-whole": Command(
        (*FCCTL, "fcctl", "plan", "{shared}/" + CLAUDE_CODE, "-o", "{out}"), "whole"
    ),
}


def decision_lines(run: Run) -> str:
    """plan.json's summary from the decision down to the capacity line (the decision, why, its
    ratio, each layout's capacity with its spread, the SLO, what was rejected, the model, the
    growth answer and the capacities in one line); the per-load detail and after are left
    out."""
    summary = run.doc("plan.json")["summary"]
    end = next((i for i, line in enumerate(summary) if line.startswith("  per load:")), None)
    return "\n".join(summary[:end])


def points(run: Run) -> list[dict[str, Any]]:
    """The replay's load points, in the order swept (each ``rate`` and its ``policies``)."""
    replay = run.doc("replay.json")
    return list(replay["rates"])


def at_rate(run: Run, rate: float) -> dict[str, Any]:
    """The load point offered at ``rate`` req/s (within 1 %: rates print rounded)."""
    for point in points(run):
        if math.isclose(point["rate"], rate, rel_tol=0.01):
            return point["policies"]
    raise LookupError(f"no load point at {rate} req/s in {run.out / 'replay.json'}")


def divergence(run: Run) -> float:
    """The plan's divergence rate: the lowest load swept whose decision is not ``none``."""
    # The offered rate: plan.json's by_load names loads by what was served (issue #33).
    rate = run.doc("replay.json")["divergence_rate"]
    if rate is None:
        raise LookupError(f"no load in {run.out / 'replay.json'} decides a layout")
    return float(rate)


def above_divergence(run: Run) -> float:
    """The next load the sweep ran above the divergence rate (the knee's other side)."""
    rates = sorted(p["rate"] for p in points(run))
    return next(r for r in rates if r > divergence(run) * 1.01)


def flat_over_tiered(rate: Callable[[Run], float], policy: str) -> Callable[[Run], Value]:
    return lambda run: at_rate(run, rate(run))[policy]["ttft_s"]["mean"]


def share_pct(rate: float, policy: str) -> Callable[[Run], Value]:
    return lambda run: 100 * at_rate(run, rate)[policy]["gpu_hit_share"]


def quickstart_busy(field: str) -> Callable[[Run], Value]:
    """The utilisation (%) of the busiest policy at the divergence rate, the highest load the
    README says the node serves as offered."""

    def extract(run: Run) -> Value:
        return 100 * max(s["utilisation"][field] for s in at_rate(run, divergence(run)).values())

    return extract


def tier_share_of_ideal(run: Run) -> Value:
    tier = next(t for t in run.doc()["memory_tier"] if t["capacity_bytes"] == 256 * GIB)
    return 100 * tier["share_of_ideal"]


def preset_line(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"^{re.escape(name)}\s+context\s+[\d,]+:\s+(?P<n>[\d,]+) rejected "
        rf"\((?P<pct>[\d.]+) %\)",
        re.M,
    )


def rejected(name: str, group: str) -> Callable[[Run], Value]:
    def extract(run: Run) -> Value:
        match = preset_line(name).search(run.stdout)
        if match is None:
            raise LookupError(f"no line for preset {name} in model_context_shares.py's output")
        return float(match[group].replace(",", ""))

    return extract


def longest_request(run: Run) -> Value:
    match = re.search(r"the longest is ([\d,]+) tokens", run.stdout)
    if match is None:
        raise LookupError("no longest request in model_context_shares.py's output")
    return float(match[1].replace(",", ""))


FIGURES: tuple[Figure, ...] = (
    Figure(
        "cc-sample-session-kv-p50",
        "analyze-cc-sample",
        "sessions.kv_bytes.p50 / GiB",
        lambda r: r.doc()["sessions"]["kv_bytes"]["p50"] / GIB,
    ),
    Figure(
        "cc-sample-verdict",
        "analyze-cc-sample",
        "verdict.layout",
        lambda r: r.doc()["verdict"]["layout"],
    ),
    Figure(
        "cc-sample-256gib-share-of-ideal",
        "analyze-cc-sample",
        "100 x memory_tier[capacity 256 GiB].share_of_ideal",
        tier_share_of_ideal,
    ),
    Figure(
        "cc-sample-256gib-p90-sessions",
        "analyze-cc-sample",
        "floor(256 GiB / sessions.kv_bytes.p90)",
        lambda r: float(256 * GIB // r.doc()["sessions"]["kv_bytes"]["p90"]),
    ),
    Figure(
        "cc-sample-decision",
        "plan-cc-sample",
        "plan.json decision.best",
        lambda r: r.doc("plan.json")["decision"]["best"],
    ),
    Figure(
        "cc-sample-achieved-rate",
        "plan-cc-sample",
        "replay.json: the largest achieved_rate.central of any point and policy",
        lambda r: max(
            s["achieved_rate"]["central"] for p in points(r) for s in p["policies"].values()
        ),
    ),
    Figure(
        "cc-sample-prefill-busy",
        "plan-cc-sample",
        "replay.json: 100 x the largest utilisation.prefill_mean of any point and policy",
        lambda r: (
            100
            * max(
                s["utilisation"]["prefill_mean"] for p in points(r) for s in p["policies"].values()
            )
        ),
    ),
    Figure(
        "quickstart-summary",
        "plan-quickstart",
        "plan.json summary, one line each",
        lambda r: "\n".join(r.doc("plan.json")["summary"]),
        block=True,
    ),
    Figure(
        "quickstart-share-memory-only",
        "plan-quickstart",
        "replay.json: 100 x memory-only gpu_hit_share at 3 req/s",
        share_pct(3, "memory-only"),
    ),
    Figure(
        "quickstart-share-tiered",
        "plan-quickstart",
        "replay.json: 100 x tiered gpu_hit_share at 3 req/s",
        share_pct(3, "tiered"),
    ),
    Figure(
        "quickstart-divergence",
        "plan-quickstart",
        "replay.json: divergence_rate (the lowest offered load whose decision is not none)",
        divergence,
    ),
    Figure(
        "quickstart-above-divergence",
        "plan-quickstart",
        "replay.json: the next rate swept above the divergence rate",
        above_divergence,
    ),
    Figure(
        "quickstart-prefill-max",
        "plan-quickstart",
        "replay.json: 100 x the largest utilisation.prefill_max at the divergence rate",
        quickstart_busy("prefill_max"),
    ),
    Figure(
        "quickstart-decode-mean",
        "plan-quickstart",
        "replay.json: 100 x the largest utilisation.decode_mean at the divergence rate",
        quickstart_busy("decode_mean"),
    ),
    Figure(
        "quickstart-knee-flat-ttft",
        "plan-quickstart",
        "replay.json: flat ttft_s.mean at the divergence rate",
        flat_over_tiered(divergence, "flat"),
    ),
    Figure(
        "quickstart-knee-tiered-ttft",
        "plan-quickstart",
        "replay.json: tiered ttft_s.mean at the divergence rate",
        flat_over_tiered(divergence, "tiered"),
    ),
    Figure(
        "quickstart-above-flat-ttft",
        "plan-quickstart",
        "replay.json: flat ttft_s.mean at the next rate above the divergence rate",
        flat_over_tiered(above_divergence, "flat"),
    ),
    Figure(
        "quickstart-above-tiered-ttft",
        "plan-quickstart",
        "replay.json: tiered ttft_s.mean at the next rate above the divergence rate",
        flat_over_tiered(above_divergence, "tiered"),
    ),
    Figure(
        "cc-whole-once-only",
        "analyze-cc-whole",
        "100 x once_only_block_share",
        lambda r: 100 * r.doc()["once_only_block_share"],
    ),
    Figure(
        "cc-whole-reuse-access",
        "analyze-cc-whole",
        "100 x reuse_access_share",
        lambda r: 100 * r.doc()["reuse_access_share"],
    ),
    Figure(
        "cc-whole-session-kv-p50",
        "analyze-cc-whole",
        "sessions.kv_bytes.p50 / GiB",
        lambda r: r.doc()["sessions"]["kv_bytes"]["p50"] / GIB,
    ),
    Figure(
        "cc-whole-longest-request",
        "context-shares-cc-whole",
        "the longest request's tokens (prompt + output)",
        longest_request,
    ),
    Figure(
        "cc-whole-plan-decision",
        "plan-cc-whole",
        "plan.json summary from the decision to the capacity line, one line each",
        decision_lines,
        block=True,
    ),
    *(
        Figure(
            f"cc-whole-rejected-{name}{suffix}",
            "context-shares-cc-whole",
            f"the {name} line: {what}",
            rejected(name, group),
        )
        for name in (
            "llama-3.1-8b",
            "deepseek-v3",
            "qwen2.5-7b",
            "qwen2.5-7b-1m",
            "qwen3-coder-480b",
        )
        for suffix, group, what in (("", "n", "requests rejected"), ("-pct", "pct", "share %"))
    ),
)


@dataclass(frozen=True)
class Quote:
    """A marker in a document and the quoted text after it (``start``:``end`` in the file)."""

    path: str
    line: int
    id: str
    start: int
    end: int
    text: str


def quotes(root: Path) -> list[Quote]:
    """Every marker in QUOTED_IN under ``root``, with the number, word or block it quotes."""
    found = []
    for name in QUOTED_IN:
        doc = (root / name).read_text()
        for marker in MARKER.finditer(doc):
            line = doc.count("\n", 0, marker.start()) + 1
            fence = FENCE.match(doc, marker.end())
            value = fence or NUMBER.match(doc, marker.end()) or WORD.match(doc, marker.end())
            if value is None:
                raise SystemExit(f"{name}:{line}: fig:{marker['id']} quotes no number or word")
            start, end = fence.span("body") if fence else value.span()
            found.append(Quote(name, line, marker["id"], start, end, doc[start:end]))
    return found


def rendered(value: Value, like: str) -> str:
    """``value`` written as the quote ``like`` writes it: its decimals, its thousands commas."""
    if isinstance(value, str):
        return value
    decimals = len(like.split(".")[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}"
    return text if "," in like else text.replace(",", "")


def agrees(quote: Quote, value: Value) -> bool:
    if isinstance(value, str):
        return quote.text.strip() == value.strip()
    return rendered(value, quote.text).replace(",", "") == quote.text.replace(",", "")


def run_commands(names: Iterable[str], workdir: Path) -> dict[str, Run]:
    """Each command once, from the repository root; one that fails stops the script, named."""
    runs = {}
    for name in names:
        out = workdir / name
        argv = [a.format(out=out, shared=SHARED) for a in COMMANDS[name].argv]
        print(f"figures: running {name}: {COMMANDS[name].text()}", file=sys.stderr, flush=True)
        # This checkout first on the path: a script under benchmarks/ imports it, not an
        # installed fcctl.
        path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
        env = {**os.environ, "PYTHONPATH": path}
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no stderr"]
            raise SystemExit(f"figures: {name} exited {done.returncode}: {tail[0]}")
        runs[name] = Run(done.stdout, out)
    return runs


def regenerate(costs: set[str], only: set[str] | None) -> dict[str, Value]:
    """The value of every selected figure, from one run of each command it needs."""
    chosen = [f for f in FIGURES if COMMANDS[f.command].cost in costs]
    chosen = [f for f in chosen if only is None or f.id in only]
    if not chosen:
        raise SystemExit("figures: no figure selected (see --only, --fast, --whole)")
    if "whole" in costs and not (SHARED / CLAUDE_CODE).is_file():
        raise SystemExit(f"figures: --whole needs {SHARED / CLAUDE_CODE} (set FCCTL_SHARED)")
    with tempfile.TemporaryDirectory(prefix="fcctl-figures-") as tmp:
        runs = run_commands(dict.fromkeys(f.command for f in chosen), Path(tmp))
        values = {}
        for figure in chosen:
            try:
                values[figure.id] = figure.extract(runs[figure.command])
            except (LookupError, StopIteration, TypeError, ValueError) as exc:
                raise SystemExit(f"figures: fig:{figure.id}: cannot read it: {exc}") from exc
    return values


def check(found: list[Quote], values: dict[str, Value]) -> list[str]:
    """One line for each quote that differs from its regenerated value or names no figure."""
    known = {f.id for f in FIGURES}
    problems = []
    for quote in found:
        where = f"{quote.path}:{quote.line}: fig:{quote.id}"
        if quote.id not in known:
            problems.append(f"{where}: no such figure in benchmarks/figures.py")
        elif quote.id in values and not agrees(quote, values[quote.id]):
            now = rendered(values[quote.id], quote.text)
            problems.append(f"{where}: quoted {quote.text!r}, regenerated {now!r}")
    return problems


def update(root: Path, found: list[Quote], values: dict[str, Value]) -> int:
    """Rewrite every regenerated quote in place (last first, so offsets hold); how many moved."""
    moved = 0
    for name in QUOTED_IN:
        path = root / name
        doc = path.read_text()
        mine = [q for q in found if q.path == name and q.id in values]
        for quote in sorted(mine, key=lambda q: q.start, reverse=True):
            new = rendered(values[quote.id], quote.text)
            if not agrees(quote, values[quote.id]):
                doc = doc[: quote.start] + new + doc[quote.end :]
                moved += 1
        write_atomic(path, doc)
    return moved


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole or not at all: an interrupted run leaves the old document."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def table_row(figure: Figure, value: Value, at: str, found: list[Quote]) -> str:
    shown = f"{value:.6g}" if isinstance(value, float) else value
    if figure.block:
        shown = "(the block quoted there)"
    where = ", ".join(f"{q.path}:{q.line}" for q in found if q.id == figure.id) or "-"
    command = COMMANDS[figure.command].text()
    return f"| {figure.id} | {shown} | {at} | `{command}` | {figure.how} | {where} |"


def write_figures(root: Path, values: dict[str, Value], found: list[Quote]) -> None:
    """docs/figures.md: every figure with its value, commit, command and quotes; the rows of
    figures not regenerated this time (``--whole`` left out) are kept from the last run."""
    path = root / OUTPUT
    old = path.read_text().splitlines() if path.exists() else []
    kept = {row.split(" | ")[0][2:]: row for row in old if row.startswith("| ") and " | " in row}
    at = commit()
    rows = []
    for figure in FIGURES:
        if figure.id in values:
            rows.append(table_row(figure, values[figure.id], at, found))
        else:
            rows.append(kept.get(figure.id, f"| {figure.id} | not run yet | | | {figure.how} | |"))
    head = [
        "# Figures quoted in README.md and docs/benchmarks.md",
        "",
        "Generated by `python3 benchmarks/figures.py` (add `--whole` for the whole public traces);",
        "do not edit. Each quote is marked `<!-- fig:ID -->` where it appears; `--check` compares",
        "the quotes with a fresh run at each quote's precision and `--update` rewrites them.",
        "Values are as the command prints them (shares in %, sizes in GiB, times in s).",
        "",
        "| figure | value | commit | command | read as | quoted at |",
        "|---|---|---|---|---|---|",
    ]
    write_atomic(path, "\n".join(head + rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare the quotes; write nothing")
    mode.add_argument("--update", action="store_true", help="rewrite the quotes in place")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--fast", action="store_true", help="only the commands taking seconds")
    size.add_argument("--whole", action="store_true", help="add the whole public traces")
    parser.add_argument("--only", help="comma-separated figure ids")
    parser.add_argument("--root", type=Path, default=REPO, help="where README.md and docs/ are")
    args = parser.parse_args(argv)

    costs = {"fast"} if args.fast else set(COSTS) if args.whole else {"fast", "sample"}
    only = set(args.only.split(",")) if args.only else None
    found = quotes(args.root)
    values = regenerate(costs, only)
    if args.check:
        problems = check(found, values)
        for line in problems:
            print(line)
        print(
            f"figures: {len(values)} regenerated, {len(problems)} quote(s) differ", file=sys.stderr
        )
        return 1 if problems else 0
    if args.update:
        print(f"figures: {update(args.root, found, values)} quote(s) rewritten", file=sys.stderr)
    write_figures(args.root, values, quotes(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
