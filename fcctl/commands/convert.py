"""``fcctl convert``: any supported trace -> canonical Parquet."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import ColumnsOpt, FormatOpt, MaxLineBytesOpt
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("convert")
    @cli_errors
    def convert(
        trace: Annotated[
            Path,
            typer.Argument(
                help="Trace file, Claude Code directory, or a dataset: a directory or glob of "
                "canonical Parquet files (fcctl convert --partition-by, fcctl synth)."
            ),
        ],
        out: Annotated[
            Path,
            typer.Option(
                "-o", "--out", help="Output Parquet file (directory with --partition-by)."
            ),
        ],
        format: FormatOpt = None,
        force: Annotated[
            bool,
            typer.Option(
                "--force", help="Replace an existing -o file (only an earlier convert output)."
            ),
        ] = False,
        max_line_bytes: MaxLineBytesOpt = "64MiB",
        columns: ColumnsOpt = None,
        partition_by: Annotated[
            str | None,
            typer.Option(
                "--partition-by", help="Write parts by day or session-hash (docs/scale.md)."
            ),
        ] = None,
        partitions: Annotated[
            int | None,
            typer.Option("--partitions", help="session-hash buckets, 1..65536 [default: 16]."),
        ] = None,
    ) -> None:
        """Convert a trace to the canonical Parquet table (one row per request).

        Reads whatever analyze and replay read, datasets included (one file from a dataset's
        parts, or a dataset cut again with --partition-by).
        """
        from fcctl.analyzers.traces.canonical import check_output_file, write_canonical
        from fcctl.analyzers.traces.dataset import read_source
        from fcctl.analyzers.traces.partitioned import (
            check_dataset_out,
            check_partition_args,
            write_partitioned,
        )
        from fcctl.common.paths import display_path
        from fcctl.common.progress import Progress
        from fcctl.common.units import parse_size

        start = time.perf_counter()
        limit = parse_size(max_line_bytes, what="--max-line-bytes")
        # A typo in -o should fail before minutes of parsing.
        if partition_by is None:
            check_partition_args(None, partitions)
            check_output_file(out, force=force, source=trace)
        else:
            check_dataset_out(
                out, by=partition_by, partitions=partitions, force=force, source=trace
            )
        with Progress(enabled=True) as progress:
            parsed = read_source(
                trace, format, progress=progress, max_line_bytes=limit, columns=columns
            )
        written = ""
        if partition_by is None:
            write_canonical(parsed, out, force=force)
        else:
            with Progress(enabled=True) as progress:
                result = write_partitioned(
                    parsed,
                    out,
                    by=partition_by,
                    partitions=partitions,
                    force=force,
                    progress=progress,
                )
            written = f" in {len(result.parts)} part(s) by {partition_by}"
        requests = parsed.requests
        sessions = requests["session_id"].drop_nulls().n_unique() if parsed.has_sessions else None
        blocks = int(requests["hash_ids"].list.len().sum() or 0) if parsed.has_hashes else None
        print(
            f"wrote {display_path(out)}: {parsed.format}, {requests.height:,} requests, "
            f"{'no' if sessions is None else f'{sessions:,}'} sessions, "
            f"{'no' if blocks is None else f'{blocks:,}'} block accesses{written} "
            f"({time.perf_counter() - start:.1f} s)",
            file=sys.stderr,
        )
