"""KV-cache geometry: the one place that says how many bytes a token, a layer and a block take.

``analyzers`` (trace sizes), ``layout`` (session files) and ``iobench`` (workloads) all use it.

Conventions
-----------
* Standard attention (MHA/GQA) stores K and V: ``2 x kv_heads x head_dim x dtype_bytes`` per
  token per layer.
* MLA (DeepSeek-V2/V3) stores one compressed latent per token per layer:
  ``(kv_lora_rank + qk_rope_head_dim) x dtype_bytes``; no separate K and V.
* Tensor parallelism (``tp``: the ranks of one serving instance, the same in every command).
  Every size is either **per rank** (its name says ``per_rank``, or it is per layer:
  ``bytes_per_token_per_layer``, ``bytes_per_block_per_layer``) or the **node total** a shared
  host-memory or SSD tier serving the instance must hold (``bytes_per_token``,
  ``bytes_per_token_node``, ``bytes_per_block``, ``kv_bytes_for_tokens``). A session file holds
  one rank's KV, so iobench and the session format size per rank; analyze sizes node totals.

  Standard attention: ``tp`` must divide ``kv_heads`` (each rank holds ``kv_heads / tp``) or be
  a multiple of it (each rank holds one head, replicated ``tp / kv_heads`` times, as vLLM and
  SGLang do); anything else is refused (``parameter="tp"``). The node total is ``tp`` times one
  rank's bytes, replicas included: each rank saves and restores its own KV. MLA: the latent
  is the same on every rank, so a shared tier holds it **once** (node total = one rank's
  bytes), whatever ``tp``.
* Sliding-window, chunked and hybrid attention: ``windowed_layers`` of the ``layers`` keep at
  most ``window_tokens`` tokens of KV. A context of ``T`` tokens then takes
  ``(full layers x T + windowed layers x min(T, window)) x bytes per token per layer``
  (:meth:`KvGeometry.kv_bytes_for_tokens`). Such a geometry has no single bytes-per-token
  figure: ``bytes_per_token`` and ``bytes_per_token_per_rank`` raise, naming the window, so no
  caller counts windowed layers as global by accident.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from dataclasses import dataclass, field, replace
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
class ModelInfo:
    """What a summary names about the model beyond its KV shape (``0``/``""``: not known).

    ``source`` is ``"preset"`` or the path of the Hugging Face config it was read from.
    ``max_context_tokens`` is the config's ``max_position_embeddings``: the longest context
    (prompt + output) the model serves.
    """

    source: str = ""
    model_type: str = ""
    hidden_size: int = 0
    attention_heads: int = 0
    max_context_tokens: int = 0


@dataclass(frozen=True)
class KvGeometry:
    """Shape of one model's KV cache. Sizes in bytes; see the module docstring for ``tp``.

    ``latent_dim`` > 0 selects MLA (one latent vector per token per layer; ``kv_heads`` and
    ``head_dim`` are then ignored for sizing).

    ``windowed_layers`` of the ``layers`` hold at most ``window_tokens`` tokens of KV (sliding
    window or chunked attention); ``0`` for a model whose every layer is global.

    Per rank: ``bytes_per_token_per_layer``, ``bytes_per_token_per_rank``,
    ``bytes_per_block_per_layer``, ``kv_bytes_for_tokens(T, per_rank=True)``. Node total over
    the ``tp`` ranks (what a shared tier holds; MLA counted once): ``bytes_per_token``
    (= ``bytes_per_token_node``), ``bytes_per_block``, ``kv_bytes_for_tokens(T)``.
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    latent_dim: int = 0
    tp: int = 1
    windowed_layers: int = 0
    window_tokens: int = 0
    # Descriptive only: two geometries with the same KV shape are equal whatever their source.
    info: ModelInfo | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("layers", "dtype_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LayoutError(
                    f"geometry {self.name!r}: {name} must be an int >= 1; got {value!r}"
                )
        if not isinstance(self.tp, int) or isinstance(self.tp, bool) or self.tp < 1:
            raise LayoutError(f"tp: must be an integer >= 1; got {self.tp!r}", parameter="tp")
        if self.latent_dim < 0:
            raise LayoutError(
                f"geometry {self.name!r}: latent_dim must be >= 0; got {self.latent_dim!r}"
            )
        if self.latent_dim == 0 and (self.kv_heads < 1 or self.head_dim < 1):
            raise LayoutError(
                f"geometry {self.name!r}: kv_heads and head_dim must be >= 1 without MLA; "
                f"got kv_heads={self.kv_heads!r}, head_dim={self.head_dim!r}"
            )
        if self.latent_dim == 0 and self.kv_heads % self.tp and self.tp % self.kv_heads:
            # Engines (vLLM, SGLang) either split the KV heads evenly or replicate each head on
            # a whole number of ranks; an uneven split is not a deployment that exists.
            raise LayoutError(
                f"tp: must divide the KV-head count ({self.kv_heads} for {self.name!r}) or be "
                f"a multiple of it (heads are then replicated); got {self.tp!r}",
                parameter="tp",
            )
        if not isinstance(self.windowed_layers, int) or not (
            0 <= self.windowed_layers <= self.layers
        ):
            raise LayoutError(
                f"geometry {self.name!r}: windowed_layers must be in [0, {self.layers}]; got "
                f"{self.windowed_layers!r}"
            )
        if self.windowed_layers and (
            not isinstance(self.window_tokens, int) or self.window_tokens < 1
        ):
            raise LayoutError(
                f"geometry {self.name!r}: window_tokens must be an int >= 1 with windowed "
                f"layers; got {self.window_tokens!r}"
            )

    @property
    def is_mla(self) -> bool:
        return self.latent_dim > 0

    @property
    def is_windowed(self) -> bool:
        """True when some layers keep only a window of tokens (no single bytes per token)."""
        return self.windowed_layers > 0

    @property
    def full_layers(self) -> int:
        """Layers that keep the KV of every token of the context."""
        return self.layers - self.windowed_layers

    @property
    def kv_heads_per_rank(self) -> int:
        return 0 if self.is_mla else math.ceil(self.kv_heads / self.tp)

    @property
    def kv_head_replicas(self) -> int:
        """Ranks holding each KV head (``tp / kv_heads`` when ``tp > kv_heads``, else 1)."""
        return 1 if self.is_mla or self.tp <= self.kv_heads else self.tp // self.kv_heads

    @property
    def bytes_per_token_per_layer(self) -> int:
        """Bytes one rank stores for one token at one layer."""
        if self.is_mla:
            return self.latent_dim * self.dtype_bytes
        return 2 * self.kv_heads_per_rank * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_token_per_layer_node(self) -> int:
        """Bytes a shared tier holds for one token at one layer: ``tp`` ranks' worth (replicated
        heads included), the MLA latent once."""
        ranks = 1 if self.is_mla else self.tp
        return ranks * self.bytes_per_token_per_layer

    def _refuse_windowed(self, what: str) -> None:
        if self.is_windowed:
            raise LayoutError(
                f"geometry {self.name!r}: {self.windowed_layers} of {self.layers} layers keep "
                f"a window of {self.window_tokens} tokens, so {what} has no single value "
                "(it would count them as global); use kv_bytes_for_tokens(tokens)"
            )

    @property
    def bytes_per_token_per_rank(self) -> int:
        """Bytes one rank stores for one token, all layers (all-global models only)."""
        self._refuse_windowed("bytes_per_token_per_rank")
        return self.layers * self.bytes_per_token_per_layer

    @property
    def bytes_per_token_node(self) -> int:
        """Bytes a shared tier holds for one token over all ``tp`` ranks and all layers (MLA
        once; all-global models only)."""
        self._refuse_windowed("bytes_per_token")
        return self.layers * self.bytes_per_token_per_layer_node

    @property
    def bytes_per_token(self) -> int:
        """The node total per token: :attr:`bytes_per_token_node`."""
        return self.bytes_per_token_node

    def kv_bytes_for_tokens(self, tokens: int, *, per_rank: bool = False) -> int:
        """KV bytes of a context of ``tokens`` tokens: full layers hold every token, windowed
        layers at most ``window_tokens``. Node total unless ``per_rank``."""
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise LayoutError(f"tokens: must be an integer >= 0; got {tokens!r}")
        if per_rank:
            per_layer = self.bytes_per_token_per_layer
        else:
            per_layer = self.bytes_per_token_per_layer_node
        kept = self.full_layers * tokens + self.windowed_layers * min(tokens, self.window_tokens)
        return kept * per_layer

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

    def describe(self) -> str:
        """One line naming the model and its KV shape, for summaries, e.g.
        ``llama-3.1-8b (llama): hidden 4096, 32 layers, 32 heads, 8 KV heads x head dim 128,
        2-byte KV, tp 1``."""
        info = self.info or ModelInfo()
        head = self.name + (f" ({info.model_type})" if info.model_type else "")
        parts = []
        if info.hidden_size:
            parts.append(f"hidden {info.hidden_size}")
        layers = f"{self.layers} layers"
        if self.is_windowed:
            layers += (
                f" ({self.windowed_layers} keep a {self.window_tokens}-token window, "
                f"{self.full_layers} global)"
            )
        parts.append(layers)
        if info.attention_heads:
            parts.append(f"{info.attention_heads} heads")
        if self.is_mla:
            parts.append(f"MLA latent {self.latent_dim}")
        else:
            parts.append(f"{self.kv_heads} KV heads x head dim {self.head_dim}")
        parts.append(f"{self.dtype_bytes}-byte KV")
        parts.append(f"tp {self.tp}")
        return f"{head}: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Fields and sizes; the per-token totals are ``None`` for a windowed geometry."""
        info = self.info or ModelInfo()
        windowed = self.is_windowed
        return {
            "name": self.name,
            "model_type": info.model_type,
            "hidden_size": info.hidden_size,
            "attention_heads": info.attention_heads,
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype_bytes": self.dtype_bytes,
            "latent_dim": self.latent_dim,
            "tp": self.tp,
            "windowed_layers": self.windowed_layers,
            "window_tokens": self.window_tokens,
            "bytes_per_token": None if windowed else self.bytes_per_token,
            "bytes_per_token_per_rank": None if windowed else self.bytes_per_token_per_rank,
            "bytes_per_token_per_layer": self.bytes_per_token_per_layer,
        }


