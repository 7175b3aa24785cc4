"""The report page's Replay section, and the per-rate table and charts that the
Recommendation section shows too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from fcctl.analyzers.replay.achieved import load_words

from .. import format as fmt
from .. import svg
from ..replay_report import SATURATION_LEGEND, saturation_mark
from ..report_inputs import Input, Node
from .elements import Cell, CellLike, figure, para, table


@dataclass(frozen=True)
class LoadPoint:
    """One entry of a document's ``rates``: its load, the sizes it ran at, its policies."""

    load: float  # offered requests/s, or sessions kept active on a closed loop (--concurrency)
    label: str  # the load as the tables write it: by what was achieved (analyzers/replay/achieved)
    sizes: str  # "" at the node's sizes (the first entry's); else the sizes it ran at
    policies: list[tuple[str, Node]]


def load_points(doc: Node) -> list[LoadPoint]:
    """The document's loads in its order: an offered rate, or a concurrency (rate null) when
    the load axis is the closed loop; entries at other sizes (a size list such as
    ``--host-memory 256GiB,1TiB``) name those sizes."""
    entries = doc["rates"].as_list()
    first = entries[0].get("sizes") if entries else None
    base = None if first is None else first.value
    out = []
    for r in entries:
        rate = r.get("rate")
        active = None if rate is not None else r["concurrency"].as_int()
        load = rate.need_num() if rate is not None else float(active or 0)
        label = load_words(None if rate is None else load, active, served_at(r), reached_at(r))
        sizes = r.get("sizes")
        named = ""
        if sizes is not None and sizes.value != base:
            named = ", ".join(
                f"{k.removesuffix('_bytes').replace('_', ' ')} {fmt.size(v.as_num())}"
                for k, v in sizes.as_items()
            )
        out.append(LoadPoint(load, label, named, r["policies"].as_items()))
    return out


def _lead(point: Node) -> Node | None:
    """A load point's leading policy: the decision's best, else the highest GPU hit share
    (analyzers/replay/achieved)."""
    policies = point["policies"].as_items()
    if not policies:
        return None
    best = point["decision"]["best"].as_str() if point.get("decision") is not None else ""
    named = dict(policies)
    return named.get(best) or max(
        named.values(), key=lambda p: number_at(p, "gpu_hit_share") or 0.0
    )


def served_at(point: Node) -> float | None:
    """Requests/s served at a load point by its leading policy, in the steady-state window (the
    whole run's when the window is empty)."""
    lead = _lead(point)
    if lead is None:
        return None
    return number_at(lead, "achieved_rate", "central") or number_at(lead, "achieved_rate", "whole")


def reached_at(point: Node) -> bool | None:
    """Whether a load point's offered rate was reached: its leading policy not ``saturated``
    (analyzers/replay/achieved.reached); None where the document does not say."""
    lead = _lead(point)
    flag = None if lead is None else lead.get("saturated")
    if flag is None or point.get("rate") is None or flag.value is None:
        return None
    return not bool(flag.value)


def closed_loop(doc: Node) -> bool:
    """Whether the document's load axis is the concurrency (``--concurrency``)."""
    return any(r.get("rate") is None for r in doc["rates"])


def policies_at(doc: Node) -> list[tuple[float, list[tuple[str, Node]]]]:
    return [(p.load, p.policies) for p in load_points(doc)]


def number_at(node: Node, *keys: str) -> float | None:
    """A nested number that may be absent (a key the issue lists but a document leaves out)."""
    for k in keys:
        nxt = node.get(k)
        if nxt is None:
            return None
        node = nxt
    return node.as_num()


def served_key(doc: Node) -> str:
    """The hit share a page shows: over served requests (schema 3), else the older documents'
    only one, over all requests (docs/simulator.md, "Shares over what was served")."""
    for pt in load_points(doc):
        for _name, p in pt.policies:
            return (
                "gpu_hit_share_served"
                if p.get("gpu_hit_share_served") is not None
                else ("gpu_hit_share")
            )
    return "gpu_hit_share"


