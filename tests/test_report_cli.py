"""fcctl report without a browser: inputs recognised, bad inputs refused, the page's figures
equal the terminal's, sections only for the inputs given, the page written atomically."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest
from report_helpers import (
    RECOMMEND_DOC,
    REPLAY_DOC,
    Samples,
    fcctl,
    parse_page,
    report_samples_fixture,  # noqa: F401 - the session fixture report_samples
    terminal_rows,
)

from fcctl.reports import format as fmt
from fcctl.reports import svg
from fcctl.reports.html_report import SECTIONS
from fcctl.reports.report_inputs import read_input


def _report(tmp_path: Path, *inputs: Path | str, name: str = "r.html") -> tuple[int, str, Path]:
    out = tmp_path / name
    r = fcctl("report", *inputs, "-o", out)
    return r.returncode, r.stderr, out


def _one_line_exit_2(tmp_path: Path, *inputs: Path | str, must: str) -> str:
    rc, err, out = _report(tmp_path, *inputs)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and must in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.html")]  # no temp left
    return err


def test_every_section_for_all_four_inputs(tmp_path: Path, report_samples: Samples) -> None:
    s = report_samples
    rc, err, out = _report(tmp_path, s.analyze_dir, s.iobench_dir, REPLAY_DOC, RECOMMEND_DOC)
    assert rc == 0, err
    page = parse_page(out.read_text())
    assert page.sections == list(SECTIONS)
    assert "report: wrote" in err and "KiB" in err


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("analyze", ["decision", "trace", "reuse", "provenance"]),
        ("iobench", ["decision", "storage", "provenance"]),
        ("replay", ["decision", "trace", "replay", "provenance"]),
        ("recommend", ["decision", "recommendation", "provenance"]),  # issue #9: no trace
    ],
)
def test_sections_for_missing_commands_are_left_out(
    tmp_path: Path, report_samples: Samples, which: str, expected: list[str]
) -> None:
    inputs = {
        "analyze": report_samples.analyze_dir / "analysis.json",  # a bare --json document
        "iobench": report_samples.iobench_dir,
        "replay": REPLAY_DOC,
        "recommend": RECOMMEND_DOC,
    }
    rc, err, out = _report(tmp_path, inputs[which])
    assert rc == 0, err
    assert parse_page(out.read_text()).sections == expected


def test_inputs_identified_by_keys_or_command_key(tmp_path: Path, report_samples: Samples) -> None:
    assert [i.command for i in read_input(report_samples.analyze_dir)] == ["analyze"]
    assert [i.command for i in read_input(report_samples.iobench_dir)] == ["iobench"]
    assert [i.command for i in read_input(REPLAY_DOC)] == ["replay"]
    assert [i.command for i in read_input(RECOMMEND_DOC)] == ["recommend-thresholds"]
    # An explicit command key wins over the keys.
    doc = json.loads(REPLAY_DOC.read_text()) | {"command": "recommend-thresholds", "grid": []}
    named = tmp_path / "named.json"
    named.write_text(json.dumps(doc))
    assert read_input(named)[0].command == "recommend-thresholds"


def test_page_and_terminal_agree_digit_for_digit(tmp_path: Path, report_samples: Samples) -> None:
    s = report_samples
    rc, err, out = _report(tmp_path, s.analyze_dir, s.iobench_dir)
    assert rc == 0, err
    page = parse_page(out.read_text())
    analyze_lines = terminal_rows(s.analyze_stdout)
    for table_id in (
        "reuse-shares",
        "reuse-distance-table",
        "sessions-table",
        "memory-tier-table",
        "request-sizes-table",
    ):
        rows = page.tables[table_id][1:]  # past the header
        assert rows, table_id
        for row in rows:
            assert " ".join(c for c in row if c) in analyze_lines, (table_id, row)
    for k, v in page.tables["trace-table"]:
        if k in (
            "requests",
            "sessions",
            "block size",
            "block accesses",
            "distinct blocks",
            "longest session",
            "model",
            "order",
        ):
            assert f"{k} {v}" in analyze_lines, (k, v)
    io_lines = terminal_rows(s.iobench_stdout)
    runs = page.tables["storage-runs"][1:]
    assert len(runs) == 4
    for row in runs:
        assert " ".join(row) in io_lines, row
    text = html.unescape(out.read_text())
    for line in s.iobench_stdout.splitlines()[-6:]:  # the fio and comparison sentences
        if line.startswith(("flat ", "eviction ", "fio")):
            assert line.strip() in text, line


def test_format_reproduces_iobench_terminal_rules() -> None:
    # iobench's terminal table renders through these same functions; pin their rules.
    rates = [fmt.rate(v, "-") for v in (0.0, 735781419.29, 1813753081.08, 12.3e9, None)]
    assert rates == ["0.00 GB/s", "0.74 GB/s", "1.81 GB/s", "12.30 GB/s", "-"]
    assert fmt.concurrency_label(16, 4) == "16 (ran 4: only 4 sessions)"
    assert fmt.concurrency_label(4, 4) == "4"
    assert fmt.ratio(8.0) == "8.00x" and fmt.ratio(None, "-") == "-"
    assert fmt.size(42847331942.4) == "39.9 GiB" and fmt.size(2**30) == "1.00 GiB"
    assert fmt.size(118 * 2**20) == "118 MiB" and fmt.size(None) == "n/a"
    assert fmt.share(0.9263667593409334) == "92.64%"
    assert fmt.number(84.2) == "84.2" and fmt.number(101059.0) == "101,059"
    assert fmt.seconds(0.0454) == "45.4 ms" and fmt.seconds(1.234) == "1.23 s"
    assert fmt.seconds(123.4) == "123 s" and fmt.seconds(0) == "0 ms"


def test_ticks() -> None:
    assert svg.linear_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.log_ticks(1, 1000) == [1, 10, 100, 1000]
    assert svg.log_ticks(2**20, 2**36, base=2) == [float(2**k) for k in range(20, 37, 3)]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_json_of_another_tool(tmp_path: Path) -> None:
    other = _write(tmp_path, "package.json", json.dumps({"name": "x", "version": "1.0"}))
    _one_line_exit_2(tmp_path, other, must="package.json: not an output of fcctl")


def test_truncated_document(tmp_path: Path, report_samples: Samples) -> None:
    text = (report_samples.analyze_dir / "analysis.json").read_text()
    cut = _write(tmp_path, "analysis.json", text[: len(text) // 2])
    _one_line_exit_2(
        tmp_path, cut, must="analysis.json: not valid JSON (truncated: the file ends mid-document)"
    )


def test_schema_from_the_future(tmp_path: Path, report_samples: Samples) -> None:
    doc = json.loads((report_samples.iobench_dir / "iobench.json").read_text())
    doc["schema_version"] = 2
    future = _write(tmp_path, "future.json", json.dumps(doc))
    err = _one_line_exit_2(tmp_path, future, must="future.json: schema_version 2 of fcctl iobench")
    assert "upgrade fcctl" in err


def test_directory_without_a_document(tmp_path: Path) -> None:
    d = tmp_path / "empty-out"
    d.mkdir()
    _write(d, "notes.json", "[1, 2]")
    _one_line_exit_2(tmp_path, d, must="empty-out: directory holds no fcctl document")


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    doc = json.loads(REPLAY_DOC.read_text())
    del doc["rates"][1]["policies"]["flat"]["ttft_s"]["p99"]  # optional: shown as n/a
    doc["rates"][0]["rate"] = "fast"
    bad = _write(tmp_path, "bad.json", json.dumps(doc))
    _one_line_exit_2(tmp_path, bad, must="bad.json: rates[0].rate: expected a number")


def test_two_documents_of_one_command(tmp_path: Path) -> None:
    copy = tmp_path / "again.json"
    shutil.copy(REPLAY_DOC, copy)
    _one_line_exit_2(tmp_path, REPLAY_DOC, copy, must="a second fcctl replay document")


def test_existing_output_needs_force(tmp_path: Path) -> None:
    out = _write(tmp_path, "r.html", "keep me")
    r = fcctl("report", REPLAY_DOC, "-o", out)
    assert r.returncode == 2 and "exists (pass --force" in r.stderr
    assert out.read_text() == "keep me"
    r = fcctl("report", REPLAY_DOC, "-o", out, "--force", "--title", "Replay <check>")
    assert r.returncode == 0, r.stderr
    assert "<title>Replay &lt;check&gt;</title>" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left


def test_bad_input_leaves_an_existing_page_alone(tmp_path: Path) -> None:
    out = _write(tmp_path, "r.html", "old page")
    bad = _write(tmp_path, "bad.json", "{")
    r = fcctl("report", bad, "-o", out, "--force")
    assert r.returncode == 2 and out.read_text() == "old page"


def test_a_real_replay_document(tmp_path: Path) -> None:
    """fcctl replay has landed: its real --json document renders like the issue's sample."""
    from report_helpers import SAMPLE_TRACE

    r = fcctl("replay", SAMPLE_TRACE, "--rates", "0.5", "--json")
    if r.returncode != 0:
        pytest.skip(f"fcctl replay did not run here: {r.stderr.strip()[:200]}")
    doc = _write(tmp_path, "replay.json", r.stdout)
    rc, err, out = _report(tmp_path, doc)
    assert rc == 0, err
    page = parse_page(out.read_text())
    assert "replay" in page.sections
    policies = json.loads(r.stdout)["rates"][0]["policies"]
    assert len(page.tables["replay-table"]) == 1 + len(policies)
