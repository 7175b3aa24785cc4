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

# Library parameters whose names are not the flag's (``kv_dtype`` -> ``--kv-dtype`` is the rule).
_FLAGS = {
    "rate_requests_per_s": "--rate",
    "flat_session_kv_bytes": "--flat-session-kv",
    "reference_capacity_bytes": "--reference-capacity",
    "config_path": "--model-config",
}


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
    @cli_errors(flags=_FLAGS)
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
        from fcctl.analyzers.reuse.analyze import VerdictThresholds, check_schedule_args
        from fcctl.analyzers.reuse.bounded import analyze_dataset, check_engine, check_sample_rate
        from fcctl.analyzers.traces.dataset import Dataset, is_dataset_spec, open_dataset
        from fcctl.analyzers.traces.readers import read_trace
        from fcctl.common.errors import FcctlInputError
        from fcctl.common.paths import display_path
        from fcctl.common.progress import Progress
        from fcctl.common.signals import interrupts_raise
        from fcctl.common.units import parse_size, parse_size_list
        from fcctl.layout.geometry import model_geometry
        from fcctl.reports.analyze_report import (
            check_analyze_out_dir,
            print_summary,
            write_out_dir,
        )

        # SIGTERM/SIGHUP as KeyboardInterrupt: the --out temporary directory is removed on the
        # way out and the exit status is 128 + N.
        with interrupts_raise(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Flags first: a typo should fail before minutes of parsing.
            geometry = model_geometry(model, config_path=model_config, tp=tp, kv_dtype=kv_dtype)
            capacities = parse_size_list(memory, what="--memory") if memory is not None else None
            check_schedule_args(rate, concurrent_sessions)
            thresholds = VerdictThresholds(
                flat_session_kv_bytes=parse_size(flat_session_kv, what="--flat-session-kv"),
                reference_capacity_bytes=parse_size(
                    reference_capacity, what="--reference-capacity"
                ),
            )
            line_limit = parse_size(max_line_bytes, what="--max-line-bytes")
            budget = (
                parse_size(memory_budget, what="--memory-budget")
                if memory_budget is not None
                else None
            )
            if sample_rate is not None:
                check_sample_rate(sample_rate)
            check_engine(engine, scheduler)
            if out is not None:
                check_analyze_out_dir(out, force=force)
            dataset_input = is_dataset_spec(trace)
            if dataset_input and (columns is not None or format not in (None, "parquet")):
                raise FcctlInputError(
                    f"format: {display_path(trace)} is a dataset of canonical Parquet files; "
                    "--format and --columns apply to one trace file (convert it first)",
                    parameter="format",
                )
            with Progress(enabled=True) as progress:
                if engine == "dask":
                    from fcctl.analyzers.reuse.dask_engine import analyze_dask

                    result = analyze_dask(
                        trace,
                        geometry=geometry,
                        scheduler=scheduler,
                        memory_budget_bytes=budget,
                        sample_rate=sample_rate,
                        memory_capacities_bytes=capacities,
                        progress=progress,
                        thresholds=thresholds,
                        rate_requests_per_s=rate,
                        concurrent_sessions=concurrent_sessions,
                        seed=seed,
                    )
                else:
                    if dataset_input:
                        data = open_dataset(trace, progress)
                    else:
                        data = Dataset.from_trace(
                            read_trace(
                                trace,
                                format,
                                progress=progress,
                                max_line_bytes=line_limit,
                                columns=columns,
                            )
                        )
                    result = analyze_dataset(
                        data,
                        geometry=geometry,
                        memory_budget_bytes=budget,
                        sample_rate=sample_rate,
                        memory_capacities_bytes=capacities,
                        progress=progress,
                        rate_requests_per_s=rate,
                        concurrent_sessions=concurrent_sessions,
                        seed=seed,
                        thresholds=thresholds,
                    )
            if out is not None:
                names = write_out_dir(result, out, force=force)
                print(f"wrote {display_path(out)}: {', '.join(names)}", file=sys.stderr)
            print_result(result, as_json=as_json, print_summary=print_summary)
        note = _library_warnings_note(list(caught))
        if note:
            print(note, file=sys.stderr)
