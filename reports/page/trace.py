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


def _described(doc: Node, t: Node, kv: Node | None) -> list[tuple[str, CellLike]]:
    """The rows of a trace summary that analyze and replay state (sizes, schedule, model)."""
    sessions = fmt.count(t["sessions"].as_int())
    if t["sessions_inferred"].as_bool():
        sessions += " (INFERRED from prefix chains)"
    block = t["block_size_tokens"].as_int()
    schedule = t.get("schedule")
    per_session = schedule is not None and schedule["kind"].as_str() in ("sequential",)
    rows: list[tuple[str, CellLike]] = [
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
    rows.append(_counting(doc, t))
    return rows


def _counting(doc: Node, t: Node) -> tuple[str, CellLike]:
    """How the figures were counted: every access, a SHARDS sample of the stack distances
    (analyze's ``trace.sampling``), or every access of sampled sessions (replay's and
    recommend's ``sampling``, issue #19, which states no SHARDS error bound)."""
    sessions = doc.get("sampling")
    if sessions is not None and sessions.get("method") is not None:
        kept, total = sessions["sessions"]["kept"].as_int(), sessions["sessions"]["total"].as_int()
        requests = sessions["requests"]
        return (
            "counting",
            f"sampled sessions (--sample-sessions {sessions['sample_sessions'].need_num():g}, "
            f"by the hash of their id): {fmt.count(kept)} of {fmt.count(total)} sessions, "
            f"{fmt.count(requests['kept'].as_int())} of {fmt.count(requests['total'].as_int())} "
            "requests; every block access of those counted",
        )
    shards = t.get("sampling")
    if shards is not None:
        return ("counting", sampling_legend(shards))
    return ("counting", "exact: every block access counted")


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
    rows: list[tuple[str, CellLike]] = [
        ("trace", t["path"].as_str()),
        ("format", t["format"].as_str()),
    ]
    conv = t.get("converted_from")
    if conv is not None:
        rows.append(("converted from", f"{conv['path'].as_str()} ({conv['format'].as_str()})"))
    if "sessions" not in t:
        # recommend-thresholds states only the trace's identity (path, format, requests).
        rows.append(("requests", Cell(fmt.count(t["requests"].as_int()), 0)))
        rows.append(_counting(first.doc, t))
    else:
        rows += _described(first.doc, t, kv)
    rows.append(("read by", f"fcctl {first.command} ({first.shown})"))
    others = [
        (f"trace read by {c}", inputs[c].doc["trace"]["path"].as_str())
        for c in ("replay", "recommend-thresholds")
        if c in inputs and inputs[c] is not first and "trace" in inputs[c].doc
    ]
    return kv_table([*rows, *others], table_id="trace-table")
