"""The simulated node: every figure the replay uses, and where each one came from.

Sizes are bytes, rates bytes/s (or tokens/s), times seconds. Capacities are per node except
``gpu_kv_bytes`` (per worker, one worker per GPU) and ``window_streams`` (per worker). A
``Hardware`` carries ``sources``: for every field, the preset, file, flag or measurement that
set it, so the JSON document says where each number came from.

Presets (``h100-8x``, ``h200-8x``, ``b200-8x``): eight GPUs, one serving instance each.

* HBM per GPU: 80 GB (H100 SXM), 141 GB (H200 SXM), 180 GB (B200 in DGX/HGX B200: 1,440 GB over
  8 GPUs); NVIDIA datasheets. ``gpu_kv_bytes`` = half of it: weights, activations and the
  engine's reserve take the rest (an assumption; vLLM's default ``gpu_memory_utilization`` is
  0.9 of HBM before weights; override with ``--gpu-kv``).
* Host memory for KV: 1 TiB per node, half of the 2 TB system memory of DGX H100 / H200 / B200
  (DGX datasheets); an assumption for the budget, the same for every policy as in the paper.
* Host memory scope: ``node`` (the presets), one pool shared by every worker, as Mooncake
  store's pool is node (cluster) wide: the FlatCake paper's Mooncake baseline. ``worker``:
  each serving instance its own pool of ``host_memory_bytes / workers``, as SGLang HiCache's
  host pool belongs to one server (``--hicache-ratio`` / ``--hicache-size`` size it per
  instance); a block may then sit in several workers' pools. The SSD stays one per node.
* SSD for KV: 4 TiB per node, the SSD budget the FlatCake paper gives Mooncake.
* SSD read bandwidth: 8 drives x 7 GB/s = 56 GB/s: DGX H100/H200/B200 carry eight NVMe data
  drives (DGX datasheets); 7 GB/s per drive is Dynamo mocker's host<->disk default
  (ai-dynamo/dynamo ``lib/mocker`` ``config.rs``).
* Per-stream SSD cap: one drive's 7 GB/s. A restore reads one session file (flat) or its
  blocks' pieces (tiered) as one stream; a file sits on one drive, so one restore alone gets
  min(stream cap, node bandwidth) and N restores on N drives get N times that. With
  ``--io-profile`` it is the iobench flat restore at concurrency 1.
* SSD writes: 8 x 7 GB/s on the same drives as the reads (one link, shared): Dynamo mocker's
  host<->disk figure for both directions (an assumption).
* SSD cost per read command: 41.6 us per drive, measured by ``fcctl iobench`` on this
  project's development machine (docs/benchmarks.md, run 4, concurrency 16: 64 KiB eviction
  pieces at 0.99 GB/s against flat reads at 2.66 GB/s; 65536/0.99e9 - 65536/2.66e9 s); eight
  drives serve commands in parallel, so 5.2 us per command per node. A virtio disk, not an
  NVMe drive: pass ``--io-profile`` with your own iobench run.
* Host->GPU: PCIe 5.0 x16, 64 GB/s nominal (MLPerf Storage KV design doc) x 0.85 and 6.67 us
  per copied segment (one segment per block): SGLang simulator's ``mem_pool_host.py``
  (effective bandwidth ``s*B / (o*B + s)``).
* Host staging buffer (tiered only): 8 GiB per worker, 64 GiB per node: LMCache's suggested
  ``gds_buffer_size`` (docs), the nearest published size of a KV staging buffer.
* GPU staging window (flat only): 2 streams per worker, each two layers (FlatCake; iobench's
  staging window measured with 2 streams).
* Prefetch timeout (tiered only): 2 s + 0.1 s per 1 K tokens, at most 30 s: SGLang HiCache's
  default (its PRs #10512, #23309).
* Buckets (tiered): 256 MiB, Mooncake's bucket backend (``fcctl.analyzers.kvmodel.tiered``).
* Watermarks: high 0.9, low 0.8, for bucket recycling and per-session reclamation alike:
  LMCache's L2 eviction (``trigger_watermark 0.9``, ``eviction_ratio 0.1``).
* HBM bandwidth per GPU (decode reads every running request's KV each iteration): 3.35 TB/s
  (H100 SXM), 4.8 TB/s (H200 SXM), 8 TB/s (B200: DGX B200's 64 TB/s over 8 GPUs); NVIDIA
  datasheets, the peak: an upper bound on decode speed.
* Iteration token budget 16,384 and per-request chunk 8,192 tokens: SGLang's server defaults
  ``max_prefill_tokens`` and ``chunked_prefill_size`` (``ServerArgs``). vLLM's own default
  budget (``max_num_batched_tokens``, 8,192 on large GPUs for the API server) has no separate
  chunk cap; set ``--max-batched-tokens 8192 --prefill-chunk-tokens 8192`` for it.
* Prefill and the iteration's fixed cost: see :mod:`analyzers.replay.timemodel`.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fcctl.common.errors import FcctlInputError
from fcctl.common.inputfile import parse_json, read_regular_text
from fcctl.common.paths import display_path
from fcctl.common.units import parse_size
from fcctl.layout.reclaim import DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK

from ..kvmodel.tiered import DEFAULT_BUCKET_BYTES

GB = 10**9
GiB = 2**30
TiB = 2**40

_DRIVES = 8
_DRIVE_BYTES_PER_S = 7 * GB
_COMMAND_S_PER_DRIVE = 65536 / 0.99e9 - 65536 / 2.66e9


# A hardware description is a few dozen lines; anything past this is not one.
HARDWARE_FILE_CAP_BYTES = 1 * 2**20


class HardwareError(FcctlInputError):
    """A bad hardware file, preset, flag or io-profile."""


@dataclass(frozen=True)
class Hardware:
    """One node (module docstring for units and defaults)."""

    name: str
    gpus: int
    hbm_bytes: int
    gpu_kv_bytes: int
    host_memory_bytes: int
    ssd_bytes: int
    host_to_gpu_bytes_per_s: float
    host_to_gpu_efficiency: float
    host_to_gpu_segment_s: float
    ssd_read_bytes_per_s: float
    ssd_command_s: float
    staging_bytes: int
    window_streams: int
    prefetch_timeout_base_s: float
    prefetch_timeout_per_1k_tokens_s: float
    prefetch_timeout_max_s: float
    bucket_bytes: int
    high_watermark: float
    low_watermark: float
    hbm_bytes_per_s: float
    #: Tokens one iteration computes (decodes one each, prefill chunks the rest).
    max_batched_tokens: int = 16384
    #: The most prompt tokens of one request in one iteration.
    prefill_chunk_tokens: int = 8192
    prefill_tokens_per_s: float | None = None
    #: The most one SSD transfer (a restore's read, a write) gets, bytes/s; None: the node's.
    ssd_stream_bytes_per_s: float | None = None
    #: The node's SSD write bandwidth, bytes/s, on the same drives as the reads; None: as read.
    ssd_write_bytes_per_s: float | None = None
    #: GPU bytes per GPU for running requests' KV apart from the prefix cache; None (the
    #: presets): one pool of ``gpu_kv_bytes`` holds both, running requests first.
    gpu_running_kv_bytes: int | None = None
    #: Who shares host memory: ``"node"`` (one pool) or ``"worker"`` (one pool per serving
    #: instance, ``host_memory_bytes / workers`` each); :data:`HOST_SCOPES`.
    host_scope: str = "node"
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def ssd_stream_share(self) -> float:
        """The share of the SSD link one transfer may take (1: no per-stream cap)."""
        if self.ssd_stream_bytes_per_s is None:
            return 1.0
        return min(1.0, self.ssd_stream_bytes_per_s / self.ssd_read_bytes_per_s)

    @property
    def ssd_write_rate(self) -> float:
        return self.ssd_write_bytes_per_s or self.ssd_read_bytes_per_s

    def prefetch_timeout_s(self, tokens: int) -> float:
        """SGLang HiCache's rule: base + per-1K-token term, capped."""
        return min(
            self.prefetch_timeout_max_s,
            self.prefetch_timeout_base_s + self.prefetch_timeout_per_1k_tokens_s * tokens / 1000,
        )

    @property
    def host_to_gpu_effective_bytes_per_s(self) -> float:
        return self.host_to_gpu_bytes_per_s * self.host_to_gpu_efficiency


