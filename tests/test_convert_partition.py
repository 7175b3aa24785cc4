"""``fcctl convert -o DIR --partition-by``: the parts together are exactly the single-file trace."""

from __future__ import annotations

import json
import math
import random
from hashlib import blake2b
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.partitioned import MANIFEST, session_bucket, write_partitioned
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.schema import SCHEMA, Trace
from fcctl.analyzers.traces.trace_metadata import (
    METADATA_KEY,
    PARTITION_KEY,
    parse_partition_metadata,
    trace_metadata,
)
from fcctl.cli import app
from tests.conftest import SAMPLES
from tests.convert_helpers import tiny_fs  # noqa: F401 - the 1 MiB tmpfs fixture

runner = CliRunner()
MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"
BAILIAN = SAMPLES / "bailian_synthetic.jsonl"


def convert(src: Path, out: Path, *flags: str) -> object:
    return runner.invoke(app, ["convert", str(src), "-o", str(out), *flags])


def parts_of(out: Path) -> list[Path]:
    return sorted(out.glob("*=*/part-*.parquet"))


def check_dataset(out: Path, original: Trace, by: str) -> dict:
    """Every property of the contract; returns the manifest."""
    manifest = json.loads((out / MANIFEST).read_text())
    files = [out / p["file"] for p in manifest["parts"]]
    assert sorted(files) == parts_of(out)
    assert not list(out.glob(".*"))  # no temporary file left
    frames, ids = [], set()
    for number, (path, listed) in enumerate(zip(files, manifest["parts"], strict=True)):
        frame = pl.read_parquet(path)
        raw = pl.read_parquet_metadata(path)
        assert raw[METADATA_KEY] == trace_metadata(original)[METADATA_KEY]
        part = parse_partition_metadata(raw[PARTITION_KEY])
        ids.add(part.dataset_id)
        assert part.partition == number == listed["partition"]
        assert part.partition_by == by == manifest["partition_by"]
        assert part.dataset_requests == original.num_requests == manifest["requests"]
        assert part.requests == frame.height == listed["requests"]
        blocks = int(frame["hash_ids"].list.len().fill_null(0).sum())
        assert part.block_accesses == blocks == listed["block_accesses"]
        assert listed["bytes"] == path.stat().st_size
        column, value = path.parent.name.split("=")
        assert part.key == listed["key"] == str(int(value))
        if by == "day":
            assert column == "day"
            days = (frame["timestamp_s"] // 86400).cast(pl.Int64)
            assert days.unique().to_list() == [int(part.key)]
        else:
            assert column == "session_bucket"
            buckets = {session_bucket(s, manifest["partitions"]) for s in frame["session_id"]}
            assert buckets == {int(part.key)}
        assert frame["request_index"].is_sorted() and frame["request_index"].n_unique() == len(
            frame
        )
        frames.append(frame)
    assert ids == {manifest["dataset_id"]}
    keys = [(int(p["key"]), p["file"]) for p in manifest["parts"]]
    assert keys == sorted(keys)  # numbered in key order, then file order
    whole = pl.concat(frames).sort("request_index")
    assert whole.schema == original.requests.schema
    assert whole.equals(original.requests)
    assert manifest["block_accesses"] == int(
        original.requests["hash_ids"].list.len().fill_null(0).sum()
    )
    assert manifest["source"] == {"path": original.source.path, "format": original.source.format}
    return manifest


@pytest.mark.parametrize(
    ("src", "flags"),
    [
        (MOONCAKE, ["--partition-by", "day"]),
        (SAMPLES / "azure_conv_1k.csv", ["--partition-by", "day"]),  # no hashes
        (BAILIAN, ["--partition-by", "day"]),
        (BAILIAN, ["--partition-by", "session-hash", "--partitions", "4"]),
        (CLAUDE, ["--partition-by", "session-hash"]),
        (CLAUDE, ["--partition-by", "session-hash", "--partitions", "1"]),
    ],
)
def test_parts_together_are_the_single_file_trace(src: Path, flags: list[str], tmp_path: Path):
    out = tmp_path / "ds"
    result = convert(src, out, *flags)
    assert result.exit_code == 0, result.output
    line = result.output.strip()
    assert line.startswith(f"wrote {out}: ") and f"by {flags[1]}" in line
    original = read_trace(src)
    manifest = check_dataset(out, original, flags[1])
    if flags[1] == "session-hash":
        assert manifest["partitions"] == int(flags[3]) if len(flags) > 2 else 16
        # A session is never split across buckets.
        rows = pl.concat(
            pl.read_parquet(p).select("session_id", pl.lit(p.parent.name).alias("dir"))
            for p in parts_of(out)
        )
        assert rows.group_by("session_id").agg(pl.col("dir").n_unique())["dir"].max() == 1
    else:
        assert manifest["partitions"] is None
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_session_bucket_is_a_fixed_documented_hash() -> None:
    # docs/scale.md: BLAKE2b with an 8-byte digest of the UTF-8 id, big-endian, mod partitions.
    assert blake2b(b"session-0", digest_size=8).hexdigest() == "b65f95cf544107cf"
    assert session_bucket("session-0", 16) == 0xB65F95CF544107CF % 16 == 15
    assert session_bucket("abc", 16) == 9
    assert (
        session_bucket("é", 7)
        == int.from_bytes(blake2b("é".encode(), digest_size=8).digest(), "big") % 7
    )
    assert session_bucket("session-0", 1) == 0


def tiny_trace(
    timestamps: list[float],
    sessions: list[str] | None = None,
    *,
    extra: dict[str, list] | None = None,
    order: str = "time",
    blocks: list[int] | None = None,
) -> Trace:
    n = len(timestamps)
    blocks = blocks or [i % 3 for i in range(n)]
    frame = pl.DataFrame(
        {
            "request_index": list(range(n)),
            "session_id": sessions,
            "turn": [0] * n,
            "parent_request": [None, *range(n - 1)],
            "timestamp_s": timestamps,
            "input_tokens": [16 * b for b in blocks],
            "output_tokens": [1] * n,
            "block_size_tokens": [16] * n,
            "hash_ids": [list(range(b)) for b in blocks],
        },
        schema=SCHEMA,
    )
    if extra:
        frame = frame.with_columns(pl.Series(k, v) for k, v in extra.items())
    return Trace(
        path="hand.jsonl",
        format="mooncake",
        requests=frame,
        order=order,  # type: ignore[arg-type]
        has_sessions=sessions is not None,
        block_size_tokens=16,
    )


def test_day_boundaries(tmp_path: Path) -> None:
    ts = [-0.5, 0.0, 86399.999, 86400.0, 3 * 86400 + 1, math.nextafter(172800.0, 0.0), 172800.0]
    trace = tiny_trace(ts)
    result = write_partitioned(trace, tmp_path / "ds", by="day")
    assert [(p.file, p.requests) for p in result.parts] == [
        ("day=-0001/part-00000.parquet", 1),
        ("day=00000/part-00000.parquet", 2),
        ("day=00001/part-00000.parquet", 2),
        ("day=00002/part-00000.parquet", 1),
        ("day=00003/part-00000.parquet", 1),
    ]
    assert [p.key for p in result.parts] == ["-1", "0", "1", "2", "3"]
    day1 = pl.read_parquet(tmp_path / "ds/day=00001/part-00000.parquet")
    assert day1["request_index"].to_list() == [3, 5]
    assert day1["parent_request"].to_list() == [2, 4]  # global, not renumbered
    check_dataset(tmp_path / "ds", trace, "day")


def test_large_partitions_are_cut_into_bounded_parts(tmp_path: Path) -> None:
    ids = [f"s{i % 5}" for i in range(40)]
    trace = tiny_trace([float(i) for i in range(40)], ids, blocks=[i % 4 for i in range(40)])
    result = write_partitioned(trace, tmp_path / "ds", by="session-hash", max_part_rows=3)
    assert all(p.requests <= 3 for p in result.parts)
    assert len(result.parts) > len({p.key for p in result.parts})
    for key in {p.key for p in result.parts}:
        names = [p.file.split("/")[1] for p in result.parts if p.key == key]
        assert names == [f"part-{j:05d}.parquet" for j in range(len(names))]
    check_dataset(tmp_path / "ds", trace, "session-hash")
    # By accesses: a request alone over the limit is a part of its own.
    big = tiny_trace([0.0, 1.0, 2.0, 3.0], blocks=[1, 1, 9, 1])
    result = write_partitioned(big, tmp_path / "acc", by="day", max_part_accesses=2)
    assert [p.block_accesses for p in result.parts] == [2, 9, 1]
    check_dataset(tmp_path / "acc", big, "day")


def test_an_extra_type_column_is_kept(tmp_path: Path) -> None:
    trace = tiny_trace([0.0, 90000.0, 1.0], ["a", "b", "a"], extra={"type": ["text", "x", "y"]})
    write_partitioned(trace, tmp_path / "ds", by="day")
    check_dataset(tmp_path / "ds", trace, "day")


def test_every_write_has_its_own_dataset_id(tmp_path: Path) -> None:
    trace = tiny_trace([0.0, 1.0], ["a", "b"])
    one = write_partitioned(trace, tmp_path / "a", by="session-hash", partitions=2)
    two = write_partitioned(trace, tmp_path / "b", by="session-hash", partitions=2)
    assert one.dataset_id != two.dataset_id and len(one.dataset_id) == 32


def test_force_replaces_only_an_earlier_partitioned_convert(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert convert(BAILIAN, out, "--partition-by", "day").exit_code == 0
    first = json.loads((out / MANIFEST).read_text())["dataset_id"]
    again = convert(BAILIAN, out, "--partition-by", "session-hash")
    assert again.exit_code == 2 and "not empty (pass --force to replace it)" in again.output
    assert json.loads((out / MANIFEST).read_text())["dataset_id"] == first
    replaced = convert(BAILIAN, out, "--partition-by", "session-hash", "--force")
    assert replaced.exit_code == 0, replaced.output
    manifest = check_dataset(out, read_trace(BAILIAN), "session-hash")
    assert manifest["dataset_id"] != first
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # old copy and temporaries gone
    # Anything else is refused, even with --force.
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    refused = convert(BAILIAN, other, "--partition-by", "day", "--force")
    assert refused.exit_code == 2 and "only an earlier" in refused.output
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    single = tmp_path / "one.parquet"
    assert convert(BAILIAN, single).exit_code == 0
    refused = convert(BAILIAN, single, "--partition-by", "day", "--force")
    assert refused.exit_code == 2 and "is not a directory" in refused.output
    # Nor a directory that holds the input trace.
    inside = out / "trace.jsonl"
    inside.write_bytes(BAILIAN.read_bytes())
    refused = convert(inside, out, "--partition-by", "day", "--force")
    assert refused.exit_code == 2 and "holds the input trace" in refused.output
    assert inside.exists()


REFUSALS = {
    "no_sessions": (MOONCAKE, ["--partition-by", "session-hash"], "use --partition-by day"),
    "session_clocks": (CLAUDE, ["--partition-by", "day"], "per-session offsets"),
    "unknown_cut": (BAILIAN, ["--partition-by", "week"], "got 'week'"),
    "zero_buckets": (BAILIAN, ["--partition-by", "session-hash", "--partitions", "0"], "got 0"),
    "too_many": (BAILIAN, ["--partition-by", "session-hash", "--partitions", "65537"], "65536"),
    "buckets_by_day": (BAILIAN, ["--partition-by", "day", "--partitions", "4"], "only to"),
    "buckets_alone": (BAILIAN, ["--partitions", "4"], "only with --partition-by"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_are_one_line_exit_2_nothing_written(case: str, tmp_path: Path) -> None:
    src, flags, fragment = REFUSALS[case]
    result = convert(src, tmp_path / "ds", *flags)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fcctl: error: --partition"), result.output
    assert fragment in lines[0] and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_run_failed_and_leaves_nothing(tiny_fs: Path, tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(7)
    rows = (
        json.dumps(
            {
                "chat_id": i,
                "parent_chat_id": i - 50 if i >= 50 else -1,  # 50 sessions of 40 turns
                "timestamp": float(i),
                "input_length": 3200,
                "output_length": 3,
                "type": "text",
                "turn": i // 50 + 1,
                "hash_ids": [rng.getrandbits(63) for _ in range(200)],
            }
        )
        for i in range(2000)
    )
    src = tmp_path / "big.jsonl"
    src.write_text("\n".join(rows) + "\n")  # ~3 MB of Parquet, onto 1 MiB
    result = convert(src, tiny_fs / "ds", "--partition-by", "session-hash", "--format", "bailian")
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], result.output
    # names the output and the part being written
    assert f"-o {tiny_fs}/ds: disk full while writing session_bucket=" in lines[0]
    assert "Traceback" not in result.output
    assert list(tiny_fs.iterdir()) == []


def test_read_dataset_gives_the_single_file_trace(tmp_path: Path) -> None:
    dataset = pytest.importorskip(
        "fcctl.analyzers.traces.dataset", reason="dataset reading not built"
    )
    if not hasattr(dataset, "read_dataset"):
        pytest.skip("fcctl.analyzers.traces.dataset.read_dataset not built yet")
    from fcctl.analyzers.traces.canonical import traces_equal

    for src, by in ((BAILIAN, "session-hash"), (MOONCAKE, "day"), (CLAUDE, "session-hash")):
        out = tmp_path / f"{src.stem}-{by}"
        assert convert(src, out, "--partition-by", by).exit_code == 0
        assert traces_equal(dataset.read_dataset(out), read_trace(src))
