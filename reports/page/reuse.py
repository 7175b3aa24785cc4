"""The report page's Reuse section, from fcctl analyze: block reuse, reuse distances,
sessions, the memory tier, request sizes and the verdict, with their charts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from .. import format as fmt
from .. import svg
from ..report_inputs import Input, Node
from .elements import (
    Cell,
    CellLike,
    bullet_list,
    figure,
    out_table,
    para,
    table,
    thin,
)


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


#: The caption of a CDF drawn from the document's percentiles. The tables of the whole CDF are
#: written by ``fcctl analyze --out`` only (``fcctl plan`` and a bare ``--json`` keep the
#: document alone), so the caption names that command and its option, whatever wrote the input.
PERCENTILES_ONLY = (
    "p50, p90 and p99 from the JSON document only; the whole CDF needs the tables that "
    "fcctl analyze TRACE --out DIR writes (give that DIR to fcctl report)"
)

_DISTANCES = (
    ("requests", "requests", "reuse distance (requests)", svg.tick, 10),
    ("seconds", "seconds", "reuse distance (seconds)", svg.tick, 10),
    ("stack_bytes", "LRU stack (bytes)", "LRU stack distance (bytes of KV)", fmt.size, 2),
)


def _distance_chart(inp: Input, metric: str, label: str, render: Callable, base: int) -> str:
    """CDF of one reuse distance: the histogram's bucket edges from ``--out``, else p50/p90/p99."""
    hist = out_table(inp, "histograms.parquet")
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
        f"{title}: {PERCENTILES_ONLY}.",
    )


def _session_chart(inp: Input) -> str:
    sess = out_table(inp, "sessions.parquet")
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
        note = PERCENTILES_ONLY
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
    curve = out_table(inp, "memory_tier_curve.parquet")
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


def sampling_legend(sampling: Node) -> str:
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
            f'<p id="sampling-legend" class="note">{escape(sampling_legend(sampling))}</p>'
        )
    if doc["reuse_access_share"].is_null():
        parts.append(
            para(
                "Reuse cannot be measured: this trace has no block hashes. Only request sizes "
                "and arrival rate are reported."
            )
        )
    else:
        parts += _block_reuse(inp, mark)
    s = doc.get("sessions")
    if s is not None:
        parts += _sessions(inp, s)
    if not doc["reuse_access_share"].is_null():
        parts += _memory_tier(inp)
    rs = doc.get("request_sizes")
    if rs is not None:
        parts += _request_sizes(rs)
    parts += _verdict(doc)
    return "".join(parts)


def _block_reuse(inp: Input, mark: str) -> list[str]:
    """The reuse shares, the reuse distances (``mark`` on the sampled rows) and their charts."""
    doc = inp.doc
    parts = []
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
    return parts


def _sessions(inp: Input, s: Node) -> list[str]:
    """The per-session figures (``s``, the document's ``sessions``) and their CDF."""
    rows: list[list[CellLike]] = []
    for label, key in (
        ("KV, distinct blocks", "kv_bytes"),
        ("KV, largest context", "max_context_bytes"),
    ):
        rows += _percentile_rows([(label, s[key], fmt.size)], ("p50", "p90", "p99", "max", "mean"))
    for label, key in (("turns", "turns"), ("largest input, tokens", "max_input_tokens")):
        rows += _percentile_rows(
            [(label, s[key], fmt.number)], ("p50", "p90", "p99", "max", "mean")
        )
    return [
        '<h3 id="sessions">Sessions</h3>',
        table(
            ["metric", "p50", "p90", "p99", "max", "mean"],
            rows,
            table_id="sessions-table",
            caption="KV, distinct blocks: every block the session references (session KV); "
            "KV, largest context: its largest request, what one restore reads.",
        ),
        _session_chart(inp),
    ]


def _memory_tier(inp: Input) -> list[str]:
    """The memory-tier points (sampled ones marked) and the hit curve."""
    rows: list[list[CellLike]] = []
    for p in inp.doc["memory_tier"]:
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
    return [
        '<h3 id="memory-tier">Memory tier (LRU in front of SSD)</h3>',
        table(
            ["capacity", "blocks", "LRU hit share", "share of ideal", "reuse from SSD"],
            rows,
            table_id="memory-tier-table",
        ),
        _tier_chart(inp),
    ]


def _request_sizes(rs: Node) -> list[str]:
    """The request sizes (``rs``, the document's ``request_sizes``) and the arrival rate."""
    parts = [
        '<h3 id="request-sizes">Request sizes</h3>',
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
        ),
    ]
    rate = rs["arrival_rate_per_s"].as_num()
    if rate is not None:
        parts.append(para(f"arrival rate: {fmt.per_s(rate)}"))
    return parts


def _verdict(doc: Node) -> list[str]:
    """analyze's verdict, its reasons and the notes."""
    v = doc["verdict"]
    layout = v["layout"].as_str()
    ref = v.get("reference_capacity_bytes")
    # The size the verdict holds at is in its heading, and the sentence under it says why a
    # replay's decision on the same page may differ: never a bare verdict that contradicts it
    # (issue #33, item 5).
    size = None if ref is None or ref.is_null() else fmt.size(ref.as_num())
    at = "" if size is None else f" at a {size} memory tier"
    parts = [
        f'<h3 id="verdict">Load-free verdict{escape(at)}: {escape(layout.upper())}</h3>',
        para(
            "Judged from the trace's reuse alone, without load"
            + (f", for a memory tier of {size}" if size else "")
            + ". Where this page also holds a replay, its decision (the first paragraph), "
            "measured under load on the simulated node, is the one to follow; the two can "
            "differ, since queueing, staging and the GPU pool are only in the replay."
        ),
        bullet_list([r.as_str() for r in v["reasons"]]),
    ]
    notes = [n.as_str() for n in doc["notes"]] if "notes" in doc else []
    if notes:
        parts.append("<h4>Notes</h4>" + bullet_list(notes))
    return parts