# Published model configs (Hugging Face config.json), bf16 KV cache, tp=1.
def _preset(
    name: str, model_type: str, hidden: int, heads: int, context: int, **kv: Any
) -> KvGeometry:
    return KvGeometry(name, info=ModelInfo("preset", model_type, hidden, heads, context), **kv)


MODEL_PRESETS: dict[str, KvGeometry] = {
    g.name: g
    for g in (
        # max_position_embeddings: 131072 for Llama 3.1, 32768 for Qwen2.5 (its YaRN 128K
        # mode is opt-in), 163840 for DeepSeek-V3 (their config.json files).
        _preset("llama-3.1-8b", "llama", 4096, 32, 131072, layers=32, kv_heads=8, head_dim=128),
        _preset("llama-3.1-70b", "llama", 8192, 64, 131072, layers=80, kv_heads=8, head_dim=128),
        _preset(
            "llama-3.1-405b", "llama", 16384, 128, 131072, layers=126, kv_heads=8, head_dim=128
        ),
        _preset("qwen2.5-7b", "qwen2", 3584, 28, 32768, layers=28, kv_heads=4, head_dim=128),
        _preset("qwen2.5-72b", "qwen2", 8192, 64, 32768, layers=80, kv_heads=8, head_dim=128),
        # MLA: kv_lora_rank 512 + qk_rope_head_dim 64 per token per layer.
        _preset(
            "deepseek-v3",
            "deepseek_v3",
            7168,
            128,
            163840,
            layers=61,
            kv_heads=0,
            head_dim=0,
            latent_dim=576,
        ),
    )
}


