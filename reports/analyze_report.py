"""Render an :class:`analyzers.reuse.analyze.AnalysisResult`: a rich summary, and ``--out DIR``
files.

``write_out_dir`` writes everything through :func:`fcctl.common.outdir.atomic_out_dir`: into a
temporary directory beside ``DIR``, moved into place only when all files are complete, so an
error never leaves a half-written ``DIR``. A non-empty ``DIR`` is refused unless ``force`` and
it holds an earlier ``analysis.json`` (then it is replaced as a whole; a directory of other
files is never removed).

Files: ``analysis.json`` (the ``--json`` document), ``requests.parquet`` (one row per request),
``sessions.parquet`` (one row per session; absent without sessions), ``histograms.parquet``
(metric, bucket_lo, bucket_hi, count; log2 buckets), ``memory_tier_curve.parquet``
(capacity_blocks, capacity_bytes, lru_hit_share), and the charts ``reuse_distance_cdf.png``,
``session_kv_cdf.png``, ``memory_tier_curve.png`` (each only when there is data for it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from fcctl.common.jsonio import write_json_file
from fcctl.common.outdir import atomic_out_dir, check_out_dir

from . import format as fmt

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from fcctl.analyzers.reuse.analyze import AnalysisResult
    from fcctl.analyzers.reuse.metrics import Percentiles, ReuseMetrics
    from fcctl.analyzers.reuse.sessions import SessionMetrics

#: The file every analyze ``--out`` directory holds (what ``--force`` looks for).
OUT_MARKER = "analysis.json"


def _header(result: AnalysisResult) -> Table:
    from rich.table import Table

    t, kv = result.trace, result.kv
    # The path is a row, not the title: a long path in a centred title wraps into a jumble.
    head = Table(title="fcctl analyze", show_header=False, box=None)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    sessions = "n/a" if t.sessions is None else f"{t.sessions:,}"
    if t.sessions_inferred:
        sessions += " (INFERRED from prefix chains)"
    rows = [
        ("trace", t.path),
        ("format", t.format),
        ("requests", f"{t.requests:,}"),
        ("sessions", sessions),
        ("block size", f"{t.block_size_tokens} tokens" if t.block_size_tokens else "n/a"),
        ("block accesses", fmt.number(t.block_accesses)),
        ("distinct blocks", fmt.number(t.distinct_blocks)),
        (
            "longest session" if t.order == "session" else "duration",
            fmt.span_s(t.duration_s),
        ),
        ("model", kv.description),
        ("KV size", _kv_size(result)),
        ("order", t.schedule.describe()),
    ]
    if t.converted_from is not None:
        # The file read is the Parquet; the figures describe the trace it was made from.
        rows.insert(1, ("converted from", f"{t.converted_from.path} ({t.converted_from.format})"))
    if t.dataset is not None:
        traces = f", {t.dataset.traces} traces" if t.dataset.traces > 1 else ""
        files = f"{t.dataset.files:,} Parquet file{'s' if t.dataset.files != 1 else ''}"
        rows.insert(1, ("dataset", f"{files}, {t.dataset.mode}{traces}"))
    rows.append(("figures", _figures(result)))
    for k, v in rows:
        head.add_row(k, v)
    return head


def _figures(result: AnalysisResult) -> str:
    """Which figures are exact and which sampled, with the rate and the stated error bound."""
    sampling = result.trace.sampling
    if sampling is None:
        return "all exact"
    bound = sampling.error_bound
    return fmt.sampling_legend(
        sampling.rate,
        sampling.exact_below_blocks,
        bound.hit_share_mean_abs_pp,
        bound.hit_share_max_abs_pp,
    )


def _kv_size(result: AnalysisResult) -> str:
    """Bytes per token as the node total (what a shared tier holds), one rank's share beside."""
    kv = result.kv
    ranks = "rank" if kv.tp == 1 else "ranks"
    text = f"{kv.bytes_per_token:,} B/token node total over tp {kv.tp} {ranks}"
    if kv.tp > 1:
        text += f" ({kv.bytes_per_token_per_rank:,} per rank)"
    return text + (f", {fmt.size(kv.block_bytes)} per block" if kv.block_bytes else "")


def _reuse_tables(r: ReuseMetrics, *, sampled: bool = False) -> list[Table]:
    from rich.table import Table

    shares = Table(title="Block reuse")
    shares.add_column("metric")
    shares.add_column("value", justify="right")
    shares.add_row("once-only block share", fmt.share(r.once_only_block_share))
    shares.add_row("reuse access share (ideal hit share)", fmt.share(r.reuse_access_share))
    dist = _percentile_table(
        "Reuse distance of re-accesses",
        "unit",
        [
            ("requests", r.distance_requests, fmt.number),
            ("seconds", r.distance_seconds, fmt.number),
            (
                (fmt.SAMPLED_MARK if sampled else "") + "LRU stack (blocks)",
                r.distance_stack_blocks,
                fmt.number,
            ),
            (
                (fmt.SAMPLED_MARK if sampled else "") + "LRU stack (bytes)",
                r.distance_stack_bytes,
                fmt.size,
            ),
        ],
    )
    return [shares, dist]


