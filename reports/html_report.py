"""``fcctl report``: one self-contained HTML page from the outputs of fcctl's commands.

The page is one file: inline CSS, inline SVG charts (:mod:`fcctl.reports.svg`), a few lines of
inline script that sort tables, and a Content-Security-Policy that allows nothing to be fetched,
so the page opened from a mail attachment or offline makes no request at all. Every figure is a
value of an input document (or its ``--out`` Parquet tables) written by
:mod:`fcctl.reports.format`, the functions the terminal summaries use, so page and terminal
agree digit for digit. Sections for commands without an input are left out. The inputs are
read by :mod:`fcctl.reports.report_inputs`; the page is written atomically.

The page is built by the modules of :mod:`fcctl.reports.page`: the shell (the sections in
order, CSS, script, CSP, writing) in :mod:`~fcctl.reports.page.shell`, the HTML builders in
:mod:`~fcctl.reports.page.elements`, and one module per section. This module names their
public names, which the CLI, the API and the tests import from here.
"""

from __future__ import annotations

from .page.decision import decision, replay_decision
from .page.elements import (
    MAX_CURVE_POINTS,
    PARQUET_COLUMNS,
    TEXT,
    Cell,
    CellLike,
    bullet_list,
    figure,
    kv_table,
    link,
    out_table,
    para,
    table,
    thin,
)
from .page.provenance import provenance_section
from .page.recommendation import recommendation_section, tokens
from .page.replay import (
    hardware_table,
    number_at,
    policies_at,
    rate_charts,
    rates_table,
    replay_section,
)
from .page.reuse import reuse_section, sampling_legend
from .page.shell import (
    SECTION_TITLES,
    SECTIONS,
    ReportOutputError,
    ReportSummary,
    build_page,
    check_not_an_input,
    check_output,
    make_report,
    write_page,
)
from .page.storage import comparison_sentences, storage_section
from .page.trace import trace_section

__all__ = [
    "MAX_CURVE_POINTS",
    "PARQUET_COLUMNS",
    "SECTIONS",
    "SECTION_TITLES",
    "TEXT",
    "Cell",
    "CellLike",
    "ReportOutputError",
    "ReportSummary",
    "build_page",
    "bullet_list",
    "check_not_an_input",
    "check_output",
    "comparison_sentences",
    "decision",
    "figure",
    "hardware_table",
    "kv_table",
    "link",
    "make_report",
    "number_at",
    "out_table",
    "para",
    "policies_at",
    "provenance_section",
    "rate_charts",
    "rates_table",
    "recommendation_section",
    "replay_decision",
    "replay_section",
    "reuse_section",
    "sampling_legend",
    "storage_section",
    "table",
    "thin",
    "tokens",
    "trace_section",
    "write_page",
]