def preset_names() -> tuple[str, ...]:
    """Every preset :func:`model_geometry` accepts, in a stable order (for ``--help``)."""
    return tuple(MODEL_PRESETS)


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
            known = ", ".join(preset_names())
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


# layer_types values (transformers) and whether the layer keeps only a window of tokens.
_LAYER_TYPES = {"full_attention": False, "sliding_attention": True, "chunked_attention": True}


def _cfg_window(cfg: dict[str, Any], path: str, key: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(
            f"{path}: field {key!r}: windowed layers need a window of >= 1 tokens; got {value!r}"
        )
    return value


def _cfg_windows(cfg: dict[str, Any], path: str, layers: int, model_type: str) -> tuple[int, int]:
    """``(windowed layers, window tokens)`` from a config's sliding-window / chunked-attention
    fields; ``(0, 0)`` when every layer is global. Anything it cannot count is refused with
    the field named, never taken as global."""
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        # transformers' per-layer list (Gemma 2/3, GPT-OSS, Llama 4, Qwen 2/3 in recent
        # releases) is the most explicit source, so it wins over the older fields.
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise LayoutError(
                f"{path}: field 'layer_types': must list one type per layer ({layers}); got "
                f"{layer_types!r:.200}"
            )
        unknown = sorted({t for t in layer_types if t not in _LAYER_TYPES}, key=str)
        if unknown:
            raise LayoutError(
                f"{path}: field 'layer_types': cannot size the KV cache of layer type "
                f"{unknown[0]!r} (known: {', '.join(_LAYER_TYPES)})"
            )
        kinds = {t for t in layer_types if _LAYER_TYPES[t]}
        window_key = {
            "sliding_attention": "sliding_window",
            "chunked_attention": "attention_chunk_size",
        }
        windows = {_cfg_window(cfg, path, window_key[t]) for t in kinds}
        if len(windows) > 1:
            raise LayoutError(
                f"{path}: field 'layer_types': sliding and chunked layers with different "
                f"windows ({sorted(windows)}) are not supported"
            )
        windowed = sum(1 for t in layer_types if _LAYER_TYPES[t])
        return (windowed, windows.pop()) if windowed else (0, 0)
    if cfg.get("attention_chunk_size") is not None:
        # Llama 4: layers that use RoPE (no_rope_layers[i] == 1) attend within a chunk.
        chunk = _cfg_window(cfg, path, "attention_chunk_size")
        no_rope = cfg.get("no_rope_layers")
        if no_rope is None:
            interval = _cfg_int(cfg, path, "no_rope_layer_interval", 4)
            if interval < 1:
                raise LayoutError(f"{path}: field 'no_rope_layer_interval': must be >= 1; got 0")
            no_rope = [int((i + 1) % interval != 0) for i in range(layers)]
        if (
            not isinstance(no_rope, list)
            or len(no_rope) != layers
            or any(v not in (0, 1) for v in no_rope)
        ):
            raise LayoutError(
                f"{path}: field 'no_rope_layers': must list 0 or 1 for each of {layers} "
                f"layers; got {no_rope!r:.200}"
            )
        windowed = sum(no_rope)
        return (windowed, chunk) if windowed else (0, 0)
    if cfg.get("sliding_window") is None:
        return 0, 0
    # Qwen 2/3 configs carry a sliding_window that is off unless use_sliding_window says so.
    default_on = not model_type.startswith("qwen")
    if not cfg.get("use_sliding_window", default_on):
        return 0, 0
    window = _cfg_window(cfg, path, "sliding_window")
    if cfg.get("sliding_window_pattern") is not None:
        # Gemma 3 / Cohere 2: every pattern-th layer is global, the others slide.
        pattern = _cfg_int(cfg, path, "sliding_window_pattern")
        if pattern < 1:
            raise LayoutError(f"{path}: field 'sliding_window_pattern': must be >= 1; got 0")
        windowed = sum(1 for i in range(layers) if (i + 1) % pattern)
    elif model_type == "gemma2":
        windowed = (layers + 1) // 2  # Gemma 2 alternates, starting with a sliding layer
    elif model_type.startswith("qwen") and cfg.get("max_window_layers") is not None:
        # Qwen 2: layers from max_window_layers on use the window.
        windowed = max(0, layers - _cfg_int(cfg, path, "max_window_layers"))
    else:
        windowed = layers  # Mistral style: one window for every layer
    return (windowed, window) if windowed else (0, 0)


# A real config.json is a few KiB (the largest multimodal ones tens of KiB): 4 MiB is far above
# any, and keeps a mistaken path (a checkpoint, /dev/zero) from being read into memory.
MAX_CONFIG_BYTES = 4 * 2**20


def _shown(p: Path) -> str:
    text = str(p)
    return repr(text) if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text) else text