#: Host memory scopes (``Hardware.host_scope``): one pool per node, or one per worker.
HOST_SCOPES: tuple[str, ...] = ("node", "worker")
#: Fields that take one of a few words, not a number.
_CHOICES: dict[str, tuple[str, ...]] = {"host_scope": HOST_SCOPES}
_NUMERIC = {f.name for f in dataclasses.fields(Hardware)} - {"name", "sources", *_CHOICES}
_FIELDS = _NUMERIC | set(_CHOICES)
_SIZES = {
    "hbm_bytes",
    "gpu_kv_bytes",
    "host_memory_bytes",
    "ssd_bytes",
    "staging_bytes",
    "bucket_bytes",
    "gpu_running_kv_bytes",
}
_INTS = _SIZES | {"gpus", "window_streams", "max_batched_tokens", "prefill_chunk_tokens"}

_COMMON_SOURCES = {
    "gpus": "preset: 8 GPUs per node, one serving instance (worker) each",
    "host_memory_bytes": "preset: 1 TiB, half of a DGX node's 2 TB system memory (assumption)",
    "ssd_bytes": "preset: 4 TiB, the SSD budget of the FlatCake paper's Mooncake baseline",
    "host_to_gpu_bytes_per_s": "preset: PCIe 5.0 x16 64 GB/s nominal (MLPerf Storage KV doc)",
    "host_to_gpu_efficiency": "SGLang simulator mem_pool_host.py: B = 0.85 x configured",
    "host_to_gpu_segment_s": "SGLang simulator mem_pool_host.py: 6.67 us per H2D segment",
    "ssd_read_bytes_per_s": "preset: 8 NVMe drives (DGX datasheet) x 7 GB/s (Dynamo mocker "
    "host<->disk default, config.rs)",
    "ssd_command_s": "fcctl iobench on the dev machine (docs/benchmarks.md run 4, c16: 64 KiB "
    "eviction pieces 0.99 GB/s vs flat 2.66 GB/s = 41.6 us per command) / 8 drives",
    "staging_bytes": "8 GiB per worker: LMCache's suggested gds_buffer_size (docs)",
    "window_streams": "FlatCake: 2 layers per stream; 2 streams as iobench's staging window",
    "prefetch_timeout_base_s": "SGLang HiCache default prefetch timeout (PRs #10512, #23309)",
    "prefetch_timeout_per_1k_tokens_s": "SGLang HiCache default prefetch timeout",
    "prefetch_timeout_max_s": "SGLang HiCache default prefetch timeout cap",
    "bucket_bytes": "Mooncake bucket backend, 256 MiB (fcctl.analyzers.kvmodel.tiered)",
    "high_watermark": "LMCache L2 eviction trigger_watermark 0.9",
    "low_watermark": "LMCache L2 eviction_ratio 0.1 below the trigger",
    "max_batched_tokens": "SGLang ServerArgs default max_prefill_tokens (16384)",
    "prefill_chunk_tokens": "SGLang ServerArgs default chunked_prefill_size (8192)",
    "ssd_stream_bytes_per_s": "one drive, 7 GB/s (Dynamo mocker host<->disk default): a session "
    "file, or one restore's read, sits on one drive",
    "ssd_write_bytes_per_s": "8 drives x 7 GB/s: Dynamo mocker's host<->disk link has one "
    "bandwidth for both directions (assumption: writes as fast as reads)",
    "gpu_running_kv_bytes": "unset: running requests' KV and cached prefixes share gpu_kv_bytes "
    "(vLLM's and SGLang's one KV pool)",
    "prefill_tokens_per_s": "unset: Dynamo mocker's fitted prefill polynomial (timemodel.py)",
    "host_scope": "node: one host pool per node, as Mooncake store's (the FlatCake paper's "
    "Mooncake baseline); 'worker' is SGLang HiCache's per-instance host pool",
}


