"""The adapters against each engine's own disk tier: one long session stored and restored cold
through the engine's own code, FlatCake and the engine's backend alternating in one run.

* **LMCache** (0.5.6): one ``StorageManager`` (LMCache's own, with its ``LocalCPUBackend`` as the
  allocator) holding both ``LocalDiskBackend`` and the FlatCake storage plugin, loaded by
  LMCache's ``storage_plugin_launcher``; ``batched_put`` / ``batched_get`` with ``location=``
  pick the backend. Default: 16,384 tokens of llama-3.1-8b-shaped KV (64 chunks of 256 tokens,
  ``KV_2LTD`` bfloat16, 2.1 GB).
* **SGLang** (0.5.23): SGLang's ``MHATokenToKVPoolHost`` (``page_first``) as the host pool, its
  ``HiCacheFile`` (a file per page) and the FlatCake ``dynamic`` backend with ``interface_v1``,
  driven by the cache controller's page functions (``_generic_page_set`` / ``_generic_page_get``
  for ``HiCacheFile``, ``_page_set_zero_copy`` / ``_page_get_zero_copy`` for the v1 backend).
  Where ``HiCacheController`` cannot be imported on this machine the script makes the same calls
  itself and says so. Default: 128 pages of 64 tokens (1.07 GB).

Per run and backend (the order alternates between runs; every run stores new keys):
``store_submit_s`` is how long the engine's put call blocked, ``store_written_s`` until every
chunk/page was on disk (the backend's own ``contains`` says so); then the written files are
fsynced and the page cache dropped (``/proc/sys/vm/drop_caches`` when writable, else
``posix_fadvise(DONTNEED)`` on each file: the output says which); then the restore is timed
(``restore_GB_per_s``) with the process's CPU time over it (``cpu_s_per_GB``: user + system of
every thread, the backends' own pools included), and every byte is compared afterwards.
Medians over ``--runs``; ratios are FlatCake / engine.

Usage (the engines' venv, this checkout first on the path)::

    PYTHONPATH=$PWD /work/venv-engines/bin/python benchmarks/engine_disk_bench.py \
        [--engines lmcache,sglang] [--runs 3] [--dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GB = 1e9
# llama-3.1-8b: 32 layers, 8 KV heads, head dim 128, bfloat16.
LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128


def _import(name: str) -> Any:
    return importlib.import_module(name)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def sync_files(directory: Path) -> float:
    """fsync every file under ``directory``; the seconds it took (what a backend that writes
    into the page cache still owes before its bytes would survive a crash)."""
    t0 = time.perf_counter()
    for p in _files(directory):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def drop_page_cache(directory: Path) -> str:
    """Everything under ``directory`` out of the page cache; which way it went."""
    sync_files(directory)
    for p in _files(directory):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        return "fadvise"


def _wait(done: Callable[[], bool], timeout_s: float = 600.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while not done():
        if time.perf_counter() > deadline:
            raise SystemExit("a backend did not finish writing within 600 s")
        time.sleep(0.002)


def _all_on_disk(backend: Any, keys: list[Any]) -> bool:
    return all(backend.contains(k) and not backend.exists_in_put_tasks(k) for k in keys)


def _all_exist(backend: Any, keys: list[str]) -> bool:
    return all(backend.exists(k) for k in keys)


@dataclass
class Sample:
    backend: str
    store_submit_s: float
    store_written_s: float
    store_durable_s: float
    restore_s: float
    restore_cpu_s: float
    nbytes: int
    cache_drop: str

    @property
    def restore_gb_per_s(self) -> float:
        return self.nbytes / GB / self.restore_s

    @property
    def cpu_s_per_gb(self) -> float:
        return self.restore_cpu_s / (self.nbytes / GB)


def _timed_restore(directory: Path, restore: Callable[[], Any]) -> tuple[float, float, Any, str]:
    how = drop_page_cache(directory)
    cpu0, t0 = _cpu_s(), time.perf_counter()
    got = restore()
    return time.perf_counter() - t0, _cpu_s() - cpu0, got, how


# LMCache --------------------------------------------------------------------------------------
def lmcache_runs(root: Path, runs: int, tokens: int) -> list[Sample]:
    torch = _import("torch")
    cfg_mod = _import("lmcache.v1.config")
    meta_mod = _import("lmcache.v1.metadata")
    events = _import("lmcache.v1.event_manager")
    sm_mod = _import("lmcache.v1.storage_backend.storage_manager")
    utils = _import("lmcache.utils")
    mm = _import("lmcache.v1.memory_management")

    chunk = 256
    chunks = tokens // chunk
    shape = (LAYERS, 2, chunk, KV_HEADS, HEAD_DIM)
    nbytes = chunks * LAYERS * 2 * chunk * KV_HEADS * HEAD_DIM * 2
    meta = meta_mod.LMCacheMetadata(
        model_name="llama-3.1-8b",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.bfloat16,
        kv_shape=shape,
        role="worker",
    )
    extra = {
        "storage_plugin.flatcake.module_path": "fcctl.layout.adapters.lmcache",
        "storage_plugin.flatcake.class_name": "FlatCakeStoragePlugin",
        "flatcake.directory": str(root / "flatcake"),
        "flatcake.host_bytes": 0,  # every turn to SSD: the disk tier is what is compared
        "flatcake.ssd_bytes": 64 << 30,
    }
    # The allocator holds the session once for the puts and once for a restore.
    cpu_gb = 2.2 * nbytes / 2**30 + 1
    config = cfg_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=chunk,
        local_cpu=False,
        max_local_cpu_size=cpu_gb,
        local_disk=str(root / "lmcache"),
        max_local_disk_size=64,
        storage_plugins=["flatcake"],
        extra_config=extra,
    )
    manager = sm_mod.StorageManager(config, meta, events.EventManager())
    allocator = manager.storage_backends["LocalCPUBackend"]
    objs = []
    for i in range(chunks):
        obj = allocator.allocate(torch.Size(shape), torch.bfloat16, mm.MemoryFormat.KV_2LTD)
        g = torch.Generator().manual_seed(i)
        obj.tensor.view(torch.uint8).copy_(
            torch.randint(0, 256, (obj.get_size(),), dtype=torch.uint8, generator=g).view(
                obj.tensor.view(torch.uint8).shape
            )
        )
        objs.append(obj)
    backends = {"engine": "LocalDiskBackend", "flatcake": "flatcake"}
    dirs = {"engine": "lmcache", "flatcake": "flatcake"}
    samples: list[Sample] = []
    try:
        for run in range(runs):
            order = list(backends) if run % 2 == 0 else list(reversed(backends))
            for name in order:
                location = backends[name]
                backend = manager.storage_backends[location]
                keys = [
                    utils.CacheEngineKey(
                        "llama-3.1-8b",
                        1,
                        0,
                        (run << 32) + (hash(name) & 0xFFFF) * 4096 + i,
                        torch.bfloat16,
                        {"lmcache.tag.session_id": f"{name}-{run}"},
                    )
                    for i in range(chunks)
                ]
                for o in objs:
                    o.ref_count_up()  # batched_put drops one reference per object
                # The engine looks the chain up before it stores (the plugin chains on it).
                manager.batched_contains(keys, search_range=[location])
                t0 = time.perf_counter()
                manager.batched_put(keys, objs, location=location)
                submit = time.perf_counter() - t0
                # On disk: no put in flight (the FlatCake plugin serves a chunk in flight
                # from its buffers, so contains() alone would not say it is written).
                _wait(functools.partial(_all_on_disk, backend, keys))
                written = time.perf_counter() - t0
                durable = written + sync_files(root / dirs[name])
                took, cpu, got, how = _timed_restore(
                    root, functools.partial(manager.batched_get, keys, location=location)
                )
                for o, g in zip(objs, got, strict=True):
                    if g is None or not torch.equal(
                        g.tensor.view(torch.uint8), o.tensor.view(torch.uint8)
                    ):
                        raise SystemExit(f"lmcache {name}: a restored chunk differs")
                    g.ref_count_down()
                samples.append(Sample(name, submit, written, durable, took, cpu, nbytes, how))
                print(
                    f"lmcache {name:8} run {run}: submit {submit:.3f} s, written {written:.2f} s, "
                    f"durable {durable:.2f} s, "
                    f"restore {nbytes / GB / took:.2f} GB/s, {cpu / (nbytes / GB):.2f} CPU s/GB",
                    file=sys.stderr,
                )
                manager.batched_remove(keys, locations=[location])
    finally:
        flatcake = manager.storage_backends["flatcake"]
        if getattr(flatcake.kv, "flush", None) is not None:
            flatcake.kv.flush()  # before LMCache frees the allocator's memory
        manager.close()
    return samples


# SGLang ---------------------------------------------------------------------------------------
def _sglang_blockers() -> str:
    """Why the script makes the cache controller's calls itself (the imports that fail here)."""
    failed = []
    for module in ("sglang.srt.managers.cache_controller", "sglang.srt.mem_cache.pool_host.mha"):
        try:
            _import(module)
        except Exception as e:  # any failure is reported, then worked around
            failed.append(f"{module}: {type(e).__name__}: {e}")
    return "; ".join(failed)


