"""The staging window: per stream a double buffer of two layer-sized buffers.

A layer-wise restore reads layer ``l`` of a session into one half of a stream's double buffer
while layer ``l-1`` is scattered from the other half into the paged KV cache. The window holds
``2 x streams`` buffers and never grows: when all are full (read but not yet scattered), the next
prefetch **waits** until the consumer frees one; nothing is dropped or cancelled.
:class:`RestoreStats` counts those waits.

Layers are handed to the producers in order together with a free buffer (both under one lock),
so the buffers in use always belong to the lowest layers not yet scattered and the consumer,
which scatters layers in order, can never wait on a layer that waits on a buffer.

On CUDA the scatter is asynchronous; a buffer is reused only after a CUDA event recorded behind
its scatter has completed. On CPU the same code runs on CPU tensors (that is how it is tested
without a GPU); CPU buffers are 4096-aligned so the posix engine reads them with O_DIRECT.

KV cache shapes accepted (any dtype; the tensor must be contiguous):

* ``[layers, num_pages, ...]`` (``kv_split=False``): one page's bytes at one layer are
  contiguous; a block's bytes in the session file are copied as they are.
* ``[layers, 2, num_pages, ...]`` (``kv_split=True``, vLLM-style separate K and V): a block's
  bytes at one layer are the K page followed by the V page (each half of the block).
* a list of per-layer tensors ``[num_pages, page_bytes]`` of one-byte elements (rows may be
  strided, e.g. padded pages): one tensor per layer, as vLLM's canonical KV caches hold them.

By default a 6-dimensional cache ``[layers, 2, num_pages, page_tokens, kv_heads, head_dim]`` is
taken as split and a 3-dimensional ``[layers, num_pages, page_bytes]`` as joint; other shapes
need ``kv_split``.

torch is imported lazily: importing this module needs only numpy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .alignment import PAGE_BYTES, align_up
from .buffers import aligned_buffer
from .engines.base import ReadEngine, ReadResult
from .errors import LayoutError
from .optional import import_optional
from .planner import ReadPlan


def import_torch() -> Any:
    """The torch module, imported on first use (an optional dependency of the core)."""
    return import_optional("torch", "the staging window")


@dataclass(frozen=True)
class RestoreStats:
    """One session restore through the staging window. Times in seconds, sizes in bytes.

    ``producer_waits`` counts prefetches that found the window full and waited for a buffer;
    ``producer_wait_seconds`` is the total time they waited. ``read_seconds`` sums the engine's
    read times (overlapping reads of several streams count each).
    """

    engine: str
    o_direct: bool
    gds: bool | None
    layers: int
    blocks: int
    read_commands: int
    bytes_requested: int
    bytes_read: int
    bytes_scattered: int
    seconds: float
    read_seconds: float
    scatter_seconds: float
    producer_waits: int
    producer_wait_seconds: float
    note: str = ""
    # True only when every layer's read was checked against its layer checksums (posix into
    # any destination; kvikio only into host memory): a restore into GPU memory through kvikio
    # says False here and in the note, never silently.
    verified: bool = False
    verified_bytes: int = 0

    @property
    def restore_bytes_per_s(self) -> float:
        """KV bytes placed into the cache per second of wall time."""
        return self.bytes_scattered / self.seconds if self.seconds > 0 else 0.0

    @property
    def read_amplification(self) -> float:
        return self.bytes_read / self.bytes_requested if self.bytes_requested else 1.0


class _Slot:
    __slots__ = ("event", "index", "tensor")

    def __init__(self, index: int, tensor: Any) -> None:
        self.index = index
        self.tensor = tensor
        self.event: Any = None  # CUDA event recorded after this slot's last scatter


@dataclass(frozen=True)
class _LayerMap:
    """Where each block of one layer sits in the staging buffer."""

    runs: tuple[tuple[int, int, int], ...]  # (buffer offset, blocks, first block index)
    rows: Any  # row index tensor when every offset is a multiple of page_bytes, else None


class StagingWindow:
    """``streams`` double buffers of ``layer_bytes`` each (rounded up to 4096) on ``device``.

    One window can serve many restores, one after another (not concurrently).
    """

    def __init__(self, layer_bytes: int, *, device: str = "cuda", streams: int = 1) -> None:
        torch = import_torch()
        if not isinstance(layer_bytes, int) or layer_bytes < 1:
            raise LayoutError(
                f"staging window: layer_bytes must be an integer >= 1; got {layer_bytes!r}"
            )
        if not isinstance(streams, int) or streams < 1:
            raise LayoutError(f"staging window: streams must be an integer >= 1; got {streams!r}")
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise LayoutError(
                f"staging window: device {device!r} needs a CUDA GPU and none is available "
                "(use device='cpu')"
            )
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.streams = streams
        self.slot_bytes = align_up(layer_bytes)
        self.layer_bytes = layer_bytes
        slots = []
        for i in range(2 * streams):
            if dev.type == "cpu":
                t = torch.from_numpy(aligned_buffer(self.slot_bytes))
            else:
                t = torch.empty(self.slot_bytes, dtype=torch.uint8, device=dev)
            slots.append(_Slot(i, t))
        self._slots = slots
        self._busy = threading.Lock()

    @property
    def buffer_bytes(self) -> int:
        """Total staging memory: 2 x streams x one layer buffer."""
        return self.slot_bytes * len(self._slots)

    def restore_session(
        self,
        plan_per_layer: Sequence[ReadPlan],
        engine: ReadEngine,
        kv_cache: Any,
        page_ids: Any,
        *,
        kv_split: bool | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> RestoreStats:
        """Read each layer's plan through the window and scatter its blocks into ``kv_cache``.

        ``plan_per_layer[l]`` reads layer ``l``; its placements, in order, hold the session's
        blocks in block order (each placement a whole number of pages). Block ``i`` goes to page
        ``page_ids[i]`` of every layer. ``on_layer(l)`` runs after layer ``l`` is scattered
        (progress; tests use it to be a slow consumer).
        """
        if not self._busy.acquire(blocking=False):
            raise LayoutError("staging window: already restoring; one restore at a time per window")
        try:
            return self._restore(plan_per_layer, engine, kv_cache, page_ids, kv_split, on_layer)
        finally:
            self._busy.release()

    # ------------------------------------------------------------------ internals
    def _restore(
        self,
        plans: Sequence[ReadPlan],
        engine: ReadEngine,
        kv_cache: Any,
        page_ids: Any,
        kv_split: bool | None,
        on_layer: Callable[[int], None] | None,
    ) -> RestoreStats:
        torch = import_torch()
        kv, split, page_bytes = kv_view(torch, kv_cache, kv_split)
        layers = len(plans)
        if layers != kv.shape[0]:
            raise LayoutError(
                f"restore: got {layers} layer plans for a KV cache of {kv.shape[0]} layers"
            )
        if kv.device != self.device:
            raise LayoutError(
                f"restore: KV cache is on {kv.device}, the staging window on {self.device}"
            )
        num_pages = kv.shape[2] if split else kv.shape[1]
        pages = torch.as_tensor(page_ids, dtype=torch.long).reshape(-1).to(self.device)
        blocks = int(pages.numel())
        if blocks:
            lo, hi = int(pages.min()), int(pages.max())
            if lo < 0 or hi >= num_pages:
                bad = lo if lo < 0 else hi
                raise LayoutError(f"restore: page_ids must be in [0, {num_pages}); got {bad}")
            if int(torch.unique(pages).numel()) != blocks:
                raise LayoutError(
                    "restore: page_ids must be distinct (two blocks cannot share a page)"
                )
        maps = [self._layer_map(torch, i, p, page_bytes, blocks) for i, p in enumerate(plans)]

        state = _Shared(layers)
        state.free = list(self._slots)
        t0 = time.perf_counter()
        producers = [
            threading.Thread(
                target=self._produce, args=(state, plans, engine), name=f"fc-stage-{i}", daemon=True
            )
            for i in range(self.streams)
        ]
        for th in producers:
            th.start()
        scatter_s = 0.0
        try:
            for layer in range(layers):
                slot = state.wait_ready(layer)
                s0 = time.perf_counter()
                self._scatter(torch, kv, split, layer, slot, maps[layer], pages, page_bytes)
                if self.device.type == "cuda":
                    slot.event = torch.cuda.Event()
                    slot.event.record()
                scatter_s += time.perf_counter() - s0
                state.release(slot)
                if on_layer is not None:
                    on_layer(layer)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except BaseException:
            state.abort()
            raise
        finally:
            for th in producers:
                th.join()
        seconds = time.perf_counter() - t0
        state.raise_error()

        results = state.results
        notes = sorted({r.note for r in results if r.note})
        return RestoreStats(
            engine=results[0].engine if results else engine.name,
            o_direct=bool(results) and all(r.o_direct for r in results),
            gds=(all(r.gds for r in results) if results and results[0].gds is not None else None),
            layers=layers,
            blocks=blocks,
            read_commands=sum(p.read_commands for p in plans),
            bytes_requested=sum(p.bytes_requested for p in plans),
            bytes_read=sum(p.bytes_read for p in plans),
            bytes_scattered=blocks * page_bytes * layers,
            seconds=seconds,
            read_seconds=sum(r.seconds for r in results),
            scatter_seconds=scatter_s,
            producer_waits=state.waits,
            producer_wait_seconds=state.wait_seconds,
            note="; ".join(notes),
            verified=bool(results) and all(r.verified for r in results),
            verified_bytes=sum(r.verified_bytes for r in results),
        )

    def _layer_map(
        self, torch: Any, layer: int, plan: ReadPlan, page_bytes: int, blocks: int
    ) -> _LayerMap:
        if plan.buffer_bytes > self.slot_bytes:
            raise LayoutError(
                f"restore: layer {layer}'s plan needs a {plan.buffer_bytes}-byte buffer; the "
                "staging "
                f"window's layer buffer holds {self.slot_bytes} (make the window larger)"
            )
        runs = []
        first = 0
        aligned = True
        for extent, at in plan.placements:
            if extent.length % page_bytes:
                raise LayoutError(
                    f"restore: layer {layer}: extent {extent.tag!r} of {extent.length} bytes is "
                    "not a "
                    f"whole number of {page_bytes}-byte pages"
                )
            n = extent.length // page_bytes
            runs.append((at, n, first))
            first += n
            aligned = aligned and at % page_bytes == 0
        if first != blocks:
            raise LayoutError(
                f"restore: layer {layer}'s plan holds {first} blocks; page_ids has {blocks}"
            )
        rows = None
        if aligned and runs:
            rows = torch.cat(
                [torch.arange(at // page_bytes, at // page_bytes + n) for at, n, _ in runs]
            )
            rows = rows.to(self.device)
        return _LayerMap(tuple(runs), rows)

    def _produce(self, state: _Shared, plans: Sequence[ReadPlan], engine: ReadEngine) -> None:
        while True:
            got = state.take()
            if got is None:
                return
            layer, slot = got
            try:
                if slot.event is not None:
                    slot.event.synchronize()  # the previous scatter from this buffer is done
                result = engine.read(plans[layer], slot.tensor)
            except BaseException as e:
                state.fail(e)
                return
            state.ready(layer, slot, result)

    def _scatter(
        self,
        torch: Any,
        kv: Any,
        split: bool,
        layer: int,
        slot: _Slot,
        lmap: _LayerMap,
        pages: Any,
        page_bytes: int,
    ) -> None:
        buf = slot.tensor
        dst = kv[layer]  # [num_pages, page_bytes] or [2, num_pages, page_bytes // 2]
        pieces: list[tuple[Any, Any]] = []
        if lmap.rows is not None:
            nrows = int(lmap.rows.max()) + 1 if lmap.rows.numel() else 0
            table = buf[: nrows * page_bytes].view(nrows, page_bytes)
            pieces.append((pages, table.index_select(0, lmap.rows)))
        else:
            for at, n, first in lmap.runs:
                pieces.append(
                    (pages[first : first + n], buf[at : at + n * page_bytes].view(n, page_bytes))
                )
        half = page_bytes // 2
        for idx, rows in pieces:
            if split:
                dst[0].index_copy_(0, idx, rows[:, :half])
                dst[1].index_copy_(0, idx, rows[:, half:])
            else:
                dst.index_copy_(0, idx, rows)


class _Shared:
    """The producer/consumer hand-off: free slots, ready layers, waits, errors."""

    def __init__(self, layers: int) -> None:
        self.cond = threading.Condition()
        self.layers = layers
        self.next_layer = 0
        self.free: list[_Slot] = []
        self.ready_slots: dict[int, _Slot] = {}
        self.results: list[ReadResult] = []
        self.waits = 0
        self.wait_seconds = 0.0
        self.error: BaseException | None = None
        self.aborted = False

    def take(self) -> tuple[int, _Slot] | None:
        with self.cond:
            if self.next_layer >= self.layers or self.aborted or self.error is not None:
                return None
            if not self.free:
                self.waits += 1
                w0 = time.perf_counter()
                while not self.free and not self.aborted and self.error is None:
                    self.cond.wait()
                self.wait_seconds += time.perf_counter() - w0
            if self.aborted or self.error is not None or self.next_layer >= self.layers:
                return None
            layer = self.next_layer
            self.next_layer += 1
            return layer, self.free.pop(0)

    def ready(self, layer: int, slot: _Slot, result: ReadResult) -> None:
        with self.cond:
            self.ready_slots[layer] = slot
            self.results.append(result)
            self.cond.notify_all()

    def wait_ready(self, layer: int) -> _Slot:
        with self.cond:
            while layer not in self.ready_slots:
                if self.error is not None:
                    raise self.error
                self.cond.wait()
            return self.ready_slots.pop(layer)

    def release(self, slot: _Slot) -> None:
        with self.cond:
            self.free.append(slot)
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


class _LayerList:
    """Per-layer page tables ``[pages, page_bytes]`` (one tensor each, rows may be strided) seen
    as one ``[layers, pages, page_bytes]`` cache: an engine whose layers are separate tensors
    (vLLM's canonical KV caches) is scattered into in place, with no stacked copy."""

    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers
        self.shape = (len(layers), layers[0].shape[0], layers[0].shape[1])
        self.device = layers[0].device

    def __getitem__(self, layer: int) -> Any:
        return self.layers[layer]


def _layer_list(torch: Any, kv_cache: Sequence[Any]) -> _LayerList:
    if not kv_cache:
        raise LayoutError("restore: kv_cache is an empty list of layers")
    views = []
    for i, t in enumerate(kv_cache):
        if not hasattr(t, "element_size") or t.dim() != 2 or t.element_size() != 1:
            raise LayoutError(
                f"restore: kv_cache[{i}] must be a 2-D one-byte tensor [pages, page_bytes]; "
                f"got {getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}"
            )
        views.append(t.view(torch.uint8))
    first = views[0]
    for i, v in enumerate(views):
        if v.shape != first.shape or v.device != first.device:
            raise LayoutError(
                f"restore: kv_cache[{i}] is {tuple(v.shape)} on {v.device}; layer 0 is "
                f"{tuple(first.shape)} on {first.device} (every layer alike)"
            )
    return _LayerList(views)


def kv_view(torch: Any, kv_cache: Any, kv_split: bool | None) -> tuple[Any, bool, int]:
    """``(uint8 view, split, page_bytes)``: ``[L, P, page_bytes]`` or ``[L, 2, P, "
    "page_bytes/2]``; a list of per-layer ``[P, page_bytes]`` tensors is taken as the first."""
    if isinstance(kv_cache, list | tuple):
        if kv_split:
            raise LayoutError("restore: a list of per-layer tensors is never split (kv_split)")
        layers = _layer_list(torch, kv_cache)
        return layers, False, layers.shape[2]
    if not hasattr(kv_cache, "is_contiguous"):
        raise LayoutError(
            f"restore: kv_cache must be a torch tensor; got {type(kv_cache).__name__}"
        )
    if not kv_cache.is_contiguous():
        raise LayoutError("restore: kv_cache must be contiguous (it is written in place)")
    split = kv_split if kv_split is not None else kv_cache.dim() == 6
    if kv_split is None and kv_cache.dim() not in (3, 6):
        raise LayoutError(
            f"restore: cannot tell the KV cache layout from shape {tuple(kv_cache.shape)}; "
            "pass kv_split=True ([layers, 2, pages, ...]) or False ([layers, pages, ...])"
        )
    flat = kv_cache.view(-1).view(torch.uint8)
    layers = kv_cache.shape[0]
    if split:
        if kv_cache.dim() < 3 or kv_cache.shape[1] != 2:
            raise LayoutError(
                f"restore: a split KV cache is [layers, 2, pages, ...]; got {tuple(kv_cache.shape)}"
            )
        pages = kv_cache.shape[2]
        kv = flat.view(layers, 2, pages, -1)
        return kv, True, 2 * kv.shape[3]
    pages = kv_cache.shape[1]
    kv = flat.view(layers, pages, -1)
    return kv, False, kv.shape[2]


def restore_session(
    plan_per_layer: Sequence[ReadPlan],
    engine: ReadEngine,
    kv_cache: Any,
    page_ids: Any,
    *,
    window: StagingWindow | None = None,
    device: str | None = None,
    streams: int = 1,
    kv_split: bool | None = None,
    on_layer: Callable[[int], None] | None = None,
) -> RestoreStats:
    """Restore one session layer by layer into ``kv_cache`` (see ``StagingWindow.restore_session``).

    Without ``window`` a window sized to the largest layer plan is made on ``device`` (default:
    the KV cache's device) with ``streams`` double buffers.
    """
    if window is None:
        need = max((p.buffer_bytes for p in plan_per_layer), default=PAGE_BYTES)
        first = kv_cache[0] if isinstance(kv_cache, list | tuple) and kv_cache else kv_cache
        dev = device if device is not None else str(first.device)
        window = StagingWindow(max(need, 1), device=dev, streams=streams)
    return window.restore_session(
        plan_per_layer, engine, kv_cache, page_ids, kv_split=kv_split, on_layer=on_layer
    )
