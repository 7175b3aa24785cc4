"""LMCache storage plugin over the storage core: ``FlatCakeStoragePlugin(StoragePluginInterface)``.

Targets LMCache 0.5.6, ``lmcache/v1/storage_backend/abstract_backend.py``
(``StoragePluginInterface``), loaded by ``storage_plugin_launcher`` in
``lmcache/v1/storage_backend/__init__.py``: for each name in ``storage_plugins`` it imports
``extra_config["storage_plugin.<name>.module_path"]`` and calls the class with ``config=,
dst_device=, metadata=, local_cpu_backend=, loop=``. Enable it in the LMCache config::

    storage_plugins: ["flatcake"]
    extra_config:
      storage_plugin.flatcake.module_path: flatcake_store.adapters.lmcache
      storage_plugin.flatcake.class_name: FlatCakeStoragePlugin
      flatcake.directory: /nvme/kv
      flatcake.host_bytes: 17179869184
      flatcake.ssd_bytes: 2199023255552

Why this interface and not the multi-process ``L2AdapterInterface``: 0.5.6 still loads
in-process plugins from ``storage_plugins`` (the launcher above) beside its local CPU backend,
and an in-process plugin sees the request's tags; the MP L2 adapter runs in LMCache's server
process, completes through eventfds and only ever fills the server's CPU L1, so it needs a
server to test against and still could not deliver more than this plugin does here.

Keys are ``CacheEngineKey`` (a chunk's prefix hash, ``chunk_size`` tokens, 256 by default).
The session id arrives as the request tag ``lmcache.tag.session_id`` (vLLM:
``kv_transfer_params={"lmcache.tag.session_id": "chat-7"}``), which LMCache folds into every
key's ``tags``; ``cache_salt`` exists only on the multi-process mode's keys in 0.5.6. Without a
tag the write-time rule's fallback links a put to the session of the last stored chunk of the
request's lookup chain (this plugin remembers the most recent lookup chains, bounded).

A chunk is kept whole (its ``MemoryObj`` bytes, padded to the largest chunk; one store *layer*):
the GPU connector consumes retrieved chunks whole, not layer by layer. What it cannot deliver:
the two-queue scheduler (LMCache decides retrieval order) and GDS into the GPU (use LMCache's
own ``GdsBackend`` for that).

The placement's reply-length signal: LMCache never tells storage a reply's length (it stores
token chunks; which of a prompt's tokens were the last reply it does not know), but it forwards
every ``lmcache.*`` request config to each key's ``request_configs``, and only the
``lmcache.tag.*`` ones enter a key's identity. So the serving layer may send
``lmcache.flatcake.previous_reply_tokens`` (and ``lmcache.flatcake.prefix_ref_count``) with a
request, per turn, without changing its keys; without it a later turn takes the session's last
reply length given, else is placed as a first turn.

Both lookup paths work: the blocking one (``batched_contains`` then ``batched_get_blocking``)
and, with ``enable_async_loading``, the prefetch one (``batched_async_contains`` then
``batched_get_non_blocking``, the read run on a worker thread so LMCache's event loop is never
blocked by a disk read).

A plugin that cannot start stops the engine: LMCache's launcher catches every ``Exception`` a
plugin's constructor raises, logs it and starts the engine without the plugin, so a
misconfigured deployment would run without FlatCake and nobody would know. The constructor
therefore logs the cause at error level and raises :class:`PluginStartupFailure`, which is not
an ``Exception`` (a ``BaseException``, like ``SystemExit``), past the launcher: the engine's
startup fails with the cause in its message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

try:
    import torch
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.memory_management import (
        MemoryFormat,
        MemoryObj,
        MemoryObjMetadata,
        TensorMemoryObj,
    )
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface
except ImportError as e:  # pragma: no cover - depends on the engine being installed
    raise ImportError(
        f"the LMCache adapter needs lmcache (0.5.6) and torch ({e}); "
        "pip install 'flatcake_store[lmcache]'"
    ) from e

from ..placement import PlacementRule
from .common import (
    Clock,
    KeyCodec,
    SessionKV,
    StoreOptions,
    key_hex,
    pack_keys,
    session_name,
    unpack_keys,
)
from .metrics import AdapterMetrics, register_if_available
from .trace import OpenRequests, TraceRecorder

ENGINE = "lmcache"
SESSION_TAG = "session_id"
SESSION_SOURCE = "lmcache.tag"
CONFIG_PREFIX = "flatcake."
#: Lookup chains remembered for the fallback (chunk key -> its chain), bounded.
MAX_CHAIN_KEYS = 65536

logger = logging.getLogger(__name__)


class PluginStartupFailure(BaseException):
    """The plugin could not start (its cause chained). A ``BaseException`` on purpose: LMCache's
    plugin launcher swallows ``Exception`` and would start the engine without FlatCake."""


def _session_of(key: CacheEngineKey) -> Any:
    for name, value in key.tags or ():
        if name == SESSION_TAG:
            return value
    return None


#: Request configs the plugin reads from a put's keys (module docstring): not tags, so a value
#: that changes from turn to turn leaves the keys, and so the prefix's hits, unchanged.
REPLY_CONFIG = "lmcache.flatcake.previous_reply_tokens"
REF_COUNT_CONFIG = "lmcache.flatcake.prefix_ref_count"


def _int_config(key: CacheEngineKey, name: str) -> int | None:
    """The request config ``name`` of ``key``'s request as a count, ``None`` when absent."""
    value = (key.request_configs or {}).get(name)
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise ValueError(f"request_configs: {name} must be a count of tokens; got {value!r}")
    return n


