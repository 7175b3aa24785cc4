"""``fcctl convert`` through typer's runner: success line, bad input -> one line, exit 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.canonical import traces_equal
from fcctl.analyzers.traces.readers import read_trace
from fcctl.cli import app
from tests.conftest import SAMPLES
from tests.convert_helpers import tiny_fs  # noqa: F401 - the 1 MiB tmpfs fixture

runner = CliRunner()


def test_convert_sample_and_read_back(tmp_path: Path) -> None:
    out = tmp_path / "cc.parquet"
    result = runner.invoke(
        app, ["convert", str(SAMPLES / "claude_code_sample.jsonl.gz"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "264 requests" in lines[0] and "5 sessions" in lines[0]
    original = read_trace(SAMPLES / "claude_code_sample.jsonl.gz")
    blocks = int(original.requests["hash_ids"].list.len().sum())
    assert f"{blocks:,} block accesses" in lines[0]
    assert traces_equal(read_trace(out), original)
    assert [p.name for p in tmp_path.iterdir()] == ["cc.parquet"]


def test_convert_format_override(tmp_path: Path) -> None:
    out = tmp_path / "q.parquet"
    src = SAMPLES / "bailian_synthetic.jsonl"
    result = runner.invoke(app, ["convert", str(src), "-o", str(out), "--format", "mooncake"])
    assert result.exit_code == 0, result.output
    assert read_trace(out).source.format == "mooncake"


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


GOOD = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}
BAD_INPUTS = {
    "mistyped": (
        lambda d: write(
            d / "t.jsonl",
            (json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "input_length": "abc"})).encode(),
        ),
        ["line 2", "'input_length'", "got 'abc'"],
    ),
    "bad_json": (lambda d: write(d / "t.jsonl", b'{"timestamp": 1,\n'), ["line 1", "invalid JSON"]),
    "broken_gzip": (
        lambda d: write(d / "t.jsonl.gz", gzip.compress(json.dumps(GOOD).encode() * 2000)[:300]),
        ["gzip"],
    ),
    "empty": (lambda d: write(d / "t.jsonl", b""), ["empty"]),
    "unknown": (lambda d: write(d / "t.txt", b"a,b,c\n1,2,3\n"), ["unknown trace format"]),
    "missing": (lambda d: d / "nope.jsonl", ["no such file"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_convert_bad_input_one_line_exit_2_nothing_written(case: str, tmp_path: Path) -> None:
    make, fragments = BAD_INPUTS[case]
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    src = make(src_dir)
    result = runner.invoke(app, ["convert", str(src), "-o", str(out_dir / "t.parquet")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("fcctl: error: ")
    assert str(src) in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.output
    assert list(out_dir.iterdir()) == []  # no output and no temporary file left behind


def test_convert_unknown_format_flag(tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    result = runner.invoke(
        app, ["convert", str(SAMPLES / "azure_conv_1k.csv"), "-o", str(out), "--format", "csv"]
    )
    assert result.exit_code == 2
    assert "unknown format 'csv'" in result.output and not out.exists()


def test_convert_missing_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "dir.parquet"
    result = runner.invoke(app, ["convert", str(SAMPLES / "azure_conv_1k.csv"), "-o", str(out)])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "Traceback" not in result.output


def test_convert_failure_keeps_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "keep.parquet"
    assert runner.invoke(app, ["convert", str(AZURE), "-o", str(out)]).exit_code == 0
    previous = out.read_bytes()
    bad = write(tmp_path / "bad.jsonl", b'{"timestamp": \n')
    result = runner.invoke(app, ["convert", str(bad), "-o", str(out), "--force"])
    assert result.exit_code == 2
    assert out.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "keep.parquet"]


AZURE = SAMPLES / "azure_conv_1k.csv"


def test_convert_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    out = tmp_path / "a.parquet"
    assert runner.invoke(app, ["convert", str(AZURE), "-o", str(out)]).exit_code == 0
    before = out.read_bytes()
    result = runner.invoke(
        app, ["convert", str(SAMPLES / "bailian_synthetic.jsonl"), "-o", str(out)]
    )
    assert result.exit_code == 2 and "exists (pass --force to replace it)" in result.output
    assert out.read_bytes() == before
    # --force replaces an earlier convert output, by a rename: no temporary file is left.
    src = SAMPLES / "bailian_synthetic.jsonl"
    result = runner.invoke(app, ["convert", str(src), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert read_trace(out).source.format == "bailian"
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


def test_convert_force_replaces_only_an_earlier_convert_output(tmp_path: Path) -> None:
    other = write(tmp_path / "notes.txt", b"my notes")
    result = runner.invoke(app, ["convert", str(AZURE), "-o", str(other), "--force"])
    assert result.exit_code == 2 and "only an earlier fcctl convert output" in result.output
    assert other.read_bytes() == b"my notes"
    # Nor the input itself, even when it is a canonical Parquet file.
    pq = tmp_path / "a.parquet"
    assert runner.invoke(app, ["convert", str(AZURE), "-o", str(pq)]).exit_code == 0
    result = runner.invoke(app, ["convert", str(pq), "-o", str(pq), "--force"])
    assert result.exit_code == 2 and "is the input trace" in result.output


def test_convert_max_line_bytes_flag(tmp_path: Path) -> None:
    src = SAMPLES / "mooncake_conversation_2k.jsonl"
    out = tmp_path / "m.parquet"
    result = runner.invoke(app, ["convert", str(src), "-o", str(out), "--max-line-bytes", "100"])
    assert result.exit_code == 2 and "line 1" in result.output and "100 bytes" in result.output
    result = runner.invoke(app, ["convert", str(src), "-o", str(out), "--max-line-bytes", "lots"])
    assert result.exit_code == 2 and "--max-line-bytes" in result.output
    result = runner.invoke(app, ["convert", str(src), "-o", str(out), "--max-line-bytes", "1MiB"])
    assert result.exit_code == 0, result.output


def test_control_characters_in_file_names_are_quoted(tmp_path: Path) -> None:
    src = write(tmp_path / "bad\nname\x1b[31m.jsonl", b'{"timestamp": 1,\n')
    result = runner.invoke(app, ["convert", str(src), "-o", str(tmp_path / "o.parquet")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "\x1b" not in result.output, result.output
    assert repr(str(src)) in lines[0], lines[0]
    good = tmp_path / "good.csv"
    good.write_bytes(AZURE.read_bytes())
    out = tmp_path / "out\tput.parquet"
    result = runner.invoke(app, ["convert", str(good), "-o", str(out)])
    assert result.exit_code == 0 and repr(str(out)) in result.output, result.output


def test_convert_onto_a_full_disk_is_run_failed(tiny_fs: Path, tmp_path: Path) -> None:  # noqa: F811
    import random

    rng = random.Random(7)
    rows = (
        json.dumps({**GOOD, "hash_ids": [rng.getrandbits(63) for _ in range(200)]})
        for _ in range(2000)
    )
    src = write(tmp_path / "big.jsonl", ("\n".join(rows) + "\n").encode())  # ~3 MB of Parquet
    result = runner.invoke(app, ["convert", str(src), "-o", str(tiny_fs / "t.parquet")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], result.output
    assert "Traceback" not in result.output
    assert list(tiny_fs.iterdir()) == []  # neither the output nor its temporary file
