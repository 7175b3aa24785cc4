"""``fcctl recommend-thresholds``: sweep the placement thresholds on a trace, recommend a pair,
and optionally emit the drop-in package with them baked in."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fcctl.commands import FORMAT_NAMES
from fcctl.errors import cli_errors

if TYPE_CHECKING:
    from fcctl.analyzers.replay import Hardware

_FLAGS = {"config_path": "--model-config"}


def hardware_from_flags(hardware: str | None, io_profile: Path | None, **sizes: Any) -> Hardware:
    """The simulated node: preset or hw.toml, then the size and rate flags, then an io-profile
    (the order and the flag names of ``fcctl replay``)."""
    from fcctl.analyzers.replay import apply_io_profile, load_hardware, with_values
    from fcctl.common.units import parse_size

    hw = load_hardware(hardware)
    for key, value in sizes.items():
        if value is None:
            continue
        flag = f"--{key.replace('_bytes', '').replace('_', '-')}"
        if key.endswith("_bytes"):
            value = parse_size(value, what=flag)
        hw = with_values(hw, {key: value}, flag)
    if io_profile is not None:
        hw = apply_io_profile(hw, io_profile)
    return hw


def register(app: typer.Typer) -> None:
    @app.command("recommend-thresholds")
    @cli_errors(flags=_FLAGS)
    def recommend_thresholds(
        trace: Annotated[Path, typer.Argument(help="Trace file (anything analyze reads).")],
        format: Annotated[
            str | None,
            typer.Option(
                "--format", help=f"Input format ({', '.join(FORMAT_NAMES)}); detected if omitted."
            ),
        ] = None,
        rates: Annotated[
            str, typer.Option("--rates", help="Comma-separated request rates (requests/s).")
        ] = "0.1,0.25,0.5,1.0",
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
        jobs: Annotated[
            int | None,
            typer.Option("--jobs", help="Simulations run in parallel processes [CPUs available]."),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON document on stdout.")
        ] = False,
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
        emit_name: Annotated[
            str, typer.Option("--emit-name", help="Package name for --emit.")
        ] = "flatcake_store",
        force: Annotated[
            bool,
            typer.Option("--force", help="Replace an earlier --out / --emit of this command."),
        ] = False,
    ) -> None:
        """Recommend FlatCake's placement thresholds for a trace: sweep, baselines, misplacement."""
        from fcctl.analyzers.emit import MANIFEST, check_name, emit_package
        from fcctl.analyzers.readers import read_trace
        from fcctl.analyzers.recommend import (
            RecommendConfig,
            default_jobs,
            parse_grid,
            recommend_thresholds,
            thresholds_source,
            thresholds_toml,
        )
        from fcctl.common.errors import FcctlInputError
        from fcctl.common.jsonio import write_json
        from fcctl.common.outdir import check_out_dir
        from fcctl.common.progress import Progress
        from fcctl.layout.geometry import model_geometry
        from fcctl.reports.recommend_report import (
            check_recommend_out_dir,
            print_summary,
            write_out_dir,
        )

        geometry = model_geometry(model, config_path=model_config, tp=tp, kv_dtype=kv_dtype)
        hw = hardware_from_flags(
            hardware, io_profile, gpus=gpus, gpu_kv_bytes=gpu_kv, host_memory_bytes=host_memory,
            ssd_bytes=ssd, staging_bytes=staging, prefill_tokens_per_s=prefill_tokens_per_s,
        )  # fmt: skip
        try:
            rate_list = tuple(float(x) for x in rates.split(","))
        except ValueError:
            raise FcctlInputError(
                f"--rates: expected comma-separated numbers like 0.1,0.5; got {rates!r}"
            ) from None
        # Every output path is checked before the sweep, so a bad one costs nothing.
        if out is not None:
            check_recommend_out_dir(out, force=force)
        if emit is not None:
            check_name(emit_name)
            check_out_dir(emit, force=force, marker=f"{emit_name}/{MANIFEST}",
                          command="--emit", flag="--emit")  # fmt: skip
        config = RecommendConfig(
            geometry=geometry,
            hardware=hw,
            rates=rate_list,
            short_reply_grid=None
            if short_reply is None
            else parse_grid(short_reply, "--short-reply"),
            agent_context_grid=None
            if agent_context is None
            else parse_grid(agent_context, "--agent-context"),
            objective=objective,
            target_rate=target_rate,
            seed=seed,
            jobs=default_jobs() if jobs is None else jobs,
        )
        with Progress(enabled=True) as progress:
            # No name holds the parsed trace here: with worker processes the sweep can let go
            # of it once they have their copies.
            result = recommend_thresholds(
                read_trace(trace, format, progress=progress), config, progress=progress
            )
        if out is not None:
            written = write_out_dir(result, out, force=force)
            print(f"wrote {out}: {', '.join(written)}", file=sys.stderr)
        if emit is not None:
            rec = result.recommendation
            emitted = emit_package(
                emit, name=emit_name, short_reply_tokens=rec.short_reply_tokens,
                agent_context_tokens=rec.agent_context_tokens, source=thresholds_source(result),
                toml_text=thresholds_toml(result), force=force,
            )  # fmt: skip
            print(
                f"wrote {emitted.package_dir}: {len(emitted.copied)} core modules, "
                f"{', '.join(emitted.generated)}, {MANIFEST} (check: python -m {emit_name}.smoke)",
                file=sys.stderr,
            )
        if as_json:
            write_json(result, sys.stdout)
        else:
            print_summary(result)
