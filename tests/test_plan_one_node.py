"""Inside ``plan``, analyze's load-free verdict is judged at the node's own host memory, and the
report explains a verdict that differs from the decision (issue 33 item 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.planning import node_memory_tiers
from tests.conftest import SAMPLES
from tests.plan_helpers import small_trace

runner = CliRunner()
GIB = 2**30
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


def _plan(*args: str) -> str:
    r = runner.invoke(app, ["plan", *args, "--jobs", "1", "--replicas", "1"])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_node_memory_tiers_surround_the_host_memory() -> None:
    assert node_memory_tiers(1024 * GIB) == (256 * GIB, 512 * GIB, 1024 * GIB, 2048 * GIB)
    assert node_memory_tiers(3) == (1, 3, 6)  # a quarter and a half of 3 bytes round to 1
    assert node_memory_tiers(0) is None  # no host memory: analyze's own tiers


def test_default_node_verdict_is_at_its_1_tib(tmp_path: Path) -> None:
    out = tmp_path / "p"
    stdout = _plan(str(small_trace(tmp_path)), "-o", str(out), "--rate", "2")
    doc = json.loads((out / "analyze.json").read_text())
    # h200-8x's host memory is 1 TiB, not analyze's default 256 GiB reference.
    assert doc["verdict"]["reference_capacity_bytes"] == 1024 * GIB
    capacities = [t["capacity_bytes"] for t in doc["memory_tier"]]
    assert capacities == [256 * GIB, 512 * GIB, 1024 * GIB, 2048 * GIB]
    assert "  analyze (no load): " in stdout and " at 1,024 GiB host memory" in stdout


def test_a_verdict_that_differs_from_the_decision_is_explained(tmp_path: Path) -> None:
    # 4 GiB of host memory holds little of the sample's reuse: load-free, flat; under load
    # every layout delivers the same, so the decision is none.
    out = tmp_path / "p"
    stdout = _plan(CLAUDE, "-o", str(out), "--rate", "0.5", "--host-memory", "4GiB")
    analyze = json.loads((out / "analyze.json").read_text())
    verdict = analyze["verdict"]
    assert verdict["reference_capacity_bytes"] == 4 * GIB
    assert 4 * GIB in [t["capacity_bytes"] for t in analyze["memory_tier"]]
    plan = json.loads((out / "plan.json").read_text())
    best = plan["decision"]["best"]
    assert verdict["layout"] in ("flat", "tiered") and verdict["layout"] != best
    assert "load-free, so it can differ from the decision, measured under load" in stdout
    html = (out / "report.html").read_text()
    start = html.index('<p class="decision">')
    text = re.sub(r"<[^>]+>", "", html[start : html.index("</p>", start)])
    assert (
        f"The load-free verdict below says {verdict['layout']} with a 4.00 GiB memory tier "
        f"and the decision says {best}: the verdict judges the trace's reuse alone" in text
    )
