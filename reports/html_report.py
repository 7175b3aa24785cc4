"""``fcctl report``: one self-contained HTML page from the outputs of fcctl's commands.

The page is one file: inline CSS, inline SVG charts (:mod:`fcctl.reports.svg`), a few lines of
inline script that sort tables, and a Content-Security-Policy that allows nothing to be fetched,
so the page opened from a mail attachment or offline makes no request at all. Every figure is a
value of an input document (or its ``--out`` Parquet tables) written by
:mod:`fcctl.reports.format`, the functions the terminal summaries use, so page and terminal
agree digit for digit. Sections for commands without an input are left out. The inputs are
read by :mod:`fcctl.reports.report_inputs`; the page is written atomically.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from fcctl.common.errors import FcctlInputError
from fcctl.common.outdir import write_text_atomic
from fcctl.common.paths import display_path
from fcctl.common.provenance import utc_now
from fcctl.common.version import fcctl_version
from fcctl.reports import format as fmt
from fcctl.reports import svg
from fcctl.reports.report_inputs import (
    Input,
    Node,
    ReportInputError,
    check_same_trace,
    read_inputs,
)

#: Section ids in page order; the tests and the decision paragraph's links use them.
SECTIONS = ("decision", "trace", "reuse", "storage", "replay", "recommendation", "provenance")
SECTION_TITLES = {
    "decision": "Decision",
    "trace": "Trace",
    "reuse": "Reuse",
    "storage": "Storage (iobench)",
    "replay": "Replay",
    "recommendation": "Recommendation",
    "provenance": "Provenance",
}
# Curves from --out Parquet tables are thinned to this many points: enough for a 640 px chart,
# and a whole-trace hit curve (one point per distinct stack distance) stays a few KB.
MAX_CURVE_POINTS = 400


# --- small HTML builders -----------------------------------------------------------------


#: The ``sort`` of a text cell (a cell made with a value, even None, is a number cell).
TEXT = "text"


@dataclass(frozen=True)
class Cell:
    """A table cell: the text shown and the value it sorts by.

    ``Cell(text)`` is text; ``Cell(text, value)`` is a number, aligned right and sorted by the
    raw value (``None``, not measured, sorts below every number)."""

    text: str
    sort: float | str | None = TEXT
    html: bool = False  # text is markup already (a link)

    @property
    def numeric(self) -> bool:
        return self.sort != TEXT


CellLike = Cell | str


def link(text: str, anchor: str) -> str:
    """``text`` as a link to the section or table it comes from."""
    return f'<a href="#{escape(anchor)}">{escape(text)}</a>'


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[CellLike]],
    *,
    table_id: str | None = None,
    caption: str | None = None,
    sortable: bool = True,
) -> str:
    """A table in a scroll box (narrow screens scroll it, not the page); numbers align right."""
    head = "".join(
        f'<th scope="col"><button type="button">{escape(h)}</button></th>'
        if sortable
        else f'<th scope="col">{escape(h)}</th>'
        for h in headers
    )
    body = []
    for row in rows:
        cells = []
        for c in row:
            cell = c if isinstance(c, Cell) else Cell(c)
            text = cell.text if cell.html else escape(cell.text)
            if cell.numeric:
                v = "-Infinity" if cell.sort is None else repr(cell.sort)
                cells.append(f'<td class="num" data-v="{v}">{text}</td>')
            else:
                cells.append(f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    ident = f' id="{escape(table_id)}"' if table_id else ""
    cls = ' class="sortable"' if sortable else ""
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table{ident}{cls}>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def kv_table(rows: Sequence[tuple[str, CellLike]], *, table_id: str | None = None) -> str:
    """A two-column table of facts (not sortable: its order is the reading order)."""
    body = []
    for k, v in rows:
        cell = v if isinstance(v, Cell) else Cell(v)
        text = cell.text if cell.html else escape(cell.text)
        cls = ' class="num"' if cell.numeric else ""
        body.append(f'<tr><th scope="row">{escape(k)}</th><td{cls}>{text}</td></tr>')
    ident = f' id="{escape(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table{ident} class="facts">{"".join(body)}</table></div>'


def para(text: str) -> str:
    return f"<p>{escape(text)}</p>"


def figure(chart: str, caption: str) -> str:
    return f"<figure>{chart}<figcaption>{escape(caption)}</figcaption></figure>"


def bullet_list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"


def thin(xs: list[float], ys: list[float], limit: int = MAX_CURVE_POINTS) -> tuple[list, list]:
    """At most ``limit`` points, evenly by index, the first and last kept."""
    if len(xs) <= limit:
        return xs, ys
    idx = sorted({round(i * (len(xs) - 1) / (limit - 1)) for i in range(limit)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


#: The columns the page reads from each ``--out`` table, and what they must hold.
PARQUET_COLUMNS: dict[str, dict[str, str]] = {
    "histograms.parquet": {"metric": "text", "count": "numbers", "bucket_hi": "numbers"},
    "sessions.parquet": {"kv_bytes": "numbers"},
    "memory_tier_curve.parquet": {"capacity_bytes": "numbers", "lru_hit_share": "numbers"},
}


def _check_columns(frame: Any, path: Path, name: str) -> None:
    """Every column the page reads from table ``name`` is there and of its kind."""
    import polars as pl

    for column, kind in PARQUET_COLUMNS.get(name, {}).items():
        if column not in frame.columns:
            raise ReportInputError(
                f"{display_path(path)}: column {column!r}: missing (an fcctl {name} has it); "
                f"got columns {', '.join(frame.columns) or 'none'}"
            )
        dtype = frame.schema[column]
        ok = dtype.is_numeric() if kind == "numbers" else dtype in (pl.String, pl.Categorical)
        if not ok:
            raise ReportInputError(
                f"{display_path(path)}: column {column!r}: expected {kind}; got {dtype}"
            )


def _parquet(inp: Input, name: str) -> Any | None:
    """A Parquet table of ``inp``'s ``--out`` directory, or None (a bare JSON, or absent)."""
    if inp.directory is None or not (inp.directory / name).is_file():
        return None
    import polars as pl

    path = inp.directory / name
    try:
        frame = pl.read_parquet(path)
    except Exception as e:  # polars raises several types for a damaged file
        first = " ".join(str(e).split())[:160]
        raise ReportInputError(
            f"{display_path(path)}: not a readable Parquet table: {first}"
        ) from None
    _check_columns(frame, path, name)
    return frame


