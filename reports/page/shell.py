"""The report page's shell: the sections in order, the inline CSS and script, the
Content-Security-Policy, and writing the page (``fcctl report``, :func:`make_report`).

See :mod:`fcctl.reports.html_report` for what the page is.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from fcctl.common.errors import FcctlInputError
from fcctl.common.outdir import write_text_atomic
from fcctl.common.paths import display_path
from fcctl.common.provenance import utc_now
from fcctl.common.version import fcctl_version

from ..report_inputs import MONITORS, Input, check_same_trace, read_inputs
from .decision import decision
from .elements import para
from .monitors import monitors_section
from .provenance import provenance_section
from .recommendation import recommendation_section
from .replay import replay_section
from .reuse import reuse_section
from .storage import storage_section
from .trace import trace_section

#: Section ids in page order; the tests and the decision paragraph's links use them.
SECTIONS = ("decision", "trace", "reuse", "storage", "replay", "recommendation", "provenance")
#: Every section in page order: SECTIONS (from command documents) and, before the provenance,
#: the Monitors of a trace the FlatCake adapters recorded (given as an input of its own).
PAGE_SECTIONS = (*SECTIONS[:-1], "monitors", SECTIONS[-1])
SECTION_TITLES = {
    "decision": "Decision",
    "trace": "Trace",
    "reuse": "Reuse",
    "storage": "Storage (iobench)",
    "replay": "Replay",
    "recommendation": "Recommendation",
    "monitors": "Monitors (recorded trace)",
    "provenance": "Provenance",
}


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
        bodies["recommendation"] = recommendation_section(
            inputs["recommend-thresholds"], replay=inputs.get("replay")
        )
    if MONITORS in inputs:
        bodies["monitors"] = monitors_section(inputs[MONITORS])
    bodies["provenance"] = provenance_section(inputs, generated_utc)
    if mixed:
        owner = {
            "reuse": "analyze",
            "storage": "iobench",
            "replay": "replay",
            "recommendation": "recommend-thresholds",
        }
        for section, command in owner.items():
            inp = inputs.get(command)
            if bodies.get(section) and inp is not None:
                trace = escape(inp.trace_path or "(no trace)")
                bodies[section] = para(f"Trace of this section: {trace}.") + bodies[section]
    present = [s for s in PAGE_SECTIONS if bodies.get(s)]
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
    present = tuple(s for s in PAGE_SECTIONS if f'<section id="{s}">' in html)
    return ReportSummary(
        out, len(html.encode()), present, tuple((c, i.shown) for c, i in inputs.items())
    )
