"""The report page in a real headless Chromium (Debian's ``chromium``, driven by Playwright
with the system browser; no browser download): no console errors, nothing fetched beyond the
file itself, every section and chart rendered, tables sort, readable at phone width, a print
stylesheet, and a screenshot kept as an artifact. ``UPDATE_DOCS=1`` also writes docs/report.png.

Skips, saying why, without the chromium binary or the playwright package (``.ci/run`` installs
both; ``pip install -e '.[test]'`` brings playwright).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_helpers import (
    RECOMMEND_DOC,
    REPLAY_DOC,
    REPO,
    Samples,
    fcctl,
    report_samples_fixture,  # noqa: F401 - the session fixture report_samples
)

from fcctl.reports.html_report import SECTIONS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("chromium is not installed (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)

# Each chart and the series it must draw for the sample inputs.
EXPECTED_CHARTS = {
    "reuse-requests": {"CDF (log2 bucket edges)"},
    "reuse-seconds": {"CDF (log2 bucket edges)"},
    "reuse-stack_bytes": {"CDF (log2 bucket edges)"},
    "session-kv": {"sessions", "flat-layout threshold (p90 >= 1.00 GiB)"},
    "memory-tier": {"LRU hit share", "analysed capacities", "ideal (reuse access share)"},
    "restore-rate": {"flat", "eviction"},
    "read-commands": {"read commands"},
    "restore-latency": {"flat p50", "flat p99", "eviction p50", "eviction p99"},
    "replay-hit-share": {
        "memory-only",
        "tiered",
        "flat",
        "flat-fcfs",
        "ideal (reuse access share)",
    },
    "replay-ttft": {
        f"{p} {q}" for p in ("memory-only", "tiered", "flat", "flat-fcfs") for q in ("p50", "p99")
    },
    "replay-ssd-bytes": {"memory-only", "tiered", "flat", "flat-fcfs"},
    "grid-hit-share": {"GPU hit share over the threshold grid"},
    "grid-ttft-p99": {"p99 TTFT over the threshold grid"},
    "recommend-hit-share": {"memory-only", "tiered", "flat-fcfs", "ideal (reuse access share)"},
}


@pytest.fixture(scope="module")
def page_file(report_samples: Samples, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report-page") / "report.html"
    s = report_samples
    root = s.analyze_dir.parent  # relative names: the page (and docs/report.png) shows them
    r = fcctl(
        "report",
        "analyze",
        "iobench",
        REPLAY_DOC,
        RECOMMEND_DOC,
        "-o",
        out,
        cwd=root,
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


class Opened:
    """A page opened offline with every request recorded and all but the file refused."""

    def __init__(self, browser: Any, url: str, width: int) -> None:
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(
            offline=True, viewport={"width": width, "height": 900}, java_script_enabled=True
        )

        def route(r: Any) -> None:
            self.requests.append(r.request.url)
            if r.request.url == url:
                r.continue_()
            else:
                r.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.errors.append(f"failed: {r.url}"))
        self.page.goto(url, wait_until="load")


@pytest.fixture
def opened(browser: Any, page_file: Path) -> Iterator[Opened]:
    o = Opened(browser, page_file.as_uri(), 1100)
    yield o
    o.context.close()


def test_no_console_errors_and_nothing_fetched(opened: Opened, page_file: Path) -> None:
    opened.page.wait_for_timeout(200)  # late errors (a CSP report) arrive after load
    assert opened.errors == []
    assert opened.requests == [page_file.as_uri()]
    # The CSP allows nothing to be fetched: a script that tries says so in the console.
    opened.page.evaluate("() => { const i = new Image(); i.src = 'https://example.com/x.png'; }")
    opened.page.wait_for_timeout(200)
    assert opened.requests == [page_file.as_uri()]


def test_every_section_and_chart_rendered(opened: Opened) -> None:
    page = opened.page
    ids = page.eval_on_selector_all("main > section", "els => els.map(e => e.id)")
    assert ids == list(SECTIONS)
    charts = page.eval_on_selector_all(
        "svg.chart",
        """els => els.map(e => ({
            name: e.dataset.chart,
            width: e.getBoundingClientRect().width,
            height: e.getBoundingClientRect().height,
            series: Array.from(e.querySelectorAll('[data-series]')).map(g => ({
                name: g.dataset.series,
                points: g.dataset.points === undefined ? 1 : Number(g.dataset.points),
                drawn: g.getBBox().width + g.getBBox().height,
            })),
        }))""",
    )
    by_name = {c["name"]: c for c in charts}
    for name, series in EXPECTED_CHARTS.items():
        chart = by_name[name]
        assert chart["width"] > 200 and chart["height"] > 100, chart
        drawn = {s["name"] for s in chart["series"] if s["points"] > 0 and s["drawn"] > 0}
        assert series <= drawn, (name, series - drawn)
    # Every number of the decision paragraph links to an element that exists.
    targets = page.eval_on_selector_all(".decision a", "as => as.map(a => a.hash.slice(1))")
    assert len(targets) >= 8
    for t in targets:
        assert page.locator(f"#{t}").count() == 1, t


def test_tables_sort_by_value(opened: Opened) -> None:
    page = opened.page
    table = page.locator("#storage-runs")

    def column(i: int) -> list[float]:
        return [
            float(v)
            for v in table.locator(f"tbody tr td:nth-child({i})").evaluate_all(
                "tds => tds.map(td => td.dataset.v)"
            )
        ]

    table.locator("th button", has_text="restore").click()
    assert column(5) == sorted(column(5))
    table.locator("th button", has_text="restore").click()
    assert column(5) == sorted(column(5), reverse=True)
    assert opened.errors == []


def test_narrow_width_and_print(browser: Any, page_file: Path, tmp_path: Path) -> None:
    o = Opened(browser, page_file.as_uri(), 390)
    try:
        page = o.page
        # The page itself never scrolls sideways on a phone: wide tables scroll in their box.
        wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 1
        chart_w = page.eval_on_selector("svg.chart", "e => e.getBoundingClientRect().width")
        assert 200 < chart_w <= 390
        page.screenshot(path=str(tmp_path / "report-390px.png"))
        page.emulate_media(media="print")
        assert page.eval_on_selector("nav", "e => getComputedStyle(e).display") == "none"
        page.pdf(path=str(tmp_path / "report.pdf"))  # the print stylesheet lays it out
        assert (tmp_path / "report.pdf").stat().st_size > 10_000
        assert o.errors == []
    finally:
        o.context.close()


def test_screenshot_artifact(opened: Opened, tmp_path: Path) -> None:
    """A full-page screenshot under tmp_path; with UPDATE_DOCS=1 the README's docs/report.png
    (the top of the page, palette PNG, to stay small)."""
    shot = tmp_path / "report.png"
    opened.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")
    if os.environ.get("UPDATE_DOCS"):
        top = tmp_path / "top.png"
        opened.page.set_viewport_size({"width": 1000, "height": 1700})
        opened.page.screenshot(path=str(top))
        from PIL import Image

        Image.open(top).convert("RGB").quantize(colors=64).save(
            REPO / "docs" / "report.png", optimize=True
        )
