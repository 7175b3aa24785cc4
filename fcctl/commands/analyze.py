"""``fcctl analyze``: measure KV-cache reuse in a trace and recommend a layout."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    ColumnsOpt,
    FormatOpt,
    JsonOpt,
    KvDtypeOpt,
    MaxLineBytesOpt,
    ModelConfigOpt,
    ModelOpt,
    print_result,
)
from fcctl.errors import cli_errors


def _library_warnings_note(caught: list[warnings.WarningMessage]) -> str | None:
    """At most one line about warnings raised by libraries during the run (None: there were none).

    A library can warn once per row or per glyph; a successful run's stderr stays progress and
    a line of our own, so they are counted, not echoed.
    """
    if not caught:
        return None
    first = caught[0]
    text = " ".join(str(first.message).split())[:120]
    more = f" (and {len(caught) - 1} more)" if len(caught) > 1 else ""
    return f"fcctl: note: a library warned: {first.category.__name__}: {text}{more}"


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    @cli_errors
    def analyze(
        trace: Annotated[
            Path,
            typer.Argument(
                help="Trace file, Claude Code directory, or a dataset: a directory or glob of "
                "canonical Parquet files (fcctl convert --partition-by, fcctl synth).",
            ),
        ],
        format: FormatOpt = None,
        model: ModelOpt = "llama-3.1-8b",
        model_config: ModelConfigOpt = None,
        tp: Annotated[
            int | None,
            typer.Option(
                "--tp",
                help="Tensor-parallel ranks of one serving instance (same meaning in every "
                "command). analyze's KV bytes are the node total over the tp ranks, what a "
                "shared memory or SSD tier holds (an MLA latent once). [default: 1]",
            ),
        ] = None,
        kv_dtype: KvDtypeOpt = None,
        memory: Annotated[
            str | None,
            typer.Option(
                "--memory",
                help="Memory-tier capacities, e.g. 64GiB,256GiB "
                "[default: 16GiB,64GiB,256GiB,1TiB].",
            ),
        ] = None,
        rate: Annotated[
            float | None,
            typer.Option(
                "--rate",
                help="Requests/s: interleave the sessions of a per-session-clock trace (Claude "
                "Code) by Poisson session starts at this request rate before the analysis "
                "(default: sessions one after another, the memory tier's best case). Refused "
                "for traces with one clock, which keep their own order.",
            ),
        ] = None,
        concurrent_sessions: Annotated[
            int | None,
            typer.Option(
                "--concurrent-sessions",
                help="Instead of --rate: run this many sessions at once, each starting when "
                "one ends.",
            ),
        ] = None,
        seed: Annotated[
            int, typer.Option("--seed", min=0, help="Seed of the --rate session starts.")
        ] = 0,
        flat_session_kv: Annotated[
            str,
            typer.Option(
                "--flat-session-kv",
                help="Verdict: p90 session KV at or above this means flat.",
            ),
        ] = "1GiB",
        reference_capacity: Annotated[
            str,
            typer.Option(
                "--reference-capacity",
                help="Verdict: weigh the memory tier at the largest --memory capacity at or "
                "below this (the smallest if all are larger).",
            ),
        ] = "256GiB",
        memory_budget: Annotated[
            str | None,
            typer.Option(
                "--memory-budget",
                help="Memory the analysis may use, e.g. 8GiB. Exact when the trace fits; "
                "otherwise the block figures take hash-partitioned exact passes and LRU stack "
                "distances come from a SHARDS sample at a rate that fits (the output says "
                "which figures are sampled). [default: 30% of this machine's memory]",
            ),
        ] = None,
        sample_rate: Annotated[
            float | None,
            typer.Option(
                "--sample-rate",
                help="Estimate stack distances from a SHARDS sample at this rate (0 < R <= 1; "
                "1 = exact) instead of the rate the memory budget picks.",
            ),
        ] = None,
        engine: Annotated[
            str,
            typer.Option(
                "--engine",
                help="local (this process) or dask (a Dask cluster: a local one, or the one "
                "--scheduler names; pip install 'fcctl[dask]').",
            ),
        ] = "local",
        scheduler: Annotated[
            str | None,
            typer.Option(
                "--scheduler",
                help="With --engine dask: the scheduler's address, e.g. tcp://10.0.0.5:8786 "
                "[default: start a local cluster].",
            ),
        ] = None,
        max_line_bytes: MaxLineBytesOpt = "64MiB",
        columns: ColumnsOpt = None,
        as_json: JsonOpt = False,
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
        from fcctl import api
        from fcctl.commands import parse
        from fcctl.common.paths import display_path
        from fcctl.reports.analyze_report import (
            check_analyze_out_dir,
            print_summary,
            write_out_dir,
        )

        # (SIGTERM/SIGHUP raise like Ctrl-C for every command: fcctl.errors.cli_errors.)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Refused before the analysis, not after minutes of it.
            if out is not None:
                check_analyze_out_dir(out, force=force)
            result = api.analyze(
                trace,
                format=format,
                columns=columns,
                max_line_bytes=parse.size(max_line_bytes, "max_line_bytes"),
                model=model,
                model_config=model_config,
                tp=tp,
                kv_dtype=kv_dtype,
                memory_capacities_bytes=(
                    None if memory is None else parse.size_list(memory, "memory_capacities_bytes")
                ),
                rate_requests_per_s=rate,
                concurrent_sessions=concurrent_sessions,
                seed=seed,
                flat_session_kv_bytes=parse.size(flat_session_kv, "flat_session_kv_bytes"),
                reference_capacity_bytes=parse.size(reference_capacity, "reference_capacity_bytes"),
                memory_budget_bytes=parse.optional_size(memory_budget, "memory_budget_bytes"),
                sample_rate=sample_rate,
                engine=engine,
                scheduler=scheduler,
                progress=True,
            )
            if out is not None:
                names = write_out_dir(result, out, force=force)
                print(f"wrote {display_path(out)}: {', '.join(names)}", file=sys.stderr)
            print_result(result, as_json=as_json, print_summary=print_summary)
        note = _library_warnings_note(list(caught))
        if note:
            print(note, file=sys.stderr)
