"""SGLang HiCache L3 backend over the storage core: ``FlatCakeHiCacheStorage(HiCacheStorage)``.

Targets SGLang 0.5.23, ``python/sglang/srt/mem_cache/hicache_storage.py`` (``HiCacheStorage``,
``HiCacheStorageConfig``, ``HiCacheStorageExtraInfo``) as loaded by
``python/sglang/srt/mem_cache/storage/backend_factory.py`` (``backend_name == "dynamic"``:
``backend_class(storage_config, kwargs)``). Enable it with::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "flatcake",
      "module_path": "flatcake_store.adapters.sglang",
      "class_name": "FlatCakeHiCacheStorage", "interface_v1": 1,
      "directory": "/nvme/kv", "host_bytes": 17179869184, "ssd_bytes": 2199023255552}'

``interface_v1: 1`` makes the cache controller call the zero-copy ``batch_get_v1`` /
``batch_set_v1`` with the host pool's page indices and an ``extra_info`` carrying
``prefix_keys`` (the page hashes before the call's keys); without it SGLang calls ``batch_get``
/ ``batch_set`` with page tensors and no ``extra_info``.

Keys are SGLang's page hashes (hex strings, each chained on the previous page). The session id
comes from ``extra_info.extra_info["session_id"]`` when a caller puts it there; SGLang's own
cache controller sends only ``prefix_keys``, so the write-time rule's fallback
(:mod:`.common`) links a write to the session whose last page is the last stored page of its
prefix chain. Without ``interface_v1`` there is no prefix chain at all and each batch of pages
becomes a session of its own (still restored whole and coalesced).

A page is kept as the host pool's flat page bytes (``get_data_page(index, flat=True)``), one
store *layer* per page: HiCache loads L3 into host memory before the request runs, so no
consumer reads L3 layer by layer and a per-layer order would buy nothing here. What this
interface cannot deliver: GDS into the GPU (L3 fills host memory only), the two-queue
scheduler (SGLang's prefetch policy decides waiting), the placement's reply-length signal.

Why no reply length reaches storage in SGLang 0.5.23: L3 writes back radix-tree nodes, not
requests. ``HiCacheController.write_storage`` takes a node's host indices, token ids and page
hashes; its backup thread calls the backend with ``HiCacheStorageExtraInfo(prefix_keys=...)``
and nothing else (``cache_controller.py``, ``_page_backup``), and a node records its tokens,
hashes and host slots, not which request or turn made them. The prefix chain gives the context
length, not where in it the last reply lies, and a node shared by requests has no one previous
reply. So every write is placed as a first turn unless a caller puts ``session_id`` and the
length in ``extra_info`` itself, which SGLang's own code never does.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

try:
    import torch
    from sglang.srt.mem_cache.hicache_storage import (
        HiCacheStorage,
        HiCacheStorageConfig,
        HiCacheStorageExtraInfo,
    )
except ImportError as e:  # pragma: no cover - depends on the engine being installed
    raise ImportError(
        f"the SGLang adapter needs sglang (0.5.23) and torch ({e}); "
        "pip install 'flatcake_store[sglang]'"
    ) from e

from ..placement import PlacementRule
from .common import Clock, SessionKV, StoreOptions, key_hex, session_name
from .metrics import AdapterMetrics, register_if_available
from .trace import TraceRecorder

ENGINE = "sglang"
SESSION_SOURCE = "extra_info"


def _session_id(extra_info: HiCacheStorageExtraInfo | None) -> Any:
    if extra_info is None or not extra_info.extra_info:
        return None
    return extra_info.extra_info.get("session_id")


def _prefix(extra_info: HiCacheStorageExtraInfo | None) -> list[str]:
    if extra_info is None or not extra_info.prefix_keys:
        return []
    return list(extra_info.prefix_keys)


def tensor_bytes(t: torch.Tensor) -> np.ndarray:
    """A tensor's bytes as a flat uint8 array on the host."""
    host: np.ndarray = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy()
    return host


