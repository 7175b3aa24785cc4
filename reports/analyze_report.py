"""Render an :class:`analyzers.analyze.AnalysisResult`: a rich summary, and ``--out DIR`` files.

``write_out_dir`` writes everything into a temporary directory beside ``DIR`` and moves it into
place only when all files are complete, so an error never leaves a half-written ``DIR``. A
non-empty ``DIR`` is refused unless ``force`` and it holds an earlier ``analysis.json`` (then
it is replaced as a whole; a directory of other files is never removed).

Files: ``analysis.json`` (the ``--json`` document), ``requests.parquet`` (one row per request),
``sessions.parquet`` (one row per session; absent without sessions), ``histograms.parquet``
(metric, bucket_lo, bucket_hi, count; log2 buckets), ``memory_tier_curve.parquet``
(capacity_blocks, capacity_bytes, lru_hit_share), and the charts ``reuse_distance_cdf.png``,
``session_kv_cdf.png``, ``memory_tier_curve.png`` (each only when there is data for it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from fcctl.common.errors import FcctlInputError

if TYPE_CHECKING:
    from fcctl.analyzers.analyze import AnalysisResult
    from fcctl.analyzers.reuse import Percentiles
    from rich.console import Console


class OutDirError(FcctlInputError):
    """``--out`` names a non-empty directory (without ``--force``) or something not a directory."""


def _num(v: float | None) -> str:
    """Whole numbers with thousands separators; fractions (interpolated percentiles) to 1 place."""
    if v is None:
        return "n/a"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{round(v):,}"
    return f"{v:,.1f}"


def _share(v: float | None) -> str:
    return "n/a" if v is None else f"{100.0 * v:.2f}%"


def _bytes(v: float | None) -> str:
    """Binary units with 3 significant digits (e.g. 71.8 MiB, 118 MiB): at most 8 characters,
    so a five-value row of sizes fits an 80-column table."""
    if v is None:
        return "n/a"
    x = float(v)
    if abs(x) < 1024:
        return f"{x:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        x /= 1024.0
        if abs(x) < 1023.5 or unit == "PiB":
            break
    if abs(x) >= 99.95:
        return f"{x:.0f} {unit}"
    return f"{x:.1f} {unit}" if abs(x) >= 9.995 else f"{x:.2f} {unit}"


def render_summary(result: AnalysisResult, console: Console) -> None:
    """The human summary: tables of every figure, then the verdict and its reasons."""
    from rich.table import Table

    r = result.reuse
    # The path is a row, not the title: a long path in a centred title wraps into a jumble.
    head = Table(title="fcctl analyze", show_header=False, box=None)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    sessions = "n/a" if result.num_sessions is None else f"{result.num_sessions:,}"
    if result.sessions_inferred:
        sessions += " (INFERRED from prefix chains)"
    rows = [
        ("trace", result.trace_path),
        ("format", result.trace_format),
        ("requests", f"{result.num_requests:,}"),
        ("sessions", sessions),
        ("block size", f"{result.block_size_tokens} tokens" if result.block_size_tokens else "n/a"),
        ("block accesses", _num(result.block_accesses)),
        ("distinct blocks", _num(result.distinct_blocks)),
        (
            "longest session" if result.order == "session" else "duration",
            "n/a" if result.duration_s is None else f"{result.duration_s:,.1f} s",
        ),
        ("KV model", f"{result.model} (tp {result.kv_tp}, {result.kv_dtype_bytes}-byte values)"),
        (
            "KV size",
            f"{result.bytes_per_token:,} B/token"
            + (f", {_bytes(result.block_bytes)} per block" if result.block_bytes else ""),
        ),
    ]
    for k, v in rows:
        head.add_row(k, v)
    console.print(head)

    if r is None:
        console.print(
            "[bold]Reuse cannot be measured:[/bold] this trace has no block hashes. "
            "Only request sizes and arrival rate are reported below."
        )
    else:
        shares = Table(title="Block reuse")
        shares.add_column("metric")
        shares.add_column("value", justify="right")
        shares.add_row("once-only block share", _share(r.once_only_block_share))
        shares.add_row("reuse access share (ideal hit share)", _share(r.reuse_access_share))
        console.print(shares)
        dist = Table(title="Reuse distance of re-accesses")
        dist.add_column("unit")
        for q in ("p50", "p90", "p99"):
            dist.add_column(q, justify="right")

        def row(name: str, p: Percentiles, fmt: Any = _num) -> None:
            dist.add_row(name, fmt(p.p50), fmt(p.p90), fmt(p.p99))

        row("requests", r.distance_requests)
        row("seconds", r.distance_seconds)
        row("LRU stack (blocks)", r.distance_stack_blocks)
        row("LRU stack (bytes)", r.distance_stack_bytes, _bytes)
        console.print(dist)

    if result.sessions is not None:
        s = result.sessions
        t = Table(title="Sessions" + (" (inferred)" if s.inferred else ""))
        t.add_column("metric")
        for q in ("p50", "p90", "p99", "max", "mean"):
            t.add_column(q, justify="right")
        kv = s.kv_bytes
        t.add_row(
            "KV per session",
            _bytes(kv.p50),
            _bytes(kv.p90),
            _bytes(kv.p99),
            _bytes(kv.max),
            _bytes(kv.mean),
        )
        t.add_row("turns", _num(s.turns.p50), _num(s.turns.p90), _num(s.turns.p99), "", "")
        m = s.max_input_tokens
        t.add_row("largest input, tokens", _num(m.p50), _num(m.p90), _num(m.p99), "", "")
        console.print(t)

    if r is not None:  # without hashes every cell would be n/a
        tier = Table(title="Memory tier (LRU in front of SSD)")
        for c in ("capacity", "blocks", "LRU hit share", "share of ideal", "reuse from SSD"):
            tier.add_column(c, justify="right")
        for p in result.memory_tier:
            tier.add_row(
                _bytes(p.capacity_bytes),
                _num(p.capacity_blocks),
                _share(p.lru_hit_share),
                _share(p.share_of_ideal),
                _share(p.ssd_reuse_share),
            )
        console.print(tier)

    rs = result.request_sizes
    sizes = Table(title="Request sizes")
    sizes.add_column("metric")
    for q in ("p50", "p90", "p99"):
        sizes.add_column(q, justify="right")
    for name, p, fmt in (
        ("input tokens", rs.input_tokens, _num),
        ("output tokens", rs.output_tokens, _num),
        ("KV per request", rs.kv_bytes, _bytes),
    ):
        sizes.add_row(name, fmt(p.p50), fmt(p.p90), fmt(p.p99))
    console.print(sizes)
    if rs.arrival_rate_per_s is not None:
        console.print(f"arrival rate: {rs.arrival_rate_per_s:,.3f} requests/s")

    # Hanging indents: a wrapped note or reason stays readable at 80 columns.
    notes = Table.grid(padding=(0, 1))
    notes.add_column(no_wrap=True)
    notes.add_column()
    from fcctl.analyzers.analyze import NO_HASHES_NOTE

    for note in result.notes:
        if note != NO_HASHES_NOTE:  # the summary already led with it
            notes.add_row("note:", note)
    console.print(notes, highlight=False)
    layout = result.verdict.layout.upper()
    console.print(f"\n[bold]Verdict: {layout}[/bold]")
    reasons = Table.grid(padding=(0, 1))
    reasons.add_column(no_wrap=True)
    reasons.add_column()
    for reason in result.verdict.reasons:
        reasons.add_row("  -", reason)
    console.print(reasons, highlight=False)


def print_summary(result: AnalysisResult) -> None:
    """Render the summary on stdout; piped output loses rich's padding at the line ends."""
    import sys

    from rich.console import Console

    console = Console()
    if console.is_terminal:
        render_summary(result, console)
        return
    with console.capture() as captured:
        render_summary(result, console)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _write_files(result: AnalysisResult, d: Path, json_doc: dict[str, Any]) -> list[str]:
    from fcctl.reports import charts

    (d / "analysis.json").write_text(json.dumps(json_doc, indent=2) + "\n")
    result.requests_table.write_parquet(d / "requests.parquet")
    if result.sessions is not None:
        result.sessions.table.write_parquet(d / "sessions.parquet")
    result.histograms.write_parquet(d / "histograms.parquet")
    pl.DataFrame(
        {
            "capacity_blocks": result.hit_curve_capacity_blocks,
            "capacity_bytes": result.hit_curve_capacity_blocks * (result.block_bytes or 0),
            "lru_hit_share": result.hit_curve_share,
        }
    ).write_parquet(d / "memory_tier_curve.parquet")
    charts.reuse_distance_cdf(result, d / "reuse_distance_cdf.png")
    charts.session_kv_cdf(result, d / "session_kv_cdf.png")
    charts.memory_tier_curve(result, d / "memory_tier_curve.png")
    return sorted(p.name for p in d.iterdir())


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse, before any work, an ``out`` that could not be written at the end.

    That is: a non-directory, a non-empty directory (unless ``force``), or a path whose
    nearest existing ancestor is not a directory we can create entries in.
    """
    if out.exists() and not out.is_dir():
        raise OutDirError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutDirError(f"--out {out}: directory is not empty (pass --force to replace it)")
        if not (out / "analysis.json").is_file():
            # --force replaces the directory as a whole: never let a typo wipe unrelated data.
            raise OutDirError(
                f"--out {out}: --force replaces only an earlier analyze output (a directory "
                "with analysis.json); this one has none"
            )
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutDirError(f"--out {out}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutDirError(f"--out {out}: cannot create entries in {str(parent)!r} (permission)")


def write_out_dir(
    result: AnalysisResult,
    out: Path,
    *,
    force: bool = False,
    json_doc: dict[str, Any] | None = None,
) -> list[str]:
    """Write every table, chart and the JSON into ``out`` all at once; return the file names."""
    out = Path(out)
    check_out_dir(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise OutDirError(f"--out {out}: cannot create it ({e.strerror}: {e.filename})") from None
    try:
        # mkdtemp makes 0700; give the result the permissions a plain mkdir would.
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        names = _write_files(result, tmp, json_doc or result.to_json_dict())
        if out.exists():
            # Keep the old directory until the new one is in place.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.rename(old / "d")
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        # Disk full, quota, a file system that refuses renames: one line, nothing left behind.
        raise OutDirError(f"--out {out}: cannot write it ({e.strerror}: {e.filename})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return names
