"""The report page's decision paragraph: replay's decision (at the operating point when the
document has one), analyze's figures, the thresholds and the SSD against fio, each number a
link to where the page shows it (docs/report.md, "The decision")."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from fcctl.analyzers.replay.achieved import load_words

from .. import format as fmt
from ..replay_report import REJECT_FLAGS, REJECT_WORDS, RejectedShare
from ..report_inputs import Input, Node
from .elements import link
from .recommendation import tokens
from .replay import number_at, policies_at, reached_at, served_at


def _policy(doc: Node, rate: float, name: str) -> Node | None:
    for r, policies in policies_at(doc):
        if r == rate:
            return next((p for n, p in policies if n == name), None)
    return None


def _load(point: Node) -> str:
    """A load point by what it achieved (analyzers/replay/achieved), the offered rate as
    detail."""
    rate = point.get("rate")
    concurrency = point.get("concurrency")
    return load_words(
        None if rate is None else rate.as_num(),
        None if concurrency is None else concurrency.as_int(),
        served_at(point),
        reached_at(point),
    )


def _node_points(doc: Node) -> list[Node]:
    """The load points replayed at the node's own sizes (the first size point's)."""
    points = doc["rates"].as_list() if doc.get("rates") is not None else []
    divergence = doc.get("divergence") or None
    first_sizes = divergence.as_list()[0].get("sizes") if divergence is not None else None
    if first_sizes is not None:
        base = first_sizes.value
        points = [p for p in points if p.get("sizes") is None or p["sizes"].value == base]
    return points


def _replay_best(doc: Node) -> str:
    """The layout :func:`replay_decision` names: the operating point's, else the first one that
    leads across the loads, else ``none``."""
    op = doc.get("operating_point")
    if op is not None:
        return op["decision"]["best"].as_str()
    named = [p["decision"]["best"].as_str() for p in _node_points(doc)]
    return next((b for b in named if b != "none"), "none")


def run_decision_html(fields: Mapping[str, Any]) -> str:
    """The run's one decision (replay.json's ``decision``) in the words of every rendering."""
    from fcctl.analyzers.replay import Verdict, verdict_sentences
    from fcctl.common.jsonio import from_jsonable

    text = verdict_sentences(from_jsonable(Verdict, dict(fields)))
    return "<br>".join(escape(line.strip()) for line in text.splitlines())


def replay_decision(rep: Input) -> str:
    """The decision sentence from replay: at the operating point when the document has one, else
    across the loads replayed at the node's sizes (docs/report.md, "The decision")."""
    doc = rep.doc
    if rep.schema_version < 2:  # before the decision existed: the shares at the highest rate
        rates = policies_at(doc)
        if not rates:
            return ""
        rate, policies = max(rates, key=lambda t: t[0])
        shown = [
            f"{escape(n)} {link(fmt.share(number_at(p, 'gpu_hit_share')), 'replay-rates')} "
            f"(p99 TTFT {link(fmt.seconds(number_at(p, 'ttft_s', 'p99')), 'replay-rates')})"
            for n, p in policies
        ]
        ideal = doc["ideal_hit_share"].as_num()
        return (
            f"At {link(fmt.per_s(rate), 'replay-rates')}, the highest rate replayed, GPU hit "
            f"shares are {', '.join(shown)}, against the ideal {link(fmt.share(ideal), 'replay')}."
        )
    verdict = doc.get("decision")
    if verdict is not None and verdict.value is not None:  # the run's one decision, as replay's
        return run_decision_html(verdict.value)
    op = doc.get("operating_point")
    if op is not None:
        d = op["decision"]
        got = [number_at(p, "achieved_rate", "central") for _n, p in op["policies"].as_items()]
        served = [g for g in got if g is not None]
        spread = (
            f"; the layouts served {fmt.per_s(min(served))}-{fmt.per_s(max(served))}"
            if len(served) > 1 and min(served) != max(served)
            else ""
        )
        at = _load(op) + spread
        return (
            f"At your operating point, {link(at, 'replay-rates')}, the layout to choose is "
            f"<strong>{escape(d['best'].as_str())}</strong>: {escape(d['why'].as_str())}."
        )
    points = _node_points(doc)
    if not points:
        return ""
    named = [(p, p["decision"]["best"].as_str()) for p in points]
    leads = [(p, b) for p, b in named if b != "none"]
    span = f"{_load(points[0])} to {_load(points[-1])}"
    if not leads:
        return (
            f"Across the loads replayed ({link(span, 'replay-rates')}) no layout leads the others "
            "by more than the decision's margins: <strong>it does not matter here</strong> "
            "which layout holds the KV cache."
        )
    first, best = leads[0]
    return (
        f"Across the loads replayed ({link(span, 'replay-rates')}), "
        f"<strong>{escape(best)}</strong> leads from {link(_load(first), 'replay-rates')} on: "
        f"{escape(first['decision']['why'].as_str())}."
    )


