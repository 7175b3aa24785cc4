"""``fcctl replay``: replay a trace through memory-only, tiered and flat KV storage under load."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    ConcurrencyOpt,
    DecisionMarginOpt,
    DecisionTtftMarginOpt,
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
    ReplicasOpt,
    SampleSessionsOpt,
    SchedulerOpt,
    ScheduleSeedOpt,
    SimEngineOpt,
    SloTtftP99Opt,
    SsdOpt,
    StagingOpt,
    ThinkTimeOpt,
    TpOpt,
    print_result,
    split_sizes,
)
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("replay")
    @cli_errors
    def replay(
        trace: Annotated[
            Path, typer.Argument(help="Trace file, or a dataset directory or glob (as analyze).")
        ],
        format: FormatOpt = None,
        policies: Annotated[
            str,
            typer.Option("--policies", help="Comma-separated policies to replay."),
        ] = "memory-only,tiered,flat,flat-fcfs",
        rates: Annotated[
            str,
            typer.Option(
                "--rates",
                help="Offered rates (requests/s), comma-separated, or auto: light load to "
                "saturation.",
            ),
        ] = "auto",
        rate: OperatingRateOpt = None,
        slo_ttft_p99: SloTtftP99Opt = None,
        concurrency: ConcurrencyOpt = None,
        think_time: ThinkTimeOpt = "original",
        cancel: Annotated[
            str,
            typer.Option(
                "--cancel",
                help="A cancelled tiered prefetch: discard what it read, or credit it.",
            ),
        ] = "discard",
        memory_budget: Annotated[
            str | None,
            typer.Option(
                "--memory-budget",
                help="Memory the replay may use, e.g. 8GiB: a dataset's size check, the default "
                "--jobs, a local Dask cluster's workers [30% of this machine's].",
            ),
        ] = None,
        router: Annotated[
            str,
            typer.Option(
                "--router",
                help="kv-aware, sticky (the session's worker), round-robin, least-loaded.",
            ),
        ] = "kv-aware",
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
        short_reply: Annotated[
            int | None,
            typer.Option("--short-reply", help="Placement: a reply of at most this is short."),
        ] = None,
        agent_context: Annotated[
            int | None,
            typer.Option("--agent-context", help="Placement: a context above this goes to SSD."),
        ] = None,
        prefill_tokens_per_s: PrefillTokensPerSOpt = None,
        max_batched_tokens: MaxBatchedTokensOpt = None,
        prefill_chunk_tokens: PrefillChunkTokensOpt = None,
        io_profile: IoProfileOpt = None,
        seed: ScheduleSeedOpt = 0,
        sample_sessions: SampleSessionsOpt = None,
        decision_margin_pp: DecisionMarginOpt = 1.0,
        decision_ttft_margin: DecisionTtftMarginOpt = 0.1,
        replicas: ReplicasOpt = 1,
        jobs: JobsOpt = None,
        engine: SimEngineOpt = "local",
        scheduler: SchedulerOpt = None,
        as_json: JsonOpt = False,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Write replay.json, per-request Parquet and PNG charts."),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an earlier --out (one with replay.json).")
        ] = False,
    ) -> None:
        """Replay a trace under load: reused KV delivered to the GPU, TTFT, SSD traffic."""
        from fcctl import api
        from fcctl.errors import flag_for
        from fcctl.reports.replay_report import check_replay_out_dir, print_summary, write_out_dir

        gpu_kv, gpu_kv_more, _ = split_sizes(gpu_kv, "gpu_kv_bytes")
        host_memory, host_more, host_auto = split_sizes(host_memory, "host_memory_bytes")
        staging, staging_more, _ = split_sizes(staging, "staging_bytes")
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
        if concurrency is not None and rates == "auto":
            rates = None  # type: ignore[assignment]  # the load axis is the concurrency
        if out is not None:
            check_replay_out_dir(out, force=force)
        result = api.replay(
            trace,
            format=format,
            policies=policies,
            rates=rates,
            rate=rate,
            slo_ttft_p99_s=slo_ttft_p99,
            gpu_kv_sweep=gpu_kv_more,
            host_memory_sweep=host_more,
            staging_sweep=staging_more,
            host_memory_auto=host_auto,
            concurrency=concurrency,
            memory_budget_bytes=memory_budget,
            think_time=think_time,
            cancel=cancel,
            router=router,
            decision_margin_pp=decision_margin_pp,
            decision_ttft_margin=decision_ttft_margin,
            replicas=replicas,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            hardware=node,
            short_reply_tokens=short_reply,
            agent_context_tokens=agent_context,
            seed=seed,
            keep_tables=out is not None,
            jobs=jobs,
            engine=engine,
            scheduler=scheduler,
            sample_sessions=sample_sessions,
            progress=True,
        )
        if out is not None:
            written = write_out_dir(result, out, force=force)
            print(f"wrote {out}: {', '.join(written)}", file=sys.stderr)
        print_result(result, as_json=as_json, print_summary=print_summary)
