"""``fcctl report`` never writes over its inputs, and refuses hostile inputs in one line.

Real files, a real FIFO, /dev/zero, a sparse file past the size cap, real Parquet tables; the
command runs as a real process (a hang would show as a timeout, not a stuck test run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO, SAMPLES

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"


def fcctl(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def analysis_out(tmp_path_factory) -> Path:
    """A real ``fcctl analyze --out`` directory of the Mooncake sample."""
    d = tmp_path_factory.mktemp("report-inputs")
    done = fcctl("analyze", MOONCAKE, "--out", d / "a", cwd=d)
    assert done.returncode == 0, done.stderr
    return d / "a"


def one_error(done: subprocess.CompletedProcess) -> str:
    """Exit 2 with exactly one line on stderr, ``fcctl: error: ...``, no traceback."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fcctl: error: "), done.stderr
    return lines[0]


def test_o_the_input_itself_with_force_is_refused_and_the_input_kept(analysis_out, tmp_path):
    doc = tmp_path / "analysis.json"
    shutil.copy(analysis_out / "analysis.json", doc)
    before = doc.read_bytes()
    line = one_error(fcctl("report", doc, "-o", doc, "--force", cwd=tmp_path))
    assert f"-o {doc}" in line and f"is the input {doc}" in line, line
    assert doc.read_bytes() == before


def test_o_another_name_of_the_input_is_refused(analysis_out, tmp_path):
    doc = tmp_path / "analysis.json"
    shutil.copy(analysis_out / "analysis.json", doc)
    hard = tmp_path / "page.html"
    os.link(doc, hard)  # same inode, another path
    before = doc.read_bytes()
    line = one_error(fcctl("report", doc, "-o", hard, "--force", cwd=tmp_path))
    assert "is the input" in line, line
    soft = tmp_path / "link.html"
    soft.symlink_to(doc)
    line = one_error(fcctl("report", doc, "-o", soft, "--force", cwd=tmp_path))
    assert "is the input" in line, line
    assert doc.read_bytes() == before


def test_o_inside_an_input_out_directory_is_refused(analysis_out, tmp_path):
    out = tmp_path / "a"
    shutil.copytree(analysis_out, out)
    line = one_error(fcctl("report", out, "-o", out / "page.html", cwd=tmp_path))
    assert f"-o {out / 'page.html'}" in line and f"input directory {out}" in line, line
    assert not (out / "page.html").exists()
    # the same directory by a relative spelling
    line = one_error(fcctl("report", "a", "-o", "./a/../a/page.html", cwd=tmp_path))
    assert "input directory" in line, line


def test_a_fifo_input_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "analysis.json"
    os.mkfifo(fifo)
    line = one_error(fcctl("report", fifo, "-o", tmp_path / "p.html", cwd=tmp_path, timeout=30))
    assert str(fifo) in line and "FIFO" in line, line


def test_a_device_input_is_refused(tmp_path):
    line = one_error(fcctl("report", "/dev/zero", "-o", tmp_path / "p.html", cwd=tmp_path))
    assert "/dev/zero" in line and "character device" in line, line


def test_an_input_over_the_size_cap_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(300 * 2**20)  # sparse: no disk used
    line = one_error(fcctl("report", big, "-o", tmp_path / "p.html", cwd=tmp_path))
    assert str(big) in line and "byte limit" in line, line


def test_deeply_nested_json_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    line = one_error(fcctl("report", deep, "-o", tmp_path / "p.html", cwd=tmp_path))
    assert str(deep) in line and "nested deeper" in line, line


def test_a_4300_digit_integer_is_one_line(tmp_path):
    huge = tmp_path / "huge.json"
    huge.write_text('{"schema_version": 1, "verdict": {}, "reuse_distance": ' + "9" * 5000 + "}")
    line = one_error(fcctl("report", huge, "-o", tmp_path / "p.html", cwd=tmp_path))
    assert str(huge) in line and "digits" in line, line


@pytest.mark.parametrize(
    ("table", "column"),
    [("histograms.parquet", "bucket_hi"), ("memory_tier_curve.parquet", "lru_hit_share")],
)
def test_an_out_table_with_a_wrong_column_is_one_line_naming_it(
    analysis_out, tmp_path, table, column
):
    out = tmp_path / "a"
    shutil.copytree(analysis_out, out)
    frame = pl.read_parquet(out / table)
    frame.rename({column: "renamed"}).write_parquet(out / table)
    line = one_error(fcctl("report", out, "-o", tmp_path / "p.html", cwd=tmp_path))
    assert f"{out / table}: column {column!r}: missing" in line, line
    # the right name with the wrong kind of values
    frame.with_columns(pl.col(column).cast(pl.String)).write_parquet(out / table)
    line = one_error(fcctl("report", out, "-o", tmp_path / "p.html", cwd=tmp_path))
    assert f"{out / table}: column {column!r}: expected numbers" in line, line
    assert not (tmp_path / "p.html").exists()
