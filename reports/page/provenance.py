"""The report page's Provenance section: one column per input, what made each document."""

from __future__ import annotations

import json
from html import escape

from fcctl.common.version import fcctl_version

from ..report_inputs import Input, Node
from .elements import CellLike, para, table

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
