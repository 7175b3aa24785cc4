"""``--emit``: write the drop-in package, the core's own source files plus generated thresholds.

The package ``DIR/<name>/`` holds:

* every module of the storage core (``fcctl.layout``) that the engine-facing parts need, as
  **byte-for-byte copies** of the core's source files, at the same relative paths: the roots
  :data:`ROOTS` (placement, address codec, geometry, session-file format, writer and reader,
  planner, readers, staging window, reclamation, scheduler, the ``FlatStore`` facade, the smoke
  test, the package ``__init__``) and everything they import (:func:`core_modules` follows the
  relative imports). The core's imports are relative, so the copy imports itself under any name;
  it needs numpy only (torch and kvikio lazily), and imports nothing of fcctl;
* ``thresholds.py`` (generated): ``SHORT_REPLY_TOKENS``, ``AGENT_CONTEXT_TOKENS``, ``RULE`` (a
  ``PlacementRule``) and ``SOURCE`` (trace, rate, hardware, fcctl version, ...);
* ``thresholds.toml`` (generated, the same values), ``README.md`` (how an engine calls it);
* ``MANIFEST``: ``<sha256>  <path>`` for every other file, ``sha256sum -c`` format, sorted.

The emitter lives outside the core because it reads the core's files; it writes through
:func:`fcctl.common.outdir.atomic_out_dir`, so a failed emit leaves nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import keyword
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fcctl.layout
from fcctl.common.errors import FcctlInputError
from fcctl.common.outdir import atomic_out_dir

from .result import RecommendResult
from .thresholds import thresholds_source, thresholds_toml

DEFAULT_NAME = "flatcake_store"
CORE_DIR = Path(fcctl.layout.__file__).resolve().parent
#: The modules the package is built around (paths relative to the core).
ROOTS: tuple[str, ...] = (
    "__init__.py",
    "placement.py",
    "address.py",
    "geometry.py",
    "session_format.py",
    "session_file.py",
    "planner.py",
    "engines/__init__.py",
    "engines/posix.py",
    "engines/kvikio.py",
    "staging.py",
    "reclaim.py",
    "scheduler.py",
    "store.py",
    "smoke.py",
    "rule_file.py",
    "adapters/__init__.py",
    "adapters/common.py",
    "adapters/trace.py",
    "adapters/lmcache.py",
    "adapters/sglang.py",
    "adapters/vllm.py",
)
GENERATED: tuple[str, ...] = ("thresholds.py", "thresholds.toml", "README.md")
#: Written beside the package (``DIR/``), listed in its MANIFEST as ``../<name>``.
PROJECT_FILES: tuple[str, ...] = ("pyproject.toml",)
MANIFEST = "MANIFEST"
#: The engine releases the adapters target: the emitted package's optional extras pin them.
ENGINE_PINS: dict[str, str] = {
    "lmcache": "lmcache==0.5.6",
    "sglang": "sglang==0.5.23",
    "vllm": "vllm==0.34.0",
}


def _module_path(parts: list[str], core: Path) -> str | None:
    """The file of the core module named by ``parts`` (package or module), if any."""
    rel = Path(*parts) if parts else Path()
    if (core / rel / "__init__.py").is_file():
        return (rel / "__init__.py").as_posix()
    if parts and (core / rel.with_suffix(".py")).is_file():
        return rel.with_suffix(".py").as_posix()
    return None


def _relative_imports(rel: str, core: Path) -> set[str]:
    tree = ast.parse((core / rel).read_text(), rel)
    package = list(Path(rel).parent.parts)
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
        mod = [*base, *(node.module.split(".") if node.module else [])]
        found = _module_path(mod, core)
        if found:
            out.add(found)
        for alias in node.names:  # ``from . import x``: x may be a module
            sub = _module_path([*mod, alias.name], core)
            if sub:
                out.add(sub)
        # Importing a subpackage's module runs the packages above it.
        for i in range(len(mod)):
            pkg = _module_path(mod[:i], core)
            if pkg and pkg.endswith("__init__.py"):
                out.add(pkg)
    return out


def core_modules(core: Path = CORE_DIR, roots: tuple[str, ...] = ROOTS) -> tuple[str, ...]:
    """The roots and every core module they import, transitively (sorted relative paths)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        if not (core / rel).is_file():
            raise FileNotFoundError(f"core module {rel} is missing from {core}")
        seen.add(rel)
        todo += sorted(_relative_imports(rel, core) - seen)
    return tuple(sorted(seen))


