"""``fcctl iobench``: flat per-session files against eviction-ordered buckets, fio as reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fcctl.commands.options import (
    FormatOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelConfigOpt,
    ModelOpt,
    print_result,
)
from fcctl.errors import cli_errors

if TYPE_CHECKING:
    from fcctl.iobench.run import RunHooks

Opt = typer.Option
# The file every iobench --out directory holds (the JSON document): --force replaces only a
# directory that has it, so it never wipes unrelated data.
OUT_MARKER = "iobench.json"


def register(app: typer.Typer, *, hooks: RunHooks | None = None) -> None:
    """Add ``iobench`` to ``app``; ``hooks`` (tests, embedders) go to :func:`run_iobench`."""

    @app.command("iobench")
    @cli_errors
    def iobench(
        dir: Annotated[
            Path | None,
            Opt("--dir", help="Write here (in a new subdirectory); default: a new temp dir."),
        ] = None,
        force: Annotated[
            bool,
            Opt(
                "--force",
                help="Use a non-empty --dir (still writes only in our subdirectory); replace an "
                "earlier iobench --out directory (one holding iobench.json).",
            ),
        ] = False,
        keep: Annotated[bool, Opt("--keep", help="Keep the written files.")] = False,
        layout: Annotated[str, Opt("--layout", help="flat, eviction or both.")] = "both",
        trace: Annotated[
            Path | None, Opt("--trace", help="Take sessions and turns from this trace.")
        ] = None,
        trace_format: FormatOpt = None,
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
        model: ModelOpt = "llama-3.1-8b",
        model_config: ModelConfigOpt = None,
        tp: Annotated[
            int | None,
            Opt(
                "--tp",
                help="Tensor-parallel ranks of one serving instance (same meaning in every "
                "command); iobench sizes one rank's KV (a session file holds one rank's).",
            ),
        ] = None,
        kv_dtype: KvDtypeOpt = None,
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
            float, Opt("--fio-runtime", help="Seconds per fio sequential job (0.001-3600).")
        ] = 1.5,
        verify_checksums: Annotated[
            bool,
            Opt(
                "--verify-checksums/--no-verify-checksums",
                help="Check the flat files' layer checksums inside the timed restore.",
            ),
        ] = True,
        free_margin: Annotated[
            str | None,
            Opt(
                "--free-margin",
                help="Free space to leave on the --dir filesystem (default: max(1GiB, 5%)).",
            ),
        ] = None,
        json_out: JsonOpt = False,
        out: Annotated[
            Path | None,
            Opt(
                "--out",
                help="Also write iobench.json, runs.parquet and PNG charts into this new "
                "directory (all or nothing).",
            ),
        ] = None,
    ) -> None:
        """Write sessions as flat files and as eviction-ordered buckets; restore both cold; fio."""
        from fcctl import api
        from fcctl.commands import parse
        from fcctl.common.outdir import check_out_dir

        if out is not None:  # refused before the run, not after minutes of it
            check_out_dir(out, force=force, marker=OUT_MARKER, command="iobench")
        result = api.iobench(
            dir,
            force=force,
            keep=keep,
            layout=layout,
            trace=trace,
            trace_format=trace_format,
            scale=scale,
            size_limit_bytes=parse.size(size_limit, "size_limit_bytes"),
            sessions=sessions,
            tokens=tokens,
            turns=turns,
            model=model,
            model_config=model_config,
            tp=tp,
            kv_dtype=kv_dtype,
            block_tokens=block_tokens,
            bucket_bytes=parse.size(bucket_size, "bucket_bytes"),
            memory_tier_bytes=parse.optional_size(memory_tier, "memory_tier_bytes"),
            concurrency=parse.int_list(concurrency, "concurrency"),
            repeat=repeat,
            engine=engine,
            engine_threads=threads,
            max_command_bytes=parse.optional_size(max_command, "max_command_bytes"),
            buffers=buffers,
            fio=not no_fio,
            fio_runtime_s=fio_runtime,
            verify_checksums=verify_checksums,
            free_margin_bytes=parse.optional_size(free_margin, "free_margin_bytes"),
            progress=True,
            hooks=hooks,
        )
        if keep:
            print(f"iobench: kept the files in {result.directory}", file=sys.stderr)

        from fcctl.reports.iobench_report import print_summary, write_out_dir

        print_result(result, as_json=json_out, print_summary=print_summary)
        if out is not None:
            for name in write_out_dir(result, out, force=force):
                print(f"iobench: wrote {out / name}", file=sys.stderr)
        result.check_verified()  # a piece read back wrong: one line, exit 1