# --- the trace ------------------------------------------------------------------------------


def _schedule_text(schedule: Node) -> str:
    """analyze's own wording of the order (the summary's ``order`` row)."""
    from fcctl.analyzers.reuse.analyze import ScheduleSummary

    names = {f.name for f in dataclasses.fields(ScheduleSummary)}
    raw = {k: v.value for k, v in schedule.as_items() if k in names}
    try:
        return ScheduleSummary(**raw).describe()
    except (TypeError, ValueError):
        raise ReportInputError(
            f"{schedule.where}: {schedule.path}: not analyze's schedule object"
        ) from None


def trace_section(inputs: dict[str, Input]) -> str:
    first = next(
        (
            inputs[c]
            for c in ("analyze", "replay", "recommend-thresholds")
            if c in inputs and "trace" in inputs[c].doc
        ),
        None,
    )
    if first is None:
        return ""
    t, kv = first.doc["trace"], first.doc.get("kv")
    sessions = fmt.count(t["sessions"].as_int())
    if t["sessions_inferred"].as_bool():
        sessions += " (INFERRED from prefix chains)"
    rows: list[tuple[str, CellLike]] = [
        ("trace", t["path"].as_str()),
        ("format", t["format"].as_str()),
    ]
    conv = t.get("converted_from")
    if conv is not None:
        rows.append(("converted from", f"{conv['path'].as_str()} ({conv['format'].as_str()})"))
    block = t["block_size_tokens"].as_int()
    schedule = t.get("schedule")
    per_session = schedule is not None and schedule["kind"].as_str() in ("sequential",)
    rows += [
        ("requests", Cell(fmt.count(t["requests"].as_int()), 0)),
        ("sessions", sessions),
        ("block size", f"{block} tokens" if block else "n/a"),
        ("block accesses", Cell(fmt.number(t["block_accesses"].as_num()), 0)),
        ("distinct blocks", Cell(fmt.number(t["distinct_blocks"].as_num()), 0)),
        ("longest session" if per_session else "duration", fmt.span_s(t["duration_s"].as_num())),
    ]
    if kv is not None:
        desc = kv.get("description")
        rows.append(("model", desc.as_str() if desc else kv["model"].as_str()))
    if schedule is not None:
        rows.append(("order", _schedule_text(schedule)))
    sampling = first.doc.get("sampling") or t.get("sampling")
    rows.append(
        (
            "counting",
            "exact: every block access counted" if sampling is None else _sampling_legend(sampling),
        )
    )
    rows.append(("read by", f"fcctl {first.command} ({first.shown})"))
    others = [
        (f"trace read by {c}", inputs[c].doc["trace"]["path"].as_str())
        for c in ("replay", "recommend-thresholds")
        if c in inputs and inputs[c] is not first and "trace" in inputs[c].doc
    ]
    return kv_table([*rows, *others], table_id="trace-table")


# --- reuse (analyze) --------------------------------------------------------------------------


def _percentile_rows(
    rows: Sequence[tuple[str, Node, Callable[[float | None], str]]], keys: Sequence[str]
) -> list[list[CellLike]]:
    out: list[list[CellLike]] = []
    for label, node, render in rows:
        cells: list[CellLike] = [label]
        for k in keys:
            v = node.get(k)
            value = None if v is None else v.as_num()
            cells.append(Cell(render(value), value) if k in node else "")
        out.append(cells)
    return out


_DISTANCES = (
    ("requests", "requests", "reuse distance (requests)", svg.tick, 10),
    ("seconds", "seconds", "reuse distance (seconds)", svg.tick, 10),
    ("stack_bytes", "LRU stack (bytes)", "LRU stack distance (bytes of KV)", fmt.size, 2),
)


def _distance_chart(inp: Input, metric: str, label: str, render: Callable, base: int) -> str:
    """CDF of one reuse distance: the histogram's bucket edges from ``--out``, else p50/p90/p99."""
    hist = _parquet(inp, "histograms.parquet")
    x_axis = svg.Axis(label, log=True, fmt=render, base=base)
    y_axis = svg.Axis("share of re-accesses", fmt=fmt.share, lo=0.0, hi=1.0)
    title = f"Reuse distance CDF: {label}"
    if hist is not None:
        part = hist.filter(hist["metric"] == metric)
        counts = part["count"].to_list()
        total = sum(counts)
        if total:
            edges = part["bucket_hi"].to_list()
            cum, acc = [], 0
            for c in counts:
                acc += c
                cum.append(acc / total)
            # A log axis cannot show distance 0: that bucket's edge (1) stands for it.
            xs, ys = thin([float(e) for e in edges], cum)
            series = [svg.Series("CDF (log2 bucket edges)", xs, ys, kind="step")]
            return figure(
                svg.line_chart(f"reuse-{metric}", title, series, x_axis, y_axis),
                f"{title}; exact at the log2 bucket edges of histograms.parquet.",
            )
    p = inp.doc["reuse_distance"][metric]
    quantiles = [(p[k].as_num(), q) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))]
    pts = [(x, q) for x, q in quantiles if x is not None and x > 0]
    if not pts:
        return ""
    series = [svg.Series("p50, p90, p99", [x for x, _ in pts], [q for _, q in pts], kind="points")]
    return figure(
        svg.line_chart(f"reuse-{metric}", title, series, x_axis, y_axis),
        f"{title}: the percentiles of the JSON (give the --out directory for the whole CDF).",
    )


def _session_chart(inp: Input) -> str:
    sess = _parquet(inp, "sessions.parquet")
    threshold = next(
        (
            c["threshold"].as_num()
            for c in inp.doc["verdict"]["checks"]
            if c["name"].as_str() == "session_kv_p90_bytes"
        ),
        None,
    )
    x_axis = svg.Axis("session KV, distinct blocks (bytes)", log=True, fmt=fmt.size, base=2)
    y_axis = svg.Axis("share of sessions", fmt=fmt.share, lo=0.0, hi=1.0)
    if sess is not None and sess.height:
        kv = sorted(float(v) for v in sess["kv_bytes"].to_list())
        xs, ys = thin([kv[0], *kv], [0.0, *((i + 1) / len(kv) for i in range(len(kv)))])
        series = [svg.Series("sessions", xs, ys, kind="step")]
        note = "every session of sessions.parquet"
    else:
        s = inp.doc["sessions"]["kv_bytes"]
        quantiles = [(s[k].as_num(), q) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))]
        pts = [(x, q) for x, q in quantiles if x]
        if not pts:
            return ""
        series = [svg.Series("p50, p90, p99", [x for x, _ in pts], [q for _, q in pts], "points")]
        note = "the percentiles of the JSON (give the --out directory for the whole CDF)"
    if threshold:
        series.append(
            svg.Series(
                f"flat-layout threshold (p90 >= {fmt.size_2dp(threshold)})",
                [threshold, threshold],
                [0.0, 1.0],
                dashed=True,
                color="#555555",
            )
        )
    return figure(
        svg.line_chart("session-kv", "Session KV size CDF", series, x_axis, y_axis),
        f"Session KV size CDF: {note}.",
    )


