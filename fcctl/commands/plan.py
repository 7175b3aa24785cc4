"""``fcctl plan``: analyze, replay, recommend (and emit) and one report, decision first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    NODE_FLAGS,
    AmplifyOpt,
    ConcurrencyOpt,
    EmitNameOpt,
    FormatOpt,
    JobsOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelConfigOpt,
    ModelOpt,
    NodeFlags,
    OperatingRateOpt,
    SampleSessionsOpt,
    SchedulerOpt,
    SimEngineOpt,
    SloTtftP99Opt,
    ThinkTimeOpt,
    TpOpt,
    node_options,
)
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @cli_errors
    @node_options
    def plan(
        trace: Annotated[Path, typer.Argument(help="Trace file (anything analyze reads).")],
        out: Annotated[Path, typer.Option("-o", "--out", help="Plan directory (new or empty).")],
        format: FormatOpt = None,
        rate: OperatingRateOpt = None,
        concurrency: ConcurrencyOpt = None,
        think_time: ThinkTimeOpt = "original",
        model: ModelOpt = "llama-3.1-8b",
        model_config: ModelConfigOpt = None,
        tp: TpOpt = None,
        kv_dtype: KvDtypeOpt = None,
        node: NodeFlags = NODE_FLAGS,
        slo_ttft_p99: SloTtftP99Opt = None,
        sample_sessions: SampleSessionsOpt = None,
        amplify: AmplifyOpt = 1,
        emit: Annotated[
            bool, typer.Option("--emit", help="Also write the drop-in package into DIR/emit.")
        ] = False,
        emit_name: EmitNameOpt = "flatcake_store",
        jobs: JobsOpt = None,
        engine: SimEngineOpt = "local",
        scheduler: SchedulerOpt = None,
        resume: Annotated[
            bool,
            typer.Option(
                "--resume",
                help="Reuse the steps whose inputs and outputs did not change; continue an "
                "interrupted plan.",
            ),
        ] = False,
        force: Annotated[
            bool, typer.Option("--force", help="Run every step again over an earlier plan.")
        ] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """From a trace to one decision: analyze, replay under load, recommend thresholds, report.

        Runs the commands' own libraries in order into DIR (analyze.json, replay.json,
        recommend.json, emit/, report.html, plan.json) and prints the decision first: at
        --rate/--concurrency when given, else across the loads swept (light load to
        saturation).
        """
        import sys

        from fcctl.api import plan as run_plan
        from fcctl.commands import parse
        from fcctl.common.jsonio import write_json

        sized = node.build(sweeps=("host_memory",))
        result = run_plan(
            trace,
            out,
            format=format,
            rate=rate,
            concurrency=None if concurrency is None else parse.concurrency(concurrency),
            think_time=parse.think_time(think_time),
            hardware=sized.hardware,
            host_memory_sweep=sized.host_memory_sweep,
            host_memory_auto=sized.host_memory_auto,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            slo_ttft_p99_s=slo_ttft_p99,
            emit=emit,
            emit_name=emit_name,
            jobs=jobs,
            engine=engine,
            scheduler=scheduler,
            resume=resume,
            force=force,
            sample_sessions=sample_sessions,
            amplify=amplify,
            progress=True,
        )
        if as_json:
            write_json(result, sys.stdout)
            return
        for line in result.summary:
            print(line)
        ran = ", ".join(
            f"{s.name} {s.status}{f' {s.seconds:.1f} s' if s.status == 'ran' else ''}"
            for s in result.steps
        )
        print(f"wrote {out}: {ran}", file=sys.stderr)