class FlatCakeHiCacheStorage(HiCacheStorage):
    """HiCache L3 on FlatCake session files (module docstring).

    ``storage_config.extra_config`` holds ``directory`` (or ``$FLATCAKE_DIR``), ``host_bytes``,
    ``ssd_bytes``, ``node``, ``page_size`` (tokens; default the host pool's), ``page_bytes``
    (a page's bytes, to open the store at construction) and the dynamic loader's fields.
    ``rule`` / ``trace`` as :class:`.common.SessionKV`.
    """

    def __init__(
        self,
        storage_config: HiCacheStorageConfig,
        kwargs: dict[str, Any] | None = None,
        *,
        rule: PlacementRule | str | os.PathLike[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
    ) -> None:
        extra = dict(storage_config.extra_config or {})
        # Each rank (TP, context-parallel, pipeline stage, DP replica) writes its own shard:
        # its own files and lock.
        c = storage_config
        group = (c.dp_rank * c.pp_size + c.pp_rank) * c.attn_cp_size + c.attn_cp_rank
        rank = group * c.tp_size + c.tp_rank
        self.options = StoreOptions.from_config(extra, rank=rank)
        self.page_tokens = int(extra.get("page_size", 0)) or None
        self.rule = rule
        self.recorder = TraceRecorder.from_environment(trace, engine=ENGINE)
        self.clock = Clock()  # the store's too, once open: one clock for the capture
        self.kv: SessionKV | None = None
        self.metrics = AdapterMetrics(ENGINE)  # counts from the first lookup, store open or not
        register_if_available(self.metrics)
        self.mem_pool_host: Any = None
        self._open_lock = threading.Lock()
        self._pending: tuple[Any, list[str]] | None = None  # the trace record being built
        self._loads = [0, 0]  # its loads' blocks delivered and failed (the monitors)
        page_bytes = int(extra.get("page_bytes", 0))
        if page_bytes:
            # Known now (else at register_mem_pool_host or the first write): the store opens
            # at once and what an earlier run stored is found from the first query.
            self._open(page_bytes)

    # setup ------------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        if self.page_tokens is None:
            self.page_tokens = int(mem_pool_host.page_size)
        page = mem_pool_host.get_dummy_flat_data_page()
        self._open(page.numel() * page.element_size())

    def _open(self, page_bytes: int) -> SessionKV:
        with self._open_lock:
            if self.kv is None:
                self.kv = SessionKV(
                    self.options,
                    engine=ENGINE,
                    layers=1,
                    layer_page_bytes=page_bytes,
                    tokens_per_key=self.page_tokens or 1,
                    rule=self.rule,
                    metrics=self.metrics,
                )
                self.kv.recorder = self.recorder  # one capture, open before the store is
                self.kv.clock = self.clock  # started earlier: never behind the store's
            elif self.kv.layer_page_bytes != page_bytes:
                raise ValueError(
                    f"value: every page is {self.kv.layer_page_bytes} bytes here; got {page_bytes}"
                )
            return self.kv

    # lookups ----------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.kv is not None and self.kv.lookup([key]) == 1

    def batch_exists(
        self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> int:
        """The consecutive prefix of ``keys`` stored (what the cache controller prefetches)."""
        self._trace(keys, extra_info)
        if self.kv is None:
            self.metrics.add("blocks_looked_up", len(keys))
            return 0
        return self.kv.lookup(keys)

    def _trace(self, keys: Sequence[str], extra_info: HiCacheStorageExtraInfo | None) -> None:
        # One record per query: the controller asks in batches of 128 pages, each batch's
        # prefix_keys being the chain so far, so a batch that continues the pending chain
        # extends it and any other starts a new record.
        if self.recorder is None:
            return
        prefix = _prefix(extra_info)
        session = _session_id(extra_info)
        pending = self._pending
        if pending is not None and pending[1] and prefix == pending[1]:
            self._pending = (pending[0], [*pending[1], *keys])
            return
        self.flush_trace()
        self._pending = (session, [*prefix, *keys])
        self._loads = [0, 0]

    def _loaded(self, delivered: int, failed: int) -> None:
        """A load of the query being recorded delivered / failed this many pages."""
        self._loads[0] += delivered
        self._loads[1] += failed

    def flush_trace(self) -> None:
        """Write the query being recorded (the next query, or close, does it too)."""
        pending, self._pending = self._pending, None
        if pending is None or self.recorder is None or not pending[1]:
            return
        session, keys = pending
        tokens = len(keys) * (self.page_tokens or 1)
        delivered, failed = self._loads
        if self.kv is not None:
            self.kv.record(
                keys,
                session_id=session,
                source=SESSION_SOURCE,
                input_tokens=tokens,
                delivered_blocks=delivered,
                failed_blocks=failed,
            )
            return
        # Nothing stored yet: the session is the side channel's, or the fallback's new one.
        named = session is not None and str(session)
        name = session_name(session) if named else "h-" + key_hex(keys[0])[:40]
        self.recorder.record(
            timestamp_s=self.clock(),
            session_id=name,
            session_source=SESSION_SOURCE if named else "chained",
            keys=keys,
            block_size_tokens=self.page_tokens or 1,
            input_tokens=tokens,
            delivered_blocks=delivered,
            failed_blocks=failed,
        )

    # zero-copy interface (interface_v1) ----------------------------------------------------
    def _host_index(self, host_indices: torch.Tensor, i: int) -> int:
        page = int(self.mem_pool_host.page_size)
        return int(host_indices[i * page].item())

    def _host_pieces(self, index: int) -> list[np.ndarray] | None:
        """The host pool's page at ``index`` as views of the pool whose concatenation is its
        flat page (``get_data_page(index, flat=True)``), or ``None`` when the layout does not
        split into contiguous pieces."""
        page = self.mem_pool_host.get_data_page(index, flat=False)
        pieces = [page[i] for i in range(page.shape[0])] if page.dim() > 1 else [page]
        if not all(p.is_contiguous() and p.device.type == "cpu" for p in pieces):
            return None
        return [p.view(-1).view(torch.uint8).numpy() for p in pieces]

    def batch_get_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Restore the stored prefix of ``keys`` straight into the host pool's pages (one
        coalesced read per session); the rest are ``False``."""
        if self.kv is None:
            return [False] * len(keys)
        hits = self.kv.lookup(keys, count=False)
        if not hits:
            return [False] * len(keys)
        indices = [self._host_index(host_indices, i) for i in range(hits)]
        views = [self._host_pieces(index) for index in indices]
        if all(v is not None for v in views):
            ok = self.kv.read_into(keys[:hits], views)  # type: ignore[arg-type]
        else:  # a layout without contiguous pieces: through flat pages
            pages = self.kv.read(keys[:hits])
            ok = pages is not None
            dummy = self.mem_pool_host.get_dummy_flat_data_page()
            for i, index in enumerate(indices):
                if pages is None:
                    break
                data = torch.from_numpy(pages[i, 0]).view(dummy.dtype).reshape(dummy.shape)
                self.mem_pool_host.set_from_flat_data_page(index, data)
        self._loaded(hits if ok else 0, 0 if ok else hits)
        if not ok:
            return [False] * len(keys)
        return [True] * hits + [False] * (len(keys) - hits)

    def batch_set_v1(
        self,
        keys: list[str],
        host_indices: torch.Tensor,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> list[bool]:
        """Submit the host pool's pages of ``keys`` as one turn of their session (copied once
        now, written by the store's writer thread)."""
        pages = []
        for i in range(len(keys)):
            index = self._host_index(host_indices, i)
            pieces = self._host_pieces(index)
            if pieces is None:
                pieces = [tensor_bytes(self.mem_pool_host.get_data_page(index))]
            pages.append(pieces)
        return self.write_pages(keys, pages, _prefix(extra_info), _session_id(extra_info))

    def write_pages(
        self,
        keys: Sequence[Hashable],
        pages: Sequence[Sequence[np.ndarray] | np.ndarray],
        prefix: list[str],
        session: Any,
    ) -> list[bool]:
        """Submit ``pages`` (each a flat page's bytes, as one or more pieces) under ``keys``
        as one turn; what both writers (``batch_set``, ``batch_set_v1``) end in. ``False``
        for every page when one is not a whole page; a write that fails later is logged, is
        counted in ``stats()`` and makes its pages a miss."""
        if not keys:
            return []
        pieces = [[p] if isinstance(p, np.ndarray) else p for p in pages]
        sizes = [sum(int(p.nbytes) for p in page) for page in pieces]
        kv = self._open(sizes[0])
        if any(size != kv.layer_page_bytes for size in sizes):
            return [False] * len(keys)
        kv.submit_write(keys, pieces, prefix=prefix, session_id=session, copy_now=True)
        return [True] * len(keys)

    # the abstract interface (page tensors) ----------------------------------------------------
    def get(
        self,
        key: str,
        target_location: Any | None = None,
        target_sizes: Any | None = None,
    ) -> torch.Tensor | None:
        got = self.batch_get([key], None if target_location is None else [target_location])
        return got[0]

    def batch_get(
        self,
        keys: list[str],
        target_locations: Any | None = None,
        target_sizes: Any | None = None,
    ) -> list[torch.Tensor | None]:
        """Each stored page (a prefix of ``keys``) copied into its target tensor (or a new
        uint8 tensor); ``None`` from the first page not stored."""
        if self.kv is None:
            return [None] * len(keys)
        hits = self.kv.lookup(keys, count=False)
        out: list[torch.Tensor | None] = [None] * len(keys)
        if not hits:
            return out
        targets: list[torch.Tensor] = []
        for i in range(hits):
            given = None if target_locations is None else target_locations[i]
            if given is None or not given.is_contiguous() or given.device.type != "cpu":
                given = torch.empty(self.kv.layer_page_bytes, dtype=torch.uint8)
            targets.append(given)
        views = [[t.view(-1).view(torch.uint8).numpy()] for t in targets]
        ok = self.kv.read_into(keys[:hits], views)
        self._loaded(hits if ok else 0, 0 if ok else hits)
        if not ok:
            return out
        for i, target in enumerate(targets):
            given = None if target_locations is None else target_locations[i]
            if given is not None and given is not target:  # not contiguous or on a device
                given.view(-1).view(torch.uint8).copy_(target.view(-1).view(torch.uint8))
                target = given
            out[i] = target
        return out

    def set(
        self,
        key: str,
        value: Any | None = None,
        target_location: Any | None = None,
        target_sizes: Any | None = None,
    ) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self,
        keys: list[str],
        values: Any | None = None,
        target_locations: Any | None = None,
        target_sizes: Any | None = None,
    ) -> bool:
        if values is None or len(values) != len(keys):
            return False
        return all(self.write_pages(keys, [[tensor_bytes(v)] for v in values], [], None))

    def stats(self) -> dict[str, Any]:
        """The monitors' numbers (:mod:`.metrics`; exported as ``sglang:flatcake_*`` where
        prometheus_client is installed)."""
        return self.kv.stats() if self.kv is not None else self.metrics.stats()

    # lifetime ---------------------------------------------------------------------------
    def clear(self) -> None:
        if self.kv is not None:
            for session in list(self.kv.index.sessions):
                self.kv.evict_session(session)

    def close(self) -> None:
        self.flush_trace()
        if self.kv is not None:
            self.kv.close()
        elif self.recorder is not None:
            self.recorder.close()
