"""Two outputs of one command are written together (``recommend-thresholds --out DIR --emit
PKG`` on a full disk: tests/test_full_disk.py), and a failed output takes back the parent
folders it created."""

from __future__ import annotations

from pathlib import Path

import pytest

from fcctl.common.outdir import atomic_out_dir, outputs_together


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
