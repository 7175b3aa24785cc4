"""Render an :class:`~fcctl.iobench.result.IobenchResult`: rich table, one JSON document,
``iobench.json`` + Parquet + PNGs. Every figure comes from the result; nothing is recomputed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

import polars as pl

from fcctl.common.jsonio import to_jsonable, write_json, write_json_file
from fcctl.iobench.result import Comparisons, IobenchResult

from . import format as fmt

JSON_NAME = "iobench.json"


def runs_frame(result: IobenchResult) -> pl.DataFrame:
    """One row per (layout, concurrency): the JSON runs, flattened, plus fio's figures."""
    rows = []
    for layout, runs in result.layouts.items():
        for r in runs:
            rows.append(
                {
                    "layout": layout,
                    "concurrency": r.concurrency,
                    "concurrency_ran": r.concurrency_ran,
                    "read_commands": r.read_commands,
                    "bytes_requested": r.bytes_requested,
                    "bytes_read": r.bytes_read,
                    "read_amplification": r.read_amplification,
                    "restore_bytes_per_s": r.restore_bytes_per_s,
                    "restore_p50_s": r.restore_s.p50,
                    "restore_p99_s": r.restore_s.p99,
                    "verified_bytes": r.verified_bytes,
                    "mismatched_blocks": r.mismatched_blocks,
                    "checksum_verified_bytes": r.checksum_verified_bytes,
                    "fio_seq_read_bytes_per_s": result.fio.seq_read_bytes_per_s,
                    "fio_replay_bytes_per_s": result.fio.replay_bytes_per_s.get(layout),
                }
            )
    schema = {
        "layout": pl.String,
        "concurrency": pl.Int64,
        "concurrency_ran": pl.Int64,
        "read_commands": pl.Int64,
        "bytes_requested": pl.Int64,
        "bytes_read": pl.Int64,
        "read_amplification": pl.Float64,
        "restore_bytes_per_s": pl.Float64,
        "restore_p50_s": pl.Float64,
        "restore_p99_s": pl.Float64,
        "verified_bytes": pl.Int64,
        "mismatched_blocks": pl.Int64,
        "checksum_verified_bytes": pl.Int64,
        "fio_seq_read_bytes_per_s": pl.Float64,
        "fio_replay_bytes_per_s": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def comparison_sentences(comparisons: Comparisons) -> list[str]:
    """The human reading of each headline comparison (the JSON keeps the numbers)."""
    return fmt.iobench_comparison_sentences(to_jsonable(comparisons))


def workload_line(result: IobenchResult) -> str | None:
    """Where a trace workload came from and the factor its token counts were scaled by."""
    wl = result.workload
    if wl.source in ("", "synthetic"):
        return None
    return f"workload: {wl.source}, token counts scaled by {wl.scale:.4g}"


def checksum_line(result: IobenchResult) -> str:
    c = result.checksums
    if c.verified:
        return "flat restores checked every layer checksum inside the timed region"
    if c.off_reason:
        return f"flat layer checksums not checked in the timed region: {c.off_reason}"
    return "flat layer checksums: the flat layout was not run"


def render_table(
    result: IobenchResult, *, file: IO[str] | None = None, width: int | None = None
) -> None:
    """The summary onto ``file`` (``width`` columns), or onto stdout: a terminal's width, and
    a pipe's as wide as the table needs (:func:`~fcctl.reports.console.print_rendered`)."""
    if file is None:
        from .console import print_rendered

        print_rendered(lambda console: render_summary(result, console))
        return
    from rich.console import Console

    render_summary(result, Console(file=file, width=width))


def render_summary(result: IobenchResult, console: Any) -> None:
    """The table and the sentences under it, onto a rich ``console``."""
    from rich import box
    from rich.table import Table

    wl, engine = result.workload, result.engine
    gds = ", GDS " + ("yes" if engine.gds else "no (compat)") if engine.gds_capable else ""
    title = (
        f"iobench: {wl.sessions} sessions, {wl.model} ({wl.layers} layers), "
        f"{wl.block_tokens}-token pages, {fmt.size_2dp(wl.bytes)} per layout; engine "
        f"{engine.name} (O_DIRECT {'yes' if engine.o_direct else 'no'}{gds})"
    )
    # Fits 80 columns: bytes requested are the same for every run (the workload's size, in the
    # title), so the table shows only whether every one of them was read back and verified.
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in ("layout", "conc.", "read cmds", "ampl.", "restore", "p50 s", "p99 s", "verified"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    for layout, runs in result.layouts.items():
        for r in runs:
            if r.mismatched_blocks:
                verified = f"{r.mismatched_blocks} BAD"
            elif r.verified_bytes == r.bytes_requested * r.repeats:
                verified = "all"  # every requested byte of every repeat
            else:
                verified = fmt.size_2dp(r.verified_bytes)
            table.add_row(
                layout,
                fmt.concurrency_label(r.concurrency, r.concurrency_ran),
                f"{r.read_commands:,}",
                fmt.fixed3(r.read_amplification),
                fmt.rate(r.restore_bytes_per_s, "-"),
                fmt.fixed3(r.restore_s.p50),
                fmt.fixed3(r.restore_s.p99),
                verified,
            )
    console.print(table)
    line = workload_line(result)
    if line is not None:
        console.print(line)
    if result.layouts.get("flat"):
        console.print(checksum_line(result))
    fio = result.fio
    if fio.available:
        replay = ", ".join(
            f"{k} {fmt.rate(v, '-')}" for k, v in fio.replay_bytes_per_s.items() if v is not None
        )
        # Two lines, so neither wraps mid-phrase at 80 columns.
        # With repeats the figure is the median of each repeat's best job (which job won each
        # repeat is in the JSON's provenance); kept short enough for one 80-column line.
        rounds = len(fio.rounds)
        which = f"median of {rounds}" if rounds > 1 else fio.best_job
        console.print(
            f"fio ({fio.ioengine}): best sequential direct read "
            f"{fmt.rate(fio.seq_read_bytes_per_s, '-')} ({which})"
        )
        console.print(f"fio replay of each layout's exact reads: {replay or '-'}")
    else:
        console.print(f"fio: not run ({fio.reason})")
    for line in comparison_sentences(result.comparisons):
        console.print(line)


def print_json(result: IobenchResult, *, file: IO[str] | None = None) -> None:
    """The ``--json`` document: exactly one JSON document and a newline."""
    write_json(result, file or sys.stdout)


def write_outputs(result: IobenchResult, out: Path) -> list[Path]:
    """``iobench.json``, ``runs.parquet``, ``restore_bytes_per_s.png`` and ``read_commands.png``
    under ``out`` (the CLI passes the temporary directory of an atomic ``--out``)."""
    out.mkdir(parents=True, exist_ok=True)
    document = out / JSON_NAME
    write_json_file(result, document)
    written = [document]
    frame = runs_frame(result)
    parquet = out / "runs.parquet"
    tmp = out / ".runs.parquet.tmp"
    frame.write_parquet(tmp)
    tmp.replace(parquet)
    written.append(parquet)
    written.extend(_charts(result, frame, out))
    return written


def _save_png(fig: Any, path: Path) -> None:
    """Write under a temporary name, then rename: an interrupted run leaves no half PNG."""
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=120, format="png")
    tmp.replace(path)


def _charts(result: IobenchResult, frame: pl.DataFrame, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    paths = []
    layouts = frame["layout"].unique(maintain_order=True).to_list()
    concs = sorted(frame["concurrency"].unique().to_list())
    width = 0.8 / max(1, len(layouts))
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, layout in enumerate(layouts):
        sub = frame.filter(pl.col("layout") == layout).sort("concurrency")
        xs = [concs.index(c) + i * width for c in sub["concurrency"].to_list()]
        ax.bar(xs, [v / 1e9 for v in sub["restore_bytes_per_s"].to_list()], width, label=layout)
    if result.fio.seq_read_bytes_per_s:
        ax.axhline(
            result.fio.seq_read_bytes_per_s / 1e9,
            color="black",
            linestyle="--",
            label="fio best sequential read",
        )
    ax.set_xticks(
        [k + width * (len(layouts) - 1) / 2 for k in range(len(concs))], [str(c) for c in concs]
    )
    ax.set_xlabel("sessions restored at once")
    ax.set_ylabel("restore GB/s (aggregate)")
    ax.set_title("Cold layer-wise restore throughput")
    # Headroom above the tallest bar or line so the legend (one row) never covers a bar.
    top = max([*(v / 1e9 for v in frame["restore_bytes_per_s"].to_list()), 0.0])
    if result.fio.seq_read_bytes_per_s:
        top = max(top, result.fio.seq_read_bytes_per_s / 1e9)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1.0)
    ax.legend(loc="upper center", ncol=3, frameon=False)
    fig.tight_layout()
    p = out / "restore_bytes_per_s.png"
    _save_png(fig, p)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(5, 4))
    first = frame.filter(pl.col("concurrency") == concs[0]) if concs else frame
    counts = first["read_commands"].to_list()
    # A linear axis: bars on a log axis start at an arbitrary floor and hide the ratio.
    bars = ax.bar(first["layout"].to_list(), counts, color=["C0", "C1"][: first.height])
    ax.bar_label(bars, labels=[f"{c:,}" for c in counts], padding=3)
    ax.set_ylim(0, max([*counts, 1]) * 1.15)
    ax.set_ylabel("read commands")
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    wl = result.workload
    ax.set_title(
        f"Read commands to restore all {wl.sessions} sessions\n"
        f"({wl.layers} layers, {fmt.size_2dp(wl.bytes)} per layout)",
        fontsize=10,
    )
    fig.tight_layout()
    p = out / "read_commands.png"
    _save_png(fig, p)
    plt.close(fig)
    paths.append(p)
    return paths
