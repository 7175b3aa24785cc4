"""The report page's Monitors section: delivered hit share and failed loads against load, from a
trace the FlatCake adapters recorded (:mod:`fcctl.reports.monitors`)."""

from __future__ import annotations

from .. import format as fmt
from .. import svg
from ..monitors import Monitors
from ..report_inputs import Input
from .elements import Cell, figure, kv_table, para, table


def monitors_section(inp: Input) -> str:
    m = inp.doc["monitors"].value
    assert isinstance(m, Monitors)
    facts = kv_table(
        [
            ("recorded trace", inp.shown),
            ("engines", ", ".join(m.engines) or "not named"),
            ("requests", Cell(fmt.count(m.requests), m.requests)),
            ("with load outcomes", Cell(fmt.count(m.requests_known), m.requests_known)),
            ("duration", Cell(fmt.seconds(m.duration_s), m.duration_s)),
        ]
    )
    if not m.requests_known:
        return facts + para(
            "No request of this trace carries delivered_blocks / failed_blocks: its recorder "
            "predates the monitors, or its adapter cannot tell them."
        )
    w = m.windows
    mid = [(x.start_s + x.end_s) / 2 for x in w]
    load_axis = svg.Axis("seconds from the first request", fmt=lambda v: fmt.seconds(v))
    charts = [
        figure(
            svg.line_chart(
                "monitors-hit-share",
                "Delivered hit share and load over time",
                [svg.Series("delivered hit share", mid, [x.delivered_hit_share for x in w])],
                load_axis,
                svg.Axis("delivered hit share", fmt=fmt.share, lo=0.0, hi=1.0),
            ),
            "Blocks the loads delivered to the engine over the blocks the requests asked "
            "for, per window (the load of each window is in the table below).",
        ),
        figure(
            svg.line_chart(
                "monitors-failed",
                "Failed loads and load over time",
                [
                    svg.Series("requests per second", mid, [x.requests_per_s for x in w]),
                    svg.Series(
                        "requests with a failed load per second",
                        mid,
                        [x.requests_failed / (x.end_s - x.start_s) for x in w],
                        dashed=True,
                    ),
                ],
                load_axis,
                svg.Axis("requests per second"),
            ),
            "Load (requests per second) and the requests whose loads failed, per window.",
        ),
    ]
    rows = [
        [
            Cell(fmt.seconds(x.start_s), x.start_s),
            Cell(f"{x.requests_per_s:.2f}", x.requests_per_s),
            Cell(fmt.count(x.blocks_requested), x.blocks_requested),
            Cell(fmt.share(x.delivered_hit_share), x.delivered_hit_share),
            Cell(fmt.count(x.requests_failed), x.requests_failed),
            Cell(fmt.count(x.blocks_failed), x.blocks_failed),
        ]
        for x in w
    ]
    windows = table(
        [
            "window start",
            "requests/s",
            "blocks asked",
            "delivered hit share",
            "failed loads",
            "blocks failed",
        ],
        rows,
        table_id="monitors-windows",
    )
    return facts + "".join(charts) + windows
