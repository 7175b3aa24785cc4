"""``fcctl synth``: a seeded synthetic trace as canonical partitioned Parquet."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from fcctl.errors import cli_errors

Opt = typer.Option
# Spelled out so that `fcctl --help` does not import polars; tests check they match PROFILES.
PROFILE_NAMES: tuple[str, ...] = ("chat", "agent", "mixed")


def register(app: typer.Typer) -> None:
    @app.command("synth")
    @cli_errors(
        flags={"partition_rows": "--partition-rows", "block_size_tokens": "--block-size-tokens"}
    )
    def synth(
        requests: Annotated[int, Opt("--requests", help="Requests in the trace.")],
        sessions: Annotated[int, Opt("--sessions", help="Sessions (each has >= 1 request).")],
        out: Annotated[Path, Opt("-o", "--out", help="Output directory (absent or empty).")],
        profile: Annotated[
            str, Opt("--profile", help=f"Workload shape: {', '.join(PROFILE_NAMES)}.")
        ] = "mixed",
        seed: Annotated[int, Opt("--seed", help="Random seed; same seed, same bytes.")] = 0,
        block_size_tokens: Annotated[
            int, Opt("--block-size-tokens", help="Tokens per hashed block.")
        ] = 64,
        partition_rows: Annotated[
            int,
            Opt(
                "--partition-rows", help="Most requests per part file (also cut at 32 Mi accesses)."
            ),
        ] = 65_536,
        force: Annotated[
            bool, Opt("--force", help="Replace an earlier synth output (a dir with synth.json).")
        ] = False,
    ) -> None:
        """Generate a seeded synthetic trace (chat, agent, mixed) as canonical Parquet parts.

        Shared system prompts, multi-turn sessions that grow by appended turns, Poisson session
        starts; deterministic for a seed. Writes part-NNNNN.parquet files and synth.json.
        """
        from fcctl.analyzers.traces.synth import write_synth
        from fcctl.common.paths import display_path

        start = time.perf_counter()
        result = write_synth(
            out,
            profile,
            requests,
            sessions,
            seed=seed,
            block_size_tokens=block_size_tokens,
            partition_rows=partition_rows,
            force=force,
        )
        on_disk = sum(p.bytes for p in result.parts)
        print(
            f"wrote {display_path(out)}: {result.profile} profile, {result.requests:,} requests, "
            f"{result.sessions:,} sessions, {result.block_accesses:,} block accesses in "
            f"{len(result.parts)} part(s), {on_disk / 2**20:,.1f} MiB "
            f"({time.perf_counter() - start:.1f} s)",
            file=sys.stderr,
        )
