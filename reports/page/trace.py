"""The report page's Trace section: what was read, from the first document that names it."""

from __future__ import annotations

import dataclasses

from .. import format as fmt
from ..report_inputs import Input, Node, ReportInputError
from .elements import Cell, CellLike, kv_table
from .reuse import sampling_legend


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
            "exact: every block access counted" if sampling is None else sampling_legend(sampling),
        )
    )
    rows.append(("read by", f"fcctl {first.command} ({first.shown})"))
    others = [
        (f"trace read by {c}", inputs[c].doc["trace"]["path"].as_str())
        for c in ("replay", "recommend-thresholds")
        if c in inputs and inputs[c] is not first and "trace" in inputs[c].doc
    ]
    return kv_table([*rows, *others], table_id="trace-table")
