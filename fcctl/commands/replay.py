"""``fcctl replay``: replay a trace through memory-only, tiered and flat KV storage under load."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.commands import FORMAT_NAMES
from fcctl.errors import cli_errors

# Library parameters whose flag is not simply --name-with-dashes.
_FLAGS = {
    "config_path": "--model-config",
    "short_reply_tokens": "--short-reply",
    "agent_context_tokens": "--agent-context",
}


def register(app: typer.Typer) -> None:
    @app.command("replay")
    @cli_errors(flags=_FLAGS)
    def replay(
        trace: Annotated[Path, typer.Argument(help="Trace file (anything analyze reads).")],
        format: Annotated[
            str | None,
            typer.Option(
                "--format", help=f"Input format ({', '.join(FORMAT_NAMES)}); detected if omitted."
            ),
        ] = None,
        policies: Annotated[
            str,
            typer.Option("--policies", help="Comma-separated policies to replay."),
        ] = "memory-only,tiered,flat,flat-fcfs",
        rates: Annotated[
            str, typer.Option("--rates", help="Comma-separated request rates (requests/s).")
        ] = "0.1,0.25,0.5,1.0",
        model: Annotated[
            str, typer.Option("--model", help="KV geometry preset (as analyze).")
        ] = "llama-3.1-8b",
        model_config: Annotated[
            Path | None,
            typer.Option("--model-config", help="Hugging Face config.json (overrides --model)."),
        ] = None,
        tp: Annotated[
            int | None, typer.Option("--tp", help="Tensor-parallel GPUs per serving instance.")
        ] = None,
        kv_dtype: Annotated[
            str | None, typer.Option("--kv-dtype", help="KV dtype: bf16, fp16, fp8, fp32.")
        ] = None,
        hardware: Annotated[
            str | None,
            typer.Option(
                "--hardware", help="Preset (h100-8x, h200-8x, b200-8x) or hw.toml [h200-8x]."
            ),
        ] = None,
        gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs on the node.")] = None,
        gpu_kv: Annotated[
            str | None, typer.Option("--gpu-kv", help="GPU KV-cache bytes per GPU, e.g. 40GiB.")
        ] = None,
        host_memory: Annotated[
            str | None, typer.Option("--host-memory", help="Host memory for KV per node.")
        ] = None,
        ssd: Annotated[str | None, typer.Option("--ssd", help="SSD for KV per node.")] = None,
        staging: Annotated[
            str | None,
            typer.Option("--staging", help="Host staging buffer per node (tiered)."),
        ] = None,
        short_reply: Annotated[
            int | None,
            typer.Option("--short-reply", help="Placement: a reply of at most this is short."),
        ] = None,
        agent_context: Annotated[
            int | None,
            typer.Option("--agent-context", help="Placement: a context above this goes to SSD."),
        ] = None,
        prefill_tokens_per_s: Annotated[
            float | None,
            typer.Option(
                "--prefill-tokens-per-s", help="Prefill rate instead of the fitted model."
            ),
        ] = None,
        io_profile: Annotated[
            Path | None,
            typer.Option("--io-profile", help="`fcctl iobench --json` document: SSD figures."),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the session schedule.")] = 0,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON document on stdout.")
        ] = False,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Write replay.json, per-request Parquet and PNG charts."),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an earlier --out (one with replay.json).")
        ] = False,
    ) -> None:
        """Replay a trace under load: reused KV delivered to the GPU, TTFT, SSD traffic."""
        from fcctl.analyzers.readers import read_trace
        from fcctl.analyzers.replay import (
            ReplayConfig,
            apply_io_profile,
            load_hardware,
            replay_trace,
            with_values,
        )
        from fcctl.common.errors import FcctlInputError
        from fcctl.common.jsonio import write_json
        from fcctl.common.progress import Progress
        from fcctl.common.units import parse_size
        from fcctl.layout.geometry import model_geometry
        from fcctl.layout.placement import PlacementRule
        from fcctl.reports.replay_report import check_replay_out_dir, print_summary, write_out_dir

        geometry = model_geometry(model, config_path=model_config, tp=tp, kv_dtype=kv_dtype)
        hw = load_hardware(hardware)
        flags = {
            "gpus": gpus,
            "gpu_kv_bytes": None if gpu_kv is None else parse_size(gpu_kv, what="--gpu-kv"),
            "host_memory_bytes": None
            if host_memory is None
            else parse_size(host_memory, what="--host-memory"),
            "ssd_bytes": None if ssd is None else parse_size(ssd, what="--ssd"),
            "staging_bytes": None if staging is None else parse_size(staging, what="--staging"),
            "prefill_tokens_per_s": prefill_tokens_per_s,
        }
        for key, value in flags.items():
            if value is not None:
                hw = with_values(
                    hw, {key: value}, f"--{key.replace('_bytes', '').replace('_', '-')}"
                )
        if io_profile is not None:
            hw = apply_io_profile(hw, io_profile)
        rule_args = {}
        if short_reply is not None:
            rule_args["short_reply_tokens"] = short_reply
        if agent_context is not None:
            rule_args["agent_context_tokens"] = agent_context
        rule = PlacementRule(**rule_args)
        try:
            rate_list = tuple(float(x) for x in rates.split(","))
        except ValueError:
            raise FcctlInputError(
                f"--rates: expected comma-separated numbers like 0.1,0.5; got {rates!r}"
            ) from None
        names = tuple(p.strip() for p in policies.split(",") if p.strip())
        if out is not None:
            check_replay_out_dir(out, force=force)
        config = ReplayConfig(
            geometry=geometry, hardware=hw, policies=names, rates=rate_list, placement=rule,
            seed=seed, keep_tables=out is not None,
        )  # fmt: skip
        with Progress(enabled=True) as progress:
            parsed = read_trace(trace, format, progress=progress)
            result = replay_trace(parsed, config, progress=progress)
        if out is not None:
            written = write_out_dir(result, out, force=force)
            print(f"wrote {out}: {', '.join(written)}", file=sys.stderr)
        if as_json:
            write_json(result, sys.stdout)
        else:
            print_summary(result)
