"""KV geometry: the bytes-per-token arithmetic every command relies on, checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fcctl.layout.errors import InputError
from fcctl.layout.geometry import KvGeometry, geometry_from_hf_config, model_geometry


def test_presets_by_hand() -> None:
    # 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (bf16)
    assert model_geometry("llama-3.1-8b").bytes_per_token == 2 * 32 * 8 * 128 * 2  # 131,072
    assert model_geometry("llama-3.1-70b").bytes_per_token == 2 * 80 * 8 * 128 * 2  # 327,680
    assert model_geometry("qwen2.5-7b").bytes_per_token == 2 * 28 * 4 * 128 * 2  # 57,344
    # MLA: one latent of kv_lora_rank 512 + rope 64 per token per layer, 61 layers, bf16
    assert model_geometry("deepseek-v3").bytes_per_token == 61 * 576 * 2  # 70,272


def test_block_and_layer_sizes() -> None:
    g = model_geometry("llama-3.1-8b")
    assert g.bytes_per_token_per_layer == 4096
    assert g.bytes_per_block(16) == 16 * 131072
    assert g.bytes_per_block_per_layer(16) == 65536


def test_tp_splits_heads_and_replicates_beyond_them() -> None:
    g = model_geometry("llama-3.1-8b", tp=4)  # 8 KV heads -> 2 per rank
    assert g.bytes_per_token_per_rank == 2 * 32 * 2 * 128 * 2
    assert g.bytes_per_token == 4 * g.bytes_per_token_per_rank  # node total = unsharded size
    g16 = model_geometry("llama-3.1-8b", tp=16)  # more ranks than heads: 1 head each
    assert g16.kv_heads_per_rank == 1
    assert g16.bytes_per_token == 16 * (2 * 32 * 1 * 128 * 2)
    mla = model_geometry("deepseek-v3", tp=8)  # the latent is replicated on every rank
    assert mla.bytes_per_token_per_rank == 61 * 576 * 2
    assert mla.bytes_per_token == 8 * 61 * 576 * 2


def test_kv_dtype() -> None:
    assert model_geometry("llama-3.1-8b", kv_dtype="fp8").bytes_per_token == 65536
    assert model_geometry("llama-3.1-8b", kv_dtype="float8_e4m3fn").bytes_per_token == 65536
    with pytest.raises(InputError) as e:
        model_geometry("llama-3.1-8b", kv_dtype="int3")
    # The core names the parameter; the CLI maps it to its flag.
    assert e.value.parameter == "kv_dtype"
    assert str(e.value).startswith("kv_dtype: unknown dtype") and "got 'int3'" in str(e.value)


def test_unknown_preset_and_bad_tp() -> None:
    with pytest.raises(InputError) as e:
        model_geometry("gpt-9")
    assert e.value.parameter == "model"
    assert str(e.value).startswith("model: unknown preset") and "got 'gpt-9'" in str(e.value)
    with pytest.raises(InputError) as e:
        model_geometry("llama-3.1-8b", tp=0)
    assert e.value.parameter == "tp" and str(e.value) == "tp: must be an integer >= 1; got 0"
    with pytest.raises(InputError, match="layers"):
        KvGeometry("x", layers=0, kv_heads=1, head_dim=1)


def test_core_messages_name_parameters_not_flags() -> None:
    for call in (
        lambda: model_geometry("gpt-9"),
        lambda: model_geometry("llama-3.1-8b", tp=0),
        lambda: model_geometry("llama-3.1-8b", kv_dtype="int3"),
    ):
        with pytest.raises(InputError) as e:
            call()
        assert "--" not in str(e.value)


def test_hf_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "hidden_size": 3584,
                "torch_dtype": "bfloat16",
                "model_type": "qwen2",
            }
        )
    )
    g = geometry_from_hf_config(cfg)
    assert (g.layers, g.kv_heads, g.head_dim) == (28, 4, 128)  # head_dim = 3584 / 28
    assert g.bytes_per_token == model_geometry("qwen2.5-7b").bytes_per_token


def test_hf_config_mla_and_nested_text_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    text = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    cfg.write_text(json.dumps({"text_config": text, "torch_dtype": "float16"}))
    g = geometry_from_hf_config(cfg)
    assert g.is_mla and g.bytes_per_token == 61 * 576 * 2


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"num_attention_heads": 8}', "'num_hidden_layers'"),
        ('{"num_hidden_layers": "32", "num_attention_heads": 8}', "'num_hidden_layers'"),
        ('{"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": -1}', "'head_dim'"),
    ],
)
def test_hf_config_errors_name_file_and_field(tmp_path: Path, content: str, needle: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(content)
    with pytest.raises(InputError) as e:
        geometry_from_hf_config(cfg)
    assert str(cfg) in str(e.value) and needle in str(e.value)


def test_hf_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        geometry_from_hf_config(tmp_path / "nope.json")


def _qwen_config(tmp_path: Path, **dtype_fields: object) -> Path:
    cfg = tmp_path / "config.json"
    fields = {
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_size": 3584,
    }
    cfg.write_text(json.dumps({**fields, **dtype_fields}))
    return cfg


@pytest.mark.parametrize(
    ("fields", "dtype_bytes"),
    [
        ({}, 2),  # absent: bf16
        ({"torch_dtype": "float8_e4m3fn"}, 1),
        ({"torch_dtype": "float8_e5m2"}, 1),
        ({"dtype": "float32"}, 4),  # newer transformers write "dtype"
        ({"torch_dtype": "float16", "dtype": "float32"}, 2),  # torch_dtype first
    ],
)
def test_hf_config_dtype(tmp_path: Path, fields: dict[str, str], dtype_bytes: int) -> None:
    assert geometry_from_hf_config(_qwen_config(tmp_path, **fields)).dtype_bytes == dtype_bytes


@pytest.mark.parametrize(("field", "value"), [("torch_dtype", "float4_e2m1"), ("dtype", 16)])
def test_hf_config_unknown_dtype_is_an_error_naming_field_and_value(
    tmp_path: Path, field: str, value: object
) -> None:
    cfg = _qwen_config(tmp_path, **{field: value})
    with pytest.raises(InputError) as e:
        geometry_from_hf_config(cfg)
    msg = str(e.value)
    assert msg.startswith(f"{cfg}: field {field!r}: unknown dtype")
    assert msg.endswith(f"got {value!r}")
