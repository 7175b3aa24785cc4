"""Hardening of replay's and recommend's inputs (issue #20): non-finite hardware values, the
--gpus memory check, --emit-name shadowing, overlapping --out/--emit; each fails on the old code."""

from __future__ import annotations

from pathlib import Path

import pytest

from fcctl.analyzers.recommend.emit import check_distinct_outputs, check_name
from fcctl.analyzers.replay import load_hardware, with_values
from fcctl.analyzers.replay.run import WORKER_STATE_BYTES, workers_of
from fcctl.common.errors import FcctlInputError
from fcctl.layout.geometry import model_geometry


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "key",
    ["prefill_tokens_per_s", "ssd_read_bytes_per_s", "host_to_gpu_efficiency", "hbm_bytes_per_s"],
)
def test_non_finite_hardware_value_names_its_source(key: str, value: float) -> None:
    with pytest.raises(FcctlInputError, match=rf"^--flag: field '{key}': must be a finite"):
        with_values(load_hardware(None), {key: value}, "--flag")


def test_non_finite_value_in_hw_toml_names_the_file(tmp_path: Path) -> None:
    hw = tmp_path / "hw.toml"
    hw.write_text("ssd_read_bytes_per_s = nan\n")
    with pytest.raises(FcctlInputError, match=r"hw.toml.*'ssd_read_bytes_per_s'.*finite.*nan"):
        load_hardware(str(hw))


def test_gpus_checked_against_the_memory_budget_before_allocation() -> None:
    geometry = model_geometry("llama-3.1-8b")
    hw = with_values(load_hardware(None), {"gpus": 10_000_000}, "--gpus")
    with pytest.raises(FcctlInputError, match=r"^gpus: .*memory budget of [\d,]+ bytes"):
        workers_of(geometry, hw)
    assert workers_of(geometry, with_values(hw, {"gpus": 8}, "--gpus")) == 8
    assert WORKER_STATE_BYTES > 0


@pytest.mark.parametrize(
    "name", ["numpy", "json", "os", "sys", "torch", "kvikio", "fcctl", "vllm", "sglang", "lmcache"]
)
def test_emit_name_that_shadows_an_import_is_refused(name: str) -> None:
    with pytest.raises(FcctlInputError, match=rf"^emit_name: must not shadow.*got '{name}'"):
        check_name(name)


@pytest.mark.parametrize("name", ["not-a-name", "class", "1pkg", ""])
def test_emit_name_must_be_an_identifier(name: str) -> None:
    with pytest.raises(FcctlInputError, match=r"^emit_name: must be a Python identifier"):
        check_name(name)


def test_emit_name_ordinary_is_accepted() -> None:
    assert check_name("flatcake_store") == "flatcake_store"


def test_out_and_emit_must_not_overlap(tmp_path: Path) -> None:
    for out, emit in [
        (tmp_path / "x", tmp_path / "x"),
        (tmp_path / "x", tmp_path / "x" / "p"),
        (tmp_path / "x" / "p", tmp_path / "x"),
    ]:
        with pytest.raises(FcctlInputError, match=r"^`out`, `emit`: must be separate"):
            check_distinct_outputs(out, emit)
    check_distinct_outputs(tmp_path / "a", tmp_path / "b")
    check_distinct_outputs(None, tmp_path / "b")


def test_arrivals_overflowing_after_time_scaling_one_line_exit_2(tmp_path: Path) -> None:
    """Five requests 1 ms apart replayed at 1e-308 requests/s: the scaled times overflow."""
    import json

    from typer.testing import CliRunner

    from fcctl.cli import app

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": i,
                    "input_length": 100,
                    "output_length": 10,
                    "hash_ids": [1, 2, i + 3],
                }
            )
            + "\n"
            for i in range(5)
        )
    )
    for command in (["replay"], ["recommend-thresholds", "--jobs", "1"]):
        r = CliRunner().invoke(
            app, [*command, str(trace), "--format", "mooncake", "--rates", "1e-308"]
        )
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--rates 1e-308 must be finite after time scaling" in lines[0]


@pytest.mark.parametrize("command", ["replay", "recommend-thresholds", "plan"])
@pytest.mark.parametrize(
    "flag,value,field",
    [
        ("--max-batched-tokens", "0", "max_batched_tokens"),
        ("--prefill-chunk-tokens", "-5", "prefill_chunk_tokens"),
    ],
)
def test_batching_flags_are_checked_in_one_line(
    tmp_path: Path, command: str, flag: str, value: str, field: str
) -> None:
    from analyze_helpers import one_line_exit_2
    from typer.testing import CliRunner

    from fcctl.cli import app
    from tests.conftest import SAMPLES

    args = [command, str(SAMPLES / "claude_code_sample.jsonl.gz"), flag, value]
    if command == "plan":
        args += ["-o", str(tmp_path / "plan")]
    err = one_line_exit_2(CliRunner().invoke(app, args))
    assert flag in err and field in err and "must be > 0" in err
    assert not (tmp_path / "plan").exists()