def _tier_chart(inp: Input) -> str:
    doc = inp.doc
    analysed = [
        (p["capacity_bytes"].need_num(), p["lru_hit_share"].as_num()) for p in doc["memory_tier"]
    ]
    points = [(c, s) for c, s in analysed if s is not None]
    series = []
    curve = _parquet(inp, "memory_tier_curve.parquet")
    if curve is not None and curve.height:
        xs = [float(v) for v in curve["capacity_bytes"].to_list()]
        ys = [float(v) for v in curve["lru_hit_share"].to_list()]
        widest = max((c for c, _ in points), default=0.0)
        if xs and widest > xs[-1]:
            # Past the largest stack distance the curve is flat: drawn out to every capacity.
            xs, ys = [*xs, widest], [*ys, ys[-1]]
        xs, ys = thin(xs, ys)
        series.append(svg.Series("LRU hit share", xs, ys))
    series.append(
        svg.Series(
            "analysed capacities",
            [c for c, _ in points],
            [s for _, s in points],
            "points",
            color=svg.PALETTE[1],
        )
    )
    ideal = doc["reuse_access_share"].as_num()
    refs = [svg.RefLine("ideal (reuse access share)", ideal)] if ideal is not None else []
    chart = svg.line_chart(
        "memory-tier",
        "Memory-tier hit curve",
        series,
        svg.Axis("memory capacity (bytes of KV)", log=True, fmt=fmt.size, base=2),
        svg.Axis("share of block accesses", fmt=fmt.share, lo=0.0, hi=1.0),
        refs,
    )
    return figure(
        chart, "LRU hit share of a host-memory tier against its capacity, with the ideal."
    )


def _sampling_legend(sampling: Node) -> str:
    """analyze's own legend of the sampled figures (rate, exact head, error bound)."""
    bound = sampling["error_bound"]
    return fmt.sampling_legend(
        sampling["rate"].need_num(),
        int(sampling["exact_below_blocks"].need_num()),
        bound["hit_share_mean_abs_pp"].as_num(),
        bound["hit_share_max_abs_pp"].as_num(),
    )


def _sampled(doc: Node) -> Node | None:
    """The analysis' ``trace.sampling`` when some figures are estimated from a sample."""
    trace = doc.get("trace")
    if trace is None:
        return None
    sampled = trace.get("sampled")
    if sampled is not None and not sampled.as_bool():
        return None
    return trace.get("sampling")


def reuse_section(inp: Input) -> str:
    doc = inp.doc
    parts = []
    sampling = _sampled(doc)
    mark = fmt.SAMPLED_MARK if sampling is not None else ""
    if sampling is not None:
        # The terminal's legend, word for word: the marked rows below are estimates.
        parts.append(
            f'<p id="sampling-legend" class="note">{escape(_sampling_legend(sampling))}</p>'
        )
    if doc["reuse_access_share"].is_null():
        parts.append(
            para(
                "Reuse cannot be measured: this trace has no block hashes. Only request sizes "
                "and arrival rate are reported."
            )
        )
    else:
        once, ideal = doc["once_only_block_share"].as_num(), doc["reuse_access_share"].as_num()
        parts.append('<h3 id="block-reuse">Block reuse</h3>')
        parts.append(
            table(
                ["metric", "value"],
                [
                    ["once-only block share", Cell(fmt.share(once), once)],
                    ["reuse access share (ideal hit share)", Cell(fmt.share(ideal), ideal)],
                ],
                table_id="reuse-shares",
            )
        )
        rd = doc["reuse_distance"]
        parts.append('<h3 id="reuse-distance">Reuse distance of re-accesses</h3>')
        parts.append(
            table(
                ["unit", "p50", "p90", "p99"],
                _percentile_rows(
                    [
                        ("requests", rd["requests"], fmt.number),
                        ("seconds", rd["seconds"], fmt.number),
                        (mark + "LRU stack (blocks)", rd["stack_blocks"], fmt.number),
                        (mark + "LRU stack (bytes)", rd["stack_bytes"], fmt.size),
                    ],
                    ("p50", "p90", "p99"),
                ),
                table_id="reuse-distance-table",
            )
        )
        charts = [_distance_chart(inp, m, label, r, b) for m, _s, label, r, b in _DISTANCES]
        parts.append('<div class="charts">' + "".join(charts) + "</div>")
    s = doc.get("sessions")
    if s is not None:
        rows: list[list[CellLike]] = []
        for label, key in (
            ("KV, distinct blocks", "kv_bytes"),
            ("KV, largest context", "max_context_bytes"),
        ):
            rows += _percentile_rows(
                [(label, s[key], fmt.size)], ("p50", "p90", "p99", "max", "mean")
            )
        for label, key in (("turns", "turns"), ("largest input, tokens", "max_input_tokens")):
            rows += _percentile_rows(
                [(label, s[key], fmt.number)], ("p50", "p90", "p99", "max", "mean")
            )
        parts.append('<h3 id="sessions">Sessions</h3>')
        parts.append(
            table(
                ["metric", "p50", "p90", "p99", "max", "mean"],
                rows,
                table_id="sessions-table",
                caption="KV, distinct blocks: every block the session references (session KV); "
                "KV, largest context: its largest request, what one restore reads.",
            )
        )
        parts.append(_session_chart(inp))
    if not doc["reuse_access_share"].is_null():
        rows = []
        for p in doc["memory_tier"]:
            cap, blocks = p["capacity_bytes"].as_num(), p["capacity_blocks"].as_num()
            point_mark = fmt.SAMPLED_MARK if (q := p.get("sampled")) and q.as_bool() else ""
            cells: list[CellLike] = [
                Cell(point_mark + fmt.size(cap), cap),
                Cell(fmt.number(blocks), blocks),
            ]
            for key in ("lru_hit_share", "share_of_ideal", "ssd_reuse_share"):
                value = p[key].as_num()
                cells.append(Cell(fmt.share(value), value))
            rows.append(cells)
        parts.append('<h3 id="memory-tier">Memory tier (LRU in front of SSD)</h3>')
        parts.append(
            table(
                ["capacity", "blocks", "LRU hit share", "share of ideal", "reuse from SSD"],
                rows,
                table_id="memory-tier-table",
            )
        )
        parts.append(_tier_chart(inp))
    rs = doc.get("request_sizes")
    if rs is not None:
        parts.append('<h3 id="request-sizes">Request sizes</h3>')
        parts.append(
            table(
                ["metric", "p50", "p90", "p99"],
                _percentile_rows(
                    [
                        ("input tokens", rs["input_tokens"], fmt.number),
                        ("output tokens", rs["output_tokens"], fmt.number),
                        ("KV per request", rs["kv_bytes"], fmt.size),
                    ],
                    ("p50", "p90", "p99"),
                ),
                table_id="request-sizes-table",
            )
        )
        rate = rs["arrival_rate_per_s"].as_num()
        if rate is not None:
            parts.append(para(f"arrival rate: {fmt.per_s(rate)}"))
    v = doc["verdict"]
    parts.append(f'<h3 id="verdict">Verdict: {escape(v["layout"].as_str().upper())}</h3>')
    parts.append(bullet_list([r.as_str() for r in v["reasons"]]))
    notes = [n.as_str() for n in doc["notes"]] if "notes" in doc else []
    if notes:
        parts.append("<h4>Notes</h4>" + bullet_list(notes))
    return "".join(parts)


