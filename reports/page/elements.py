"""The small HTML builders every section of the report page uses, and its ``--out`` tables.

Cells and tables (numbers aligned right and sorted by their raw value), links to a section,
paragraphs, figures and lists, all escaped here; curves thinned for a chart; the Parquet tables
of an input's ``--out`` directory, read and checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from fcctl.common.paths import display_path

from ..report_inputs import Input, ReportInputError

# Curves from --out Parquet tables are thinned to this many points: enough for a 640 px chart,
# and a whole-trace hit curve (one point per distinct stack distance) stays a few KB.
MAX_CURVE_POINTS = 400


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


def out_table(inp: Input, name: str) -> Any | None:
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