def _preset(name: str, hbm_bytes: int, hbm_bytes_per_s: float, gpu_label: str) -> Hardware:
    sources = dict(_COMMON_SOURCES)
    sources["hbm_bytes"] = f"NVIDIA {gpu_label} datasheet"
    sources["hbm_bytes_per_s"] = f"NVIDIA {gpu_label} datasheet (peak HBM bandwidth)"
    sources["gpu_kv_bytes"] = "half of HBM (assumption: weights and activations take the rest)"
    return Hardware(
        name=name,
        gpus=8,
        hbm_bytes=hbm_bytes,
        gpu_kv_bytes=hbm_bytes // 2,
        host_memory_bytes=TiB,
        ssd_bytes=4 * TiB,
        host_to_gpu_bytes_per_s=64 * GB,
        host_to_gpu_efficiency=0.85,
        host_to_gpu_segment_s=6.67e-6,
        ssd_read_bytes_per_s=float(_DRIVES * _DRIVE_BYTES_PER_S),
        ssd_command_s=_COMMAND_S_PER_DRIVE / _DRIVES,
        staging_bytes=8 * 8 * GiB,
        window_streams=2,
        prefetch_timeout_base_s=2.0,
        prefetch_timeout_per_1k_tokens_s=0.1,
        prefetch_timeout_max_s=30.0,
        bucket_bytes=DEFAULT_BUCKET_BYTES,
        high_watermark=DEFAULT_HIGH_WATERMARK,
        low_watermark=DEFAULT_LOW_WATERMARK,
        hbm_bytes_per_s=hbm_bytes_per_s,
        ssd_stream_bytes_per_s=float(_DRIVE_BYTES_PER_S),
        ssd_write_bytes_per_s=float(_DRIVES * _DRIVE_BYTES_PER_S),
        sources=sources,
    )


PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in (
        _preset("h100-8x", 80 * GB, 3.35e12, "H100 SXM (80 GB, 3.35 TB/s)"),
        _preset("h200-8x", 141 * GB, 4.8e12, "H200 SXM (141 GB, 4.8 TB/s)"),
        _preset("b200-8x", 180 * GB, 8e12, "DGX B200 (1,440 GB, 64 TB/s over 8 GPUs)"),
    )
}
DEFAULT_PRESET = "h200-8x"


def _coerce(where: str, key: str, value: Any) -> Any:
    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise HardwareError(
                f"{where}: field {key!r}: must be one of {', '.join(_CHOICES[key])}; got {value!r}"
            )
        return value
    if key in _SIZES and isinstance(value, str):
        return parse_size(value, what=f"{where}: {key}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HardwareError(f"{where}: field {key!r}: must be a number; got {value!r}")
    if key in _INTS:
        if not isinstance(value, int):
            raise HardwareError(f"{where}: field {key!r}: must be a whole number; got {value!r}")
        return value
    # NaN passes every `> 0` / `< 0` test below and inf makes every time infinite: refuse both
    # here, where the source (flag or file) is still known.
    if not math.isfinite(value):
        raise HardwareError(f"{where}: field {key!r}: must be a finite number; got {value!r}")
    return float(value)


def _check(hw: Hardware, where: str) -> Hardware:
    positive = (
        "gpus",
        "host_to_gpu_bytes_per_s",
        "host_to_gpu_efficiency",
        "ssd_read_bytes_per_s",
        "window_streams",
        "hbm_bytes_per_s",
        "bucket_bytes",
        "max_batched_tokens",
        "prefill_chunk_tokens",
    )
    for key in positive:
        if not getattr(hw, key) > 0:
            raise HardwareError(f"{where}: field {key!r}: must be > 0; got {getattr(hw, key)!r}")
    for key in _NUMERIC:
        value = getattr(hw, key)
        if value is not None and value < 0:
            raise HardwareError(f"{where}: field {key!r}: must be >= 0; got {value!r}")
    for key in ("prefill_tokens_per_s", "ssd_stream_bytes_per_s", "ssd_write_bytes_per_s"):
        value = getattr(hw, key)
        if value is not None and not value > 0:
            raise HardwareError(f"{where}: field {key!r}: must be > 0; got {value!r}")
    if not 0 <= hw.low_watermark <= hw.high_watermark <= 1 or hw.high_watermark == 0:
        raise HardwareError(
            f"{where}: fields 'low_watermark', 'high_watermark': must satisfy 0 <= low <= high "
            f"<= 1, high > 0; got {hw.low_watermark!r}, {hw.high_watermark!r}"
        )
    return hw


def with_values(hw: Hardware, values: Mapping[str, Any], source: str) -> Hardware:
    """``hw`` with ``values`` (field -> value) replaced, each recorded as from ``source``."""
    changes: dict[str, Any] = {}
    sources = dict(hw.sources)
    for key, value in values.items():
        if key == "decode_tokens_per_s":
            raise HardwareError(
                f"{source}: field 'decode_tokens_per_s': no longer used: decode runs in the "
                "workers' iterations, its time from the KV bytes read at hbm_bytes_per_s "
                "(docs/simulator.md); remove the field"
            )
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise HardwareError(f"{source}: unknown field {key!r} (known: {known})")
        changes[key] = None if value is None and key in _NUMERIC else _coerce(source, key, value)
        sources[key] = source
    return _check(dataclasses.replace(hw, **changes, sources=sources), source)


def load_hardware(spec: str | None) -> Hardware:
    """A preset name, or a TOML file of fields (optionally ``preset = "..."`` as its base)."""
    if spec is None:
        return PRESETS[DEFAULT_PRESET]
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.suffix == ".toml" and not path.exists():
        raise HardwareError(
            f"--hardware: unknown preset (known: {', '.join(PRESETS)}; or a .toml file); "
            f"got {spec!r}"
        )
    text = read_regular_text(
        path, "hardware file", cap_bytes=HARDWARE_FILE_CAP_BYTES, error=HardwareError
    )
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise HardwareError(
            f"{path}: not usable TOML: nested deeper than the parser allows"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise HardwareError(f"{path}: not valid TOML: {e}") from None
    except ValueError as e:  # an integer past CPython's 4300-digit conversion limit
        raise HardwareError(f"{path}: not usable TOML: {e}") from None
    base_name = doc.pop("preset", DEFAULT_PRESET)
    if base_name not in PRESETS:
        raise HardwareError(
            f"{path}: field 'preset': unknown (known: {', '.join(PRESETS)}); got {base_name!r}"
        )
    hw = with_values(PRESETS[base_name], doc, str(path))
    return dataclasses.replace(hw, name=f"{path.name} (on {base_name})")


def _profile_number(doc: Any, path: str, *keys: str | int) -> float | None:
    cur = doc
    for k in keys:
        try:
            cur = cur[k]
        except (KeyError, IndexError, TypeError):
            return None
    if isinstance(cur, bool) or not isinstance(cur, int | float) or cur <= 0:
        return None
    return float(cur)


def apply_io_profile(hw: Hardware, path: str | Path) -> Hardware:
    """Derive the SSD figures from a ``fcctl iobench --json`` document (docs/benchmarks.md).

    * ``ssd_read_bytes_per_s``: ``fio.seq_read_bytes_per_s`` when fio ran, else the flat
      layout's ``restore_bytes_per_s`` at its highest concurrency.
    * ``ssd_stream_bytes_per_s``: the flat layout's ``restore_bytes_per_s`` at concurrency 1
      (one restore alone), when iobench ran it.
    * ``ssd_command_s``: from the eviction layout at the highest concurrency both layouts ran:
      its restore time (``bytes_requested / restore_bytes_per_s``) minus its bytes at that
      bandwidth, over its ``read_commands`` (0 when the difference is negative).
    """
    p = Path(path)
    where = f"{display_path(p)}: --io-profile"
    text = read_regular_text(p, "--io-profile", error=HardwareError)
    doc = parse_json(text, where, error=HardwareError)
    if not isinstance(doc, dict) or doc.get("schema_version") != 1 or "layouts" not in doc:
        raise HardwareError(
            f"{p}: --io-profile: expected a `fcctl iobench --json` document (schema_version 1 "
            "with 'layouts')"
        )
    layouts = doc["layouts"] if isinstance(doc["layouts"], dict) else {}

    def cells(name: str) -> dict[Any, Any]:
        return {r.get("concurrency"): r for r in layouts.get(name) or [] if isinstance(r, dict)}

    flat = cells("flat")
    evic = cells("eviction")
    common = sorted(c for c in set(flat) & set(evic) if isinstance(c, int))
    if not common:
        raise HardwareError(
            f"{p}: --io-profile: field 'layouts': needs the flat and eviction layouts at a "
            "common concurrency"
        )
    c = common[-1]
    fio = _profile_number(doc, str(p), "fio", "seq_read_bytes_per_s")
    flat_rate = _profile_number(flat[c], str(p), "restore_bytes_per_s")
    bandwidth = fio or flat_rate
    if bandwidth is None:
        raise HardwareError(
            f"{p}: --io-profile: field 'layouts.flat[].restore_bytes_per_s': missing"
        )
    e_rate = _profile_number(evic[c], str(p), "restore_bytes_per_s")
    e_bytes = _profile_number(evic[c], str(p), "bytes_requested")
    e_read = _profile_number(evic[c], str(p), "bytes_read") or e_bytes
    e_cmds = _profile_number(evic[c], str(p), "read_commands")
    if e_rate is None or e_bytes is None or e_cmds is None or e_read is None:
        raise HardwareError(
            f"{p}: --io-profile: field 'layouts.eviction[]': needs restore_bytes_per_s, "
            "bytes_requested and read_commands"
        )
    command_s = max(0.0, (e_bytes / e_rate - e_read / bandwidth) / e_cmds)
    bw_source = (
        f"{p}: fio.seq_read_bytes_per_s"
        if fio
        else f"{p}: layouts.flat[concurrency={c}].restore_bytes_per_s"
    )
    hw = with_values(hw, {"ssd_read_bytes_per_s": bandwidth}, bw_source)
    one = _profile_number(flat.get(1, {}), str(p), "restore_bytes_per_s")
    if one is not None:
        hw = with_values(
            hw,
            {"ssd_stream_bytes_per_s": min(one, bandwidth)},
            f"{p}: layouts.flat[concurrency=1].restore_bytes_per_s (one restore stream)",
        )
    return with_values(
        hw,
        {"ssd_command_s": command_s},
        f"{p}: layouts.eviction[concurrency={c}]: (bytes_requested / restore_bytes_per_s - "
        "bytes_read / ssd_read_bytes_per_s) / read_commands",
    )


def hardware_document(hw: Hardware) -> dict[str, Any]:
    """Every figure with its source, for the JSON: ``{field: {"value": v, "source": s}}``."""
    out: dict[str, Any] = {"name": hw.name}
    for f in dataclasses.fields(hw):
        if f.name in ("name", "sources"):
            continue
        out[f.name] = {"value": getattr(hw, f.name), "source": hw.sources.get(f.name, "")}
    return out
