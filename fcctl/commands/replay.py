"""``fcctl replay``: replay a trace through memory-only, tiered and flat KV storage under load."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    NODE_FLAGS,
    AmplifyOpt,
    ConcurrencyOpt,
    DecisionMarginOpt,
    DecisionTtftMarginOpt,
    FormatOpt,
    JobsOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelConfigOpt,
    ModelOpt,
    NodeFlags,
    OperatingRateOpt,
    ReplicasOpt,
    SampleSessionsOpt,
    SchedulerOpt,
    ScheduleSeedOpt,
    SimEngineOpt,
    SloTtftP99Opt,
    ThinkTimeOpt,
    TpOpt,
    node_options,
    print_result,
)
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("replay")
    @cli_errors
    @node_options
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
        amplify: AmplifyOpt = 1,
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
        node: NodeFlags = NODE_FLAGS,
        short_reply: Annotated[
            int | None,
            typer.Option("--short-reply", help="Placement: a reply of at most this is short."),
        ] = None,
        agent_context: Annotated[
            int | None,
            typer.Option("--agent-context", help="Placement: a context above this goes to SSD."),
        ] = None,
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
        from fcctl.commands import parse
        from fcctl.reports.replay_report import check_replay_out_dir, print_summary, write_out_dir

        sized = node.build(sweeps=("gpu_kv", "host_memory", "staging"))
        # The load axis is the concurrency when it is given (its default rates are "auto").
        offered = None if concurrency is not None and rates == "auto" else parse.rates(rates)
        if out is not None:
            check_replay_out_dir(out, force=force)
        result = api.replay(
            trace,
            format=format,
            policies=parse.names(policies),
            rates=offered,
            rate=rate,
            slo_ttft_p99_s=slo_ttft_p99,
            gpu_kv_sweep=sized.gpu_kv_sweep,
            host_memory_sweep=sized.host_memory_sweep,
            staging_sweep=sized.staging_sweep,
            host_memory_auto=sized.host_memory_auto,
            concurrency=None if concurrency is None else parse.concurrency(concurrency),
            amplify=amplify,
            memory_budget_bytes=parse.optional_size(memory_budget, "memory_budget_bytes"),
            think_time=parse.think_time(think_time),
            cancel=cancel,
            router=router,
            decision_margin_pp=decision_margin_pp,
            decision_ttft_margin=decision_ttft_margin,
            replicas=replicas,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            hardware=sized.hardware,
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