#: Top-level modules the emitted core (adapters included) imports from outside itself: a
#: package of one of these names would shadow it (``--emit-name numpy`` cannot import its
#: own ``import numpy``).
IMPORTED_TOP_LEVEL = ("numpy", "torch", "kvikio", "fcctl", "lmcache", "sglang", "vllm", "pyarrow")


def check_name(name: str) -> str:
    """A package name: a Python identifier, not a keyword, and no module the package imports.

    A name of the standard library (``sys.stdlib_module_names``) or of a top-level module the
    core imports (numpy; torch, kvikio, the engines, pyarrow lazily) would shadow it once the
    emitted directory is on ``sys.path``, so the package could not import itself.
    """
    if not name.isidentifier() or keyword.iskeyword(name):
        raise FcctlInputError(
            f"--emit-name: must be a Python identifier, not a keyword; got {name!r}"
        )
    if name in sys.stdlib_module_names or name in IMPORTED_TOP_LEVEL:
        raise FcctlInputError(
            f"--emit-name: must not shadow a module the package imports (the standard library, "
            f"{', '.join(IMPORTED_TOP_LEVEL)}); got {name!r}"
        )
    return name


def check_distinct_outputs(out: Path | None, emit: Path | None) -> None:
    """Refuse ``--out`` and ``--emit`` naming the same directory or one inside the other.

    Each is written atomically (a sibling temporary, then a rename), so with overlapping paths
    the second write would replace or nest in the first; checked before any simulation.
    """
    if out is None or emit is None:
        return
    a, b = Path(out).resolve(), Path(emit).resolve()
    if a == b or a in b.parents or b in a.parents:
        raise FcctlInputError(
            f"--out, --emit: must be separate directories, neither inside the other; "
            f"got {str(out)!r} and {str(emit)!r}"
        )


def thresholds_module(
    short_reply_tokens: int, agent_context_tokens: int, source: Mapping[str, Any]
) -> str:
    """The generated ``thresholds.py``: the thresholds stay data, read at import from
    ``thresholds.toml`` (or the file ``$FLATCAKE_THRESHOLDS`` names)."""
    lines = [
        '"""Placement thresholds recommended by ``fcctl recommend-thresholds`` (generated).',
        "",
        "``RULE`` is the placement rule an engine passes to ``FlatStore``, read at import from",
        "the file ``$FLATCAKE_THRESHOLDS`` names, else ``thresholds.toml`` beside this module",
        "(``RECOMMENDED`` when that file is gone); ``SOURCE`` says where the recommendation came",
        "from. Regenerate with ``fcctl recommend-thresholds TRACE --emit DIR``.",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "from .placement import PlacementRule",
        "from .rule_file import package_rule",
        "",
        "RECOMMENDED = PlacementRule(",
        f"    short_reply_tokens={int(short_reply_tokens)!r}, "
        f"agent_context_tokens={int(agent_context_tokens)!r}",
        ")",
        "SOURCE = {",
        *(f"    {str(k)!r}: {v!r}," for k, v in source.items()),
        "}",
        'RULE = package_rule(Path(__file__).with_name("thresholds.toml"), RECOMMENDED)',
        "SHORT_REPLY_TOKENS = RULE.short_reply_tokens",
        "AGENT_CONTEXT_TOKENS = RULE.agent_context_tokens",
    ]
    return "\n".join(lines) + "\n"


def package_version(short_reply_tokens: int, agent_context_tokens: int) -> str:
    """fcctl's version plus the thresholds' short hash as a PEP 440 local version
    (``0.1.0+t1a2b3c4``): two packages emitted with other thresholds never share a version."""
    digest = hashlib.sha256(f"{int(short_reply_tokens)},{int(agent_context_tokens)}".encode())
    return f"{fcctl_version()}+t{digest.hexdigest()[:8]}"


def fcctl_version() -> str:
    from fcctl.common.version import __version__

    return str(__version__).split("+", 1)[0]


