"""KV-cache geometry: the one place that says how many bytes a token, a layer and a block take.

``analyzers`` (trace sizes), ``layout`` (session files) and ``iobench`` (workloads) all use it.

Conventions
-----------
* Standard attention (MHA/GQA) stores K and V: ``2 x kv_heads x head_dim x dtype_bytes`` per
  token per layer.
* MLA (DeepSeek-V2/V3) stores one compressed latent per token per layer:
  ``(kv_lora_rank + qk_rope_head_dim) x dtype_bytes``; no separate K and V.
* Tensor parallelism: with ``tp`` ranks, each rank holds ``ceil(kv_heads / tp)`` KV heads
  (heads are replicated when ``tp > kv_heads``, as vLLM and SGLang do). The MLA latent is
  replicated on every rank. ``bytes_per_token_per_rank`` is what one GPU stores and restores;
  ``bytes_per_token`` is the node total over all ``tp`` ranks, which is what a host-memory or
  SSD tier serving that node must hold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import LayoutError

KV_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "float8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    # torch's float8 names, as Hugging Face configs write them (``"torch_dtype": "float8_e4m3fn"``).
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "int8": 1,
}


@dataclass(frozen=True)
class KvGeometry:
    """Shape of one model's KV cache.

    ``latent_dim`` > 0 selects MLA (one latent vector per token per layer; ``kv_heads`` and
    ``head_dim`` are then ignored for sizing).
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    latent_dim: int = 0
    tp: int = 1

    def __post_init__(self) -> None:
        for field in ("layers", "dtype_bytes", "tp"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise LayoutError(
                    f"geometry {self.name!r}: {field} must be an int >= 1; got {value!r}"
                )
        if self.latent_dim < 0:
            raise LayoutError(
                f"geometry {self.name!r}: latent_dim must be >= 0; got {self.latent_dim!r}"
            )
        if self.latent_dim == 0 and (self.kv_heads < 1 or self.head_dim < 1):
            raise LayoutError(
                f"geometry {self.name!r}: kv_heads and head_dim must be >= 1 without MLA; "
                f"got kv_heads={self.kv_heads!r}, head_dim={self.head_dim!r}"
            )

    @property
    def is_mla(self) -> bool:
        return self.latent_dim > 0

    @property
    def kv_heads_per_rank(self) -> int:
        return 0 if self.is_mla else math.ceil(self.kv_heads / self.tp)

    @property
    def bytes_per_token_per_layer(self) -> int:
        """Bytes one rank stores for one token at one layer."""
        if self.is_mla:
            return self.latent_dim * self.dtype_bytes
        return 2 * self.kv_heads_per_rank * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_token_per_rank(self) -> int:
        """Bytes one rank stores for one token, all layers."""
        return self.layers * self.bytes_per_token_per_layer

    @property
    def bytes_per_token(self) -> int:
        """Bytes the node stores for one token over all ``tp`` ranks, all layers."""
        return self.tp * self.bytes_per_token_per_rank

    def bytes_per_block(self, block_tokens: int) -> int:
        """Node bytes of one block of ``block_tokens`` tokens (all layers, all ranks)."""
        return block_tokens * self.bytes_per_token

    def bytes_per_block_per_layer(self, block_tokens: int) -> int:
        """One rank's bytes of one block at one layer: the unit a layer-wise restore reads."""
        return block_tokens * self.bytes_per_token_per_layer

    def with_overrides(
        self, *, tp: int | None = None, dtype_bytes: int | None = None
    ) -> KvGeometry:
        kw: dict[str, Any] = {}
        if tp is not None:
            kw["tp"] = tp
        if dtype_bytes is not None:
            kw["dtype_bytes"] = dtype_bytes
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype_bytes": self.dtype_bytes,
            "latent_dim": self.latent_dim,
            "tp": self.tp,
            "bytes_per_token": self.bytes_per_token,
            "bytes_per_token_per_rank": self.bytes_per_token_per_rank,
            "bytes_per_token_per_layer": self.bytes_per_token_per_layer,
        }


# Published model configs (Hugging Face config.json), bf16 KV cache, tp=1.
MODEL_PRESETS: dict[str, KvGeometry] = {
    g.name: g
    for g in (
        KvGeometry("llama-3.1-8b", layers=32, kv_heads=8, head_dim=128),
        KvGeometry("llama-3.1-70b", layers=80, kv_heads=8, head_dim=128),
        KvGeometry("llama-3.1-405b", layers=126, kv_heads=8, head_dim=128),
        KvGeometry("qwen2.5-7b", layers=28, kv_heads=4, head_dim=128),
        KvGeometry("qwen2.5-72b", layers=80, kv_heads=8, head_dim=128),
        # MLA: kv_lora_rank 512 + qk_rope_head_dim 64 per token per layer.
        KvGeometry("deepseek-v3", layers=61, kv_heads=0, head_dim=0, latent_dim=576),
    )
}


