"""The HTML page marks sampled figures as analyze's terminal does: ``~`` on the LRU stack rows
and on sampled memory-tier points, and the same legend line with the rate and the bound."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.synth import write_synth
from fcctl.cli import app
from fcctl.reports.format import sampling_legend, size

# 64 TiB is 8 Mi blocks of 8 MiB, past the exact head at rate 0.1: a sampled point.
MEMORY = "16GiB,64GiB,64TiB"


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """A real bounded analysis (SHARDS at rate 0.1) of a synthetic dataset: the --out
    directory, its JSON and its terminal summary."""
    d = tmp_path_factory.mktemp("sampled")
    write_synth(d / "ds", "mixed", 2500, 50, seed=11, partition_rows=400)
    runner = CliRunner()
    args = ["analyze", str(d / "ds"), "--sample-rate", "0.1", "--memory", MEMORY]
    done = runner.invoke(app, [*args, "--out", str(d / "a")])
    assert done.exit_code == 0, done.output
    doc = json.loads((d / "a" / "analysis.json").read_text())
    terminal = runner.invoke(app, args)
    assert terminal.exit_code == 0, terminal.output
    return d / "a", doc, terminal.stdout


def _page_text(path: Path) -> str:
    html = path.read_text()
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.mark.parametrize("form", ["out-dir", "json"])
def test_the_page_marks_sampled_figures_with_the_terminals_legend(bounded, tmp_path, form):
    out, doc, terminal = bounded
    t = doc["trace"]
    assert t["sampled"] is True
    assert [p["sampled"] for p in doc["memory_tier"]] == [False, False, True]
    if form == "json":
        source = tmp_path / "analysis.json"
        source.write_text(json.dumps(doc))
    else:
        source = out
    page = tmp_path / "page.html"
    done = CliRunner().invoke(app, ["report", str(source), "-o", str(page)])
    assert done.exit_code == 0, done.output
    text = _page_text(page)
    s = t["sampling"]
    legend = sampling_legend(
        s["rate"],
        s["exact_below_blocks"],
        s["error_bound"]["hit_share_mean_abs_pp"],
        s["error_bound"]["hit_share_max_abs_pp"],
    )
    assert "rate 0.1" in legend and "pp mean" in legend
    assert legend in text  # the page states the rate and the bound...
    assert legend in " ".join(terminal.split())  # ...in the terminal's words
    assert "~ LRU stack (blocks)" in text and "~ LRU stack (bytes)" in text
    caps = [p["capacity_bytes"] for p in doc["memory_tier"]]
    assert f"~ {size(caps[2])}" in text  # the sampled memory-tier point (64 TiB)
    for exact in caps[:2]:
        assert f"~ {size(exact)}" not in text and size(exact) in text  # exact points unmarked
    html = page.read_text()
    assert 'id="sampling-legend"' in html


def test_an_exact_analysis_has_no_marks(tmp_path):
    samples = Path(__file__).parent.parent / "samples" / "mooncake_conversation_2k.jsonl"
    runner = CliRunner()
    done = runner.invoke(app, ["analyze", str(samples), "--out", str(tmp_path / "a")])
    assert done.exit_code == 0, done.output
    page = tmp_path / "page.html"
    done = runner.invoke(app, ["report", str(tmp_path / "a"), "-o", str(page)])
    assert done.exit_code == 0, done.output
    text = _page_text(page)
    assert "SAMPLED" not in text and "~ LRU" not in text
    assert "exact: every block access counted" in text