def decision(inputs: dict[str, Input], *, mixed: bool = False) -> str:
    """One paragraph: the decision (replay's at the user's operating point when replay is given,
    analyze's verdict otherwise, never both), thresholds, the SSD against fio; each number links
    to where it is shown. With ``mixed`` traces each sentence names its trace."""
    sentences = []

    def trace_of(inp: Input) -> str:
        return f"On {escape(inp.trace_path or inp.shown)}: " if mixed else ""

    a = inputs.get("analyze")
    rep = inputs.get("replay")
    # A replay with a decision (schema 2) decides; analyze's load-free verdict then stays out.
    decides = rep is not None and rep.schema_version >= 2
    if rep is not None:
        text = replay_decision(rep)
        if text:
            sentences.append(trace_of(rep) + text)
        text = _rejected_sentence(rep)
        if text:
            sentences.append(trace_of(rep) + text)
    if a is not None:
        text = _analyze_sentence(a, decides=decides)
        if text:
            sentences.append(trace_of(a) + text)
        if decides and rep is not None:
            text = _verdict_differs(a, _replay_best(rep.doc))
            if text:
                sentences.append(trace_of(a) + text)
    rec = inputs.get("recommend-thresholds")
    if rec is not None:
        text = _recommend_sentence(rec)
        sentences.append(trace_of(rec) + text)
    io = inputs.get("iobench")
    if io is not None:
        text = _iobench_sentence(io)
        if text:
            sentences.append(text)
    return '<p class="decision">' + " ".join(sentences) + "</p>"


def _analyze_sentence(a: Input, *, decides: bool) -> str:
    """analyze's verdict and its figures; with a replay that ``decides``, the figures only
    ("" when there are none)."""
    v = a.doc["verdict"]
    layout = v["layout"].as_str()
    # With a replay the decision is the replay's; analyze's figures stay, its load-free
    # verdict does not (two verdicts could contradict each other).
    text = "Without load," if decides else f"Verdict {link(layout, 'verdict')}"
    clauses = []
    for c in v["checks"]:
        name, value = c["name"].as_str(), c["value"].as_num()
        if name == "session_kv_p90_bytes":
            rule = (
                ""
                if decides
                else f" (flat at {escape(fmt.size_2dp(c['threshold'].as_num()))} or more)"
            )
            clauses.append(f"p90 session KV is {link(fmt.size(value), 'sessions')}{rule}")
        elif name == "share_of_ideal":
            ref = v["reference_capacity_bytes"].as_num()
            clauses.append(
                f"a {link(fmt.size(ref), 'memory-tier')} memory tier serves "
                f"{link(fmt.share(value), 'memory-tier')} of the ideal hit share ("
                f"{link(fmt.share(a.doc['reuse_access_share'].as_num()), 'block-reuse')})"
            )
    if decides and not clauses:
        return ""
    joiner = " " if decides else ": "
    return text + (joiner + "; ".join(clauses) if clauses else "") + "."


def _rejected_sentence(rep: Input) -> str:
    """The share of requests the replay never ran, by reason with the flag that changes it
    (replay_report.RejectedShare, read from the document); "" when none were."""
    doc = rep.doc
    op = doc.get("operating_point")
    rates = doc.get("rates")
    point = op if op is not None else (rates.as_list()[0] if rates is not None else None)
    if point is None or rep.schema_version < 2:
        return ""
    counted = [
        (p["rejected_requests"], p["requests"].as_int() or 0)
        for _n, p in point["policies"].as_items()
        if p.get("rejected_requests") is not None
    ]
    if not counted:
        return ""
    r, requests = max(counted, key=lambda t: t[0]["count"].as_int() or 0)
    reasons = {k: v.as_int() or 0 for k, v in r["reasons"].as_items()}
    shown = RejectedShare(r["count"].as_int() or 0, requests, reasons)
    if shown.rejected == 0:
        return ""
    parts = [
        f"{n:,} {escape(REJECT_WORDS.get(k, k))} (change with "
        f"<code>{escape(REJECT_FLAGS.get(k, '--model'))}</code>)"
        for k, n in sorted(reasons.items())
    ]
    return (
        f"{link(fmt.share(shown.share), 'replay')} of the requests "
        f"({shown.rejected:,} of {shown.requests:,}) were rejected, never run: "
        f"{'; '.join(parts)}; their TTFT is not counted; hit shares are over the "
        "requests that ran, and over all with their blocks as misses."
    )


