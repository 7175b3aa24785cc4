"""``fcctl convert``: any supported trace -> canonical Parquet."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands import FORMAT_NAMES
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("convert")
    @cli_errors
    def convert(
        trace: Annotated[Path, typer.Argument(help="Trace file (or Claude Code directory).")],
        out: Annotated[Path, typer.Option("-o", "--out", help="Output canonical Parquet file.")],
        format: Annotated[
            str | None,
            typer.Option(
                "--format",
                help=f"Input format ({', '.join(FORMAT_NAMES)}); detected from content if omitted.",
            ),
        ] = None,
    ) -> None:
        """Convert a trace to the canonical Parquet table (one row per request)."""
        from fcctl.analyzers.canonical import check_output_file, write_canonical
        from fcctl.analyzers.readers import read_trace
        from fcctl.common.progress import Progress

        start = time.perf_counter()
        check_output_file(out)  # a typo in -o should fail before minutes of parsing
        with Progress(enabled=True) as progress:
            parsed = read_trace(trace, format, progress=progress)
        write_canonical(parsed, out)
        requests = parsed.requests
        sessions = requests["session_id"].drop_nulls().n_unique() if parsed.has_sessions else None
        blocks = int(requests["hash_ids"].list.len().sum() or 0) if parsed.has_hashes else None
        print(
            f"wrote {out}: {parsed.format}, {requests.height:,} requests, "
            f"{'no' if sessions is None else f'{sessions:,}'} sessions, "
            f"{'no' if blocks is None else f'{blocks:,}'} block accesses "
            f"({time.perf_counter() - start:.1f} s)",
            file=sys.stderr,
        )
