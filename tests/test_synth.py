"""The synthetic generator: canonical parts, realistic shapes, determinism, bounded partitions."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.schema import SCHEMA
from fcctl.analyzers.traces.synth import (
    AGENT,
    MANIFEST,
    PROFILES,
    Profile,
    generate,
    write_synth,
)
from fcctl.analyzers.traces.trace_metadata import (
    METADATA_KEY,
    PARTITION_KEY,
    parse_partition_metadata,
    parse_trace_metadata,
)
from fcctl.cli import app
from fcctl.commands.synth import PROFILE_NAMES
from fcctl.common.errors import FcctlInputError


def _all(profile: str | Profile, requests: int, sessions: int, **kw: int) -> pl.DataFrame:
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    return pl.concat(list(generate(prof, requests, sessions, **kw)))


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_parts_are_canonical_and_deterministic(tmp_path: Path) -> None:
    a = write_synth(tmp_path / "a", "mixed", 3000, 80, seed=4, partition_rows=1000)
    write_synth(tmp_path / "b", "mixed", 3000, 80, seed=4, partition_rows=1000)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")  # same bytes
    write_synth(tmp_path / "c", "mixed", 3000, 80, seed=5, partition_rows=1000)
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    assert [p.file for p in a.parts] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    frames = [pl.read_parquet(tmp_path / "a" / p.file) for p in a.parts]
    whole = pl.concat(frames)
    assert whole.schema == pl.Schema(SCHEMA)
    assert whole["request_index"].to_list() == list(range(3000))  # global across parts
    assert whole["session_id"].n_unique() == 80
    assert np.all(np.diff(whole["timestamp_s"].to_numpy()) >= 0)
    for i, p in enumerate(a.parts):
        meta = pl.read_parquet_metadata(tmp_path / "a" / p.file)
        info = parse_trace_metadata(meta[METADATA_KEY])
        assert info.order == "time" and info.has_hashes and info.has_sessions
        assert info.block_size_tokens == 64 and info.format == "synth"
        part = parse_partition_metadata(meta[PARTITION_KEY])
        assert part.partition == i and part.partition_by == "request-range"
        assert part.requests == p.requests and part.dataset_requests == 3000
        assert part.block_accesses == p.block_accesses
        assert len({part.dataset_id}) == 1 and part.dataset_id
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["requests"] == 3000 and manifest["block_accesses"] == a.block_accesses
    assert a.block_accesses == int(whole["hash_ids"].list.len().sum())
    # Part 0 is a canonical file the readers take as it is.
    trace = read_trace(tmp_path / "a" / "part-00000.parquet")
    assert trace.requests.height == 1000 and trace.order == "time"


def test_partition_size_only_cuts_the_stream() -> None:
    one = _all("agent", 800, 12, seed=1, partition_rows=10_000)
    many = list(
        generate(PROFILES["agent"], 800, 12, seed=1, partition_rows=97, partition_accesses=50_000)
    )
    assert all(f.height <= 97 for f in many)
    assert all(f["hash_ids"].list.len().sum() <= 50_000 or f.height == 1 for f in many)
    assert pl.concat(many).equals(one)


def test_sessions_grow_by_appended_turns_and_share_prompts() -> None:
    df = _all("mixed", 4000, 100, seed=9)
    rows = {r["request_index"]: r for r in df.iter_rows(named=True)}
    grown = 0
    for r in rows.values():
        p = r["parent_request"]
        if r["turn"] == 0:
            assert p is None
            continue
        parent = rows[p]
        assert parent["session_id"] == r["session_id"] and parent["turn"] == r["turn"] - 1
        assert r["timestamp_s"] > parent["timestamp_s"]
        if r["input_tokens"] >= parent["input_tokens"]:
            # the previous turn's context plus its output plus new content
            assert r["input_tokens"] > parent["input_tokens"] + parent["output_tokens"]
            assert r["hash_ids"][: len(parent["hash_ids"])] == parent["hash_ids"]
            grown += 1
    assert grown > 3000
    assert all(len(r["hash_ids"]) == r["input_tokens"] // 64 for r in rows.values())
    # A few prompts serve many sessions: first blocks are shared across sessions.
    firsts = df.filter(pl.col("turn") == 0)["hash_ids"].list.first()
    assert firsts.n_unique() < 24 and firsts.value_counts()["count"].max() > 10
    # Sessions interleave: consecutive requests often belong to different sessions.
    sid = df["session_id"]
    assert (sid[1:] != sid[:-1]).mean() > 0.5
    # Agent sessions are the long ones.
    kinds = df.group_by(pl.col("session_id").str.split("-").list.first()).agg(
        pl.col("input_tokens").median()
    )
    med = dict(kinds.iter_rows())
    assert med["agent"] > 10 * med["chat"]


def test_compaction_restarts_the_context() -> None:
    small = Profile(
        "tiny",
        (dataclasses.replace(AGENT, max_context_tokens=30_000, compact_tokens=2_000),),
        mean_concurrent_sessions=4,
    )
    df = _all(small, 400, 4, seed=0)
    assert df["input_tokens"].max() < 30_000 + 200_000  # bounded by the threshold + one turn
    rows = {r["request_index"]: r for r in df.iter_rows(named=True)}
    drops = [
        r
        for r in rows.values()
        if r["turn"] and r["input_tokens"] < rows[r["parent_request"]]["input_tokens"]
    ]
    assert drops
    for r in drops:
        parent = rows[r["parent_request"]]
        h, hp = r["hash_ids"], parent["hash_ids"]
        shared = next(i for i, (x, y) in enumerate(zip(h, hp, strict=False)) if x != y)
        # Only the system prompt (about 15,000 tokens = 234 blocks) is kept; the history is new.
        assert 150 < shared < 400
        assert set(h[shared:]).isdisjoint(hp)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FcctlInputError, match="sessions: must be <= requests"):
        generate(PROFILES["chat"], 5, 6)
    with pytest.raises(FcctlInputError, match="profile: must be one of"):
        write_synth(tmp_path / "x", "video", 5, 1)
    for kw in ({"partition_rows": 0}, {"seed": -1}, {"block_size_tokens": 0}):
        with pytest.raises(FcctlInputError):
            generate(PROFILES["chat"], 5, 1, **kw)
    assert not (tmp_path / "x").exists()
    assert set(PROFILE_NAMES) == set(PROFILES)


def test_cli_writes_refuses_and_replaces(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "d"
    args = ["synth", "--requests", "300", "--sessions", "20", "--profile", "chat", "-o", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "300 requests" in r.output and (out / "part-00000.parquet").is_file()
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "not empty" in r.output
    assert runner.invoke(app, [*args, "--force", "--seed", "1"]).exit_code == 0
    r = runner.invoke(
        app, ["synth", "--requests", "3", "--sessions", "5", "-o", str(tmp_path / "e")]
    )
    assert r.exit_code == 2 and "--sessions: must be <= requests" in r.output
    assert not (tmp_path / "e").exists()
    # analyze reads part 0 as it reads any canonical file
    r = runner.invoke(app, ["analyze", str(out / "part-00000.parquet"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["trace"]["requests"] == 300 and doc["reuse_access_share"] > 0.5


def test_huge_counts_refused_against_the_memory_budget_before_allocation(tmp_path: Path) -> None:
    """Issue #20: sizes derived from the counts are checked before numpy allocates them."""
    runner = CliRunner()
    for requests, sessions, flag in [(10**11, 10**11, "--sessions"), (10**11, 10, "--requests")]:
        out = tmp_path / flag.strip("-")
        r = runner.invoke(
            app, ["synth", "--requests", str(requests), "--sessions", str(sessions), "-o", str(out)]
        )
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fcctl: error: {flag}: "), r.stderr
        assert "memory budget of" in lines[0]
        assert not out.exists()
