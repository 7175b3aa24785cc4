"""Two outputs of one command are written together (``recommend-thresholds --out DIR --emit
PKG`` on a full disk: tests/test_full_disk.py), and a failed output takes back the parent
folders it created."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.common.outdir import atomic_out_dir, outputs_together
from tests.plan_helpers import MOONCAKE

runner = CliRunner()


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


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{trace}", "--out", "{out}", "--model", "nonesuch-9b"],
        ["replay", "{trace}", "--out", "{out}", "--rates", "-1"],
        ["replay", "{trace}", "--out", "{out}", "--concurrency", "-1"],
        ["recommend-thresholds", "{trace}", "--out", "{out}", "--rates", "-1"],
        ["recommend-thresholds", "{trace}", "--emit", "{out}", "--emit-name", "numpy"],
        ["iobench", "--out", "{out}", "--sessions", "0"],
        ["synth", "-o", "{out}", "--sessions", "0", "--requests", "5"],
        ["plan", "{trace}", "-o", "{out}", "--rate", "-1"],
        ["plan", "{trace}", "-o", "{out}", "--concurrency", "-1"],
        ["plan", "{trace}", "-o", "{out}", "--slo-ttft-p99", "-1"],
        ["plan", "{trace}", "-o", "{out}", "--think-time", "sometimes"],
    ],
    ids=lambda args: " ".join(a for a in args if not a.startswith("{")),
)
def test_a_bad_flag_touches_no_output_directory(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "new" / "out"
    argv = [a.format(trace=MOONCAKE, out=out) for a in args]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("fcctl: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert list(tmp_path.iterdir()) == []