def sglang_runs(root: Path, runs: int, pages: int) -> tuple[list[Sample], str]:
    torch = _import("torch")
    hicache = _import("sglang.srt.mem_cache.hicache_storage")
    adapter = _import("fcctl.layout.adapters.sglang")
    blockers = _sglang_blockers()
    how_driven = (
        "the calls HiCacheController._generic_page_set / _generic_page_get make (batch_set with "
        "the host pool's flat pages, batch_get into flat page tensors)"
        + (f"; made by this script, since {blockers}" if blockers else "")
    )
    page_tokens = 64
    page_elems = 2 * LAYERS * page_tokens * KV_HEADS * HEAD_DIM  # one flat page_first page
    sources = []
    for i in range(pages):
        g = torch.Generator().manual_seed(i)
        raw = torch.randint(0, 256, (page_elems * 2,), dtype=torch.uint8, generator=g)
        sources.append(raw.view(torch.bfloat16))
    targets = [torch.zeros(page_elems, dtype=torch.bfloat16) for _ in range(pages)]
    nbytes = pages * page_elems * 2

    def config(extra: dict[str, Any]) -> Any:
        return hicache.HiCacheStorageConfig(
            tp_rank=0,
            tp_size=1,
            pp_rank=0,
            pp_size=1,
            attn_cp_rank=0,
            attn_cp_size=1,
            is_mla_model=False,
            enable_storage_metrics=False,
            is_page_first_layout=True,
            model_name="llama-3.1-8b",
            extra_config=extra,
        )

    own = hicache.HiCacheFile(config({"file_storage_path": str(root / "hicache")}))
    ours = adapter.FlatCakeHiCacheStorage(
        config(
            {
                "backend_name": "flatcake",
                "module_path": adapter.__name__,
                "class_name": "FlatCakeHiCacheStorage",
                "directory": str(root / "flatcake"),
                "page_size": page_tokens,
                "host_bytes": 0,  # every turn to SSD: the disk tier is what is compared
                "ssd_bytes": 64 << 30,
            }
        ),
        None,
    )
    backends = {"engine": own, "flatcake": ours}
    dirs = {"engine": "hicache", "flatcake": "flatcake"}
    samples: list[Sample] = []
    try:
        for run in range(runs):
            order = list(backends) if run % 2 == 0 else list(reversed(backends))
            for name in order:
                backend = backends[name]
                keys = [f"{name}-{run}-{i:058x}" for i in range(pages)]
                assert backend.batch_exists(keys) == 0
                t0 = time.perf_counter()
                if not backend.batch_set(keys, sources):
                    raise SystemExit(f"sglang {name}: the store failed")
                submit = time.perf_counter() - t0
                flush = getattr(backend.kv, "flush", None) if name == "flatcake" else None
                if flush is not None:  # pages in flight are served from its buffers
                    _wait(functools.partial(flush, timeout_s=0.0))
                _wait(functools.partial(_all_exist, backend, keys))
                written = time.perf_counter() - t0
                durable = written + sync_files(root / dirs[name])
                for t in targets:
                    t.zero_()
                took, cpu, got, how = _timed_restore(
                    root, functools.partial(backend.batch_get, keys, targets)
                )
                for i, (src, out) in enumerate(zip(sources, got, strict=True)):
                    same = out is targets[i] and torch.equal(
                        src.view(torch.uint8), out.view(torch.uint8)
                    )
                    if not same:
                        raise SystemExit(f"sglang {name}: restored page {i} differs")
                samples.append(Sample(name, submit, written, durable, took, cpu, nbytes, how))
                print(
                    f"sglang  {name:8} run {run}: submit {submit:.3f} s, written {written:.2f} s, "
                    f"durable {durable:.2f} s, "
                    f"restore {nbytes / GB / took:.2f} GB/s, {cpu / (nbytes / GB):.2f} CPU s/GB",
                    file=sys.stderr,
                )
                backend.clear()
    finally:
        ours.close()
    return samples, how_driven


