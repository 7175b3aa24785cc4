"""KV geometry: the bytes-per-token arithmetic every command relies on, checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fcctl.layout.errors import InputError
from fcctl.layout.geometry import (
    KvGeometry,
    geometry_from_hf_config,
    model_geometry,
    preset_names,
)


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
    # ... so a shared tier holds it once, not tp times.
    assert mla.bytes_per_token == mla.bytes_per_token_node == 61 * 576 * 2
    assert mla.kv_bytes_for_tokens(1000) == 1000 * 61 * 576 * 2


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
        (
            '{"num_hidden_layers": 0, "num_attention_heads": 8, "head_dim": 64}',
            "'num_hidden_layers'",
        ),
        (
            '{"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 0, '
            '"head_dim": 64}',
            "'num_key_value_heads'",
        ),
        (
            '{"num_hidden_layers": 2, "num_attention_heads": 0, "head_dim": 64}',
            "'num_attention_heads'",
        ),
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


# --------------------------------------------------------------------------- tp rules


def test_tp_per_rank_and_node_total_accessors() -> None:
    g = model_geometry("llama-3.1-70b", tp=4)
    per_rank = 80 * 2 * 2 * 128 * 2  # 2 of the 8 KV heads per rank
    assert g.bytes_per_token_per_rank == per_rank
    assert g.bytes_per_token_node == g.bytes_per_token == 4 * per_rank
    assert g.kv_bytes_for_tokens(10, per_rank=True) == 10 * per_rank
    assert g.kv_bytes_for_tokens(10) == 10 * 4 * per_rank
    # A session file holds one rank's KV: its block unit is per rank.
    assert g.bytes_per_block_per_layer(16) == 16 * 2 * 2 * 128 * 2
    assert model_geometry("llama-3.1-70b", tp=16).kv_head_replicas == 2


@pytest.mark.parametrize("tp", [3, 5, 12])
def test_tp_must_divide_kv_heads_or_be_a_multiple(tp: int) -> None:
    with pytest.raises(InputError) as e:
        model_geometry("llama-3.1-8b", tp=tp)  # 8 KV heads
    assert e.value.parameter == "tp"
    assert str(e.value).startswith("tp: must divide the KV-head count (8")
    assert f"got {tp}" in str(e.value)
    # MLA has no heads to split: any tp is fine.
    assert model_geometry("deepseek-v3", tp=tp).tp == tp


def test_every_preset_is_listed_and_described() -> None:
    assert {
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "deepseek-v3",
    } <= set(preset_names())
    with pytest.raises(InputError) as e:
        model_geometry("gpt-9")
    for name in preset_names():
        assert name in str(e.value)
        assert model_geometry(name).describe().startswith(name)
    assert model_geometry("llama-3.1-8b").describe() == (
        "llama-3.1-8b (llama): hidden 4096, 32 layers, 32 heads, 8 KV heads x head dim 128, "
        "2-byte KV, tp 1"
    )


# --------------------------------------------------------------------------- windows


def _config(tmp_path: Path, **fields: object) -> Path:
    base: dict[str, object] = {
        "hidden_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "num_hidden_layers": 12,
        "torch_dtype": "bfloat16",
    }
    base.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in base.items() if v is not None}))
    return path


PER_LAYER = 2 * 4 * 256 * 2  # K and V, 4 KV heads, head dim 256, bf16


def test_gemma3_pattern_counts_windowed_layers_at_their_window(tmp_path: Path) -> None:
    # Gemma 3: every 6th layer is global, the other five slide over 1024 tokens.
    g = geometry_from_hf_config(
        _config(tmp_path, model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=6)
    )
    assert (g.windowed_layers, g.window_tokens, g.full_layers) == (10, 1024, 2)
    assert g.kv_bytes_for_tokens(100) == 12 * 100 * PER_LAYER  # inside the window: all layers
    assert g.kv_bytes_for_tokens(50_000) == (2 * 50_000 + 10 * 1024) * PER_LAYER
    with pytest.raises(InputError, match="10 of 12 layers keep a window of 1024 tokens"):
        _ = g.bytes_per_token  # never silently as global
    assert g.to_dict()["bytes_per_token"] is None
    assert "10 keep a 1024-token window, 2 global" in g.describe()


def test_gemma3_multimodal_layer_types_win(tmp_path: Path) -> None:
    types = ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 5
    types.append("full_attention")
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gemma3",
                "text_config": {
                    "model_type": "gemma3_text",
                    "hidden_size": 2560,
                    "num_attention_heads": 8,
                    "num_key_value_heads": 4,
                    "head_dim": 256,
                    "num_hidden_layers": 12,
                    "sliding_window": 1024,
                    "sliding_window_pattern": 3,  # contradicted by layer_types: the list wins
                    "layer_types": types,
                },
            }
        )
    )
    g = geometry_from_hf_config(path)
    assert (g.windowed_layers, g.window_tokens) == (10, 1024)
    assert g.describe().startswith("gemma3 (gemma3_text): hidden 2560, 12 layers")


def test_gemma2_alternates(tmp_path: Path) -> None:
    g = geometry_from_hf_config(_config(tmp_path, model_type="gemma2", sliding_window=4096))
    assert (g.windowed_layers, g.window_tokens) == (6, 4096)
    assert g.kv_bytes_for_tokens(8192) == (6 * 8192 + 6 * 4096) * PER_LAYER


def test_gpt_oss_layer_types(tmp_path: Path) -> None:
    types = ["sliding_attention", "full_attention"] * 6
    g = geometry_from_hf_config(
        _config(tmp_path, model_type="gpt_oss", sliding_window=128, layer_types=types)
    )
    assert (g.windowed_layers, g.window_tokens) == (6, 128)
    assert g.kv_bytes_for_tokens(1000, per_rank=True) == (6 * 1000 + 6 * 128) * PER_LAYER


def test_llama4_chunked_attention(tmp_path: Path) -> None:
    # Layers that use RoPE attend within an 8192-token chunk; every 4th (NoPE) is global.
    no_rope = [int((i + 1) % 4 != 0) for i in range(12)]
    g = geometry_from_hf_config(
        _config(
            tmp_path, model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=no_rope
        )
    )
    assert (g.windowed_layers, g.window_tokens) == (9, 8192)
    g2 = geometry_from_hf_config(
        _config(tmp_path, model_type="llama4_text", attention_chunk_size=8192)
    )
    assert g2 == g  # the default interval of 4 gives the same layers


def test_qwen_sliding_window_off_is_global_and_mistral_is_all_windowed(tmp_path: Path) -> None:
    qwen = geometry_from_hf_config(
        _config(tmp_path, model_type="qwen2", sliding_window=131072, use_sliding_window=False)
    )
    assert not qwen.is_windowed and qwen.bytes_per_token == 12 * PER_LAYER
    qwen_default = geometry_from_hf_config(
        _config(tmp_path, model_type="qwen2", sliding_window=4096)
    )
    assert not qwen_default.is_windowed  # Qwen's use_sliding_window defaults to false
    mistral = geometry_from_hf_config(_config(tmp_path, model_type="mistral", sliding_window=4096))
    assert (mistral.windowed_layers, mistral.window_tokens) == (12, 4096)
    assert not geometry_from_hf_config(_config(tmp_path, sliding_window=None)).is_windowed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"layer_types": ["linear_attention"] * 12}, "field 'layer_types': cannot size"),
        ({"layer_types": ["full_attention"] * 3}, "field 'layer_types': must list one type"),
        ({"layer_types": ["sliding_attention"] * 12}, "field 'sliding_window'"),
        ({"sliding_window": 0, "model_type": "mistral"}, "field 'sliding_window'"),
        ({"attention_chunk_size": 8192, "no_rope_layers": [2] * 12}, "field 'no_rope_layers'"),
    ],
)
def test_windows_it_cannot_count_are_refused_with_the_field(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        geometry_from_hf_config(_config(tmp_path, **fields))


def test_hf_config_summary_names_the_model(tmp_path: Path) -> None:
    g = geometry_from_hf_config(_config(tmp_path, model_type="llama", _name_or_path="my/model"))
    assert g.describe() == (
        "my/model (llama): hidden 2048, 12 layers, 8 heads, 4 KV heads x head dim 256, "
        "2-byte KV, tp 1"
    )
    assert g.info is not None and g.info.source == str(tmp_path / "config.json")
    d = g.to_dict()
    assert (d["hidden_size"], d["attention_heads"], d["model_type"]) == (2048, 8, "llama")


def test_model_config_only_regular_files_of_bounded_size(tmp_path: Path) -> None:
    import os

    from fcctl.layout.geometry import geometry_from_hf_config

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="must be a regular file; this is a FIFO"):
        geometry_from_hf_config(fifo)  # no hang: opened non-blocking, refused by type
    with pytest.raises(InputError, match="this is a device"):
        geometry_from_hf_config("/dev/zero")  # never read: it would never end
    with pytest.raises(InputError, match="this is a directory"):
        geometry_from_hf_config(tmp_path)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "missing.json")
    with pytest.raises(InputError, match="model config not found"):
        geometry_from_hf_config(tmp_path / "dangling.json")
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(5 * 2**20)  # sparse: costs no disk
    with pytest.raises(InputError, match="over the 4194304-byte limit"):
        geometry_from_hf_config(big)
    weird = tmp_path / "bad\nname.json"
    weird.write_text("{")
    with pytest.raises(InputError) as e:
        geometry_from_hf_config(weird)
    assert "\n" not in str(e.value) and "bad\\nname.json" in str(e.value)
