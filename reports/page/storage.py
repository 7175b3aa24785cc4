"""The report page's Storage section, from fcctl iobench: the restore runs per layout and
concurrency, their charts, and fio's figures and the comparisons in iobench's own words."""

from __future__ import annotations

from collections.abc import Callable

from .. import format as fmt
from .. import svg
from ..report_inputs import Input, Node
from .elements import Cell, CellLike, bullet_list, figure, para, table


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


#: Runs by layout: each layout's runs, one per concurrency, in the document's order.
RunsByLayout = dict[str, list[Node]]


def storage_section(inp: Input) -> str:
    doc = inp.doc
    wl, engine, fio = doc["workload"], doc["engine"], doc["fio"]
    settings = doc["provenance"].get("settings")
    parts = [_workload_para(wl, engine, settings)]
    runs_table, by_layout = _runs_table(doc)
    parts.append(runs_table)
    seq = fio["seq_read_bytes_per_s"].as_num() if fio["available"].as_bool() else None
    parts.append('<div class="charts">' + "".join(_charts(by_layout, seq)) + "</div>")
    lines = _workload_lines(doc, wl, settings, by_layout)
    lines += _fio_lines(doc, fio, seq)
    lines += comparison_sentences(doc)
    parts.append(bullet_list(lines))
    return "".join(parts)


def _workload_para(wl: Node, engine: Node, settings: Node | None) -> str:
    """The workload restored and the engine that read it, in one sentence."""
    model = settings.get("model") if settings is not None else None
    model_text = f"{model.as_str()} " if model is not None else ""
    direct = "yes" if engine["o_direct"].as_bool() else "no"
    gds = ", GDS yes" if engine["gds"].as_bool() else ""
    return para(
        f"{wl['sessions'].as_int()} sessions, {model_text}({wl['layers'].as_int()} layers), "
        f"{wl['block_tokens'].as_int()}-token pages, {fmt.size_2dp(wl['bytes'].as_num())} per "
        f"layout; engine {engine['name'].as_str()} (O_DIRECT {direct}{gds})"
    )


def _runs_table(doc: Node) -> tuple[str, RunsByLayout]:
    """The table of every run (layout, concurrency), and the runs by layout."""
    repeats = _iobench_repeats(doc)
    rows: list[list[CellLike]] = []
    by_layout: RunsByLayout = {}
    for layout, runs in doc["layouts"].as_items():
        by_layout[layout] = runs.as_list()
        rows += [_run_row(layout, r, repeats) for r in runs]
    runs_table = table(
        ["layout", "conc.", "read cmds", "ampl.", "restore", "p50 s", "p99 s", "verified"],
        rows,
        table_id="storage-runs",
        caption="Cold layer-wise restore of every session; restore is bytes requested over "
        "wall time (GB/s, decimal); p50/p99 s: per-session time from its first read to its "
        "last.",
    )
    return runs_table, by_layout


def _run_row(layout: str, r: Node, repeats: int) -> list[CellLike]:
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
    return [
        layout,
        Cell(fmt.concurrency_label(conc, conc_ran or conc), conc),
        Cell(fmt.count(cmds), cmds),
        Cell(fmt.fixed3(ampl, "-"), ampl),
        Cell(fmt.rate(rate, "-"), rate),
        Cell(fmt.fixed3(p50, "-"), p50),
        Cell(fmt.fixed3(p99, "-"), p99),
        verified,
    ]


def _at(
    by_layout: RunsByLayout, layout: str, c: int, key: Callable[[Node], float | None]
) -> float | None:
    """``key`` of ``layout``'s run at concurrency ``c``, or None when it has none."""
    cell = next((r for r in by_layout[layout] if r["concurrency"].as_int() == c), None)
    return None if cell is None else key(cell)


def _charts(by_layout: RunsByLayout, seq: float | None) -> list[str]:
    """Restore rate, read commands and restore time, by layout and concurrency (none without
    runs)."""
    concs = sorted({r["concurrency"].as_int() or 0 for runs in by_layout.values() for r in runs})
    ran = [lay for lay, runs in by_layout.items() if runs]
    if not (concs and ran):
        return []
    return [
        _rate_chart(by_layout, concs, ran, seq),
        _commands_chart(by_layout, concs[0], ran),
        _latency_chart(by_layout, concs, ran),
    ]


def _rate_chart(
    by_layout: RunsByLayout, concs: list[int], ran: list[str], seq: float | None
) -> str:
    return figure(
        svg.bar_chart(
            "restore-rate",
            "Cold layer-wise restore throughput",
            [str(c) for c in concs],
            [
                (
                    lay,
                    [
                        _at(by_layout, lay, c, lambda r: r["restore_bytes_per_s"].as_num())
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


def _commands_chart(by_layout: RunsByLayout, low: int, ran: list[str]) -> str:
    return figure(
        svg.bar_chart(
            "read-commands",
            f"Read commands to restore all sessions (concurrency {low})",
            ran,
            [
                (
                    "read commands",
                    [
                        _at(by_layout, lay, low, lambda r: r["read_commands"].as_num())
                        for lay in ran
                    ],
                )
            ],
            "layout",
            svg.Axis("read commands", fmt=lambda v: fmt.number(v)),
        ),
        "Read commands issued for one full restore of every session.",
    )


def _latency_chart(by_layout: RunsByLayout, concs: list[int], ran: list[str]) -> str:
    latency = []
    for lay in ran:
        for q in ("p50", "p99"):

            def restore_s(r: Node, q: str = q) -> float | None:
                return r["restore_s"][q].as_num()

            latency.append((f"{lay} {q}", [_at(by_layout, lay, c, restore_s) for c in concs]))
    return figure(
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


def _workload_lines(
    doc: Node, wl: Node, settings: Node | None, by_layout: RunsByLayout
) -> list[str]:
    """Where the workload came from (a trace's, scaled) and whether flat checked checksums."""
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
    return lines


def _fio_lines(doc: Node, fio: Node, seq: float | None) -> list[str]:
    """fio's best sequential read and its replay of each layout's reads, or why it did not run."""
    if not fio["available"].as_bool():
        reason = (doc["provenance"].get("fio") or Node({}, "", "")).get("reason")
        return [f"fio: not run ({reason.as_str() if reason else 'not available'})"]
    fio_prov = doc["provenance"].get("fio")
    ioengine = fio_prov.get("ioengine") if fio_prov is not None else None
    rounds = (
        len(fio_prov["rounds"].as_list()) if fio_prov is not None and "rounds" in fio_prov else 1
    )
    best = fio_prov.get("best_job") if fio_prov is not None else None
    which = f"median of {rounds}" if rounds > 1 else (best.as_str() if best else "-")
    best_read = (
        f"fio ({ioengine.as_str() if ioengine else '-'}): best sequential direct read "
        f"{fmt.rate(seq, '-')} ({which})"
    )
    replay = ", ".join(
        f"{k} {fmt.rate(v.as_num(), '-')}"
        for k, v in fio["replay_bytes_per_s"].as_items()
        if v.as_num() is not None
    )
    return [best_read, f"fio replay of each layout's exact reads: {replay or '-'}"]
