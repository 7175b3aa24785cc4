"""Two outputs of one command are written together: ``recommend-thresholds --out DIR --emit
PKG`` on a disk that fills while the package is written leaves neither (exit 1, one line), and
a failed output takes back the parent folders it created."""

from __future__ import annotations

from pathlib import Path

import pytest

from fcctl.common.outdir import atomic_out_dir, outputs_together
from tests.plan_helpers import fcctl, one_error_line, small_trace, tmpfs


def test_a_full_disk_under_emit_leaves_no_out_dir(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    with tmpfs(tmp_path / "fs", "64k") as fs:
        done = fcctl(
            "recommend-thresholds",
            trace,
            "--rates",
            "0.5",
            "--short-reply",
            "256",
            "--agent-context",
            "8192",
            "--jobs",
            "1",
            "--out",
            tmp_path / "r",
            "--emit",
            fs / "e",
            cwd=tmp_path,
        )
        assert done.returncode == 1, done.stderr
        line = one_error_line(done.stderr)
        assert line.startswith(f"fcctl: error: --emit {fs / 'e'}: disk full while writing "), line
        assert list(fs.iterdir()) == []
    # --out fitted, but it is half of what was asked: it is not left alone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fs", trace.name]


def test_outputs_together_moves_all_or_none(tmp_path: Path) -> None:
    with outputs_together():
        for name in ("a", "b"):
            with atomic_out_dir(tmp_path / name, force=False, marker="m", command="t") as d:
                (d / "m").write_text(name)
        # Complete, but not in place until the block ends.
        assert not (tmp_path / "a").exists()
    assert (tmp_path / "a" / "m").read_text() == "a" and (tmp_path / "b" / "m").read_text() == "b"

    with pytest.raises(OSError), outputs_together():
        with atomic_out_dir(tmp_path / "c", force=False, marker="m", command="t") as d:
            (d / "m").write_text("c")
        raise OSError("the second output failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_failed_output_removes_the_folders_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    for parent in (tmp_path / "new" / "deeper", tmp_path / "kept" / "new"):
        with pytest.raises(RuntimeError):
            with atomic_out_dir(parent / "out", force=False, marker="m", command="t") as d:
                (d / "half").write_text("x")
                raise RuntimeError("the run failed")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["kept"]