def pyproject_text(name: str, version: str, packages: list[str]) -> str:
    """The emitted ``pyproject.toml``: numpy the only requirement, one extra per engine."""
    extras = {
        **{engine: [pin] for engine, pin in ENGINE_PINS.items()},
        "trace": ["pyarrow>=14"],
        "gpu": ["torch>=2.4", "kvikio-cu12>=24.10"],
    }
    q = json.dumps  # a TOML basic string is a JSON string for these names
    lines = [
        "# Generated by fcctl recommend-thresholds --emit: pip install DIR (or pip wheel DIR).",
        "[build-system]",
        f"requires = [{q('setuptools>=61')}]",
        f"build-backend = {q('setuptools.build_meta')}",
        "",
        "[project]",
        f"name = {q(name)}",
        f"version = {q(version)}",
        f"description = {q('FlatCake write-time placement and per-session KV layout (fcctl)')}",
        f"requires-python = {q('>=3.11')}",
        f"dependencies = [{q('numpy>=1.26')}]",
        "",
        "[project.optional-dependencies]",
        *(f"{extra} = [{', '.join(map(q, pins))}]" for extra, pins in extras.items()),
        "",
        "[tool.setuptools]",
        f"packages = [{', '.join(map(q, packages))}]",
        "",
        "[tool.setuptools.package-data]",
        f"{name} = [{', '.join(map(q, ('thresholds.toml', 'README.md', MANIFEST)))}]",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class EmitResult:
    """What was written: the package directory and its files (relative, sorted)."""

    package_dir: Path
    copied: tuple[str, ...]
    generated: tuple[str, ...]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def emit_package(
    directory: Path,
    result: RecommendResult | None = None,
    *,
    name: str = DEFAULT_NAME,
    force: bool = False,
    short_reply_tokens: int | None = None,
    agent_context_tokens: int | None = None,
    source: Mapping[str, Any] | None = None,
    toml_text: str | None = None,
) -> EmitResult:
    """Write the package ``directory/<name>/`` (module docstring) with ``result``'s
    recommended pair, where it came from and its ``thresholds.toml``; ``directory`` must be
    absent or empty (or, with ``force``, an earlier emit of a package of this name).

    Without a ``result`` (a pair measured elsewhere, the tests' fixed pair) the pair, its
    ``source`` and ``toml_text`` are given instead."""
    if result is not None:
        short_reply_tokens = result.recommendation.short_reply_tokens
        agent_context_tokens = result.recommendation.agent_context_tokens
        source = thresholds_source(result)
        toml_text = thresholds_toml(result)
    if short_reply_tokens is None or agent_context_tokens is None:
        raise ValueError("emit_package: give a result, or both thresholds")
    if source is None or toml_text is None:
        raise ValueError("emit_package: give a result, or the source and toml_text")
    check_name(name)
    copied = core_modules()
    marker = f"{name}/{MANIFEST}"
    with atomic_out_dir(
        directory, force=force, marker=marker, command="--emit", flag="--emit"
    ) as tmp:
        pkg = tmp / name
        for rel in copied:
            dest = pkg / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((CORE_DIR / rel).read_bytes())
        (pkg / "thresholds.py").write_text(
            thresholds_module(short_reply_tokens, agent_context_tokens, source)
        )
        (pkg / "thresholds.toml").write_text(toml_text)
        (pkg / "README.md").write_text(
            readme_text(name, short_reply_tokens, agent_context_tokens, source)
        )
        packages = sorted({".".join([name, *Path(rel).parent.parts]) for rel in copied})
        version = package_version(short_reply_tokens, agent_context_tokens)
        (tmp / "pyproject.toml").write_text(pyproject_text(name, version, packages))
        files = sorted([*copied, *GENERATED, *(f"../{f}" for f in PROJECT_FILES)])
        (pkg / MANIFEST).write_text("".join(f"{sha256_file(pkg / f)}  {f}\n" for f in files))
    return EmitResult(directory / name, copied, GENERATED)


def readme_text(
    name: str, short_reply_tokens: int, agent_context_tokens: int, source: Mapping[str, Any]
) -> str:
    """The package's README: what it holds, how an engine calls it, the engines' hook points."""
    where = ", ".join(f"{k} {v}" for k, v in source.items())
    return _README.format(
        name=name, short=short_reply_tokens, agent=agent_context_tokens, where=where
    )


_README = """# {name}: FlatCake write-time placement and per-session KV layout

Generated by `fcctl recommend-thresholds --emit`. Every `.py` file except `thresholds.py` is a
byte-for-byte copy of fcctl's storage core (`fcctl.layout`); `MANIFEST` lists each file's
sha256 (`cd {name} && sha256sum -c MANIFEST`). It needs numpy only; torch (GPU staging window)
and kvikio (GDS reads) are imported when used.

Recommended thresholds (`thresholds.py`, `thresholds.toml`): a later turn goes to host memory
when its context is at most **{agent} tokens** and the previous reply was at most **{short}
tokens**; first turns, long replies, agent contexts and writes that do not fit memory go to
SSD; shared prefixes stay in memory. Source: {where}.

Install it (`pyproject.toml` is beside this directory): `pip install DIR` (or `pip wheel DIR`);
numpy is its only requirement, and `pip install 'DIR[vllm]'` (`[sglang]`, `[lmcache]`,
`[trace]` for Parquet captures) adds an engine. The thresholds are data: `thresholds.toml`,
read at import; `FLATCAKE_THRESHOLDS=/path/other.toml` replaces it without a rebuild.

Check it runs here: `python -m {name}.smoke`.

## Adapters (`{name}.adapters`)

Each is a thin module over `FlatStore`, importing its engine only when it is imported itself.
Set `FLATCAKE_TRACE=/path/capture.jsonl` to record what each sees (`fcctl analyze` reads it).

* vLLM 0.34.0: `--kv-transfer-config '{{"kv_connector": "OffloadingConnector", "kv_role":
  "kv_both", "kv_connector_extra_config": {{"spec_name": "FlatCakeOffloadingSpec",
  "spec_module_path": "{name}.adapters.vllm", "directory": "/nvme/kv"}}}}'`; per request
  `"kv_transfer_params": {{"session_id": "..."}}`.
* SGLang 0.5.23: `--hicache-storage-backend dynamic --hicache-storage-backend-extra-config
  '{{"backend_name": "flatcake", "module_path": "{name}.adapters.sglang", "class_name":
  "FlatCakeHiCacheStorage", "interface_v1": 1, "directory": "/nvme/kv"}}'`.
* LMCache 0.5.6: `storage_plugins: ["flatcake"]`, `extra_config:
  {{storage_plugin.flatcake.module_path: {name}.adapters.lmcache,
  storage_plugin.flatcake.class_name: FlatCakeStoragePlugin, flatcake.directory: /nvme/kv}}`;
  per request the tag `lmcache.tag.session_id`.

Without a session id an adapter links a write to the session whose last stored block ends
the request's prefix chain, else starts a new one (`adapters/common.py`).

## What is ready

| part | module | state |
|---|---|---|
| placement rule (FC-GVA) | `placement.py`, `thresholds.py` | ready (what the simulator ran) |
| 64-bit block address | `address.py` | ready |
| KV geometry | `geometry.py` | ready (presets, Hugging Face config.json) |
| session files (FC-CIO): format, writer, reader | `session_format.py`, `session_file.py` | ready |
| read planner: sort, merge, 64 KiB gaps, alignment | `planner.py` | ready |
| readers: posix O_DIRECT, kvikio (GDS) | `engines/` | ready; kvikio needs `kvikio-cu12` |
| GPU staging window, two layers per stream | `staging.py` | ready; needs torch |
| per-session reclamation | `reclaim.py` | ready |
| two-queue scheduler (FC-MAS) | `scheduler.py` | ready |
| engine facade `FlatStore` | `store.py` | ready |
| engine adapters | `adapters/` | ready: vLLM 0.34.0, SGLang 0.5.23, LMCache 0.5.6 |
| thresholds as data | `rule_file.py`, `thresholds.toml` | ready (`FLATCAKE_THRESHOLDS`) |

## How an engine calls it

Every call takes the engine's clock `now_s` (seconds); nothing starts a thread or reads the wall
clock. Sizes are one tensor-parallel rank's KV.

Each rank opens its own store, and all ranks (and engine processes, and nodes) may share one
directory: a store writes only `n{{node}}-r{{rank}}-*.fccio` and holds the lock
`n{{node}}-r{{rank}}.lock` while open, so pass every process its own `rank=` (the TP rank; a
global rank when several instances on one node share the directory) and `node=`. A second
store of a (node, rank) already open is refused (`StoreBusy`, naming the holder's pid); a
session file already there (an earlier run's) is never replaced, and `close(remove=True)`
deletes only the files that store created.

```python
import numpy as np
from {name}.geometry import model_geometry
from {name}.placement import Medium
from {name}.store import FlatStore
from {name}.thresholds import RULE

store = FlatStore.open("/nvme/kv", model_geometry("llama-3.1-8b", tp=tp), block_tokens=16,
                       host_bytes=64 << 30, ssd_bytes=2 << 40, rule=RULE, now_s=now,
                       node=node_id, rank=tp_rank)   # this process's own files and lock
# before prefill: where will this turn's new KV go?
p = store.place(turn=t, context_tokens=ctx, previous_reply_tokens=prev_reply,
                prefix_ref_count=refs, new_tokens=new, now_s=now)
# a new request: how much of its history is stored, and how much of it is on SSD?
plan = store.plan_restore(session, history_tokens, now_s=now)
store.submit(request_id, arrival_s=now, ssd_bytes=plan.ssd_read_bytes, now_s=now)
for r in store.start_prefetches(now):      # start these SSD restores (window permitting)
    ...                                    # store.restore(plan, out, now_s=now), or into paged
                                           # GPU KV: store.restore_to_pages(plan, kv, pages, ...)
store.prefetch_done(request_id, now)       # when its restore finished
for r in store.ready(now):                 # prefill these, in this order
    ...
# after prefill: store the turn's new KV, layer-ordered (layers x layer_bytes_for(new) bytes)
store.write_turn(session, t, kv_bytes, tokens=new, medium=p.medium, now_s=now)
store.reclaim(now)                         # at the watermark, whole sessions
```

## Hook points (where each engine's calls go; what the adapters implement or why not)

**vLLM, `KVConnectorBase_V1`** (a connector class loaded through `kv_transfer_config`; the
session id rides in the request's `kv_transfer_params`):
* scheduler side, `get_num_new_matched_tokens(request, num_computed_tokens)`: `plan_restore`
  gives the stored tokens; when part of them is on SSD, `submit` the request and return `None`
  ("needs more time") until `ready(now)` lists it, then the matched token count, so the request
  is deferred while its SSD read runs instead of holding the batch;
* `update_state_after_alloc` / `build_connector_meta`: the page ids the restore scatters into;
* worker side, `start_load_kv(forward_context)`: start the layer-by-layer restore
  (`store.restore_to_pages(plan, kv_cache, page_ids, engine=..., now_s=...)`: SSD turns
  through the staging window, GDS with the kvikio engine; memory turns copied; run it on the
  connector's own thread); `wait_for_layer_load(layer_name)`: wait until that layer is
  scattered (its `on_layer(l)` callback); `save_kv_layer(layer_name, kv_layer,
  attn_metadata, ...)`: collect the new turn's pages of that layer; `wait_for_save()`:
  `write_turn` with the medium `place` chose before prefill.
* Cannot deliver: `KVConnectorBase_V1` sees block hashes, not sessions (hence
  `kv_transfer_params`); vLLM's own `OffloadingConnector` stages every secondary tier through
  CPU (direct GPU-storage access is a stated non-goal there), so use this connector interface,
  whose worker holds the GPU KV tensors, for GDS into the GPU.

**SGLang HiCache** (`--hicache-storage-backend dynamic` with the backend's
`{{backend_name, module_path, class_name}}`; the class implements `HiCacheStorage`):
* `batch_exists(keys, extra_info)` returns the stored prefix length (from `plan_restore`);
  `batch_get_v1(keys, host_indices, extra_info)` restores into the host pages
  (`store.restore`); `batch_set_v1(keys, host_indices, extra_info)` writes a turn
  (`place` + `write_turn`); `get`, `batch_get`, `set`, `batch_set`, `exists` as the abstract
  interface requires. The session id comes through `extra_info`.
* Cannot deliver: this interface fills SGLang's **host-memory tier** only, so there is no GDS
  into the GPU and no GPU staging window; SGLang's prefetch policy (`best_effort`,
  `wait_complete`, `timeout`) decides waiting, not the two-queue scheduler; keys are pages, so
  a turn is written when its pages arrive.

**LMCache** (its storage plugin interface; session id through `cache_salt`):
* in-process `StoragePluginInterface` (`storage_plugins`): `contains`, `batched_submit_put_task`
  (`write_turn`), `get_blocking` / `get_non_blocking` (`restore`), `pin` / `unpin`
  (`begin_read` / `end_read` of the reclaimer), `remove`, `close`; `dst_device="cuda"` for a
  GPU destination;
* multi-process mode: the `"type": "plugin"` L2 adapter (`L2AdapterInterface`:
  `submit_store_task`, `submit_lookup_and_lock_task`, `submit_load_task`, ...).
* Cannot deliver: the multi-process L2 adapter loads into CPU L1 buffers (no GDS); chunks
  (256 tokens by default) are keyed by hash, so a session's chunks must be mapped to its turn
  segments by the adapter; the in-process interface is documented as deprecated for MP mode.
"""
