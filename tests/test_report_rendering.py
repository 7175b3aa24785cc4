"""The report page as a reader sees it (issue #36, item 14): a real plan of the Claude Code
sample and a real iobench, every section screenshot in Chromium and checked in the DOM.

(a) the decision paragraph's load-free sentence reads as a sentence; (b) a heat map's colours
show no difference its labels cannot (equal labels, one colour; a small spread, shades); (c)
a chart of one load is bars or centred points, never a line over a wide axis; (d) a caption
names only options that exist, on the command it names; (e) the hardware table is printed
once; (f) no string cell keeps JSON quotes. The screenshots stay under pytest's tmp_path
(their folder is printed) for a person to look at.

The heat map's colour rule is also checked without a browser. The browser tests skip without
chromium or playwright, as tests/test_report_browser.py does.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_helpers import (
    Samples,
    report_samples_fixture,  # noqa: F401 - the session fixture report_samples
)
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.reports import format as fmt
from fcctl.reports import svg
from tests.conftest import SAMPLES

runner = CliRunner()


def _fills(chart: str) -> dict[str, set[str]]:
    """A heat map's cell fills by the label drawn on the cell."""
    cells = re.findall(
        r'<rect [^>]*fill="(#[0-9a-f]{6})" data-v[^>]*><title>[^<]*: ([^<]*)<', chart
    )
    out: dict[str, set[str]] = {}
    for fill, label in cells:
        out.setdefault(label, set()).add(fill)
    return out


def _heat(values: list[float]) -> str:
    cells = {(i, 0): v for i, v in enumerate(values)}
    names = [str(i) for i in range(len(values))]
    return svg.heat_map("h", "p99 TTFT", names, ["a"], cells, "x", "y", fmt.seconds)


def test_cells_that_read_alike_share_one_colour() -> None:
    # Every cell reads 4.77 s: one colour, whatever the digits behind the label.
    fills = _fills(_heat([4.7651, 4.7702, 4.7711, 4.7749]))
    assert set(fills) == {"4.77 s"}
    assert len(fills["4.77 s"]) == 1


def test_a_small_spread_is_shades_not_the_whole_ramp() -> None:
    # 4.70 s against 4.79 s (2 %): near the middle of the ramp, not navy against white.
    cells = {(0, 0): 4.70, (1, 0): 4.79}
    shades = svg.heat_shades(cells, fmt.seconds)
    assert abs(shades[(1, 0)] - shades[(0, 0)]) < 0.25
    assert 0.3 < shades[(0, 0)] < shades[(1, 0)] < 0.7
    # A wide spread still spans the ramp: the smallest light, the largest dark.
    wide = svg.heat_shades({(0, 0): 1.0, (1, 0): 30.0}, fmt.seconds)
    assert wide == {(0, 0): 0.0, (1, 0): 1.0}


def test_a_chart_of_one_x_centres_its_points() -> None:
    chart = svg.line_chart(
        "c",
        "one rate",
        [svg.Series("flat", [1.6], [0.8]), svg.Series("tiered", [1.6], [0.7])],
        svg.Axis("offered load (requests/s)"),
        svg.Axis("share", lo=0.0, hi=1.0),
    )
    xs = {float(x) for x in re.findall(r'<circle cx="([0-9.]+)"', chart)}
    middle = svg.LEFT + (svg.WIDTH - svg.LEFT - svg.RIGHT) / 2
    assert xs == {middle} and "<polyline" not in chart


