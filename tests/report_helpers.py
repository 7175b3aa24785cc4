"""Inputs for the ``fcctl report`` tests: real analyze and iobench outputs made from samples/.

``make_samples`` runs the real commands (tiny workloads) once per test session and keeps their
terminal output, so the tests can check that the page and the terminal agree digit for digit.
Replay and recommend-thresholds do not exist yet: their documents are the hand-written ones in
``tests/report_data/``, which follow the key lists of issues #8 (§4) and #9 (§1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TRACE = REPO / "samples" / "claude_code_sample.jsonl.gz"
REPORT_DATA = REPO / "tests" / "report_data"
REPLAY_DOC = REPORT_DATA / "replay_issue8.json"
RECOMMEND_DOC = REPORT_DATA / "recommend_issue9.json"


@dataclass(frozen=True)
class Samples:
    analyze_dir: Path  # analyze --out: analysis.json + Parquet + PNGs
    analyze_stdout: str  # its terminal summary
    iobench_dir: Path  # iobench --out
    iobench_stdout: str


def fcctl(*args: str | os.PathLike[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a child process (wide terminal: rich tables do not wrap)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def tiny_iobench(scratch: str) -> list[str]:
    """A real iobench of two sessions of 256 tokens in ``scratch`` (fio for 0.1 s if present)."""
    fio = ["--fio-runtime", "0.1"] if shutil.which("fio") else ["--no-fio"]
    return ["iobench", "--dir", scratch, "--sessions", "2", "--tokens", "256", "--turns", "2", *fio]


def make_samples(root: Path) -> Samples:
    """analyze of the Claude Code sample and a tiny iobench (fio if installed) in ``root``."""
    # From the repository root with the relative name, so the page names the trace as the
    # README does (samples/...), not by this machine's checkout path.
    a = fcctl("analyze", SAMPLE_TRACE.relative_to(REPO), "--out", root / "analyze", cwd=REPO)
    assert a.returncode == 0, a.stderr
    scratch = root / "scratch"
    scratch.mkdir()
    io = fcctl(*tiny_iobench(str(scratch)), "--concurrency", "1,4", "--out", root / "iobench")
    assert io.returncode == 0, io.stderr
    return Samples(root / "analyze", a.stdout, root / "iobench", io.stdout)


class _Tables(HTMLParser):
    """Rows of every table with an id, as lists of cell texts; section ids; chart names."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.sections: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "section" and a.get("id"):
            self.sections.append(str(a["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse_page(html: str) -> _Tables:
    p = _Tables()
    p.feed(html)
    return p


def terminal_rows(text: str) -> set[str]:
    """Each line of rich's output with the box characters dropped and spaces collapsed."""
    out = set()
    for line in text.splitlines():
        cleaned = "".join(" " if c in "│┃║|" else c for c in line)
        out.add(" ".join(cleaned.split()))
    return out


@pytest.fixture(scope="session", name="report_samples")
def report_samples_fixture(tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """Made once per test session and shared by every report test module (imported by each).

    Each importing module gets its own fixture definition, so the samples are cached here."""
    global _SAMPLES
    if _SAMPLES is None:
        _SAMPLES = make_samples(tmp_path_factory.mktemp("report-samples"))
    return _SAMPLES


_SAMPLES: Samples | None = None
