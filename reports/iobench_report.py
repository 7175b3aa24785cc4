"""Render an :class:`iobench.bench.IobenchResult`: rich table, one JSON document, Parquet + PNGs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from fcctl.common.units import format_bytes


def runs_frame(result: Any) -> pl.DataFrame:
    """One row per (layout, concurrency): the JSON runs, flattened, plus fio's figures."""
    rows = []
    for layout, runs in result.layouts.items():
        for r in runs:
            rows.append(
                {
                    "layout": layout,
                    "concurrency": r.concurrency,
                    "read_commands": r.read_commands,
                    "bytes_requested": r.bytes_requested,
                    "bytes_read": r.bytes_read,
                    "read_amplification": r.read_amplification,
                    "restore_bytes_per_s": r.restore_bytes_per_s,
                    "restore_p50_s": r.restore_p50_s,
                    "restore_p99_s": r.restore_p99_s,
                    "verified_bytes": r.verified_bytes,
                    "mismatched_blocks": r.mismatched_blocks,
                    "fio_seq_read_bytes_per_s": result.fio.seq_read_bytes_per_s,
                    "fio_replay_bytes_per_s": result.fio.replay_bytes_per_s.get(layout),
                }
            )
    schema = {
        "layout": pl.String,
        "concurrency": pl.Int64,
        "read_commands": pl.Int64,
        "bytes_requested": pl.Int64,
        "bytes_read": pl.Int64,
        "read_amplification": pl.Float64,
        "restore_bytes_per_s": pl.Float64,
        "restore_p50_s": pl.Float64,
        "restore_p99_s": pl.Float64,
        "verified_bytes": pl.Int64,
        "mismatched_blocks": pl.Int64,
        "fio_seq_read_bytes_per_s": pl.Float64,
        "fio_replay_bytes_per_s": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def ratios(result: Any) -> dict[str, float | None]:
    """The headline comparisons: commands, flat vs fio, flat vs eviction restore time."""
    out: dict[str, float | None] = {}
    flat = {r.concurrency: r for r in result.layouts.get("flat", ())}
    evic = {r.concurrency: r for r in result.layouts.get("eviction", ())}
    common = sorted(set(flat) & set(evic))
    if common:
        c = common[0]
        out["eviction_over_flat_read_commands"] = evic[c].read_commands / max(
            1, flat[c].read_commands
        )
    for c in common:
        f, e = flat[c], evic[c]
        out[f"flat_over_eviction_restore_time_c{c}"] = (
            e.restore_bytes_per_s / f.restore_bytes_per_s if f.restore_bytes_per_s else None
        )
    best = result.fio.seq_read_bytes_per_s
    if best and flat:
        c = max(flat)
        out[f"flat_c{c}_over_fio_seq"] = flat[c].restore_bytes_per_s / best
    return out


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f} GB/s"


def render_table(result: Any, *, file: Any = None, width: int | None = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=width)
    wl = result.workload
    title = (
        f"iobench: {len(wl.sessions)} sessions, {wl.geometry.name} ({wl.geometry.layers} layers), "
        f"{wl.block_tokens}-token pages, {format_bytes(wl.bytes)} per layout; engine "
        f"{result.engine_name} (O_DIRECT {'yes' if result.o_direct else 'no'}"
        f"{'' if result.gds is None else ', GDS ' + ('yes' if result.gds else 'no (compat)')})"
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
            elif r.verified_bytes == r.bytes_requested * getattr(r, "repeats", 1):
                verified = "all"  # every requested byte of every repeat
            else:
                verified = format_bytes(r.verified_bytes)
            table.add_row(
                layout,
                str(r.concurrency),
                f"{r.read_commands:,}",
                f"{r.read_amplification:.3f}",
                _rate(r.restore_bytes_per_s),
                f"{r.restore_p50_s:.3f}",
                f"{r.restore_p99_s:.3f}",
                verified,
            )
    console.print(table)
    fio = result.fio
    if fio.available:
        replay = ", ".join(
            f"{k} {_rate(v)}" for k, v in fio.replay_bytes_per_s.items() if v is not None
        )
        # Two lines, so neither wraps mid-phrase at 80 columns.
        # With repeats the figure is the median of each repeat's best job (which job won each
        # repeat is in the JSON's provenance); kept short enough for one 80-column line.
        rounds = len(fio.samples)
        which = f"median of {rounds}" if rounds > 1 else fio.best_job
        console.print(
            f"fio ({fio.ioengine}): best sequential direct read {_rate(fio.seq_read_bytes_per_s)}"
            f" ({which})"
        )
        console.print(f"fio replay of each layout's exact reads: {replay or '-'}")
    else:
        console.print(f"fio: not run ({fio.reason})")
    for name, value in ratios(result).items():
        console.print(_ratio_sentence(name, value))


def _ratio_sentence(name: str, value: float | None) -> str:
    """The human reading of one :func:`ratios` key (the JSON and Parquet keep the key)."""
    v = "-" if value is None else f"{value:.2f}x"
    if name == "eviction_over_flat_read_commands":
        return f"eviction issues {v} the flat layout's read commands"
    if name.startswith("flat_over_eviction_restore_time_c"):
        c = name.rsplit("_c", 1)[1]
        return f"flat restores in {v} the eviction layout's time at concurrency {c}"
    if name.startswith("flat_c") and name.endswith("_over_fio_seq"):
        c = name[len("flat_c") : -len("_over_fio_seq")]
        return f"flat restore at concurrency {c} reads at {v} fio's best sequential read"
    return f"{name}: {v}"


def print_json(result: Any, *, file: Any = None) -> None:
    json.dump(result.to_json_dict(), file or sys.stdout, indent=2, sort_keys=False)
    (file or sys.stdout).write("\n")


def write_outputs(result: Any, out: Path) -> list[Path]:
    """``runs.parquet``, ``restore_bytes_per_s.png`` and ``read_commands.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
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


def _charts(result: Any, frame: pl.DataFrame, out: Path) -> list[Path]:
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
        f"Read commands to restore all {len(wl.sessions)} sessions\n"
        f"({wl.geometry.layers} layers, {format_bytes(wl.bytes)} per layout)",
        fontsize=10,
    )
    fig.tight_layout()
    p = out / "read_commands.png"
    _save_png(fig, p)
    plt.close(fig)
    paths.append(p)
    return paths