# --- the page in Chromium --------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page_file(report_samples: Samples, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan of the Claude Code sample (its recommend step runs one rate: one-load charts,
    a heat map of equal cells) with a real iobench beside it."""
    root = tmp_path_factory.mktemp("rendering")
    plan = root / "plan"
    done = runner.invoke(
        app,
        [
            "plan",
            str(SAMPLES / "claude_code_sample.jsonl.gz"),
            "-o",
            str(plan),
            "--jobs",
            "1",
            "--replicas",
            "1",
        ],
    )
    assert done.exit_code == 0, done.output
    out = root / "report.html"
    done = runner.invoke(
        app, ["report", str(plan), str(report_samples.iobench_dir), "-o", str(out)]
    )
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture(scope="module")
def page(page_file: Path) -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        context = browser.new_context(offline=True, viewport={"width": 1100, "height": 900})
        opened = context.new_page()
        opened.goto(page_file.as_uri(), wait_until="load")
        yield opened
        browser.close()


def test_every_section_screenshot(page: Any, page_file: Path) -> None:
    ids = page.eval_on_selector_all("main > section", "els => els.map(e => e.id)")
    assert ids == [
        "decision",
        "trace",
        "reuse",
        "storage",
        "replay",
        "recommendation",
        "provenance",
    ]
    for i, sid in enumerate(ids):
        shot = page_file.parent / f"section-{i}-{sid}.png"
        page.locator(f"section#{sid}").screenshot(path=str(shot))
        assert shot.stat().st_size > 5_000, sid
    print(f"screenshots: {page_file.parent}")


def test_a_the_load_free_sentence_reads(page: Any) -> None:
    text = " ".join(page.inner_text("p.decision").split())
    assert "the trace has a" not in text
    assert re.search(
        r"Without load, a [0-9.]+ [KMGT]iB memory tier serves [0-9.]+% of the ideal hit share "
        r"\([0-9.]+%\); p90 session KV is [0-9.]+ [KMGT]?i?B\.",
        text,
    ), text


def test_b_heat_map_cells_that_read_alike_share_a_colour(page: Any) -> None:
    maps = page.eval_on_selector_all(
        "svg.chart[data-chart^=grid-]",
        """els => els.map(e => Array.from(e.querySelectorAll('rect[data-v]')).map(r => [
            r.getAttribute('fill'), r.nextElementSibling.textContent]))""",
    )
    assert len(maps) == 2
    for cells in maps:
        by_label: dict[str, set[str]] = {}
        for fill, label in cells:
            by_label.setdefault(label, set()).add(fill)
        assert all(len(f) == 1 for f in by_label.values()), by_label


def test_c_no_chart_stretches_one_load_over_a_wide_axis(page: Any) -> None:
    charts = page.eval_on_selector_all(
        "svg.chart",
        """els => els.map(e => ({
            name: e.dataset.chart,
            xs: Array.from(e.querySelectorAll('[data-series] circle'))
                .map(c => Number(c.getAttribute('cx'))),
            lines: e.querySelectorAll('[data-series] polyline').length,
            bars: e.querySelectorAll('[data-series] rect').length,
        }))""",
    )
    middle = svg.LEFT + (svg.WIDTH - svg.LEFT - svg.RIGHT) / 2
    for c in charts:
        if c["xs"] and len(set(c["xs"])) == 1:
            assert c["lines"] == 0 and c["xs"][0] == pytest.approx(middle, abs=1), c
    # The plan's recommend step ran one rate: its baselines are bars, one group a policy.
    by_name = {c["name"]: c for c in charts}
    for name in ("recommend-hit-share", "recommend-ttft"):
        assert by_name[name]["bars"] >= 4 and by_name[name]["lines"] == 0, by_name[name]


def test_d_captions_name_options_of_the_command_they_name(page: Any) -> None:
    captions = page.eval_on_selector_all(
        "figcaption, caption", "els => els.map(e => e.textContent)"
    )
    helps: dict[str, str] = {}
    for text in captions:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", text):
            named = re.findall(r"fcctl ([a-z][a-z-]+)", text.split(flag)[0])
            assert named, f"{flag} with no command named: {text}"
            command = named[-1]
            if command not in helps:
                helps[command] = runner.invoke(app, [command, "--help"]).output
            assert flag in helps[command], (command, flag, text)


def test_e_the_hardware_table_is_printed_once(page: Any) -> None:
    headings = page.eval_on_selector_all("h3", "els => els.map(e => e.textContent)")
    assert sum(h.startswith("Hardware") for h in headings) == 1, headings
    ids = page.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_f_no_string_cell_keeps_json_quotes(page: Any) -> None:
    cells = page.eval_on_selector_all("td", "els => els.map(e => e.textContent.trim())")
    quoted = [c for c in cells if len(c) >= 2 and c[0] == c[-1] == '"']
    assert quoted == []
    assert "null" not in cells


def test_e_a_recommendation_on_other_hardware_keeps_its_own_table(
    page_file: Path, tmp_path: Path
) -> None:
    """The recommendation's table is left out only when the replay's shows the same node."""
    plan = page_file.parent / "plan"
    doc = json.loads((plan / "recommend.json").read_text())
    doc["hardware"]["gpus"]["value"] = 4
    other = tmp_path / "recommend.json"
    other.write_text(json.dumps(doc))
    out = tmp_path / "page.html"
    done = runner.invoke(app, ["report", str(plan / "replay.json"), str(other), "-o", str(out)])
    assert done.exit_code == 0, done.output
    html = out.read_text()
    assert html.count('id="hardware-table"') == 1
    assert html.count('id="recommend-hardware-table"') == 1
    assert "<h3>Hardware (recommend-thresholds)</h3>" in html