def served_ideal(doc: Node) -> float | None:
    """The ideal beside the served shares: a policy's ``ideal_hit_share_served`` (the same for
    every policy at the node's sizes), else the document's over all requests."""
    for pt in load_points(doc):
        for _name, p in pt.policies:
            v = number_at(p, "ideal_hit_share_served")
            if v is not None and not pt.sizes:
                return v
    return doc["ideal_hit_share"].as_num()


def hit_text(p: Node) -> tuple[str, float | None]:
    """A policy's hit cell: the served share, and "/ all" beside it where requests were
    rejected (the two then differ)."""
    served = number_at(p, "gpu_hit_share_served")
    every = number_at(p, "gpu_hit_share")
    if served is None:
        return fmt.share(every), every
    rejected = number_at(p, "rejected_requests", "count")
    if not rejected:
        return fmt.share(served), served
    return f"{fmt.share(served)} / {fmt.share(every)}", served


def rates_table(doc: Node, table_id: str) -> str:
    rows: list[list[CellLike]] = []
    points = load_points(doc)
    sized = any(pt.sizes for pt in points)
    for pt in points:
        for name, p in pt.policies:
            hit_cell, hit = hit_text(p)
            cells: list[CellLike] = [Cell(pt.label, pt.load)]
            if sized:
                cells.append(pt.sizes or "the node's")
            served = number_at(p, "achieved_rate", "central")
            by = p.get("saturated_by")
            mark = saturation_mark(None if by is None else by.as_opt_str())
            cells += [name, Cell(fmt.sig3(served) + mark, served), Cell(hit_cell, hit)]
            for keys, render in (
                (("ttft_s", "mean"), fmt.seconds),
                (("ttft_s", "p50"), fmt.seconds),
                (("ttft_s", "p99"), fmt.seconds),
                (("ssd_read_bytes",), fmt.size),
                (("read_amplification",), fmt.fixed3),
                (("prefetch_s", "mean"), fmt.seconds),
                (("prefetch_s", "p99"), fmt.seconds),
                (("cancelled_prefetches",), fmt.number),
                (("recomputed_tokens",), fmt.number),
            ):
                v = number_at(p, *keys)
                cells.append(Cell(render(v), v))
            rows.append(cells)
    return table(
        [
            "sessions active" if closed_loop(doc) else "rate",
            *(["sizes"] if sized else []),
            "policy",
            "served/s",
            "GPU hit share",
            "TTFT mean",
            "TTFT p50",
            "TTFT p99",
            "SSD read",
            "read ampl.",
            "prefetch mean",
            "prefetch p99",
            "cancelled prefetches",
            "recomputed tokens",
        ],
        rows,
        table_id=table_id,
    )


