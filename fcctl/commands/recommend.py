"""``fcctl recommend-thresholds``: sweep the placement thresholds on a trace, recommend a pair,
and optionally emit the drop-in package with them baked in."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands.options import (
    NODE_FLAGS,
    AmplifyOpt,
    DecisionMarginOpt,
    DecisionTtftMarginOpt,
    EmitNameOpt,
    FormatOpt,
    JobsOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelConfigOpt,
    ModelOpt,
    NodeFlags,
    RatesOpt,
    SampleSessionsOpt,
    SchedulerOpt,
    ScheduleSeedOpt,
    SimEngineOpt,
    TpOpt,
    node_options,
    print_result,
)
from fcctl.errors import cli_errors


def register(app: typer.Typer) -> None:
    @app.command("recommend-thresholds")
    @cli_errors
    @node_options
    def recommend_thresholds(
        trace: Annotated[Path, typer.Argument(help="Trace file (anything analyze reads).")],
        format: FormatOpt = None,
        rates: RatesOpt = "0.1,0.25,0.5,1.0",
        short_reply: Annotated[
            str | None,
            typer.Option(
                "--short-reply",
                help="Short-reply thresholds to sweep (tokens, e.g. 256,512,1024); default: "
                "from the trace's previous-reply percentiles.",
            ),
        ] = None,
        agent_context: Annotated[
            str | None,
            typer.Option(
                "--agent-context",
                help="Agent-context thresholds to sweep (tokens, e.g. 8192,32768); default: "
                "from the trace's context percentiles.",
            ),
        ] = None,
        objective: Annotated[
            str,
            typer.Option(
                "--objective",
                help="hit: highest GPU hit share, ties by p99 TTFT; ttft-p99: the reverse.",
            ),
        ] = "hit",
        target_rate: Annotated[
            float | None,
            typer.Option("--target-rate", help="Rate the pick is made at [the highest rate]."),
        ] = None,
        model: ModelOpt = "llama-3.1-8b",
        model_config: ModelConfigOpt = None,
        tp: TpOpt = None,
        kv_dtype: KvDtypeOpt = None,
        node: NodeFlags = NODE_FLAGS,
        seed: ScheduleSeedOpt = 0,
        sample_sessions: SampleSessionsOpt = None,
        amplify: AmplifyOpt = 1,
        decision_margin_pp: DecisionMarginOpt = 1.0,
        decision_ttft_margin: DecisionTtftMarginOpt = 0.1,
        jobs: JobsOpt = None,
        engine: SimEngineOpt = "local",
        scheduler: SchedulerOpt = None,
        as_json: JsonOpt = False,
        out: Annotated[
            Path | None,
            typer.Option(
                "--out", help="Write recommend.json, thresholds.toml, Parquet tables, PNG charts."
            ),
        ] = None,
        emit: Annotated[
            Path | None,
            typer.Option(
                "--emit", help="Write the drop-in package (core modules + thresholds) into DIR."
            ),
        ] = None,
        emit_name: EmitNameOpt = "flatcake_store",
        force: Annotated[
            bool,
            typer.Option("--force", help="Replace an earlier --out / --emit of this command."),
        ] = False,
    ) -> None:
        """Recommend FlatCake's placement thresholds for a trace: sweep, baselines, misplacement."""
        from fcctl import api
        from fcctl.analyzers.recommend.emit import (
            MANIFEST,
            check_distinct_outputs,
            check_name,
            emit_package,
        )
        from fcctl.commands import parse
        from fcctl.common.outdir import check_out_dir, outputs_together
        from fcctl.reports.recommend_report import (
            check_recommend_out_dir,
            print_summary,
            write_out_dir,
        )

        hw = node.build().hardware
        # Every output path is checked before the sweep, so a bad one costs nothing.
        check_distinct_outputs(out, emit)
        if out is not None:
            check_recommend_out_dir(out, force=force)
        if emit is not None:
            check_name(emit_name)
            check_out_dir(
                emit, force=force, marker=f"{emit_name}/{MANIFEST}", command="--emit", flag="--emit"
            )
        result = api.recommend_thresholds(
            trace,
            format=format,
            rates=parse.numbers(rates, "rates"),
            short_reply_grid=None
            if short_reply is None
            else parse.grid(short_reply, "short_reply_grid"),
            agent_context_grid=(
                None if agent_context is None else parse.grid(agent_context, "agent_context_grid")
            ),
            objective=objective,
            target_rate=target_rate,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            hardware=hw,
            seed=seed,
            jobs=jobs,
            engine=engine,
            scheduler=scheduler,
            decision_margin_pp=decision_margin_pp,
            decision_ttft_margin=decision_ttft_margin,
            sample_sessions=sample_sessions,
            amplify=amplify,
            progress=True,
        )
        wrote = []
        # Both outputs or neither: a full disk while emitting must not leave --out behind.
        with outputs_together():
            if out is not None:
                written = write_out_dir(result, out, force=force)
                wrote.append(f"wrote {out}: {', '.join(written)}")
            if emit is not None:
                emitted = emit_package(emit, result, name=emit_name, force=force)
                wrote.append(
                    f"wrote {emitted.package_dir}: {len(emitted.copied)} core modules, "
                    f"{', '.join(emitted.generated)}, {MANIFEST}; {emit}/pyproject.toml "
                    f"(install: pip install {emit}; check: python -m {emit_name}.smoke)"
                )
        for line in wrote:
            print(line, file=sys.stderr)
        print_result(result, as_json=as_json, print_summary=print_summary)
