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
#: Data files the core reads at run time (the model presets), copied beside the modules.
CORE_DATA: tuple[str, ...] = ("presets/*.json",)
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


def core_data(core: Path = CORE_DIR) -> tuple[str, ...]:
    """The core's data files (:data:`CORE_DATA`), as sorted relative paths."""
    return tuple(sorted(p.relative_to(core).as_posix() for g in CORE_DATA for p in core.glob(g)))


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
            f"emit_name: must be a Python identifier, not a keyword; got {name!r}",
            parameter="emit_name",
        )
    if name in sys.stdlib_module_names or name in IMPORTED_TOP_LEVEL:
        raise FcctlInputError(
            f"emit_name: must not shadow a module the package imports (the standard library, "
            f"{', '.join(IMPORTED_TOP_LEVEL)}); got {name!r}",
            parameter="emit_name",
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
            f"`out`, `emit`: must be separate directories, neither inside the other; "
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


def pyproject_text(
    name: str, version: str, packages: list[str], data: tuple[str, ...] = CORE_DATA
) -> str:
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
        f"{name} = [{', '.join(map(q, ('thresholds.toml', 'README.md', MANIFEST, *data)))}]",
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
    modules = core_modules()
    copied = (*modules, *core_data())
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
        packages = sorted({".".join([name, *Path(rel).parent.parts]) for rel in modules})
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

Each is a thin module over `FlatStore` that imports its engine when it is imported itself, and
loads through the engine's own configuration (no fork, no patch). What each engine's interface
lets it deliver of the design, and what it prevents, is in the table under each.

Shared by all three: `adapters.common` (`SessionKV`, one rank's store behind an engine's page
or chunk keys; `KeyIndex`, keys to sessions and the write-time session rule; `StoreOptions`)
and `adapters.trace` (`TraceRecorder`). Without a session id an adapter links a write to the
session whose last stored block ends the request's prefix chain, else starts a new session.

**Recording a trace.** Set `FLATCAKE_TRACE=/path/capture.jsonl` in the engine's environment:
each adapter appends one JSON line per request (a lookup followed by its retrieve is one
request), which `fcctl analyze` and `fcctl replay` read. Every rank and every restart may
share the path: each writes whole lines with `O_APPEND`, and Parquet parts of its own
(`capture.jsonl.part-<pid>-<time>-<random>-NNNNN.parquet`, renamed into place when complete).
The path is checked when the adapter starts: a directory, a missing folder or no permission
stops the adapter with one line naming `$FLATCAKE_TRACE`.

### vLLM 0.34.0: `adapters.vllm.FlatCakeOffloadingSpec`

An `OffloadingSpec` loaded by vLLM's own `OffloadingConnector` (`spec_module_path`); it ships
`FlatCakeOffloadingSpec`, its scheduler-side `FlatCakeManager` (an `OffloadingManager`), its
worker-side `FlatCakeWorker` (an `OffloadingWorker`) and their `FlatCakeStoreSpec` /
`FlatCakeLoadSpec`.

    vllm serve MODEL --kv-transfer-config '{{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {{"spec_name": "FlatCakeOffloadingSpec",
      "spec_module_path": "{name}.adapters.vllm", "directory": "/nvme/kv"}}}}'

Session id: the request's `kv_transfer_params` (`{{"session_id": "chat-7"}}`, optionally
`"previous_reply_tokens"` and `"prefix_ref_count"`).

What it stores: every whole block a request computed, its reply's included (vLLM's own default,
`"offload_prompt_only": true`, stores prompt blocks only; the adapter defaults it to false,
since a chat's reply is its next turn's prefix; set it true for a model whose replies are
dropped before the next turn). A request's stores form one turn, kept open in the worker's
host memory and written whole when vLLM tells the workers the request finished: vLLM gives a
worker no call for that, so the manager creates an empty `*.fcseal` file in the directory
and each worker seals the turn at its next `get_finished` (vLLM calls it in that very step).

| part of the design | vLLM |
|---|---|
| write-time placement | yes (reply length: `kv_transfer_params`, else the finished request) |
| layer-ordered session files | yes: a store's blocks, layer by layer, in the session's file |
| coalesced reads | yes: each session's whole turns through the read planner |
| direct reads into the GPU | partly (1) |
| two queues (waiting for SSD apart from ready) | partly (2) |

1. The worker holds the GPU KV tensors: a load of whole turns goes into them through the
   staging window (GDS with kvikio when usable); a load that starts inside a turn goes
   through host memory.
2. vLLM's scheduler keeps a request whose load is in flight (`WAITING_FOR_REMOTE_KVS`) apart
   from runnable ones; but the adapter runs each transfer inside `submit_load`, one at a time
   in submission order, not ordered by the design's priority (the interface would allow it:
   transfers complete through `get_finished`).

### SGLang 0.5.23: `adapters.sglang.FlatCakeHiCacheStorage`