def _per_policy(doc: Node, *keys: str) -> dict[str, tuple[list[float], list[float]]]:
    """Each policy's (loads, values) at the node's sizes: a chart draws one size set. On the
    rate axis a policy's load is what it served (its central achieved rate), not what was
    offered: an offered rate the trace's pacing never reaches is no load (issue #33)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    by_rate = not closed_loop(doc)
    for pt in load_points(doc):
        if pt.sizes:
            continue
        for name, p in pt.policies:
            v = number_at(p, *keys)
            x: float | None = pt.load
            if by_rate and _served_axis(doc):
                x = number_at(p, "achieved_rate", "central")
            if v is not None and x is not None:
                xs, ys = out.setdefault(name, ([], []))
                xs.append(x)
                ys.append(v)
    return out


def _served_axis(doc: Node) -> bool:
    """Whether the rate axis is the load served: every policy at the node's sizes states its
    central achieved rate. An older or hand-written document without it is charted against the
    offered rate, named as such, rather than drawn empty."""
    return all(
        number_at(p, "achieved_rate", "central") is not None
        for pt in load_points(doc)
        if not pt.sizes
        for _, p in pt.policies
    )


def rate_charts(doc: Node, prefix: str) -> str:
    """Hit share, TTFT p50/p99 and SSD bytes against rate, one series per policy (bars per
    policy when the document ran one load: a line needs two)."""
    at_node = [pt for pt in load_points(doc) if not pt.sizes]
    if len({pt.load for pt in at_node}) == 1:
        return _one_load_charts(doc, prefix, at_node[0])
    rate_axis = (
        svg.Axis("sessions kept active (closed loop)", fmt=lambda v: f"{v:g}")
        if closed_loop(doc)
        else svg.Axis("served load (requests/s, steady-state window)", fmt=lambda v: f"{v:.3g}")
        if _served_axis(doc)
        else svg.Axis(
            "offered load (requests/s; no served rate recorded)", fmt=lambda v: f"{v:.3g}"
        )
    )
    ideal = served_ideal(doc)
    hits = _per_policy(doc, served_key(doc))
    charts = [
        figure(
            svg.line_chart(
                f"{prefix}-hit-share",
                "GPU hit share against rate",
                [svg.Series(n, xs, ys) for n, (xs, ys) in hits.items()],
                rate_axis,
                svg.Axis("GPU-delivered hit share", fmt=fmt.share, lo=0.0, hi=1.0),
                [svg.RefLine("ideal (reuse access share)", ideal)] if ideal is not None else [],
            ),
            f"Reused blocks delivered to GPU memory before prefill, over {_over(doc)}.",
        )
    ]
    series = []
    p50, p99 = _per_policy(doc, "ttft_s", "p50"), _per_policy(doc, "ttft_s", "p99")
    for i, name in enumerate(dict.fromkeys([*p50, *p99])):
        color = svg.PALETTE[i % len(svg.PALETTE)]
        if name in p50:
            series.append(svg.Series(f"{name} p50", *p50[name], color=color))
        if name in p99:
            series.append(svg.Series(f"{name} p99", *p99[name], dashed=True, color=color))
    charts.append(
        figure(
            svg.line_chart(
                f"{prefix}-ttft",
                "Time to first token against rate",
                series,
                rate_axis,
                svg.Axis("TTFT (seconds)", fmt=lambda v: fmt.seconds(v)),
            ),
            "TTFT p50 (solid) and p99 (dashed) per policy.",
        )
    )
    ssd = _per_policy(doc, "ssd_read_bytes")
    if ssd:
        charts.append(
            figure(
                svg.line_chart(
                    f"{prefix}-ssd-bytes",
                    "SSD bytes read against rate",
                    [svg.Series(n, xs, ys) for n, (xs, ys) in ssd.items()],
                    rate_axis,
                    svg.Axis("SSD bytes read", fmt=lambda v: fmt.size(v)),
                ),
                "Bytes read from SSD per policy over the whole replay.",
            )
        )
    return '<div class="charts">' + "".join(charts) + "</div>"


def _over(doc: Node) -> str:
    """What the charted hit share is over, in words."""
    if served_key(doc) == "gpu_hit_share":
        return "all block accesses"
    return "the block accesses of the requests that ran (served)"


def _one_load_charts(doc: Node, prefix: str, point: LoadPoint) -> str:
    """The charts of :func:`rate_charts` at the one load replayed: bars, one group a policy."""
    names = [n for n, _ in point.policies]

    def values(*keys: str) -> list[float | None]:
        return [number_at(p, *keys) for _, p in point.policies]

    ideal = served_ideal(doc)
    at = f"at {point.label}, the one load replayed"
    charts = [
        figure(
            svg.bar_chart(
                f"{prefix}-hit-share",
                "GPU hit share per policy",
                names,
                [("GPU hit share", values(served_key(doc)))],
                "policy",
                svg.Axis("GPU-delivered hit share", fmt=fmt.share, lo=0.0, hi=1.0),
                svg.RefLine("ideal (reuse access share)", ideal) if ideal is not None else None,
            ),
            f"Reused blocks delivered to GPU memory before prefill, over {_over(doc)}, {at}.",
        ),
        figure(
            svg.bar_chart(
                f"{prefix}-ttft",
                "Time to first token per policy",
                names,
                [("p50", values("ttft_s", "p50")), ("p99", values("ttft_s", "p99"))],
                "policy",
                svg.Axis("TTFT (seconds)", fmt=lambda v: fmt.seconds(v)),
            ),
            f"TTFT p50 and p99 per policy, {at}.",
        ),
    ]
    ssd = values("ssd_read_bytes")
    if any(v is not None for v in ssd):
        charts.append(
            figure(
                svg.bar_chart(
                    f"{prefix}-ssd-bytes",
                    "SSD bytes read per policy",
                    names,
                    [("SSD bytes read", ssd)],
                    "policy",
                    svg.Axis("SSD bytes read", fmt=lambda v: fmt.size(v)),
                ),
                f"Bytes read from SSD per policy over the whole replay, {at}.",
            )
        )
    return '<div class="charts">' + "".join(charts) + "</div>"


def _plain(value: object) -> str:
    """A non-numeric hardware value as text: a string as it is (no JSON quotes), null as
    n/a, anything else (a list, an object) as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return fmt.NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    return json.dumps(value)