# report ---------------------------------------------------------------------------------------
def summarise(engine: str, samples: list[Sample]) -> dict[str, Any]:
    out: dict[str, Any] = {"engine_name": engine, "runs": len(samples) // 2}
    for name in ("engine", "flatcake"):
        mine = [s for s in samples if s.backend == name]
        out[name] = {
            "store_submit_s": statistics.median(s.store_submit_s for s in mine),
            "store_written_s": statistics.median(s.store_written_s for s in mine),
            "store_durable_s": statistics.median(s.store_durable_s for s in mine),
            "restore_GB_per_s": statistics.median(s.restore_gb_per_s for s in mine),
            "cpu_s_per_GB": statistics.median(s.cpu_s_per_gb for s in mine),
            "bytes": mine[0].nbytes,
            "cache_drop": sorted({s.cache_drop for s in mine}),
        }
    e, f = out["engine"], out["flatcake"]
    out["ratios_flatcake_to_engine"] = {
        "restore_GB_per_s": f["restore_GB_per_s"] / e["restore_GB_per_s"],
        "cpu_s_per_GB": f["cpu_s_per_GB"] / e["cpu_s_per_GB"],
        "store_submit_s": f["store_submit_s"] / e["store_submit_s"],
        "store_written_s": f["store_written_s"] / e["store_written_s"],
        "store_durable_s": f["store_durable_s"] / e["store_durable_s"],
    }
    return out


def render(result: dict[str, Any]) -> str:
    names = {"lmcache": "LocalDiskBackend", "sglang": "HiCacheFile"}
    own = names[result["engine_name"]]
    lines = [
        f"{result['engine_name']}: {result['flatcake']['bytes'] / GB:.2f} GB, medians of "
        f"{result['runs']} runs, page cache dropped by "
        f"{', '.join(result['flatcake']['cache_drop'])}",
        f"  {'':18}{own:>18}{'FlatCake':>12}{'ratio':>8}",
    ]
    rows = [
        ("restore GB/s", "restore_GB_per_s", "{:.2f}"),
        ("restore CPU s/GB", "cpu_s_per_GB", "{:.2f}"),
        ("store blocks (s)", "store_submit_s", "{:.3f}"),
        ("store written (s)", "store_written_s", "{:.2f}"),
        ("store durable (s)", "store_durable_s", "{:.2f}"),
    ]
    for label, key, fmt in rows:
        e, f = result["engine"][key], result["flatcake"][key]
        ratio = result["ratios_flatcake_to_engine"][key]
        lines.append(f"  {label:18}{fmt.format(e):>18}{fmt.format(f):>12}{ratio:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="lmcache,sglang")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16384, help="LMCache session length")
    ap.add_argument("--pages", type=int, default=128, help="SGLang pages of 64 tokens")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ("lmcache", "sglang"):
            raise SystemExit(f"--engines: lmcache or sglang; got {e!r}")
    asyncio.set_event_loop(asyncio.new_event_loop())
    results = []
    for engine in engines:
        root = Path(tempfile.mkdtemp(prefix=f"engine-disk-{engine}-", dir=args.dir))
        try:
            if engine == "lmcache":
                result = summarise(engine, lmcache_runs(root, args.runs, args.tokens))
                result["driven_by"] = "LMCache's StorageManager (batched_put, batched_get)"
            else:
                samples, how = sglang_runs(root, args.runs, args.pages)
                result = summarise(engine, samples)
                result["driven_by"] = how
        finally:
            shutil.rmtree(root, ignore_errors=True)
        results.append(result)
        if not args.json:
            print(render(result))
            print(f"  driven by {result['driven_by']}")
    if args.json:
        print(json.dumps({"schema_version": 1, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