A `HiCacheStorage` (HiCache's L3 tier) loaded by SGLang's `dynamic` storage backend.

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{{"backend_name": "flatcake",
      "module_path": "{name}.adapters.sglang", "class_name": "FlatCakeHiCacheStorage",
      "interface_v1": 1, "directory": "/nvme/kv"}}'

Session id: SGLang's cache controller sends none, so sessions come from the prefix chain it
does send (`extra_info.prefix_keys`, with `"interface_v1": 1`): a write joins the session whose
last page ends its prefix. (Without `interface_v1` there is no chain: each batch of pages is a
session of its own.)

| part of the design | SGLang |
|---|---|
| write-time placement | partly: no reply length reaches storage (2): placed as a first turn |
| layer-ordered session files | no: HiCache loads L3 into host pages before the request runs (1) |
| coalesced reads | yes: a prefetch restores each session's whole turns in one planned read |
| direct reads into the GPU | no: L3 fills SGLang's host-memory tier only |
| two queues | no: SGLang's prefetch policy (`best_effort`, `wait_complete`, `timeout`) |

1. No reader goes layer by layer, so a page is kept whole (the host pool's flat page).
2. HiCache writes back radix-tree nodes, not requests: the backup calls the backend with the
   page hashes and `prefix_keys` only, and a node (possibly shared by requests) records no
   request or turn, so which part of the prefix was the last reply is not known there.

### LMCache 0.5.6: `adapters.lmcache.FlatCakeStoragePlugin`

A `StoragePluginInterface` loaded by LMCache's `storage_plugins`, beside its own backends.

    storage_plugins: ["flatcake"]
    extra_config:
      storage_plugin.flatcake.module_path: {name}.adapters.lmcache
      storage_plugin.flatcake.class_name: FlatCakeStoragePlugin
      flatcake.directory: /nvme/kv

Session id: the request tag `lmcache.tag.session_id` (vLLM:
`"kv_transfer_params": {{"lmcache.tag.session_id": "chat-7"}}`), which LMCache puts in every
chunk key. Both lookup paths work, blocking and `enable_async_loading` (LMCache's prefetch:
`batched_async_contains` / `batched_get_non_blocking`). A plugin that cannot start (a bad
directory, a bad `FLATCAKE_TRACE`) raises `PluginStartupFailure`: LMCache's launcher would
log any ordinary exception and start without the plugin, so this one, a `BaseException`,
passes it and the engine's startup fails with the cause.

Reply length: LMCache never tells storage which tokens were the last reply, but forwards every
`lmcache.*` request config to the chunk keys, and only `lmcache.tag.*` ones enter a key's
identity; so send `"lmcache.flatcake.previous_reply_tokens": 212` (and optionally
`"lmcache.flatcake.prefix_ref_count"`) with each later turn. Without it a turn is placed as
a first turn.

| part of the design | LMCache |
|---|---|
| write-time placement | yes, given `lmcache.flatcake.previous_reply_tokens`; else as a first turn |
| layer-ordered session files | no: LMCache's GPU connector takes a retrieved chunk whole |
| coalesced reads | yes: the chunks asked for, one planned read per session |
| direct reads into the GPU | no: a plugin returns CPU memory objects that LMCache copies (1) |
| two queues | no: LMCache decides the retrieval order |

1. LMCache's own `GdsBackend` reads into the GPU; a storage plugin cannot.

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
| two-queue scheduler (FC-MAS) | `scheduler.py` | ready; no adapter drives it yet (above) |
| engine facade `FlatStore` | `store.py` | ready |
| engine adapters | `adapters/` | vLLM 0.34.0, SGLang 0.5.23, LMCache 0.5.6 (tables above) |
| thresholds as data | `rule_file.py`, `thresholds.toml` | ready (`FLATCAKE_THRESHOLDS`) |

## How an engine calls the store itself

Every call takes the engine's clock `now_s` (seconds); nothing starts a thread or reads the wall
clock. Sizes are one tensor-parallel rank's KV.

Each rank opens its own store, and all ranks (and engine processes, and nodes) may share one
directory: a store writes only `n{{node}}-r{{rank}}-*.fccio` and holds the lock
`n{{node}}-r{{rank}}.lock` while open, so pass every process its own `rank=` (the TP rank; a
global rank when several instances on one node share the directory) and `node=`. A second
store of a (node, rank) already open is refused (`StoreBusy`, naming the holder's pid); a
session file already there (an earlier run's) is never replaced, and `close(remove=True)`
deletes only the files that store created.

This runs as written (a test runs it on every emitted package):

```python
import tempfile

import numpy as np

from {name}.geometry import model_geometry
from {name}.store import FlatStore
from {name}.thresholds import RULE

geometry = model_geometry("llama-3.1-8b", tp=8)  # one tensor-parallel rank's KV
now = 0.0  # the engine's clock, in seconds
with tempfile.TemporaryDirectory() as directory:  # your NVMe directory in production
    store = FlatStore.open(directory, geometry, block_tokens=16, host_bytes=1 << 30,
                           ssd_bytes=8 << 30, rule=RULE, now_s=now, node=0, rank=0)
    # Before prefill: where will this turn's new KV go? (a first turn goes to SSD)
    p = store.place(turn=0, context_tokens=48, previous_reply_tokens=None,
                    prefix_ref_count=1, new_tokens=48, now_s=now)
    # After prefill: the turn's new KV in layer order, layers x layer_bytes_for(48) bytes.
    rng = np.random.default_rng(0)
    kv = rng.integers(0, 256, (geometry.layers, store.layer_bytes_for(48)), dtype=np.uint8)
    store.write_turn("chat-7", 0, kv, tokens=48, medium=p.medium, now_s=now)

    # The session's next request: how much is stored, how much of it is on SSD?
    now = 2.0
    plan = store.plan_restore("chat-7", 48, now_s=now)
    store.submit("request-2", arrival_s=now, ssd_bytes=plan.ssd_read_bytes, now_s=now)
    out = np.empty((geometry.layers, plan.layer_bytes), dtype=np.uint8)  # (layers, layer_bytes)
    for request in store.start_prefetches(now):  # the SSD reads the window has room for
        store.restore(plan, out, now_s=now)  # or store.restore_to_pages(...) into paged GPU KV
        store.prefetch_done(request, now)
    assert store.ready(now) == ["request-2"]  # prefill these, in this order
    assert np.array_equal(out, kv)
    store.reclaim(now)  # at the watermark, whole sessions
    store.close(remove=True)
```
"""
