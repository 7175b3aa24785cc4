"""``fcctl convert`` reads every input analyze and replay read (issue #36, item 3): the directory
``fcctl synth`` writes, a glob of its parts, a dataset ``convert --partition-by`` wrote, with
``--format parquet`` or none. The converted file is the trace analyze sees in the dataset:
the same requests in the same order, the same block ids, so the same analysis figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.analyzers.traces.canonical import traces_equal
from fcctl.analyzers.traces.dataset import read_dataset
from fcctl.analyzers.traces.readers import read_trace
from fcctl.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A synth directory (three parts and synth.json), a glob of its parts, and the Claude Code
    sample cut by session hash into a partitioned dataset (hive-style folders)."""
    root = tmp_path_factory.mktemp("datasets")
    synth = root / "synth"
    done = runner.invoke(
        app,
        [
            *("synth", "--requests", "300", "--sessions", "30", "-o", str(synth)),
            *("--partition-rows", "100", "--seed", "3"),
        ],
    )
    assert done.exit_code == 0, done.output
    parts = root / "by-session"
    done = runner.invoke(
        app,
        [
            *("convert", str(SAMPLES / "claude_code_sample.jsonl.gz"), "-o", str(parts)),
            *("--partition-by", "session-hash", "--partitions", "4"),
        ],
    )
    assert done.exit_code == 0, done.output
    return {
        "synth directory": str(synth),
        "synth glob": str(synth / "part-*.parquet"),
        "partitioned dataset": str(parts),
    }


def _analysis(source: str) -> dict:
    done = runner.invoke(app, ["analyze", source, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


@pytest.mark.parametrize("given", ["synth directory", "synth glob", "partitioned dataset"])
@pytest.mark.parametrize("format", [None, "parquet"])
def test_convert_reads_what_analyze_reads(
    inputs: dict[str, str], given: str, format: str | None, tmp_path: Path
) -> None:
    source = inputs[given]
    out = tmp_path / "one.parquet"
    flags = [] if format is None else ["--format", format]
    done = runner.invoke(app, ["convert", source, "-o", str(out), *flags])
    assert done.exit_code == 0, done.output
    # The converted file is the trace analyze reads from the dataset, row for row.
    assert traces_equal(read_trace(out), read_dataset(source))
    before, after = _analysis(source)["trace"], _analysis(str(out))["trace"]
    for key in ("requests", "sessions", "block_accesses", "distinct_blocks", "duration_s"):
        assert after[key] == before[key], key
    assert f"{before['requests']:,} requests" in done.output
    assert f"{before['block_accesses']:,} block accesses" in done.output


def test_convert_cuts_a_dataset_again(inputs: dict[str, str], tmp_path: Path) -> None:
    """A synth dataset re-partitioned by session hash reads back as the same trace."""
    source = inputs["synth directory"]
    out = tmp_path / "again"
    done = runner.invoke(app, ["convert", source, "-o", str(out), "--partition-by", "session-hash"])
    assert done.exit_code == 0, done.output
    assert traces_equal(read_dataset(out), read_dataset(source))


@pytest.mark.parametrize(
    ("given", "inside", "words"),
    [
        ("synth directory", "x.parquet", "lies inside the input dataset"),
        ("synth glob", "part-99999.parquet", "lies inside the input dataset"),
    ],
)
def test_an_output_inside_the_dataset_is_refused(
    inputs: dict[str, str], given: str, inside: str, words: str
) -> None:
    """Written into the dataset, the output would be read back as one more of its parts."""
    directory = Path(inputs["synth directory"])
    before = sorted(p.name for p in directory.iterdir())
    done = runner.invoke(app, ["convert", inputs[given], "-o", str(directory / inside)])
    assert done.exit_code == 2 and words in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1
    assert sorted(p.name for p in directory.iterdir()) == before


def test_a_reader_format_on_a_dataset_names_the_flag(
    inputs: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "x.parquet"
    done = runner.invoke(
        app, ["convert", inputs["synth directory"], "-o", str(out), "--format", "mooncake"]
    )
    assert done.exit_code == 2, done.output
    assert done.output.startswith("fcctl: error: --format: ") and "dataset" in done.output
    assert not out.exists()