def dtype_bytes(name: str) -> int:
    """Bytes per element for a KV dtype name such as ``bf16`` or ``fp8``."""
    try:
        return KV_DTYPE_BYTES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(KV_DTYPE_BYTES))
        raise LayoutError(
            f"kv_dtype: unknown dtype (known: {known}); got {name!r}", parameter="kv_dtype"
        ) from None


def model_geometry(
    model: str = "llama-3.1-8b",
    *,
    config_path: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
) -> KvGeometry:
    """Resolve a preset name or a Hugging Face ``config.json`` into a :class:`KvGeometry`."""
    if config_path is not None:
        geom = geometry_from_hf_config(config_path)
    else:
        try:
            geom = MODEL_PRESETS[model.lower()]
        except KeyError:
            known = ", ".join(MODEL_PRESETS)
            raise LayoutError(
                f"model: unknown preset (known: {known}; or give a Hugging Face config.json as "
                f"config_path); got {model!r}",
                parameter="model",
            ) from None
    if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
        raise LayoutError(f"tp: must be an integer >= 1; got {tp!r}", parameter="tp")
    return geom.with_overrides(tp=tp, dtype_bytes=dtype_bytes(kv_dtype) if kv_dtype else None)


def _cfg_int(cfg: dict[str, Any], path: str, key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise LayoutError(f"{path}: field {key!r}: required for the KV geometry; missing")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LayoutError(f"{path}: field {key!r}: must be a non-negative integer; got {value!r}")
    return value


def _cfg_dtype_bytes(cfg: dict[str, Any], raw: dict[str, Any], path: str) -> int:
    """Element size from the first dtype field present; bf16 when none is.

    An unknown value is an error: guessing 2 bytes would silently double an fp8 cache's size.
    """
    for source, key in ((cfg, "torch_dtype"), (cfg, "dtype"), (raw, "torch_dtype")):
        value = source.get(key)
        if not value:
            continue
        bytes_ = KV_DTYPE_BYTES.get(value.lower()) if isinstance(value, str) else None
        if bytes_ is None:
            known = ", ".join(sorted(KV_DTYPE_BYTES))
            raise LayoutError(
                f"{path}: field {key!r}: unknown dtype (known: {known}); got {value!r}"
            )
        return bytes_
    return KV_DTYPE_BYTES["bfloat16"]


def geometry_from_hf_config(path: str | Path) -> KvGeometry:
    """Read layers, KV heads, head dim, MLA latent and dtype from a Hugging Face config.json.

    Multimodal configs with a nested ``text_config`` use that. ``torch_dtype`` (or ``dtype``)
    sets the element size; bf16 when absent.
    """
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise LayoutError(f"{p}: model config not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LayoutError(f"{p}: cannot read model config: {e}") from None
    except json.JSONDecodeError as e:
        raise LayoutError(f"{p}:{e.lineno}: model config is not valid JSON: {e.msg}") from None
    if not isinstance(raw, dict):
        raise LayoutError(f"{p}: model config must be a JSON object; got {type(raw).__name__}")
    text_config = raw.get("text_config")
    cfg: dict[str, Any] = text_config if isinstance(text_config, dict) else raw
    layers = _cfg_int(cfg, str(p), "num_hidden_layers")
    dbytes = _cfg_dtype_bytes(cfg, raw, str(p))
    name = str(raw.get("_name_or_path") or raw.get("model_type") or p.stem)
    if cfg.get("kv_lora_rank"):
        latent = _cfg_int(cfg, str(p), "kv_lora_rank") + _cfg_int(
            cfg, str(p), "qk_rope_head_dim", 0
        )
        return KvGeometry(
            name, layers=layers, kv_heads=0, head_dim=0, dtype_bytes=dbytes, latent_dim=latent
        )
    heads = _cfg_int(cfg, str(p), "num_attention_heads")
    kv_heads = _cfg_int(cfg, str(p), "num_key_value_heads", heads)
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        hidden = _cfg_int(cfg, str(p), "hidden_size")
        if heads == 0:
            raise LayoutError(f"{p}: field 'num_attention_heads': must be > 0; got 0")
        head_dim = hidden // heads
    elif not isinstance(head_dim, int) or head_dim < 1:
        raise LayoutError(f"{p}: field 'head_dim': must be a positive integer; got {head_dim!r}")
    return KvGeometry(name, layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dbytes)
