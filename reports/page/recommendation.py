"""The report page's Recommendation section, from fcctl recommend-thresholds: the thresholds,
heat maps over the grid, the misplacement cost and the baselines at every rate."""

from __future__ import annotations

from .. import format as fmt
from .. import svg
from ..report_inputs import Input, Node
from .elements import Cell, CellLike, figure, kv_table, para, table
from .replay import hardware_table, number_at, rate_charts, rates_table


def tokens(v: float | None) -> str:
    return fmt.number(v) + " tokens" if v is not None else fmt.NA


def recommendation_section(inp: Input, *, replay: Input | None = None) -> str:
    """The section; ``replay``, the page's replay input: when it ran on the same hardware, its
    table (in the Replay section) stands for this one, which is not printed twice."""
    doc = inp.doc
    rec = doc["recommendation"]
    short, agent = rec["short_reply_tokens"].as_num(), rec["agent_context_tokens"].as_num()
    rate = rec["rate"].need_num()
    hit, mean, p99 = (
        rec["gpu_hit_share"].as_num(),
        number_at(rec, "ttft_s", "mean"),
        number_at(rec, "ttft_s", "p99"),
    )
    parts = [
        kv_table(
            [
                ("short-reply threshold", Cell(tokens(short), short)),
                ("agent-context threshold", Cell(tokens(agent), agent)),
                ("target rate", Cell(fmt.per_s(rate), rate)),
                ("GPU hit share", Cell(fmt.share(hit), hit)),
                ("TTFT mean", Cell(fmt.seconds(mean), mean)),
                ("TTFT p99", Cell(fmt.seconds(p99), p99)),
            ],
            table_id="recommendation-table",
        )
    ]
    parts += _heat_maps(doc, rate, short, agent)
    mis = doc.get("misplacement")
    if mis is not None:
        parts += _misplacement(mis, hit, mean, p99)
    parts.append('<h3 id="baselines">Baselines at every rate</h3>')
    parts.append(rate_charts(doc, "recommend"))
    parts.append(rates_table(doc, "recommend-rates-table"))
    shown = replay.doc.get("hardware") if replay is not None else None
    hardware = doc.get("hardware")
    if hardware is not None and shown is not None and hardware.value == shown.value:
        parts.append(para("Hardware: the same node as the replay's (its table, above)."))
    else:
        parts.append(
            hardware_table(
                doc,
                table_id="recommend-hardware-table",
                heading="Hardware (recommend-thresholds)" if shown is not None else "Hardware",
            )
        )
    return "".join(parts)


def _heat_maps(doc: Node, rate: float, short: float | None, agent: float | None) -> list[str]:
    """GPU hit share and p99 TTFT over the threshold grid at ``rate``, the recommended pair
    outlined (none without a grid at that rate)."""
    grid = [g for g in doc["grid"] if g["rate"].need_num() == rate]
    shorts = sorted({g["short_reply_tokens"].need_num() for g in grid})
    agents = sorted({g["agent_context_tokens"].need_num() for g in grid})
    if not grid:
        return []
    mark = (
        (shorts.index(short), agents.index(agent)) if short in shorts and agent in agents else None
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
            v = number_at(g, *keys)
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
    return ['<div class="charts">' + "".join(maps) + "</div>"]


def _misplacement(mis: Node, hit: float | None, mean: float | None, p99: float | None) -> list[str]:
    """The recommended pair as is (``hit``, ``mean``, ``p99``) against each change of it."""
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
            number_at(m, "gpu_hit_share"),
            number_at(m, "ttft_s", "mean"),
            number_at(m, "ttft_s", "p99"),
            number_at(m, "ssd_read_bytes"),
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
    return [
        '<h3 id="misplacement">Misplacement cost</h3>',
        table(
            ["change", "GPU hit share", "TTFT mean", "TTFT p99", "SSD read"],
            rows,
            table_id="misplacement-table",
            caption="The recommended pair with one threshold halved or doubled, or every "
            "short chat forced to SSD / every session to memory, as the document gives them.",
        ),
    ]