class FlatCakeStoragePlugin(StoragePluginInterface):
    """LMCache chunks in FlatCake session files (module docstring).

    ``page_bytes``: the largest chunk in bytes; default the engine metadata's full chunk
    (``kv_shape`` x dtype), else the first chunk stored. ``rule`` / ``trace`` as
    :class:`.common.SessionKV`.
    """

    def __init__(
        self,
        dst_device: str = "cpu",
        config: Any = None,
        metadata: Any = None,
        local_cpu_backend: Any = None,
        loop: Any = None,
        *,
        page_bytes: int | None = None,
        rule: PlacementRule | str | os.PathLike[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(
            dst_device=dst_device,
            config=config,
            metadata=metadata,
            local_cpu_backend=local_cpu_backend,
            loop=loop,
        )
        try:
            self._start(config, metadata, page_bytes, rule, trace)
        except Exception as e:
            logger.error("the FlatCake storage plugin cannot start: %s", e)
            if loop is not None and loop.is_running():
                # The storage manager's event loop runs in a non-daemon thread that its
                # constructor (which this failure leaves unfinished) would have owned; stopped,
                # so the failing engine's process can exit instead of hanging.
                loop.call_soon_threadsafe(loop.stop)
            raise PluginStartupFailure(f"the FlatCake storage plugin cannot start: {e}") from e

    def _start(
        self,
        config: Any,
        metadata: Any,
        page_bytes: int | None,
        rule: PlacementRule | str | os.PathLike[str] | None,
        trace: str | os.PathLike[str] | None,
    ) -> None:
        extra = dict(getattr(config, "extra_config", None) or {})
        ours = {k[len(CONFIG_PREFIX) :]: v for k, v in extra.items() if k.startswith(CONFIG_PREFIX)}
        rank = int(getattr(metadata, "worker_id", 0) or 0)
        self.options = StoreOptions.from_config(ours, rank=rank)
        self.chunk_tokens = int(getattr(config, "chunk_size", 256) or 256)
        self.page_bytes = page_bytes or int(ours.get("page_bytes", 0)) or _full_chunk(metadata)
        self.rule = rule
        self.recorder = TraceRecorder.from_environment(trace, engine=ENGINE)
        self.clock = Clock()  # the store's too, once open: one clock for the capture
        self.kv: SessionKV | None = None
        self.metrics = AdapterMetrics(ENGINE)  # counts from the first lookup, store open or not
        register_if_available(self.metrics)
        # chunk key -> (shape, dtype, format, bytes) of the object stored under it
        self.objects: dict[CacheEngineKey, tuple[torch.Size, torch.dtype, Any, int]] = {}
        self.chains: OrderedDict[CacheEngineKey, tuple[CacheEngineKey, ...]] = OrderedDict()
        self.pinned: dict[CacheEngineKey, int] = {}
        self.requests = OpenRequests()  # one trace record per request (trace.OpenRequests)
        self.lookup_pins: dict[str, list[CacheEngineKey]] = {}  # async lookups' pins
        self.lock = threading.Lock()  # the engine's thread and LMCache's event loop both call
        if self.page_bytes:
            self._open(self.page_bytes)  # indexes what an earlier run stored (restart)

    def _open(self, page_bytes: int) -> SessionKV:
        if self.kv is None:
            self.page_bytes = page_bytes
            self.kv = SessionKV(
                self.options,
                engine=ENGINE,
                layers=1,
                layer_page_bytes=page_bytes,
                tokens_per_key=self.chunk_tokens,
                rule=self.rule,
                metrics=self.metrics,
                key_codec=KeyCodec(self._pack_keys, self._unpack_keys),
            )
            self.kv.recorder = self.recorder
            self.kv.clock = self.clock  # started earlier: never behind the store's
        return self.kv

    # keys on disk, for a restart: each chunk's key and its memory object's shape ---------
    def _pack_keys(self, keys: Sequence[Any]) -> bytes:
        rows = []
        for k in keys:
            shape, dtype, fmt, size = self.objects[k]
            rows.append(json.dumps([k.to_string(), list(shape), str(dtype), int(fmt.value), size]))
        return pack_keys(rows)

    def _unpack_keys(self, tag: bytes) -> list[Any]:
        keys: list[Any] = []
        for row in unpack_keys(tag):
            try:
                text, shape, dtype, fmt, size = json.loads(row)  # type: ignore[arg-type]
                key = CacheEngineKey.from_string(text)
                kind = getattr(torch, str(dtype).removeprefix("torch."))
                self.objects[key] = (torch.Size(shape), kind, MemoryFormat(fmt), int(size))
            except (ValueError, TypeError, AttributeError):
                break  # not this plugin's: the keys before it are kept
            keys.append(key)
        return keys

    # lookups ----------------------------------------------------------------------------
    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        found = self.kv is not None and self.kv.lookup([key]) == 1
        if found and pin:
            self.pin(key)
        return found

    def batched_contains(self, keys: list[CacheEngineKey], pin: bool = False) -> int:
        """The stored prefix of a request's chunk chain; a new request's chain is remembered
        for the fallback and recorded to the trace (a retrieve's second lookup is not new)."""
        with self.lock:
            if self.requests.is_new(keys):
                self._remember(keys)
                self._record(keys)
        if self.kv is None:
            self.metrics.add("blocks_looked_up", len(keys))
        hits = 0 if self.kv is None else self.kv.lookup(keys)
        if pin:
            for k in keys[:hits]:
                self.pin(k)
        return hits

    async def batched_async_contains(
        self, lookup_id: str, keys: list[CacheEngineKey], pin: bool = False
    ) -> int:
        """``batched_contains`` for LMCache's prefetch path; pins held for ``lookup_id`` until
        its ``batched_get_non_blocking``."""
        hits = self.batched_contains(keys, pin)
        if pin and hits:
            with self.lock:
                self.lookup_pins.setdefault(lookup_id, []).extend(keys[:hits])
        return hits

    async def batched_get_non_blocking(
        self, lookup_id: str, keys: list[CacheEngineKey], transfer_spec: Any = None
    ) -> list[MemoryObj]:
        """The chunks of ``keys`` restored on a worker thread (LMCache's event loop goes on),
        up to the first one no longer stored: LMCache takes a shorter list as fewer chunks."""
        try:
            got = await asyncio.get_running_loop().run_in_executor(
                None, self.batched_get_blocking, keys
            )
        finally:
            with self.lock:
                pinned = self.lookup_pins.pop(lookup_id, [])
            for k in pinned:
                self.unpin(k)
        out: list[MemoryObj] = []
        for obj in got:
            if obj is None:
                break
            out.append(obj)
        return out

    def _record(self, keys: Sequence[CacheEngineKey]) -> None:
        if self.recorder is None or not keys:
            return
        session, tokens = _session_of(keys[0]), len(keys) * self.chunk_tokens
        if self.kv is not None:
            self.kv.record(
                keys,
                session_id=session,
                source=SESSION_SOURCE,
                input_tokens=tokens,
                trace_keys=[k.chunk_hash for k in keys],
            )
            return
        named = session is not None and str(session)
        self.recorder.record(
            timestamp_s=self.clock(),
            session_id=session_name(session) if named else "h-" + key_hex(keys[0])[:40],
            session_source=SESSION_SOURCE if named else "chained",
            keys=[k.chunk_hash for k in keys],
            block_size_tokens=self.chunk_tokens,
            input_tokens=tokens,
        )

    def _remember(self, keys: Sequence[CacheEngineKey]) -> None:
        chain = tuple(keys)
        for k in chain:
            self.chains[k] = chain
            self.chains.move_to_end(k)
        while len(self.chains) > MAX_CHAIN_KEYS:
            self.chains.popitem(last=False)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        """Whether ``key``'s chunk was submitted and is still being written."""
        return self.kv is not None and key in self.kv.pending

    # writes -----------------------------------------------------------------------------
    def batched_submit_put_task(
        self,
        keys: Sequence[CacheEngineKey],
        objs: list[MemoryObj],
        transfer_spec: Any = None,
        on_complete_callback: Callable[[CacheEngineKey], None] | None = None,
    ) -> list[Future[Any]] | None:
        """Submit the chunks as one turn of their session and return (``None``, as LMCache's
        own disk backend does): the chunks are copied once, before this returns, into the
        turn's layer-ordered staging buffer, which the store's writer thread writes in the
        background (a lookup of them is a hit meanwhile, served from that buffer).

        Copied now, not by the writer from the memory objects held by reference count (as
        ``LocalDiskBackend`` holds them): LMCache's ``StorageManager.close`` closes its
        ``LocalCPUBackend`` first, whose allocator frees the memory of every object it
        handed out whatever their reference counts, and only then this plugin; a write still
        queued then read freed memory (SIGSEGV in the writer thread). The copy is the one the
        writer made anyway, moved to the engine's thread; the disk write stays off it."""
        if not keys:
            return None
        with self.lock:
            self.requests.close(keys)
        sizes = [o.get_size() for o in objs]
        kv = self._open(max(sizes))
        for size in sizes:
            if size > kv.layer_page_bytes:
                raise ValueError(
                    f"objs: a chunk is at most {kv.layer_page_bytes} bytes here; got {size}"
                )
        chain = self.chains.get(keys[0], ())
        prefix = chain[: chain.index(keys[0])] if keys[0] in chain else ()
        for k, obj, size in zip(keys, objs, sizes, strict=True):
            # Kept with the keys: a restart rebuilds each chunk's memory object from them.
            self.objects[k] = (obj.get_shape(), obj.get_dtype(), obj.get_memory_format(), size)

        def written() -> None:
            if on_complete_callback is not None:
                for k in keys:
                    on_complete_callback(k)

        ref_count = _int_config(keys[0], REF_COUNT_CONFIG)
        kv.submit_write(
            list(keys),
            [[_bytes_of(o)] for o in objs],
            prefix=prefix,
            session_id=_session_of(keys[0]),
            previous_reply_tokens=_int_config(keys[0], REPLY_CONFIG),
            prefix_ref_count=1 if ref_count is None else max(1, ref_count),
            copy_now=True,  # never touch LMCache's memory after return (docstring)
            on_written=written,
        )
        return None

    # reads ------------------------------------------------------------------------------
    def get_blocking(self, key: CacheEngineKey) -> MemoryObj | None:
        got = self.batched_get_blocking([key])
        return got[0]

    def batched_get_blocking(self, keys: list[CacheEngineKey]) -> list[MemoryObj | None]:
        """The chunks, restored with one coalesced read per session straight into the memory
        objects handed back; ``None`` for a chunk not stored."""
        with self.lock:
            self.requests.close(keys)
        if self.kv is None:
            return [None] * len(keys)
        present = [k for k in keys if self.kv.lookup([k], count=False) == 1]
        objs = [self._allocate(k) for k in present]
        if not present or not self.kv.read_into(present, [[_bytes_of(o)] for o in objs]):
            for obj in objs:
                obj.ref_count_down()
            return [None] * len(keys)
        found = dict(zip(present, objs, strict=True))
        return [found.get(k) for k in keys]

    def get_non_blocking(
        self, key: CacheEngineKey, location: str | None = None
    ) -> Future[Any] | None:
        obj = self.get_blocking(key)
        if obj is None:
            return None
        done: Future[Any] = Future()
        done.set_result(obj)
        return done

    def _allocate(self, key: CacheEngineKey) -> MemoryObj:
        """A memory object for ``key``'s chunk, from LMCache's allocator when there is one."""
        shape, dtype, fmt, size = self.objects[key]
        obj = None
        if self.local_cpu_backend is not None:
            obj = self.local_cpu_backend.allocate(shape, dtype, fmt)
        if obj is None:
            raw = torch.empty(size, dtype=torch.uint8)
            meta = MemoryObjMetadata(
                shape=shape, dtype=dtype, address=0, phy_size=size, ref_count=1, fmt=fmt
            )
            obj = TensorMemoryObj(raw, meta, None)
        return obj

    # pins and removal -------------------------------------------------------------------
    def pin(self, key: CacheEngineKey) -> bool:
        if self.kv is None or self.kv.lookup([key]) != 1:
            return False
        self.pinned[key] = self.pinned.get(key, 0) + 1
        return True

    def unpin(self, key: CacheEngineKey) -> bool:
        if self.pinned.get(key, 0) < 1:
            return False
        self.pinned[key] -= 1
        if not self.pinned[key]:
            del self.pinned[key]
        return True

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        """Remove ``key``: its whole session goes (a session is stored whole), unless one of
        its chunks is pinned and ``force`` is false."""
        if self.kv is None or self.kv.lookup([key]) != 1:
            return False
        session = self.kv.index.where[key][0]
        held = self.kv.index.sessions[session].keys
        if not force and any(k in self.pinned for k in held):
            return False
        for k in self.kv.evict_session(session):
            self.objects.pop(k, None)
            self.pinned.pop(k, None)
        return True

    def stats(self) -> dict[str, Any]:
        """The monitors' numbers (:mod:`.metrics`; exported as ``lmcache:flatcake_*`` where
        prometheus_client is installed)."""
        return self.kv.stats() if self.kv is not None else self.metrics.stats()

    def get_allocator_backend(self) -> Any:
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        return None  # recency is the core's (sessions touched by their reads)

    def close(self) -> None:
        if self.kv is not None:
            self.kv.close()
        elif self.recorder is not None:
            self.recorder.close()


def _bytes_of(obj: MemoryObj) -> np.ndarray:
    """A memory object's chunk bytes as a flat uint8 view (no copy; the object is on the
    host)."""
    view: np.ndarray = obj.tensor.view(-1).view(torch.uint8).numpy()
    return view[: obj.get_size()]


def _full_chunk(metadata: Any) -> int:
    """Bytes of one full chunk from LMCache's engine metadata (0 when not known)."""
    shape = getattr(metadata, "kv_shape", None)
    dtype = getattr(metadata, "kv_dtype", None)
    if not shape or dtype is None:
        return 0
    return int(np.prod(shape)) * int(torch.empty((), dtype=dtype).element_size())
