"""``fcctl report`` reads every document an fcctl command writes (issue #36, item 2).

Each command runs for real, in this process, on a bundled sample or a tiny synthetic dataset,
with and without the options that change its document's shape (session sampling, a closed
loop, a policy subset, the per-worker host scope, one rate or the auto sweep, an analysis of a
dataset or on Dask, a SHARDS sample, ``--out`` directories, a plan's directory and its
``plan.json``). Every document is then given to ``fcctl report`` on its own: exit 0 and a
page with the sections its command fills.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from report_helpers import parse_page, tiny_iobench
from typer.testing import CliRunner

from fcctl.cli import app
from tests.conftest import SAMPLES

CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
runner = CliRunner()

ANALYZE = ["decision", "trace", "reuse", "provenance"]
IOBENCH = ["decision", "storage", "provenance"]
REPLAY = ["decision", "trace", "replay", "provenance"]
RECOMMEND = ["decision", "trace", "recommendation", "provenance"]
PLAN = ["decision", "trace", "reuse", "replay", "recommendation", "provenance"]

# name -> (command line with {out}/{dataset} placeholders, what is reported, its sections);
# "json": the --json document on stdout, "out": the --out (or -o) directory, or a file in it.
FAST = ["--jobs", "1"]
CASES: dict[str, tuple[list[str], str, list[str]]] = {
    "analyze": (["analyze", CLAUDE, "--json"], "json", ANALYZE),
    "analyze --out": (["analyze", CLAUDE, "--out", "{out}"], "out", ANALYZE),
    "analyze --rate": (["analyze", CLAUDE, "--rate", "1", "--json"], "json", ANALYZE),
    "analyze --sample-rate": (
        ["analyze", "{dataset}", "--sample-rate", "0.5", "--json"],
        "json",
        ANALYZE,
    ),
    "analyze dataset": (["analyze", "{dataset}", "--json"], "json", ANALYZE),
    "analyze dataset --engine dask": (
        ["analyze", "{dataset}", "--engine", "dask", "--json"],
        "json",
        ANALYZE,
    ),
    "replay dataset --engine dask": (
        ["replay", "{dataset}", "--rates", "1", "--engine", "dask", "--json"],
        "json",
        REPLAY,
    ),
    "replay --rates 1": (["replay", CLAUDE, "--rates", "1", *FAST, "--json"], "json", REPLAY),
    "replay --rates auto": (["replay", CLAUDE, *FAST, "--json"], "json", REPLAY),
    "replay --rates 1,2 --rate": (
        ["replay", CLAUDE, "--rates", "1,2", "--rate", "1.5", *FAST, "--json"],
        "json",
        REPLAY,
    ),
    "replay --sample-sessions": (
        ["replay", CLAUDE, "--rates", "1", "--sample-sessions", "0.5", *FAST, "--json"],
        "json",
        REPLAY,
    ),
    "replay --concurrency": (
        ["replay", CLAUDE, "--concurrency", "2,all", *FAST, "--json"],
        "json",
        REPLAY,
    ),
    "replay --host-memory list": (
        ["replay", CLAUDE, "--rates", "1,2", "--host-memory", "1TiB,16GiB", *FAST, "--json"],
        "json",
        REPLAY,
    ),
    "replay --host-scope worker --policies": (
        [
            "replay",
            CLAUDE,
            "--rates",
            "1",
            "--host-scope",
            "worker",
            "--policies",
            "flat",
            *FAST,
            "--json",
        ],
        "json",
        REPLAY,
    ),
    "replay dataset --out": (
        [
            "replay",
            "{dataset}",
            "--rates",
            "1",
            "--policies",
            "tiered,flat",
            *FAST,
            "--out",
            "{out}",
        ],
        "out",
        REPLAY,
    ),
    "recommend-thresholds": (
        [
            "recommend-thresholds",
            CLAUDE,
            "--rates",
            "1",
            "--short-reply",
            "256,512",
            "--agent-context",
            "8192",
            *FAST,
            "--json",
        ],
        "json",
        RECOMMEND,
    ),
    "recommend-thresholds --sample-sessions --out": (
        [
            "recommend-thresholds",
            CLAUDE,
            "--rates",
            "0.5,1",
            "--short-reply",
            "256",
            "--agent-context",
            "8192,32768",
            "--sample-sessions",
            "0.5",
            *FAST,
            "--out",
            "{out}",
        ],
        "out",
        RECOMMEND,
    ),
    "plan": (["plan", CLAUDE, "-o", "{out}", "--rate", "1", "--replicas", "1", *FAST], "out", PLAN),
    "plan.json": (
        ["plan", CLAUDE, "-o", "{out}", "--rate", "1", "--replicas", "1", *FAST],
        "out/plan.json",
        PLAN,
    ),
    "plan --sample-sessions": (
        [
            "plan",
            CLAUDE,
            "-o",
            "{out}",
            "--rate",
            "1",
            "--sample-sessions",
            "0.5",
            "--replicas",
            "1",
            *FAST,
        ],
        "out",
        PLAN,
    ),
}


IOBENCH_RUN = tiny_iobench("{scratch}")
CASES |= {
    "iobench": ([*IOBENCH_RUN, "--concurrency", "1,4", "--json"], "json", IOBENCH),
    "iobench --layout flat --out": (
        [*IOBENCH_RUN, "--layout", "flat", "--concurrency", "1", "--out", "{out}"],
        "out",
        IOBENCH,
    ),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``fcctl synth`` writes: three Parquet parts and synth.json."""
    out = tmp_path_factory.mktemp("synth") / "ds"
    done = runner.invoke(
        app,
        [
            "synth",
            "--requests",
            "300",
            "--sessions",
            "30",
            "-o",
            str(out),
            "--partition-rows",
            "100",
        ],
    )
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture(scope="module")
def produce(tmp_path_factory: pytest.TempPathFactory, dataset: Path) -> Callable[[str], Path]:
    """Run a case's command for real (once per command line: a plan's directory and its
    plan.json share one plan) and return the path ``fcctl report`` is given."""
    root = tmp_path_factory.mktemp("documents")
    ran: dict[tuple[str, ...], Path] = {}

    def run(name: str) -> Path:
        args, form, _ = CASES[name]
        if tuple(args) not in ran:
            here = root / f"run{len(ran)}"
            (here / "scratch").mkdir(parents=True)
            values = {
                "out": str(here / "out"),
                "dataset": str(dataset),
                "scratch": str(here / "scratch"),
            }
            done = runner.invoke(app, [a.format(**values) for a in args])
            assert done.exit_code == 0, f"{name}: {done.output}"
            (here / "doc.json").write_text(done.stdout)
            ran[tuple(args)] = here
        return ran[tuple(args)] / ("doc.json" if form == "json" else form)

    return run


@pytest.mark.parametrize(
    "name",
    # A local Dask cluster takes 10-30 s to start here: its cases run with -m slow.
    [pytest.param(n, marks=pytest.mark.slow) if "dask" in n else n for n in sorted(CASES)],
)
def test_report_reads_the_document(
    name: str, produce: Callable[[str], Path], tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    done = runner.invoke(app, ["report", str(produce(name)), "-o", str(page)])
    assert done.exit_code == 0, f"{name}: {done.output}"
    assert parse_page(page.read_text()).sections == CASES[name][2], name


def test_a_synth_description_is_named_as_one(dataset: Path, tmp_path: Path) -> None:
    """synth.json describes a trace (it measures nothing): one line that says so and what to
    run, exit 2, no page; the same for the dataset's directory."""
    for given in (dataset / "synth.json", dataset):
        page = tmp_path / "page.html"
        done = runner.invoke(app, ["report", str(given), "-o", str(page)])
        assert done.exit_code == 2, done.output
        assert "fcctl synth" in done.output and "fcctl analyze" in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1 and not page.exists()
