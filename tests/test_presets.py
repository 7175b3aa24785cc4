"""Presets are data: model geometries and hardware nodes are files in the package, each figure
with its source, read by the same readers as a user's ``--model-config`` and hw.toml."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

import fcctl
from fcctl.analyzers.kvmodel.tiered import DEFAULT_BUCKET_BYTES
from fcctl.analyzers.replay import PRESETS, hardware_document, load_hardware
from fcctl.analyzers.replay.hardware import PRESET_DIR as HARDWARE_DIR
from fcctl.analyzers.replay.hardware import HardwareError, read_preset
from fcctl.layout.geometry import (
    PRESET_DIR as MODEL_DIR,
)
from fcctl.layout.geometry import (
    geometry_from_hf_config,
    model_geometry,
    preset_names,
)
from fcctl.layout.reclaim import DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK
from tests.conftest import REPO
from tests.replay_helpers import trace_of

#: The longest request of the public Claude Code trace (weka_kv_cache_tester), prompt plus
#: output: 894,371 + 795 tokens (docs/benchmarks.md, "Model presets").
CLAUDE_CODE_LONGEST_TOKENS = 895_166
MODEL_FILES = sorted(MODEL_DIR.glob("*.json"))
HARDWARE_FILES = sorted(HARDWARE_DIR.glob("*.toml"))


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_every_number_of_a_model_preset_has_its_source(path: Path) -> None:
    doc = json.loads(path.read_text())
    numbers = {k for k, v in doc.items() if isinstance(v, int) and not k.startswith("_")}
    assert numbers and numbers | {"torch_dtype"} == set(doc["_sources"]), path.name
    assert all(isinstance(s, str) and s for s in doc["_sources"].values())


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_a_model_preset_is_read_as_a_users_config_is(path: Path) -> None:
    preset = model_geometry(path.stem)
    as_config = model_geometry(config_path=path)  # the file given as --model-config
    assert preset == dataclasses.replace(as_config, name=path.stem)
    assert preset.info is not None and preset.info.source == "preset"
    assert geometry_from_hf_config(path).info.source == str(path)  # type: ignore[union-attr]


def test_the_preset_list_is_the_files_in_a_stable_order() -> None:
    assert set(preset_names()) == {p.stem for p in MODEL_FILES}
    llama = [n for n in preset_names() if n.startswith("llama-3.1-")]
    assert llama == ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"]


def test_a_1m_preset_serves_the_longest_claude_code_request_on_the_default_node() -> None:
    """The default model cannot run the trace's longest request (its 128 K context, and its KV
    is larger than one worker's GPU pool); qwen2.5-7b-1m runs it on the default node (h200-8x),
    by the simulator's own rules."""
    blocks = -(-CLAUDE_CODE_LONGEST_TOKENS // 16)
    trace = trace_of([list(range(blocks)), [0, 1]], output_tokens=[8, 8])
    rejected = {}
    for model in ("llama-3.1-8b", "qwen2.5-7b-1m"):
        result = fcctl.replay(trace, policies="memory-only", rates=[1.0], model=model, jobs=1)
        counts = result.rates[0].policies["memory-only"].rejected_requests
        rejected[model] = counts.count
    assert rejected == {"llama-3.1-8b": 1, "qwen2.5-7b-1m": 0}


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=[p.stem for p in HARDWARE_FILES])
def test_every_figure_of_a_hardware_preset_has_its_source(path: Path) -> None:
    doc = tomllib.loads(path.read_text())
    assert all(isinstance(v, dict) and v.get("source") for v in doc.values()), path.name
    document = hardware_document(PRESETS[path.stem])
    assert {k: v["source"] for k, v in doc.items()} == {
        k: v["source"] for k, v in document.items() if k != "name"
    }


def test_hardware_presets_agree_with_the_modules_they_name() -> None:
    for hw in PRESETS.values():
        assert hw.bucket_bytes == DEFAULT_BUCKET_BYTES
        assert (hw.high_watermark, hw.low_watermark) == (
            DEFAULT_HIGH_WATERMARK,
            DEFAULT_LOW_WATERMARK,
        )
    assert list(PRESETS) == ["h100-8x", "h200-8x", "b200-8x"]


def test_a_users_hardware_file_is_read_as_the_presets_are(tmp_path: Path) -> None:
    user = tmp_path / "node.toml"
    user.write_text(
        'preset = "h100-8x"\n'
        "gpus = 4\n"
        'ssd_read_bytes_per_s = { value = 2e10, source = "our fio run, 2026-11-02" }\n'
    )
    hw = load_hardware(str(user))
    assert (hw.gpus, hw.ssd_read_bytes_per_s) == (4, 2e10)
    assert hw.sources["gpus"] == str(user)
    assert hw.sources["ssd_read_bytes_per_s"] == "our fio run, 2026-11-02"
    assert hw.sources["hbm_bytes"] == PRESETS["h100-8x"].sources["hbm_bytes"]
    # A preset file given as the user's file is that preset, figure for figure.
    same = load_hardware(str(HARDWARE_DIR / "b200-8x.toml"))
    assert dataclasses.replace(same, name="b200-8x") == PRESETS["b200-8x"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus = { value = 8 }\n", "required in a preset; missing"),
        ('gpus = { value = 8, origin = "x" }\n', "field 'gpus': a table holds a value"),
        ('gpus = { source = "x" }\n', "field 'gpus': value: required"),
    ],
)
def test_a_broken_preset_names_its_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(HardwareError) as e:
        read_preset(path)
    assert str(path) in str(e.value) and needle in str(e.value)


def test_the_benchmark_presets_use_the_presets_format() -> None:
    node = load_hardware(str(REPO / "benchmarks/presets/paper-single-instance.toml"))
    assert node.gpus == 1 and node.sources["ssd_read_bytes_per_s"].startswith("FlatCake summary")
    long_context = REPO / "benchmarks/presets/deepseek-v3-long-context.json"
    test_every_number_of_a_model_preset_has_its_source(long_context)
    geometry = model_geometry(config_path=long_context)
    assert geometry.info is not None
    assert geometry.info.max_context_tokens >= CLAUDE_CODE_LONGEST_TOKENS
