"""Partitioned and assembled datasets (issue #10 §1): order, the single file's figures, checks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from analyze_helpers import one_line_exit_2
from typer.testing import CliRunner

from fcctl.analyzers.traces.canonical import write_canonical
from fcctl.analyzers.traces.dataset import (
    dataset_files,
    is_dataset_spec,
    open_dataset,
    read_dataset,
)
from fcctl.analyzers.traces.partitioned import write_partitioned
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.readers._common import TraceFormatError
from fcctl.analyzers.traces.schema import Trace
from fcctl.analyzers.traces.synth import write_synth
from fcctl.analyzers.traces.trace_metadata import (
    PartitionMetadata,
    partition_metadata,
    trace_metadata,
)
from fcctl.cli import app

SAMPLES = Path(__file__).parent.parent / "samples"
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"
MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
BAILIAN = SAMPLES / "bailian_synthetic.jsonl"


def _flat(trace: Trace) -> np.ndarray:
    return trace.requests["hash_ids"].explode().to_numpy()


def _stream(ds, batch: int) -> tuple[np.ndarray, np.ndarray]:
    chunks = list(ds.iter_blocks(batch_accesses=batch))
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def _figures(doc: dict) -> dict:
    """The analysis figures of a --json document, without what names the input."""
    doc = dict(doc)
    for key in ("provenance", "notes"):
        doc.pop(key)
    trace = dict(doc.pop("trace"))
    for key in ("path", "format", "dataset", "converted_from"):
        trace.pop(key)
    doc["trace"] = trace
    return doc


def _run(*args: str):
    return CliRunner().invoke(app, ["analyze", *args])


@pytest.mark.parametrize(
    ("sample", "by"),
    [(CLAUDE, "session-hash"), (MOONCAKE, "day"), (BAILIAN, "session-hash"), (BAILIAN, "day")],
)
def test_partitioned_dataset_is_the_single_file(tmp_path: Path, sample: Path, by: str) -> None:
    trace = read_trace(sample)
    buckets = 5 if by == "session-hash" else None
    write_partitioned(trace, tmp_path / "ds", by=by, partitions=buckets, max_part_rows=60)
    assert len(dataset_files(tmp_path / "ds")) > 2
    ds = open_dataset(tmp_path / "ds")
    assert ds.mode == "partitioned" and ds.units == 1
    back = ds.load_trace()
    assert back.requests.equals(trace.requests)
    assert (back.order, back.has_sessions, back.block_size_tokens) == (
        trace.order,
        trace.has_sessions,
        trace.block_size_tokens,
    )
    # The ordered merge gives the access stream of the single file, whatever the batch size.
    for batch in (1, 97, 1 << 22):
        lens, ids = _stream(ds, batch)
        assert np.array_equal(ids, _flat(trace))
        assert np.array_equal(lens, trace.requests["hash_ids"].list.len().to_numpy())
    # And the analysis gives exactly the single file's figures.
    one = _run(str(sample), "--json")
    many = _run(str(tmp_path / "ds"), "--json")
    assert one.exit_code == 0 and many.exit_code == 0, many.output
    a, b = json.loads(one.stdout), json.loads(many.stdout)
    assert b["trace"]["dataset"]["mode"] == "partitioned"
    assert b["trace"]["converted_from"]["path"] == str(sample)
    assert _figures(a) == _figures(b)


def test_synth_dataset_and_glob(tmp_path: Path) -> None:
    write_synth(tmp_path / "s", "mixed", 2000, 40, seed=3, partition_rows=300)
    ds = open_dataset(tmp_path / "s")
    assert ds.num_requests == 2000 and len(ds.parts) == 7
    whole = pl.concat([pl.read_parquet(p) for p in sorted((tmp_path / "s").glob("*.parquet"))])
    assert ds.load_trace().requests.equals(whole)
    assert is_dataset_spec(str(tmp_path / "s" / "part-*.parquet"))
    globbed = open_dataset(str(tmp_path / "s" / "part-*.parquet"))
    assert globbed.load_trace().requests.equals(whole)
    # A glob naming some of the parts is a dataset with parts missing: refused.
    with pytest.raises(TraceFormatError, match="a part is missing"):
        open_dataset(str(tmp_path / "s" / "part-0000[0-3].parquet"))


def _split_by_time(trace: Trace, cut: float, d: Path) -> None:
    """Two separately converted files: requests before ``cut`` and from ``cut`` on."""
    req = trace.requests
    for name, rows in (
        ("b.parquet", req["timestamp_s"] >= cut),
        ("a.parquet", req["timestamp_s"] < cut),
    ):
        part = req.filter(rows)
        index = part["request_index"].to_numpy()
        new = {int(old): k for k, old in enumerate(index)}
        parents = [None if p is None or p not in new else new[p] for p in part["parent_request"]]
        part = part.with_columns(
            pl.Series("request_index", np.arange(part.height, dtype=np.int64)),
            pl.Series("parent_request", parents, dtype=pl.Int64),
        )
        write_canonical(
            Trace(
                trace.path,
                trace.format,
                part,
                trace.order,
                trace.has_hashes,
                trace.has_sessions,
                trace.block_size_tokens,
                trace.notes,
            ),
            d / name,
        )


def test_assembled_time_ordered_files_merge_by_timestamp(tmp_path: Path) -> None:
    trace = read_trace(MOONCAKE)
    ts = trace.requests["timestamp_s"].to_numpy()
    _split_by_time(trace, float(np.median(ts)), tmp_path)
    ds = open_dataset(tmp_path)
    assert ds.mode == "assembled" and ds.units == 2
    back = ds.load_trace()
    # Mooncake has no parents: the merged trace is the original, block for block.
    assert back.requests.drop("parent_request").equals(trace.requests.drop("parent_request"))
    assert any("Assembled from 2" in n for n in back.notes)


def _pairs(req: pl.DataFrame, cut: float | None = None) -> set[tuple]:
    """(child, parent) as (timestamp, input_tokens) pairs; with ``cut``, same-side pairs only."""
    out = set()
    ts, inp = req["timestamp_s"].to_list(), req["input_tokens"].to_list()
    for row, parent in enumerate(req["parent_request"].to_list()):
        if parent is None:
            continue
        if cut is not None and (ts[row] < cut) != (ts[parent] < cut):
            continue
        out.add(((ts[row], inp[row]), (ts[parent], inp[parent])))
    return out


def test_assembled_parents_are_renumbered(tmp_path: Path) -> None:
    trace = read_trace(BAILIAN)
    cut = float(np.quantile(trace.requests["timestamp_s"].to_numpy(), 0.3))
    _split_by_time(trace, cut, tmp_path)
    back = open_dataset(tmp_path).load_trace().requests
    assert back["timestamp_s"].to_list() == sorted(trace.requests["timestamp_s"].to_list())
    # Every parent within one file still names the same request after the merge.
    expected = _pairs(trace.requests, cut)
    assert expected and _pairs(back) == expected


def test_assembled_session_clock_files_concatenate(tmp_path: Path) -> None:
    trace = read_trace(CLAUDE)
    sessions = trace.requests["session_id"].unique(maintain_order=True).to_list()
    half = set(sessions[: len(sessions) // 2])
    req = trace.requests
    for name, rows in (
        ("1.parquet", req["session_id"].is_in(half)),
        ("2.parquet", ~req["session_id"].is_in(half)),
    ):
        part = req.filter(rows)
        first = int(part["request_index"][0])
        part = part.with_columns(
            (pl.col("request_index") - first), (pl.col("parent_request") - first)
        )
        write_canonical(
            Trace(trace.path, trace.format, part, "session", True, True, 64, trace.notes),
            tmp_path / name,
        )
    back = open_dataset(tmp_path).load_trace()
    assert back.order == "session" and back.requests.equals(trace.requests)
    # The same session in two files cannot be assembled on per-session clocks.
    shutil.copy(tmp_path / "1.parquet", tmp_path / "3.parquet")
    with pytest.raises(TraceFormatError, match="appears in more than one file"):
        open_dataset(tmp_path)


def test_mixed_orders_and_block_sizes_are_refused(tmp_path: Path) -> None:
    write_canonical(read_trace(CLAUDE), tmp_path / "a.parquet")
    write_canonical(read_trace(BAILIAN), tmp_path / "b.parquet")
    with pytest.raises(TraceFormatError, match=r"must agree|cannot be assembled"):
        open_dataset(tmp_path)


def _parts(tmp_path: Path) -> Path:
    write_partitioned(read_trace(BAILIAN), tmp_path / "ds", by="session-hash", partitions=3)
    return tmp_path / "ds"


def test_missing_and_repeated_parts_are_named(tmp_path: Path) -> None:
    d = _parts(tmp_path)
    files = dataset_files(d)
    copy = files[0].parent / "part-00099.parquet"
    shutil.copy(files[0], copy)
    with pytest.raises(TraceFormatError, match="is also in") as e:
        open_dataset(d)
    assert "part-00099.parquet: row 0" in str(e.value) or "part-00000.parquet: row 0" in str(
        e.value
    )
    copy.unlink()
    files[1].unlink()
    with pytest.raises(TraceFormatError, match="a part is missing"):
        open_dataset(d)


def _write_part(path: Path, trace: Trace, frame: pl.DataFrame, k: int, total: int) -> None:
    meta = trace_metadata(trace)
    meta.update(
        partition_metadata(
            PartitionMetadata(
                "ds1",
                k,
                "day",
                str(k),
                frame.height,
                int(frame["hash_ids"].list.len().sum()),
                total,
            )
        )
    )
    frame.write_parquet(path, metadata=meta)


def test_time_order_across_parts_is_checked(tmp_path: Path) -> None:
    trace = read_trace(MOONCAKE)
    req = trace.requests
    a, b = req[:100], req[100:200]
    # Part b's first request is stamped before part a's last one: not in analysis order.
    b = b.with_columns(pl.col("timestamp_s") - 10_000.0)
    total = 200
    _write_part(tmp_path / "a.parquet", trace, a, 0, total)
    _write_part(tmp_path / "b.parquet", trace, b, 1, total)
    with pytest.raises(TraceFormatError) as e:
        open_dataset(tmp_path)
    msg = str(e.value)
    assert "b.parquet: row 0" in msg and "timestamp_s" in msg and "request_index 100" in msg


def test_part_metadata_must_match_its_rows(tmp_path: Path) -> None:
    trace = read_trace(MOONCAKE)
    req = trace.requests[:50]
    meta = trace_metadata(trace)
    meta.update(partition_metadata(PartitionMetadata("x", 0, "day", "0", 49, 0, 50)))
    req.write_parquet(tmp_path / "p.parquet", metadata=meta)
    with pytest.raises(TraceFormatError, match="says 49 requests"):
        open_dataset(tmp_path)
    # An index past dataset_requests is named with its row.
    req = req.with_columns(pl.col("request_index") + 20)
    meta.update(partition_metadata(PartitionMetadata("x", 0, "day", "0", 50, 0, 60)))
    req.write_parquet(tmp_path / "p.parquet", metadata=meta)
    with pytest.raises(TraceFormatError, match=r"p\.parquet: row 40: column 'request_index'"):
        open_dataset(tmp_path)


def test_a_single_part_read_alone_says_what_it_is(tmp_path: Path) -> None:
    d = _parts(tmp_path)
    later = next(f for f in dataset_files(d) if pl.read_parquet(f)["request_index"][0] != 0)
    with pytest.raises(TraceFormatError, match="one part of a partitioned dataset"):
        read_trace(later)


def test_hidden_files_are_skipped_and_bad_members_refused(tmp_path: Path) -> None:
    d = _parts(tmp_path)
    (d / "_SUCCESS").write_text("")
    (d / ".tmp").mkdir()
    (d / ".tmp" / "junk.parquet").write_text("not parquet")
    assert read_dataset(d).requests.height == read_trace(BAILIAN).requests.height
    os.mkfifo(d / "fifo.parquet")
    with pytest.raises(TraceFormatError, match=r"fifo\.parquet"):
        open_dataset(d)


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: d.mkdir(), "holds no"),
        (lambda d: None, "matches no file"),
    ],
)
def test_cli_bad_datasets_exit_2(tmp_path: Path, make, expect: str) -> None:
    target = tmp_path / "empty"
    make(target)
    spec = str(target) if target.exists() else str(tmp_path / "none-*.parquet")
    result = _run(spec)
    assert expect in one_line_exit_2(result)


def test_cli_refuses_format_flags_on_a_dataset(tmp_path: Path) -> None:
    d = _parts(tmp_path)
    line = one_line_exit_2(_run(str(d), "--format", "mooncake"))
    assert "--format" in line and "dataset" in line


def test_many_overlapping_parts_within_the_open_file_limit(tmp_path: Path) -> None:
    """Interleaved parts are all open at once: raised to the hard limit, or a clear exit 2."""
    import resource
    import subprocess
    import sys

    write_synth(tmp_path / "s", "chat", 1500, 300, seed=2, partition_rows=1500)
    trace = open_dataset(tmp_path / "s").load_trace()
    write_partitioned(trace, tmp_path / "ds", by="session-hash", partitions=200)
    parts = len(dataset_files(tmp_path / "ds"))
    assert parts > 120
    _, ids = _stream(open_dataset(tmp_path / "ds"), 10_000)
    assert np.array_equal(ids, _flat(trace))

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    code = (
        "import sys; from fcctl.cli import main; "
        f"sys.argv = ['fcctl', 'analyze', {str(tmp_path / 'ds')!r}, '--sample-rate', '0.5']; "
        "main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=low_limit
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "too many dataset parts" in lines[0]


def test_dataset_requests_claim_sizes_nothing(tmp_path: Path) -> None:
    # issue #20.7: two 100-row parts whose metadata claims 1e11 requests used to size two
    # 800 GB arrays from that number; now the rows read must back it first.
    trace = read_trace(MOONCAKE)
    req = trace.requests
    _write_part(tmp_path / "a.parquet", trace, req[:100], 0, 10**11)
    _write_part(tmp_path / "b.parquet", trace, req[100:200], 1, 10**11)
    with pytest.raises(TraceFormatError) as e:
        open_dataset(tmp_path)
    msg = str(e.value)
    assert "field 'dataset_requests' says 100000000000 requests" in msg, msg
    assert "2 part(s) found hold 200 rows: a part is missing" in msg, msg
