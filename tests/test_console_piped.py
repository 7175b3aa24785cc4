"""A command's summary with stdout piped to a file (issue #36, item 16): every table whole, a
title on one line, no cell cut or wrapped, no padding at the ends of lines. A pipe has no
width; laid out for rich's fallback of 80 columns, iobench's title fell onto two lines and a
long concurrency label was cut, and analyze's model line wrapped inside its cell."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES
from tests.iobench_helpers import tiny_model_config

MOONCAKE = SAMPLES / "mooncake_conversation_2k.jsonl"
CLAUDE = SAMPLES / "claude_code_sample.jsonl.gz"


def piped(*args: str | Path, cwd: Path) -> list[str]:
    """The stdout lines of ``fcctl ARGS`` run as a real process, stdout and stderr pipes."""
    done = subprocess.run(
        [sys.executable, "-m", "fcctl", *map(str, args)],
        capture_output=True,
        text=True,
        # No $COLUMNS, as a shell exports none by default: a width it names is honoured.
        env={**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "PYTHONPATH": str(REPO)},
        cwd=cwd,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def assert_tables_whole(lines: list[str]) -> None:
    """Every line of a boxed table is as wide as the table's top border, and no line ends in
    padding."""
    assert all(line == line.rstrip() for line in lines), "padding left at the end of a line"
    width = None
    for line in lines:
        if line.startswith("┏"):
            width = len(line)
        elif width is not None and line[:1] in "┃┡│└":
            assert len(line) == width, f"a table line is cut or wrapped: {line!r}"
            if line.startswith("└"):
                width = None


def test_iobench_piped_keeps_its_title_on_one_line_and_no_cell_cut(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    cfg = tiny_model_config(tmp_path / "tiny.json")
    lines = piped(
        "iobench",
        "--model-config",
        cfg,
        "--sessions",
        "4",
        "--tokens",
        "32",
        "--turns",
        "2",
        "--no-fio",
        "--free-margin",
        "0",
        "--dir",
        bench,
        cwd=tmp_path,
    )
    title = [line for line in lines if line.lstrip().startswith("iobench: 4 sessions")]
    assert len(title) == 1 and title[0].rstrip().endswith("(O_DIRECT yes)"), lines
    # Concurrency 16 of a 4-session workload ran 4: the label, a long cell, is whole.
    rows = [line for line in lines if "16 (ran 4: only 4 sessions)" in line]
    assert [row.split()[0] for row in rows] == ["flat", "eviction"], lines
    assert all(row.split()[-1] == "all" for row in rows)  # the last column is there too
    header = next(line for line in lines if line.split()[:1] == ["layout"])
    assert header.split()[-1] == "verified"


def test_analyze_piped_keeps_the_model_line_in_one_cell_line(tmp_path: Path) -> None:
    lines = piped("analyze", MOONCAKE, cwd=tmp_path)
    model = [line for line in lines if line.lstrip().startswith("model ")]
    assert len(model) == 1 and model[0].rstrip().endswith("tp 1"), lines
    assert_tables_whole(lines)


def test_replay_piped_keeps_every_row_and_sentence_whole(tmp_path: Path) -> None:
    lines = piped("replay", MOONCAKE, "--rates", "0.5,2", cwd=tmp_path)
    assert_tables_whole(lines)
    # Each decision is one sentence on one line (a 150-column layout broke them in two).
    decisions = [line for line in lines if line.startswith("decision at ")]
    assert len(decisions) == 2 and all(line.endswith(")") for line in decisions), lines
    # The run's one decision heads the summary, its sentences whole too.
    assert lines[0].startswith("decision: ") and lines[0].endswith(")"), lines
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) >= 6 and {len(row.split("│")) for row in rows} == {16}, rows


def test_recommend_piped_keeps_its_tables_whole(tmp_path: Path) -> None:
    lines = piped(
        "recommend-thresholds",
        CLAUDE,
        "--rates",
        "1",
        "--short-reply",
        "256,1024",
        "--agent-context",
        "8192,65536",
        cwd=tmp_path,
    )
    assert_tables_whole(lines)
    assert any(line.startswith("┏") for line in lines)


def test_a_piped_table_is_as_wide_as_its_title() -> None:
    """The rule itself: rich wraps a title to its table's width; in a pipe the table widens."""
    from rich.table import Table

    from fcctl.reports.console import pipe_console

    title = "a title far longer than the two narrow columns of the table it stands over"
    table = Table(title=title)
    table.add_column("a")
    table.add_column("b")
    table.add_row("1", "2")
    buf = io.StringIO()
    pipe_console(file=buf).print(table)
    lines = buf.getvalue().splitlines()
    assert lines[0].strip() == title
    assert_tables_whole([line.rstrip() for line in lines])


def test_columns_names_the_width_of_a_pipe() -> None:
    from fcctl.reports.console import PIPE_WIDTH, pipe_width

    assert pipe_width({}) == PIPE_WIDTH
    assert pipe_width({"COLUMNS": "80"}) == 80
    assert pipe_width({"COLUMNS": ""}) == pipe_width({"COLUMNS": "wide"}) == PIPE_WIDTH
