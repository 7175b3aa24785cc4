"""``fcctl report``: one self-contained HTML page from the outputs of fcctl's commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("report")
    @cli_errors
    def report(
        inputs: Annotated[
            list[Path],
            typer.Argument(
                help="--json documents or --out directories of analyze, iobench, replay, "
                "recommend-thresholds (any subset, one of each), or a trace the FlatCake "
                "adapters recorded (FLATCAKE_TRACE: its Monitors section).",
                show_default=False,
                metavar="INPUT",
            ),
        ],
        output: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write.")],
        title: Annotated[
            str | None, typer.Option("--title", help="Page title (default: from the trace).")
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an existing -o file.")
        ] = False,
        allow_mixed: Annotated[
            bool,
            typer.Option(
                "--allow-mixed",
                help="Combine documents measured on different traces (each section names its).",
            ),
        ] = False,
    ) -> None:
        """Build one self-contained HTML page (inline SVG charts, no network) from fcctl outputs.

        Each INPUT is a --json document or an --out directory; sections for commands without
        an input are left out. Bad inputs are one line naming the file, exit 2, no page.
        """
        from fcctl.common.paths import display_path
        from fcctl.reports.html_report import make_report

        summary = make_report(inputs, output, title=title, force=force, allow_mixed=allow_mixed)
        kib = summary.bytes / 1024
        print(
            f"report: wrote {display_path(summary.out)} ({kib:,.0f} KiB; sections: "
            f"{', '.join(summary.sections)})",
            file=sys.stderr,
        )