def _verdict_differs(a: Input, best: str) -> str:
    """Why analyze's load-free verdict (shown on this page) names another layout than the
    replay's decision ``best``; "" when they agree or the verdict names none."""
    v = a.doc["verdict"]
    layout = v["layout"].as_str()
    if layout not in ("flat", "tiered") or layout == best:
        return ""
    ref = v.get("reference_capacity_bytes")
    size = (
        f" with a {link(fmt.size(ref.as_num()), 'memory-tier')} memory tier"
        if ref is not None
        else ""
    )
    return (
        f"The load-free {link('verdict', 'verdict')} below says "
        f"<strong>{escape(layout)}</strong>{size} and the decision says "
        f"<strong>{escape(best)}</strong>: the verdict judges the trace's reuse alone, without "
        "load (no prefill queue, no SSD or PCIe contention, no staging limit), while the "
        "decision is measured under load on the simulated node; the decision is the one to "
        "follow here."
    )


def _recommend_sentence(rec: Input) -> str:
    """The recommended thresholds and what they deliver, against tiered at the same rate."""
    r = rec.doc["recommendation"]
    rate = r["rate"].need_num()
    text = (
        f"Recommended thresholds: short reply "
        f"{link(tokens(r['short_reply_tokens'].as_num()), 'recommendation-table')}, agent "
        f"context {link(tokens(r['agent_context_tokens'].as_num()), 'recommendation-table')}"
        f"; at {link(fmt.per_s(rate), 'recommendation-table')} they deliver a GPU hit share "
        f"of {link(fmt.share(r['gpu_hit_share'].as_num()), 'recommendation-table')}"
    )
    tiered = _policy(rec.doc, rate, "tiered")
    if tiered is not None:
        text += (
            f" against {link(fmt.share(number_at(tiered, 'gpu_hit_share')), 'baselines')} for "
            f"tiered, p99 TTFT "
            f"{link(fmt.seconds(number_at(r, 'ttft_s', 'p99')), 'recommendation-table')}"
            f" against {link(fmt.seconds(number_at(tiered, 'ttft_s', 'p99')), 'baselines')}"
        )
    matters = r.get("matters")
    if matters is not None and not matters.as_bool():
        text += " (the thresholds do not matter here: every pair is within the margins)"
    return text + "."


def _iobench_sentence(io: Input) -> str:
    """The flat layout's restore rate on this SSD against fio, and the eviction-ordered
    baseline's read commands ("" without flat runs)."""
    flat = io.doc["layouts"].get("flat")
    runs = flat.as_list() if flat is not None else []
    fio = io.doc["fio"]
    seq = fio["seq_read_bytes_per_s"].as_num() if fio["available"].as_bool() else None
    if not runs:
        return ""
    best = max(runs, key=lambda r: r["concurrency"].as_int() or 0)
    settings = io.doc["provenance"].get("settings")
    source = settings.get("source") if settings is not None else None
    synthetic = source is None or source.as_str() in ("", "synthetic")
    workload = " with a synthetic workload (generated sessions, not the trace)"
    if not synthetic:
        workload = ""
    text = (
        f"On this SSD{workload} the flat layout restores at "
        f"{link(fmt.rate(best['restore_bytes_per_s'].as_num()), 'storage-runs')} at "
        f"concurrency {best['concurrency'].as_int()}"
    )
    over = io.doc["comparisons"].get("flat_over_fio_seq")
    if seq is not None and over is not None:
        text += (
            f", {link(fmt.ratio(over['ratio'].as_num()), 'storage')} fio's best "
            f"sequential read ({link(fmt.rate(seq), 'storage')})"
        )
    cmds = io.doc["comparisons"].get("eviction_over_flat_read_commands")
    if cmds is not None:
        text += (
            f"; the eviction-ordered baseline issues "
            f"{link(fmt.ratio(cmds['ratio'].as_num()), 'storage-runs')} its read commands"
        )
    return text + "."
