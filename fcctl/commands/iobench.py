"""``fcctl iobench``: flat per-session files against eviction-ordered buckets, fio as reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fcctl.errors import cli_errors, fail

Opt = typer.Option


def register(app: typer.Typer) -> None:
    @app.command("iobench")
    @cli_errors
    def iobench(
        dir: Annotated[
            Path | None,
            Opt("--dir", help="Write here (in a new subdirectory); default: a new temp dir."),
        ] = None,
        force: Annotated[
            bool,
            Opt("--force", help="Use a non-empty --dir (still writes only in our subdirectory)."),
        ] = False,
        keep: Annotated[bool, Opt("--keep", help="Keep the written files.")] = False,
        layout: Annotated[str, Opt("--layout", help="flat, eviction or both.")] = "both",
        trace: Annotated[
            Path | None, Opt("--trace", help="Take sessions and turns from this trace.")
        ] = None,
        trace_format: Annotated[
            str | None, Opt("--format", help="Trace format (detected if omitted).")
        ] = None,
        scale: Annotated[
            float, Opt("--scale", help="Multiply trace token counts (then fit --size-limit).")
        ] = 1.0,
        size_limit: Annotated[
            str,
            Opt(
                "--size-limit", help="Most KV bytes per layout (trace workloads are scaled to fit)."
            ),
        ] = "2GiB",
        sessions: Annotated[
            int,
            Opt("--sessions", help="Sessions (synthetic; first N multi-turn sessions of a trace)."),
        ] = 16,
        tokens: Annotated[int, Opt("--tokens", help="Tokens per synthetic session.")] = 1024,
        turns: Annotated[int, Opt("--turns", help="Turns per synthetic session.")] = 4,
        model: Annotated[
            str, Opt("--model", help="Model preset for the KV geometry.")
        ] = "llama-3.1-8b",
        model_config: Annotated[
            Path | None, Opt("--model-config", help="Hugging Face config.json instead of a preset.")
        ] = None,
        tp: Annotated[
            int | None, Opt("--tp", help="Tensor-parallel ranks (sizes are one rank's).")
        ] = None,
        kv_dtype: Annotated[
            str | None, Opt("--kv-dtype", help="KV dtype (bf16, fp8, ...).")
        ] = None,
        block_tokens: Annotated[int, Opt("--block-tokens", help="Tokens per KV page.")] = 16,
        bucket_size: Annotated[
            str, Opt("--bucket-size", help="Eviction bucket file size.")
        ] = "256MiB",
        memory_tier: Annotated[
            str | None,
            Opt(
                "--memory-tier",
                help="LRU memory tier of the baseline (default 1/8 of the workload).",
            ),
        ] = None,
        concurrency: Annotated[
            str, Opt("--concurrency", help="Sessions restored at once, e.g. 1,4,16.")
        ] = "1,4,16",
        repeat: Annotated[int, Opt("--repeat", help="Repeat and report medians.")] = 1,
        engine: Annotated[
            str | None,
            Opt(
                "--engine",
                help="posix or kvikio (default: kvikio if it can read here, else posix).",
            ),
        ] = None,
        threads: Annotated[
            int | None, Opt("--threads", help="Reader threads (commands in flight).")
        ] = None,
        max_command: Annotated[
            str | None,
            Opt("--max-command", help="Split flat reads into commands of at most this size."),
        ] = None,
        buffers: Annotated[
            str, Opt("--buffers", help="Restore into host or gpu memory (auto: gpu for kvikio).")
        ] = "auto",
        no_fio: Annotated[bool, Opt("--no-fio", help="Skip the fio reference.")] = False,
        fio_runtime: Annotated[
            float, Opt("--fio-runtime", help="Seconds per fio sequential job.")
        ] = 1.5,
        json_out: Annotated[bool, Opt("--json", help="Print one JSON document to stdout.")] = False,
        out: Annotated[
            Path | None, Opt("--out", help="Also write runs.parquet and PNG charts here.")
        ] = None,
    ) -> None:
        """Write sessions as flat files and as eviction-ordered buckets; restore both cold; fio."""
        from fcctl.common.units import parse_int_list, parse_size
        from fcctl.iobench.bench import BenchFailed, IobenchConfig, run_iobench

        if out is not None and out.exists() and not out.is_dir():
            raise fail(f"--out: must be a directory; got a file {str(out)!r}")
        if out is not None and not out.exists() and not out.parent.is_dir():
            raise fail(f"--out: the parent directory does not exist; got {str(out)!r}")
        config = IobenchConfig(
            directory=dir,
            force=force,
            keep=keep,
            layout=layout,
            trace=trace,
            trace_format=trace_format,
            scale=scale,
            size_limit_bytes=parse_size(size_limit, what="--size-limit"),
            sessions=sessions,
            tokens=tokens,
            turns=turns,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            block_tokens=block_tokens,
            bucket_bytes=parse_size(bucket_size, what="--bucket-size"),
            memory_tier_bytes=None
            if memory_tier is None
            else parse_size(memory_tier, what="--memory-tier"),
            concurrency=tuple(parse_int_list(concurrency, what="--concurrency")),
            repeat=repeat,
            engine=engine,
            engine_threads=threads,
            max_command_bytes=None
            if max_command is None
            else parse_size(max_command, what="--max-command"),
            buffers=buffers,
            fio=not no_fio,
            fio_runtime_s=fio_runtime,
        )
        try:
            result = run_iobench(config, progress=True)
        except BenchFailed as e:  # a disk error or a file changed under the run: exit 1
            raise fail(str(e), code=1) from None
        if keep:
            print(f"iobench: kept the files in {result.provenance['directory']}", file=sys.stderr)

        from fcctl.reports.iobench_report import print_json, render_table, write_outputs

        if json_out:
            print_json(result)
        else:
            render_table(result)
        if out is not None:
            for path in write_outputs(result, out):
                print(f"iobench: wrote {path}", file=sys.stderr)
        if result.mismatched_blocks:
            raise fail(
                f"verification failed: {result.mismatched_blocks} block pieces read back wrong "
                f"(first: {'; '.join(result.mismatch_examples[:1]) or 'unknown'})",
                code=1,
            )