def _read_config_bytes(p: Path, max_bytes: int) -> bytes:
    """The file's bytes: only a regular file, at most ``max_bytes``, never blocking on a FIFO."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise LayoutError(f"{_shown(p)}: model config not found") from None
    except OSError as e:
        raise LayoutError(f"{_shown(p)}: cannot read model config: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            m = st.st_mode
            kind = (
                "a directory"
                if stat.S_ISDIR(m)
                else "a FIFO"
                if stat.S_ISFIFO(m)
                else "a device"
                if stat.S_ISCHR(m) or stat.S_ISBLK(m)
                else "a socket"
                if stat.S_ISSOCK(m)
                else "not a regular file"
            )
            raise LayoutError(f"{_shown(p)}: model config must be a regular file; this is {kind}")
        if st.st_size > max_bytes:
            raise LayoutError(
                f"{_shown(p)}: model config is {st.st_size} bytes, over the {max_bytes}-byte "
                "limit for a config.json (is this the model's config.json?)"
            )
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:  # grew while read
            raise LayoutError(f"{_shown(p)}: model config is over the {max_bytes}-byte limit")
        return data
    except OSError as e:
        if e.errno == errno.EISDIR:
            raise LayoutError(f"{_shown(p)}: model config must be a regular file") from None
        raise LayoutError(f"{_shown(p)}: cannot read model config: {e.strerror}") from None
    finally:
        os.close(fd)


def geometry_from_hf_config(path: str | Path, *, max_bytes: int = MAX_CONFIG_BYTES) -> KvGeometry:
    """Read layers, KV heads, head dim, MLA latent, dtype and sliding windows from a Hugging
    Face config.json.

    Multimodal configs with a nested ``text_config`` use that. ``torch_dtype`` (or ``dtype``)
    sets the element size; bf16 when absent. Sliding-window, chunked and hybrid attention
    (``layer_types``, ``sliding_window`` + ``sliding_window_pattern``, ``attention_chunk_size``
    + ``no_rope_layers``) set ``windowed_layers`` / ``window_tokens``; a layer type it cannot
    size is refused with the field named.
    """
    p = Path(path)
    where = _shown(p)
    data = _read_config_bytes(p, max_bytes)
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise LayoutError(f"{where}: model config is not UTF-8 text: {e.reason}") from None
    except json.JSONDecodeError as e:
        raise LayoutError(f"{where}:{e.lineno}: model config is not valid JSON: {e.msg}") from None
    except RecursionError:  # brackets nested past the parser's depth
        raise LayoutError(
            f"{where}: model config is not usable JSON: nested deeper than the parser allows"
        ) from None
    except ValueError as e:  # an integer past CPython's 4300-digit conversion limit
        raise LayoutError(f"{where}: model config is not usable JSON: {e}") from None
    if not isinstance(raw, dict):
        raise LayoutError(f"{where}: model config must be a JSON object; got {type(raw).__name__}")
    text_config = raw.get("text_config")
    cfg: dict[str, Any] = text_config if isinstance(text_config, dict) else raw
    layers = _cfg_int(cfg, where, "num_hidden_layers")
    dbytes = _cfg_dtype_bytes(cfg, raw, where)
    name = str(raw.get("_name_or_path") or raw.get("model_type") or p.stem)
    model_type = str(cfg.get("model_type") or raw.get("model_type") or "")
    windowed, window = _cfg_windows(cfg, where, layers, model_type)
    hidden = cfg.get("hidden_size")
    heads_field = cfg.get("num_attention_heads")
    context = cfg.get("max_position_embeddings")
    info = ModelInfo(
        source=where,
        model_type=model_type,
        hidden_size=hidden if isinstance(hidden, int) else 0,
        attention_heads=heads_field if isinstance(heads_field, int) else 0,
        max_context_tokens=context if isinstance(context, int) and context > 0 else 0,
    )
    if cfg.get("kv_lora_rank"):
        latent = _cfg_int(cfg, where, "kv_lora_rank") + _cfg_int(cfg, where, "qk_rope_head_dim", 0)
        return KvGeometry(
            name,
            layers=layers,
            kv_heads=0,
            head_dim=0,
            dtype_bytes=dbytes,
            latent_dim=latent,
            windowed_layers=windowed,
            window_tokens=window,
            info=info,
        )
    heads = _cfg_int(cfg, where, "num_attention_heads")
    kv_heads = _cfg_int(cfg, where, "num_key_value_heads", heads)
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        hidden_size = _cfg_int(cfg, where, "hidden_size")
        if heads == 0:
            raise LayoutError(f"{where}: field 'num_attention_heads': must be > 0; got 0")
        head_dim = hidden_size // heads
    elif not isinstance(head_dim, int) or head_dim < 1:
        raise LayoutError(
            f"{where}: field 'head_dim': must be a positive integer; got {head_dim!r}"
        )
    return KvGeometry(
        name,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype_bytes=dbytes,
        windowed_layers=windowed,
        window_tokens=window,
        info=info,
    )
