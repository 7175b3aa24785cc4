"""``fcctl analyze``: measure KV-cache reuse in a trace and recommend a layout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands import FORMAT_NAMES
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @cli_errors
    def analyze(
        trace: Annotated[Path, typer.Argument(help="Trace file (or Claude Code directory).")],
        format: Annotated[
            str | None,
            typer.Option(
                "--format", help=f"Input format ({', '.join(FORMAT_NAMES)}); detected if omitted."
            ),
        ] = None,
        model: Annotated[
            str,
            typer.Option(
                "--model",
                help="KV geometry preset (llama-3.1-8b, llama-3.1-70b, qwen2.5-7b, deepseek-v3).",
            ),
        ] = "llama-3.1-8b",
        model_config: Annotated[
            Path | None,
            typer.Option("--model-config", help="Hugging Face config.json (overrides --model)."),
        ] = None,
        tp: Annotated[
            int | None, typer.Option("--tp", help="Tensor-parallel ranks (KV is the node total).")
        ] = None,
        kv_dtype: Annotated[
            str | None, typer.Option("--kv-dtype", help="KV dtype: bf16, fp16, fp8, fp32.")
        ] = None,
        memory: Annotated[
            str | None,
            typer.Option(
                "--memory",
                help="Memory-tier capacities, e.g. 64GiB,256GiB "
                "[default: 16GiB,64GiB,256GiB,1TiB].",
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON document on stdout.")
        ] = False,
        out: Annotated[
            Path | None,
            typer.Option(
                "--out",
                help="Write analysis.json, Parquet tables and PNG charts into this directory.",
            ),
        ] = None,
        force: Annotated[
            bool,
            typer.Option(
                "--force", help="Replace an earlier --out directory (one with analysis.json)."
            ),
        ] = False,
    ) -> None:
        """Measure block reuse, reuse distances, session KV sizes and memory-tier hit shares."""
        from fcctl.analyzers.analyze import analyze_trace
        from fcctl.analyzers.readers import read_trace
        from fcctl.common.jsonio import write_json
        from fcctl.common.progress import Progress
        from fcctl.common.units import parse_size_list
        from fcctl.layout.geometry import model_geometry
        from fcctl.reports.analyze_report import (
            check_analyze_out_dir,
            print_summary,
            write_out_dir,
        )

        # Flags first: a typo should fail before minutes of parsing.
        geometry = model_geometry(model, config_path=model_config, tp=tp, kv_dtype=kv_dtype)
        capacities = parse_size_list(memory, what="--memory") if memory is not None else None
        if out is not None:
            check_analyze_out_dir(out, force=force)
        with Progress(enabled=True) as progress:
            parsed = read_trace(trace, format, progress=progress)
            result = analyze_trace(
                parsed, geometry=geometry, memory_capacities_bytes=capacities, progress=progress
            )
        if out is not None:
            names = write_out_dir(result, out, force=force)
            print(f"wrote {out}: {', '.join(names)}", file=sys.stderr)
        if as_json:
            write_json(result, sys.stdout)
        else:
            print_summary(result)
