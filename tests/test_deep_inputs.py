"""JSON and TOML inputs nested past the parser's depth (200 KB of brackets) or holding an
integer past CPython's 4300-digit limit: one line naming the file, exit 2, no traceback (a
model config, a hardware file, an emitted package's thresholds; a report's inputs and a plan's
resumed documents: tests/test_report_hardening.py, tests/test_plan_resume.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.layout.errors import InputError
from fcctl.layout.rule_file import read_rule
from tests.plan_helpers import MOONCAKE

runner = CliRunner()
BRACKETS = 100_000  # 200 KB: far past the parsers' recursion


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * BRACKETS + "]" * BRACKETS, "nested deeper than the parser allows"),
        ('{"a":' * BRACKETS + "1" + "}" * BRACKETS, "nested deeper than the parser allows"),
        ('{"num_hidden_layers": ' + "9" * 5000 + "}", "4300 digits"),
    ],
    ids=["arrays", "objects", "long-integer"],
)
def test_model_config_past_the_parser_is_one_line(tmp_path: Path, text: str, said: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(text)
    r = runner.invoke(app, ["analyze", str(MOONCAKE), "--model-config", str(config)])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"fcctl: error: {config}: model config is not usable JSON: ")
    assert said in r.stderr


TOML_CASES = [
    ("[" * BRACKETS + "]" * BRACKETS, "nested deeper than the parser allows"),
    ("9" * 5000, "4300 digits"),
]
TOML_IDS = ["arrays", "long-integer"]


@pytest.mark.parametrize(("value", "said"), TOML_CASES, ids=TOML_IDS)
def test_thresholds_toml_past_the_parser_is_an_input_error(
    tmp_path: Path, value: str, said: str
) -> None:
    rule = tmp_path / "thresholds.toml"
    rule.write_text(f"[thresholds]\nshort_reply_tokens = {value}\n")
    with pytest.raises(InputError, match="not usable TOML: ") as caught:
        read_rule(rule)
    assert caught.value.parameter == "thresholds" and said in str(caught.value)


@pytest.mark.parametrize(("value", "said"), TOML_CASES, ids=TOML_IDS)
def test_hardware_toml_past_the_parser_is_one_line(tmp_path: Path, value: str, said: str) -> None:
    hardware = tmp_path / "node.toml"
    hardware.write_text(f'preset = "h200-8x"\ngpus = {value}\n')
    r = runner.invoke(app, ["replay", str(MOONCAKE), "--hardware", str(hardware)])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"fcctl: error: {hardware}: not usable TOML: ") and said in r.stderr