def _sessions_table(s: SessionMetrics) -> Table:
    from rich.table import Table

    t = Table(
        title="Sessions" + (" (inferred)" if s.inferred else ""),
        caption="KV, distinct blocks: every block the session references (session KV); "
        "KV, largest context: its largest request, what one restore reads.",
        caption_justify="left",
    )
    t.add_column("metric")
    for q in ("p50", "p90", "p99", "max", "mean"):
        t.add_column(q, justify="right")
    # Two different sizes: all distinct blocks a session ever references, and the largest
    # single context, which is what one restore of the session reads. Labelled apart.
    for label, summary in (
        ("KV, distinct blocks", s.kv_bytes),
        ("KV, largest context", s.max_context_bytes),
    ):
        cells = (summary.p50, summary.p90, summary.p99, summary.max, summary.mean)
        t.add_row(label, *(fmt.size(v) for v in cells))
    for label, p in (("turns", s.turns), ("largest input, tokens", s.max_input_tokens)):
        t.add_row(label, fmt.number(p.p50), fmt.number(p.p90), fmt.number(p.p99), "", "")
    return t


def _memory_tier_table(result: AnalysisResult) -> Table:
    from rich.table import Table

    tier = Table(title="Memory tier (LRU in front of SSD)")
    for c in ("capacity", "blocks", "LRU hit share", "share of ideal", "reuse from SSD"):
        tier.add_column(c, justify="right")
    for p in result.memory_tier:
        tier.add_row(
            (fmt.SAMPLED_MARK if p.sampled else "") + fmt.size(p.capacity_bytes),
            fmt.number(p.capacity_blocks),
            fmt.share(p.lru_hit_share),
            fmt.share(p.share_of_ideal),
            fmt.share(p.ssd_reuse_share),
        )
    return tier


def _request_sizes_table(result: AnalysisResult) -> Table:
    rs = result.request_sizes
    return _percentile_table(
        "Request sizes",
        "metric",
        [
            ("input tokens", rs.input_tokens, fmt.number),
            ("output tokens", rs.output_tokens, fmt.number),
            ("KV per request", rs.kv_bytes, fmt.size),
        ],
    )


_Row = tuple[str, "Percentiles", Callable[[float | None], str]]


def _percentile_table(title: str, first: str, rows: list[_Row]) -> Table:
    """A p50/p90/p99 table: one row per (name, percentiles, how to format a value)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column(first)
    for q in ("p50", "p90", "p99"):
        table.add_column(q, justify="right")
    for name, p, render in rows:
        table.add_row(name, render(p.p50), render(p.p90), render(p.p99))
    return table


def _hanging(label: str, lines: list[str]) -> Table:
    """``label`` beside each line, wrapped lines indented under the text (readable at 80 cols)."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for line in lines:
        grid.add_row(label, line)
    return grid


def render_summary(result: AnalysisResult, console: Console) -> None:
    """The human summary: tables of every figure, then the notes, the verdict and its reasons."""
    from fcctl.analyzers.reuse.analyze import NoteCode

    console.print(_header(result))
    if result.reuse is None:
        console.print(
            "[bold]Reuse cannot be measured:[/bold] this trace has no block hashes. "
            "Only request sizes and arrival rate are reported below."
        )
    else:
        for table in _reuse_tables(result.reuse, sampled=result.trace.sampled):
            console.print(table)
    if result.sessions is not None:
        console.print(_sessions_table(result.sessions))
    if result.reuse is not None:  # without hashes every cell would be n/a
        console.print(_memory_tier_table(result))
    console.print(_request_sizes_table(result))
    rate = result.request_sizes.arrival_rate_per_s
    if rate is not None:
        console.print(f"arrival rate: {fmt.per_s(rate)}")
    # The summary already led with the no-hashes note.
    notes = [n.text for n in result.note_details if n.code is not NoteCode.NO_HASHES]
    console.print(_hanging("note:", notes), highlight=False)
    console.print(f"\n[bold]Verdict: {result.verdict.layout.upper()}[/bold]")
    console.print(_hanging("  -", list(result.verdict.reasons)), highlight=False)


def print_summary(result: AnalysisResult) -> None:
    """Render the summary on stdout; piped output loses rich's padding at the line ends."""
    from .console import print_rendered

    print_rendered(lambda console: render_summary(result, console))


def _write_files(result: AnalysisResult, d: Path) -> list[str]:
    from . import charts

    write_json_file(result, d / OUT_MARKER)
    tables = result.tables
    tables.requests.write_parquet(d / "requests.parquet")
    if result.sessions is not None:
        result.sessions.table.write_parquet(d / "sessions.parquet")
    tables.histograms.write_parquet(d / "histograms.parquet")
    pl.DataFrame(
        {
            "capacity_blocks": tables.hit_curve_capacity_blocks,
            "capacity_bytes": tables.hit_curve_capacity_blocks * (result.kv.block_bytes or 0),
            "lru_hit_share": tables.hit_curve_share,
        }
    ).write_parquet(d / "memory_tier_curve.parquet")
    charts.reuse_distance_cdf(result, d / "reuse_distance_cdf.png")
    charts.session_kv_cdf(result, d / "session_kv_cdf.png")
    charts.memory_tier_curve(result, d / "memory_tier_curve.png")
    return sorted(p.name for p in d.iterdir())


def check_analyze_out_dir(out: Path, *, force: bool) -> None:
    """Refuse, before any work, an ``--out`` that could not be written at the end."""
    check_out_dir(out, force=force, marker=OUT_MARKER, command="analyze")


def write_out_dir(result: AnalysisResult, out: Path, *, force: bool = False) -> list[str]:
    """Write every table, chart and the JSON into ``out`` all at once; return the file names."""
    with atomic_out_dir(Path(out), force=force, marker=OUT_MARKER, command="analyze") as tmp:
        return _write_files(result, tmp)
