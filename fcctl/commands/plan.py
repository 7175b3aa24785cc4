"""``fcctl plan``: analyze, replay, recommend (and emit) and one report, decision first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    AmplifyOpt,
    ConcurrencyOpt,
    EmitNameOpt,
    FormatOpt,
    GpuKvOpt,
    GpusOpt,
    HardwareOpt,
    HostMemoryOpt,
    HostScopeOpt,
    IoProfileOpt,
    JobsOpt,
    JsonOpt,
    KvDtypeOpt,
    MaxBatchedTokensOpt,
    ModelConfigOpt,
    ModelOpt,
    OperatingRateOpt,
    PrefillChunkTokensOpt,
    PrefillTokensPerSOpt,
    SampleSessionsOpt,
    SchedulerOpt,
    SimEngineOpt,
    SloTtftP99Opt,
    SsdOpt,
    StagingOpt,
    ThinkTimeOpt,
    TpOpt,
    split_sizes,
)
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @cli_errors
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
        hardware: HardwareOpt = None,
        gpus: GpusOpt = None,
        gpu_kv: GpuKvOpt = None,
        host_memory: HostMemoryOpt = None,
        ssd: SsdOpt = None,
        staging: StagingOpt = None,
        host_scope: HostScopeOpt = None,
        prefill_tokens_per_s: PrefillTokensPerSOpt = None,
        max_batched_tokens: MaxBatchedTokensOpt = None,
        prefill_chunk_tokens: PrefillChunkTokensOpt = None,
        io_profile: IoProfileOpt = None,
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

        from fcctl import api
        from fcctl.api import plan as run_plan
        from fcctl.common.jsonio import write_json
        from fcctl.errors import flag_for

        host_memory, host_more, host_auto = split_sizes(host_memory, "host_memory_bytes")
        node = api.hardware(
            hardware,
            io_profile=io_profile,
            gpus=gpus,
            gpu_kv_bytes=gpu_kv,
            host_memory_bytes=host_memory,
            ssd_bytes=ssd,
            staging_bytes=staging,
            prefill_tokens_per_s=prefill_tokens_per_s,
            max_batched_tokens=max_batched_tokens,
            prefill_chunk_tokens=prefill_chunk_tokens,
            host_scope=host_scope,
            source_of=flag_for,
        )
        result = run_plan(
            trace,
            out,
            format=format,
            rate=rate,
            concurrency=concurrency,
            think_time=think_time,
            hardware=node,
            host_memory_sweep=host_more,
            host_memory_auto=host_auto,
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