def hardware_table(
    doc: Node, *, table_id: str = "hardware-table", heading: str = "Hardware"
) -> str:
    hw = doc.get("hardware")
    if hw is None:
        return ""
    rows: list[list[CellLike]] = []
    for name, v in hw.as_items():
        if isinstance(v.value, dict) and "value" in v.value:
            value, source = v.value["value"], v.value.get("source") or ""
        else:
            value, source = v.value, ""
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # Figures as the JSON holds them: whole numbers with separators, fractions to 1 place.
        cell: CellLike = Cell(fmt.number(value), value) if number else _plain(value)
        rows.append([name, cell, str(source)])
    return f"<h3>{escape(heading)}</h3>" + table(
        ["figure", "value", "source"], rows, table_id=table_id
    )


def sampling_line(doc: Node) -> str:
    """A paragraph saying the figures come from sampled sessions (issue #19); "" when not."""
    sampling = doc.get("sampling")
    if sampling is None or sampling.get("method") is None:
        return ""
    rate = sampling["sample_sessions"].as_num() or 0.0
    sessions, requests = sampling["sessions"], sampling["requests"]
    error = sampling.get("measured_error")
    hit = None if error is None or error.get("gpu_hit_share_abs_pp") is None else error
    stated = (
        "error not measured at this rate"
        if hit is None
        else f"measured error up to {hit['gpu_hit_share_abs_pp'].as_num():.2g} pp of GPU hit "
        f"share, {100 * (hit['ttft_mean_rel'].as_num() or 0):.2g} % of mean TTFT "
        f"(docs/benchmarks.md)"
    )
    return para(
        f"Sampled: {100 * rate:.3g} % of sessions ({sessions['kept'].as_int() or 0:,} of "
        f"{sessions['total'].as_int() or 0:,}; {requests['kept'].as_int() or 0:,} of "
        f"{requests['total'].as_int() or 0:,} requests), at the same load per node; {stated}."
    )


def replay_section(inp: Input) -> str:
    doc = inp.doc
    ideal = doc["ideal_hit_share"].as_num()
    served = served_ideal(doc)
    ideal_text = (
        fmt.share(ideal)
        if served is None or served == ideal
        else f"{fmt.share(served)} over served requests; {fmt.share(ideal)} over all, rejected "
        "requests as misses (GPU hit cells: served / all)"
    )
    return (
        sampling_line(doc)
        + para(f"Ideal hit share (analyze's reuse access share): {ideal_text}")
        + rate_charts(doc, "replay")
        + '<h3 id="replay-rates">Policies by rate</h3>'
        + rates_table(doc, "replay-table")
        + para(f"served/s: {SATURATION_LEGEND}.")
        + hardware_table(doc)
    )