# --- storage (iobench) ------------------------------------------------------------------------


def _iobench_repeats(doc: Node) -> int:
    settings = doc["provenance"].get("settings")
    rep = settings.get("repeat") if settings is not None else None
    return (rep.as_int() or 1) if rep is not None else 1


def comparison_sentences(doc: Node) -> list[str]:
    """iobench's reading of its headline comparisons, from the JSON (its terminal wording)."""
    c = doc["comparisons"]
    # Checked through the accessors (one line naming the key when a value is off), then worded
    # by the one function the terminal table uses too.
    for key in ("eviction_over_flat_read_commands", "flat_over_fio_seq"):
        r = c.get(key)
        if r is not None:
            r["ratio"].as_num()
            r["concurrency"].as_int()
    for r in c["flat_over_eviction_restore_time"]:
        r["ratio"].as_num()
        r["concurrency"].as_int()
    return fmt.iobench_comparison_sentences(c.value)


def storage_section(inp: Input) -> str:
    doc = inp.doc
    wl, engine, fio = doc["workload"], doc["engine"], doc["fio"]
    settings = doc["provenance"].get("settings")
    model = settings.get("model") if settings is not None else None
    model_text = f"{model.as_str()} " if model is not None else ""
    direct = "yes" if engine["o_direct"].as_bool() else "no"
    gds = ", GDS yes" if engine["gds"].as_bool() else ""
    parts = [
        para(
            f"{wl['sessions'].as_int()} sessions, {model_text}({wl['layers'].as_int()} layers), "
            f"{wl['block_tokens'].as_int()}-token pages, {fmt.size_2dp(wl['bytes'].as_num())} per "
            f"layout; engine {engine['name'].as_str()} (O_DIRECT {direct}{gds})"
        )
    ]
    repeats = _iobench_repeats(doc)
    rows: list[list[CellLike]] = []
    by_layout: dict[str, list[Node]] = {}
    for layout, runs in doc["layouts"].as_items():
        by_layout[layout] = runs.as_list()
        for r in runs:
            mismatched = r["mismatched_blocks"].as_int() or 0
            requested = r["bytes_requested"].as_int() or 0
            verified_bytes = r["verified_bytes"].as_int() or 0
            if mismatched:
                verified = f"{mismatched} BAD"
            elif verified_bytes == requested * repeats:
                verified = "all"
            else:
                verified = fmt.size_2dp(verified_bytes)
            conc = r["concurrency"].as_int() or 0
            conc_ran = r["concurrency_ran"].as_int() if "concurrency_ran" in r else conc
            cmds, ampl = r["read_commands"].as_int(), r["read_amplification"].as_num()
            rate = r["restore_bytes_per_s"].as_num()
            p50, p99 = r["restore_s"]["p50"].as_num(), r["restore_s"]["p99"].as_num()
            rows.append(
                [
                    layout,
                    Cell(fmt.concurrency_label(conc, conc_ran or conc), conc),
                    Cell(fmt.count(cmds), cmds),
                    Cell(fmt.fixed3(ampl, "-"), ampl),
                    Cell(fmt.rate(rate, "-"), rate),
                    Cell(fmt.fixed3(p50, "-"), p50),
                    Cell(fmt.fixed3(p99, "-"), p99),
                    verified,
                ]
            )
    parts.append(
        table(
            ["layout", "conc.", "read cmds", "ampl.", "restore", "p50 s", "p99 s", "verified"],
            rows,
            table_id="storage-runs",
            caption="Cold layer-wise restore of every session; restore is bytes requested over "
            "wall time (GB/s, decimal); p50/p99 s: per-session time from its first read to its "
            "last.",
        )
    )
    seq = fio["seq_read_bytes_per_s"].as_num() if fio["available"].as_bool() else None
    concs = sorted({r["concurrency"].as_int() or 0 for runs in by_layout.values() for r in runs})
    ran = [lay for lay, runs in by_layout.items() if runs]

    def at(layout: str, c: int, key: Callable[[Node], float | None]) -> float | None:
        cell = next((r for r in by_layout[layout] if r["concurrency"].as_int() == c), None)
        return None if cell is None else key(cell)

    charts = []
    if concs and ran:
        charts.append(
            figure(
                svg.bar_chart(
                    "restore-rate",
                    "Cold layer-wise restore throughput",
                    [str(c) for c in concs],
                    [
                        (
                            lay,
                            [
                                at(lay, c, lambda r: r["restore_bytes_per_s"].as_num())
                                for c in concs
                            ],
                        )
                        for lay in ran
                    ],
                    "sessions restored at once",
                    svg.Axis("restore GB/s (aggregate)", fmt=lambda v: f"{v / 1e9:.2f}"),
                    svg.RefLine("fio best sequential read", seq) if seq else None,
                    value_fmt=lambda v: fmt.rate(v),
                ),
                "Restore rate per layout and concurrency against fio's best sequential direct "
                "read of the same files.",
            )
        )
        low = concs[0]
        charts.append(
            figure(
                svg.bar_chart(
                    "read-commands",
                    f"Read commands to restore all sessions (concurrency {low})",
                    ran,
                    [
                        (
                            "read commands",
                            [at(lay, low, lambda r: r["read_commands"].as_num()) for lay in ran],
                        )
                    ],
                    "layout",
                    svg.Axis("read commands", fmt=lambda v: fmt.number(v)),
                ),
                "Read commands issued for one full restore of every session.",
            )
        )
        latency = []
        for lay in ran:
            for q in ("p50", "p99"):

                def restore_s(r: Node, q: str = q) -> float | None:
                    return r["restore_s"][q].as_num()

                latency.append((f"{lay} {q}", [at(lay, c, restore_s) for c in concs]))
        charts.append(
            figure(
                svg.bar_chart(
                    "restore-latency",
                    "Per-session restore time",
                    [str(c) for c in concs],
                    latency,
                    "sessions restored at once",
                    svg.Axis("seconds per session restore", fmt=lambda v: f"{v:.3g}"),
                    value_fmt=lambda v: fmt.fixed3(v),
                ),
                "p50 and p99 of the time from a session's first read to its last.",
            )
        )
    parts.append('<div class="charts">' + "".join(charts) + "</div>")
    lines = []
    scale = wl.get("scale")
    source = settings.get("source") if settings is not None else None
    if source is not None and source.as_str() not in ("", "synthetic") and scale is not None:
        lines.append(f"workload: {source.as_str()}, token counts scaled by {scale.need_num():.4g}")
    ch = doc.get("checksums")
    if ch is not None and by_layout.get("flat"):
        if ch["verified"].as_bool():
            lines.append("flat restores checked every layer checksum inside the timed region")
        elif ch.get("off_reason") is not None:
            lines.append(
                "flat layer checksums not checked in the timed region: " + ch["off_reason"].as_str()
            )
    if fio["available"].as_bool():
        fio_prov = doc["provenance"].get("fio")
        ioengine = fio_prov.get("ioengine") if fio_prov is not None else None
        rounds = (
            len(fio_prov["rounds"].as_list())
            if fio_prov is not None and "rounds" in fio_prov
            else 1
        )
        best = fio_prov.get("best_job") if fio_prov is not None else None
        which = f"median of {rounds}" if rounds > 1 else (best.as_str() if best else "-")
        lines.append(
            f"fio ({ioengine.as_str() if ioengine else '-'}): best sequential direct read "
            f"{fmt.rate(seq, '-')} ({which})"
        )
        replay = ", ".join(
            f"{k} {fmt.rate(v.as_num(), '-')}"
            for k, v in fio["replay_bytes_per_s"].as_items()
            if v.as_num() is not None
        )
        lines.append(f"fio replay of each layout's exact reads: {replay or '-'}")
    else:
        reason = (doc["provenance"].get("fio") or Node({}, "", "")).get("reason")
        lines.append(f"fio: not run ({reason.as_str() if reason else 'not available'})")
    lines += comparison_sentences(doc)
    parts.append(bullet_list(lines))
    return "".join(parts)


