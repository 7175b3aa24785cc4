"""benchmarks/figures.py: the figures README.md and docs/benchmarks.md quote, regenerated.

Only the fast subset runs here (analyze on the Claude Code sample, seconds); the plans on the
samples and the whole traces are the lead's run of the script (docs/figures.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "figures.py"
FIGURE = "cc-sample-session-kv-p50"


def figures(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--fast", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_check_names_a_changed_quote_and_update_restores_it(tmp_path: Path) -> None:
    """A copy of the docs with one quote changed and one unknown marker: --check names both and
    nothing else (so every other fast figure quoted agrees with a fresh run), and --update
    puts the repository's quote back byte for byte."""
    (tmp_path / "docs").mkdir()
    for name in ("README.md", "docs/benchmarks.md"):
        shutil.copy(REPO / name, tmp_path / name)
    readme = (REPO / "README.md").read_text()
    marker = f"<!-- fig:{FIGURE} -->"
    at = readme.index(marker) + len(marker)
    quoted = readme[at : readme.index(" ", at)]
    wrong = f"{float(quoted) + 1:.{len(quoted.split('.')[1])}f}"
    changed = readme[:at] + wrong + readme[at + len(quoted) :]
    changed += "\n<!-- fig:no-such-figure -->1\n"
    (tmp_path / "README.md").write_text(changed)
    line = changed.count("\n", 0, at) + 1

    done = figures("--check", "--root", str(tmp_path))
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 2, done.stdout
    assert (
        f"README.md:{line}: fig:{FIGURE}: quoted '{wrong}', regenerated '{quoted}'" in done.stdout
    )
    assert "fig:no-such-figure: no such figure" in done.stdout
    assert not (tmp_path / "docs" / "figures.md").exists()  # --check writes nothing

    done = figures("--update", "--root", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "1 quote(s) rewritten" in done.stderr
    assert (tmp_path / "README.md").read_text() == readme + "\n<!-- fig:no-such-figure -->1\n"
    rows = (tmp_path / "docs" / "figures.md").read_text().splitlines()
    row = next(r for r in rows if r.startswith(f"| {FIGURE} |"))
    assert "fcctl analyze samples/claude_code_sample.jsonl.gz --json" in row
    assert f"README.md:{line}" in row