# --- replay and recommend -------------------------------------------------------------------


def _policies_at(doc: Node) -> list[tuple[float, list[tuple[str, Node]]]]:
    return [(r["rate"].need_num(), r["policies"].as_items()) for r in doc["rates"]]


def _sub(node: Node, *keys: str) -> float | None:
    """A nested number that may be absent (a key the issue lists but a document leaves out)."""
    for k in keys:
        nxt = node.get(k)
        if nxt is None:
            return None
        node = nxt
    return node.as_num()


def rates_table(doc: Node, table_id: str) -> str:
    rows: list[list[CellLike]] = []
    for rate, policies in _policies_at(doc):
        for name, p in policies:
            hit = _sub(p, "gpu_hit_share")
            cells: list[CellLike] = [Cell(fmt.per_s(rate), rate), name, Cell(fmt.share(hit), hit)]
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
                v = _sub(p, *keys)
                cells.append(Cell(render(v), v))
            rows.append(cells)
    return table(
        [
            "rate",
            "policy",
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
    out: dict[str, tuple[list[float], list[float]]] = {}
    for rate, policies in _policies_at(doc):
        for name, p in policies:
            v = _sub(p, *keys)
            if v is not None:
                xs, ys = out.setdefault(name, ([], []))
                xs.append(rate)
                ys.append(v)
    return out


def rate_charts(doc: Node, prefix: str) -> str:
    """Hit share, TTFT p50/p99 and SSD bytes against rate, one series per policy."""
    rate_axis = svg.Axis("offered load (requests/s)", fmt=lambda v: f"{v:g}")
    ideal = doc["ideal_hit_share"].as_num()
    hits = _per_policy(doc, "gpu_hit_share")
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
            "Reused blocks delivered to GPU memory before prefill, over all block accesses.",
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


def hardware_table(doc: Node) -> str:
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
        cell: CellLike = Cell(fmt.number(value), value) if number else json.dumps(value)
        rows.append([name, cell, str(source)])
    return "<h3>Hardware</h3>" + table(
        ["figure", "value", "source"], rows, table_id="hardware-table"
    )


def replay_section(inp: Input) -> str:
    doc = inp.doc
    ideal = doc["ideal_hit_share"].as_num()
    return (
        para(f"Ideal hit share (analyze's reuse access share): {fmt.share(ideal)}")
        + rate_charts(doc, "replay")
        + '<h3 id="replay-rates">Policies by rate</h3>'
        + rates_table(doc, "replay-table")
        + hardware_table(doc)
    )


def _tokens(v: float | None) -> str:
    return fmt.number(v) + " tokens" if v is not None else fmt.NA


def recommendation_section(inp: Input) -> str:
    doc = inp.doc
    rec = doc["recommendation"]
    short, agent = rec["short_reply_tokens"].as_num(), rec["agent_context_tokens"].as_num()
    rate = rec["rate"].need_num()
    hit, mean, p99 = (
        rec["gpu_hit_share"].as_num(),
        _sub(rec, "ttft_s", "mean"),
        _sub(rec, "ttft_s", "p99"),
    )
    parts = [
        kv_table(
            [
                ("short-reply threshold", Cell(_tokens(short), short)),
                ("agent-context threshold", Cell(_tokens(agent), agent)),
                ("target rate", Cell(fmt.per_s(rate), rate)),
                ("GPU hit share", Cell(fmt.share(hit), hit)),
                ("TTFT mean", Cell(fmt.seconds(mean), mean)),
                ("TTFT p99", Cell(fmt.seconds(p99), p99)),
            ],
            table_id="recommendation-table",
        )
    ]
    grid = [g for g in doc["grid"] if g["rate"].need_num() == rate]
    shorts = sorted({g["short_reply_tokens"].need_num() for g in grid})
    agents = sorted({g["agent_context_tokens"].need_num() for g in grid})
    if grid:
        mark = (
            (shorts.index(short), agents.index(agent))
            if short in shorts and agent in agents
            else None
        )
        maps = []
        for name, title, keys, render in (
            (
                "grid-hit-share",
                "GPU hit share over the threshold grid",
                ("gpu_hit_share",),
                fmt.share,
            ),
            ("grid-ttft-p99", "p99 TTFT over the threshold grid", ("ttft_s", "p99"), fmt.seconds),
        ):
            cells = {}
            for g in grid:
                v = _sub(g, *keys)
                if v is not None:
                    key = (
                        shorts.index(g["short_reply_tokens"].need_num()),
                        agents.index(g["agent_context_tokens"].need_num()),
                    )
                    cells[key] = v
            maps.append(
                figure(
                    svg.heat_map(
                        name,
                        title,
                        [fmt.number(s) for s in shorts],
                        [fmt.number(a) for a in agents],
                        cells,
                        "short-reply threshold (tokens)",
                        "agent-context threshold (tokens)",
                        render,
                        mark,
                    ),
                    f"{title} at {fmt.per_s(rate)} (flat policy); the outlined cell is the "
                    "recommendation.",
                )
            )
        parts.append('<div class="charts">' + "".join(maps) + "</div>")
    mis = doc.get("misplacement")
    if mis is not None:
        rows: list[list[CellLike]] = [
            [
                "recommended (as is)",
                Cell(fmt.share(hit), hit),
                Cell(fmt.seconds(mean), mean),
                Cell(fmt.seconds(p99), p99),
                "",
            ]
        ]
        for m in mis:
            h, mn, q, b = (
                _sub(m, "gpu_hit_share"),
                _sub(m, "ttft_s", "mean"),
                _sub(m, "ttft_s", "p99"),
                _sub(m, "ssd_read_bytes"),
            )
            rows.append(
                [
                    m["change"].as_str(),
                    Cell(fmt.share(h), h),
                    Cell(fmt.seconds(mn), mn),
                    Cell(fmt.seconds(q), q),
                    Cell(fmt.size(b), b),
                ]
            )
        parts.append('<h3 id="misplacement">Misplacement cost</h3>')
        parts.append(
            table(
                ["change", "GPU hit share", "TTFT mean", "TTFT p99", "SSD read"],
                rows,
                table_id="misplacement-table",
                caption="The recommended pair with one threshold halved or doubled, or every "
                "short chat forced to SSD / every session to memory, as the document gives them.",
            )
        )
    parts.append('<h3 id="baselines">Baselines at every rate</h3>')
    parts.append(rate_charts(doc, "recommend"))
    parts.append(rates_table(doc, "recommend-rates-table"))
    parts.append(hardware_table(doc))
    return "".join(parts)


# --- the decision paragraph -----------------------------------------------------------------


def _policy(doc: Node, rate: float, name: str) -> Node | None:
    for r, policies in _policies_at(doc):
        if r == rate:
            return next((p for n, p in policies if n == name), None)
    return None


def _load(point: Node) -> str:
    rate = point.get("rate")
    if rate is not None:
        return f"{fmt.per_s(rate.as_num())} offered"
    return f"{point['concurrency'].as_int():,} sessions active"


def replay_decision(rep: Input) -> str:
    """The decision sentence from replay: at the operating point when the document has one, else
    across the loads replayed at the node's sizes (docs/report.md, "The decision")."""
    doc = rep.doc
    if rep.schema_version < 2:  # before the decision existed: the shares at the highest rate
        rates = _policies_at(doc)
        if not rates:
            return ""
        rate, policies = max(rates, key=lambda t: t[0])
        shown = [
            f"{escape(n)} {link(fmt.share(_sub(p, 'gpu_hit_share')), 'replay-rates')} "
            f"(p99 TTFT {link(fmt.seconds(_sub(p, 'ttft_s', 'p99')), 'replay-rates')})"
            for n, p in policies
        ]
        ideal = doc["ideal_hit_share"].as_num()
        return (
            f"At {link(fmt.per_s(rate), 'replay-rates')}, the highest rate replayed, GPU hit "
            f"shares are {', '.join(shown)}, against the ideal {link(fmt.share(ideal), 'replay')}."
        )
    op = doc.get("operating_point")
    if op is not None:
        d = op["decision"]
        got = [_sub(p, "achieved_rate", "central") for _n, p in op["policies"].as_items()]
        served = [g for g in got if g is not None]
        at = _load(op) + (f", {fmt.per_s(min(served))} served" if served else "")
        return (
            f"At your operating point ({link(at, 'replay-rates')}) the layout to choose is "
            f"<strong>{escape(d['best'].as_str())}</strong>: {escape(d['why'].as_str())}."
        )
    points = doc["rates"].as_list() if doc.get("rates") is not None else []
    divergence = doc.get("divergence") or None
    first_sizes = divergence.as_list()[0].get("sizes") if divergence is not None else None
    if first_sizes is not None:
        base = first_sizes.value
        points = [p for p in points if p.get("sizes") is None or p["sizes"].value == base]
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
    decides = rep if rep is not None and rep.schema_version >= 2 else None
    if rep is not None:
        text = replay_decision(rep)
        if text:
            sentences.append(trace_of(rep) + text)
    if a is not None:
        v = a.doc["verdict"]
        layout = v["layout"].as_str()
        # With a replay the decision is the replay's; analyze's figures stay, its load-free
        # verdict does not (two verdicts could contradict each other).
        text = "Without load, the trace has" if decides else f"Verdict {link(layout, 'verdict')}"
        clauses = []
        for c in v["checks"]:
            name, value = c["name"].as_str(), c["value"].as_num()
            if name == "session_kv_p90_bytes":
                rule = (
                    ""
                    if decides
                    else f" (flat at {escape(fmt.size_2dp(c['threshold'].as_num()))} or more)"
                )
                clauses.append(f"p90 session KV {link(fmt.size(value), 'sessions')}{rule}")
            elif name == "share_of_ideal":
                ref = v["reference_capacity_bytes"].as_num()
                clauses.append(
                    f"a {link(fmt.size(ref), 'memory-tier')} memory tier serves "
                    f"{link(fmt.share(value), 'memory-tier')} of the ideal hit share "
                    f"{link(fmt.share(a.doc['reuse_access_share'].as_num()), 'block-reuse')}"
                )
        if decides is None or clauses:
            joiner = ": " if decides is None else " "
            sentences.append(
                trace_of(a) + text + (joiner + "; ".join(clauses) if clauses else "") + "."
            )
    rec = inputs.get("recommend-thresholds")
    if rec is not None:
        r = rec.doc["recommendation"]
        rate = r["rate"].need_num()
        text = (
            f"Recommended thresholds: short reply "
            f"{link(_tokens(r['short_reply_tokens'].as_num()), 'recommendation-table')}, agent "
            f"context {link(_tokens(r['agent_context_tokens'].as_num()), 'recommendation-table')}"
            f"; at {link(fmt.per_s(rate), 'recommendation-table')} they deliver a GPU hit share "
            f"of {link(fmt.share(r['gpu_hit_share'].as_num()), 'recommendation-table')}"
        )
        tiered = _policy(rec.doc, rate, "tiered")
        if tiered is not None:
            text += (
                f" against {link(fmt.share(_sub(tiered, 'gpu_hit_share')), 'baselines')} for "
                f"tiered, p99 TTFT "
                f"{link(fmt.seconds(_sub(r, 'ttft_s', 'p99')), 'recommendation-table')}"
                f" against {link(fmt.seconds(_sub(tiered, 'ttft_s', 'p99')), 'baselines')}"
            )
        matters = r.get("matters")
        if matters is not None and not matters.as_bool():
            text += " (the thresholds do not matter here: every pair is within the margins)"
        sentences.append(trace_of(rec) + text + ".")
    io = inputs.get("iobench")
    if io is not None:
        flat = io.doc["layouts"].get("flat")
        runs = flat.as_list() if flat is not None else []
        fio = io.doc["fio"]
        seq = fio["seq_read_bytes_per_s"].as_num() if fio["available"].as_bool() else None
        if runs:
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
            sentences.append(text + ".")
    return '<p class="decision">' + " ".join(sentences) + "</p>"


# --- provenance -----------------------------------------------------------------------------

_PROVENANCE_ROWS = (
    ("fcctl", "fcctl_version"),
    ("Python", "python"),
    ("numpy", "numpy"),
    ("polars", "polars"),
    ("numba", "numba"),
    ("torch", "torch"),
    ("kvikio", "kvikio"),
    ("CUDA runtime", "cuda_runtime"),
    ("CUDA driver", "cuda_driver"),
    ("host", "host"),
    ("platform", "platform"),
    ("started (UTC)", "started_utc"),
    ("finished (UTC)", "finished_utc"),
)


def provenance_section(inputs: dict[str, Input], generated_utc: str) -> str:
    order = [
        inputs[c] for c in ("analyze", "iobench", "replay", "recommend-thresholds") if c in inputs
    ]
    rows: list[list[CellLike]] = [["input", *(i.shown for i in order)]]
    rows.append(["schema_version", *(str(i.schema_version) for i in order)])
    for label, key in _PROVENANCE_ROWS:
        rows.append([label, *(_prov_text(i.doc, key) for i in order)])
    rows.append(["argv", *(_argv_text(i.doc) for i in order)])
    known = {k for _l, k in _PROVENANCE_ROWS} | {"argv"}
    extras = []
    for i in order:
        extra = {k: v for k, v in i.doc["provenance"].value.items() if k not in known}
        if extra:
            extras.append(
                f"<details><summary>fcctl {escape(i.command)}: every other provenance field"
                f"</summary><pre>{escape(json.dumps(extra, indent=2))}</pre></details>"
            )
    return (
        table(
            ["", *(f"fcctl {i.command}" for i in order)],
            rows,
            table_id="provenance-table",
            sortable=False,
        )
        + "".join(extras)
        + para(f"This page: fcctl {fcctl_version()} report, made {generated_utc}.")
    )


def _argv_text(doc: Node) -> str:
    argv = doc["provenance"].get("argv")
    return "-" if argv is None else " ".join(a.as_str() for a in argv)


def _prov_text(doc: Node, key: str) -> str:
    v = doc["provenance"].get(key)
    return "-" if v is None else str(v.value)


# --- the page -------------------------------------------------------------------------------

_CSS = """
:root{--fg:#1b1b1b;--muted:#555;--line:#d6d6d6;--accent:#0072b2}
*{box-sizing:border-box}
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
margin:0 auto;max-width:1100px;padding:16px 24px}
h1{font-size:1.6em;margin:.2em 0}h2{border-bottom:2px solid var(--line);padding-bottom:.2em;
margin-top:1.6em}h3{margin-top:1.3em}
nav{font-size:.92em;margin:.4em 0 1em}nav a{margin-right:1em}
a{color:var(--accent)}
.decision{font-size:1.08em;background:#f3f7fb;border-left:4px solid var(--accent);
padding:.7em 1em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.92em}
th,td{border-bottom:1px solid var(--line);padding:.25em .6em;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts th{font-weight:600;white-space:nowrap}
caption{caption-side:bottom;text-align:left;color:var(--muted);font-size:.9em;padding-top:.3em}
th button{font:inherit;font-weight:600;background:none;border:0;padding:0;cursor:pointer;
color:inherit;text-align:left}
th[aria-sort=ascending] button::after{content:" \\25B2"}
th[aria-sort=descending] button::after{content:" \\25BC"}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;flex:1 1 420px;max-width:660px}
figcaption{color:var(--muted);font-size:.88em}
svg.chart{width:100%;height:auto;display:block}
svg.chart .axis-label{font-size:12px}
pre{white-space:pre-wrap;font-size:.85em;background:#f6f6f6;padding:.6em}
footer{color:var(--muted);font-size:.85em;margin-top:2em}
@media (max-width:640px){body{padding:8px 10px;font-size:14px}figure{flex-basis:100%}
nav a{display:inline-block}}
@media print{body{max-width:none;padding:0;font-size:10.5pt}nav,th button::after{display:none}
a{color:inherit;text-decoration:none}.decision{background:none}
.scroll{overflow:visible}figure,table,svg.chart{break-inside:avoid}h2,h3{break-after:avoid}
figure{flex-basis:45%}details{display:block}details>pre{display:block}}
"""

# Sorts a table by the clicked column: numbers by the cell's data-v (the raw JSON value, so
# "1.00 GiB" sorts above "512 MiB"), other cells as text; a second click reverses.
_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.querySelectorAll("thead th");
  heads.forEach(function (th, col) {
    th.querySelector("button").addEventListener("click", function () {
      var down = th.getAttribute("aria-sort") === "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col];
        if (!cell) { return ""; }
        var v = cell.getAttribute("data-v");
        return v === null ? cell.textContent : parseFloat(v);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), r;
        if (typeof x === "number" && typeof y === "number") { r = x - y; }
        else { r = String(x).localeCompare(String(y)); }
        return down ? -r : r;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _default_title(inputs: dict[str, Input]) -> str:
    for c in ("analyze", "replay", "recommend-thresholds"):
        if c in inputs and "trace" in inputs[c].doc:
            path = inputs[c].doc["trace"]["path"].as_str()
            return f"fcctl report: {Path(path).name}"
    return "fcctl report"


def build_page(
    inputs: dict[str, Input],
    *,
    title: str | None = None,
    generated_utc: str | None = None,
    mixed: bool = False,
) -> str:
    """The whole page as one string; ``mixed``: the inputs come from different traces (each
    section then says which)."""
    generated_utc = generated_utc or utc_now()
    title = title or _default_title(inputs)
    bodies: dict[str, str] = {
        "decision": decision(inputs, mixed=mixed),
        "trace": trace_section(inputs),
    }
    if "analyze" in inputs:
        bodies["reuse"] = reuse_section(inputs["analyze"])
    if "iobench" in inputs:
        bodies["storage"] = storage_section(inputs["iobench"])
    if "replay" in inputs:
        bodies["replay"] = replay_section(inputs["replay"])
    if "recommend-thresholds" in inputs:
        bodies["recommendation"] = recommendation_section(inputs["recommend-thresholds"])
    bodies["provenance"] = provenance_section(inputs, generated_utc)
    if mixed:
        owner = {"reuse": "analyze", "storage": "iobench", "replay": "replay",
                 "recommendation": "recommend-thresholds"}  # fmt: skip
        for section, command in owner.items():
            inp = inputs.get(command)
            if bodies.get(section) and inp is not None:
                trace = escape(inp.trace_path or "(no trace)")
                bodies[section] = para(f"Trace of this section: {trace}.") + bodies[section]
    present = [s for s in SECTIONS if bodies.get(s)]
    nav = "".join(f'<a href="#{s}">{escape(SECTION_TITLES[s])}</a>' for s in present)
    sections = "".join(
        f'<section id="{s}"><h2>{escape(SECTION_TITLES[s])}</h2>{bodies[s]}</section>'
        for s in present
    )
    # Nothing may be fetched: no default source, and the one style and script by hash.
    csp = (
        f"default-src 'none'; style-src {_csp_hash(_CSS)}; script-src {_csp_hash(_SCRIPT)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="fcctl {escape(fcctl_version())}">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{escape(title)}</h1><nav>{nav}</nav></header><main>{sections}</main>"
        f"<footer>Made by fcctl {escape(fcctl_version())} report at {escape(generated_utc)} from "
        f"{len(inputs)} input{'s' if len(inputs) != 1 else ''}. Self-contained: nothing is "
        f"fetched when this page is opened.</footer><script>{_SCRIPT}</script></body></html>\n"
    )


# --- writing --------------------------------------------------------------------------------


class ReportOutputError(FcctlInputError):
    """An ``-o`` path that cannot be used."""


def check_output(out: Path, *, force: bool) -> None:
    """Refuse, before reading any input, an ``-o`` that could not be written."""
    shown = display_path(out)
    if out.is_dir():
        raise ReportOutputError(f"-o {shown}: is a directory")
    if out.exists() and not force:
        raise ReportOutputError(f"-o {shown}: exists (pass --force to replace it)")
    if out.exists() and not out.is_file():
        raise ReportOutputError(f"-o {shown}: exists and is not a regular file")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise ReportOutputError(f"-o {shown}: directory {display_path(parent)} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ReportOutputError(f"-o {shown}: cannot create files in {display_path(parent)}")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_not_an_input(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an ``-o`` that is one of the inputs, or lies inside an input directory.

    Compared by resolved path and by device and inode, so a link or another spelling of an
    input is caught too: ``--force`` replaces an earlier page, never what the page is made of.
    """
    shown = display_path(out)
    page = out.resolve()
    page_id = _identity(out)
    parent_id = _identity(out.absolute().parent)
    for given in inputs:
        where = display_path(given)
        if given.is_dir():
            inside = (
                page.is_relative_to(given.resolve())
                or (parent_id is not None and parent_id == _identity(given))
                or (page_id is not None and any(_identity(f) == page_id for f in given.iterdir()))
            )
            if inside:
                raise ReportOutputError(
                    f"-o {shown}: is inside the input directory {where}; choose a page outside it"
                )
        elif page == given.resolve() or (page_id is not None and page_id == _identity(given)):
            raise ReportOutputError(f"-o {shown}: is the input {where}; choose another file")


def write_page(html: str, out: Path) -> None:
    """A temporary sibling, then a rename: a reader never sees half a page."""
    write_text_atomic(out, html, flag="-o")


@dataclass(frozen=True)
class ReportSummary:
    """What was written: the page, its size, the sections and the inputs recognised."""

    out: Path
    bytes: int
    sections: tuple[str, ...]
    inputs: tuple[tuple[str, str], ...]  # (command, file as shown)


def make_report(
    paths: Sequence[Path],
    out: Path,
    *,
    title: str | None = None,
    force: bool = False,
    allow_mixed: bool = False,
) -> ReportSummary:
    """Read every input, build the page and write it to ``out``; nothing is written on error."""
    out = Path(out)
    check_output(out, force=force)
    check_not_an_input(out, [Path(p) for p in paths])
    inputs = read_inputs([Path(p) for p in paths])
    mixed = check_same_trace(inputs, allow_mixed=allow_mixed)
    html = build_page(inputs, title=title, mixed=mixed)
    write_page(html, out)
    present = tuple(s for s in SECTIONS if f'<section id="{s}">' in html)
    return ReportSummary(
        out, len(html.encode()), present, tuple((c, i.shown) for c, i in inputs.items())
    )
