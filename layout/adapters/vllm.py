"""vLLM offloading spec over the storage core: ``FlatCakeOffloadingSpec(OffloadingSpec)``.

Targets vLLM 0.34.0, ``vllm/v1/kv_offload/base.py`` (``OffloadingSpec``, ``OffloadingManager``,
``OffloadingWorker``, ``LoadStoreSpec``, ``ReqContext``, ``CanonicalKVCaches``,
``DevicePointers``), loaded by ``vllm/v1/kv_offload/factory.py`` (``spec_name`` +
``spec_module_path``) inside the ``OffloadingConnector``. Enable it with::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "FlatCakeOffloadingSpec",
        "spec_module_path": "flatcake_store.adapters.vllm",
        "directory": "/nvme/kv", "host_bytes": 17179869184, "ssd_bytes": 2199023255552}}'

and send the session id per request: ``"kv_transfer_params": {"session_id": "chat-7"}``
(optionally ``"previous_reply_tokens"`` and ``"prefix_ref_count"``, the placement's other
signals).

Why an ``OffloadingSpec`` and not a ``KVConnectorBase_V1``: the spec is vLLM's supported
out-of-tree storage hook (a module path in the config, no fork), its scheduler-side manager
sees every request's ``kv_transfer_params`` and its worker receives the GPU KV tensors
themselves (``CanonicalKVCaches``), so restores can go straight into them through the
core's staging window (GDS with the kvikio engine). A ``KVConnectorBase_V1`` would add
per-layer pipelining (``wait_for_layer_load``) and ``get_num_new_matched_tokens`` returning
``None`` for SSD-aware deferral, at the price of reimplementing vLLM's whole connector
(block allocation, metadata, async bookkeeping) around the core.

Split as vLLM splits it:

* :class:`FlatCakeManager` (scheduler process) decides: it indexes stored keys
  (:class:`.common.KeyIndex`), names the session (side channel, else the write-time rule's
  fallback), places each request's turn once, at its first store, with the emitted
  thresholds (:class:`..placement.PlacementRule` on the manager's own host/SSD accounting),
  and reclaims whole sessions at the watermark (:class:`..reclaim.SessionReclaimer`). vLLM
  stores a request's blocks step by step as they complete; each later store extends the same
  turn. Its decisions travel to the workers in the load/store specs, with the sessions to drop
  and the turns to seal (their request finished). At start it indexes what the workers' stores
  recover from the directory (:func:`..store.scan_sessions`, the keys kept in each turn's tag).
* :class:`FlatCakeWorker` (each worker process, one per rank) executes them on its own
  :class:`..store.FlatStore`: a turn's stores accumulate in host memory and are written as
  one turn when sealed (layer-ordered, one FC-CIO segment or one host array); a load that
  fails its checksums is reported failed and its session dropped with its file (the manager
  forgets it when the load completes: a miss from then on); a load restores each session's
  whole turns with the coalesced planner, into the KV tensors in place through the staging
  window when the requested blocks are exactly those turns, else through host memory and a
  copy of the requested blocks. On a GPU the window reads with the kvikio engine (GDS) when
  it is usable; otherwise with the posix engine, noted once in the log.

One offloaded block per GPU block (``blocks_per_chunk`` 1) and one KV cache group; a "layer"
of the store is one canonical tensor reference (vLLM splits FlashAttention's K and V into two).
Transfers run synchronously inside ``submit_*`` and are reported by ``get_finished``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import torch
    from vllm.v1.kv_offload.base import (
        CanonicalKVCaches,
        DevicePointers,
        LoadStoreSpec,
        LookupResult,
        Medium,
        OffloadingEvent,
        OffloadingManager,
        OffloadingSpec,
        OffloadingWorker,
        OffloadKey,
        PrepareStoreOutput,
        ReqContext,
        RequestOffloadingContext,
        ScheduleEndContext,
        TransferResult,
    )
    from vllm.v1.kv_offload.config import OffloadingConfig
except ImportError as e:  # pragma: no cover - depends on the engine being installed
    raise ImportError(
        f"the vLLM adapter needs vllm (0.34.0) and torch ({e}); pip install 'flatcake_store[vllm]'"
    ) from e

from ..engines import EngineUnavailable, open_engine
from ..placement import Medium as StoreMedium
from ..placement import PlacementRule, PlacementSignals
from ..reclaim import SessionReclaimer
from ..rule_file import resolve_rule
from ..store import SESSION_SUFFIX, FlatStore, scan_sessions, session_file_name
from .common import (
    Clock,
    KeyIndex,
    StoreOptions,
    pack_keys,
    page_geometry,
    session_name,
    unpack_keys,
)
from .metrics import AdapterMetrics, register_if_available
from .trace import TraceRecorder

ENGINE = "vllm"
SESSION_SOURCE = "kv_transfer_params"
log = logging.getLogger(__name__)


def _params(req_context: ReqContext) -> dict[str, Any]:
    return dict(req_context.kv_transfer_params or {})


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


SEAL_SUFFIX = ".fcseal"


def seal_marker(directory: str, node: int, session: str, turn: int) -> str:
    """The empty file by which the manager tells the workers that ``session``'s turn ``turn``
    is whole though no transfer carries it: vLLM gives an ``OffloadingWorker`` no call when a
    request finishes (only ``submit_*``, ``get_finished``, ``wait``, ``shutdown``), and the
    manager and its workers share the directory. Named like the session's files (rank 0's,
    one marker serves every rank)."""
    name = session_file_name(node, 0, session).removesuffix(SESSION_SUFFIX)
    return os.path.join(directory, f".{name}-t{turn}{SEAL_SUFFIX}")


class FlatCakeStoreSpec(LoadStoreSpec):
    """A store decided by the manager: ``keys`` become (more of) turn ``turn`` of ``session``
    on ``medium`` (0 memory, 1 SSD); ``drops`` are sessions to remove first, ``seals`` the
    ``(session, turn)`` whose request finished (the turn is whole: write it). ``final`` is set
    by the manager when the request finishes in the step that made this store, its last: the
    worker then writes the turn whole at once (vLLM sends a step's specs to the workers after
    ``on_request_finished``, so the flag set there travels with the spec)."""

    def __init__(
        self,
        session: str,
        turn: int,
        medium: int,
        keys: list[bytes],
        drops: list[str],
        seals: list[tuple[str, int]] | None = None,
    ) -> None:
        self.session = session
        self.turn = turn
        self.medium = medium
        self.keys = keys
        self.drops = drops
        self.seals = seals or []
        self.final = False


class FlatCakeLoadSpec(LoadStoreSpec):
    """A load: block ``i`` is block ``blocks[i]`` of session ``sessions[i]``; ``spans`` gives
    each session's whole-turn range ``(start, stop)`` to restore; ``drops`` as a store's."""

    def __init__(
        self,
        sessions: list[str],
        blocks: list[int],
        spans: dict[str, tuple[int, int]],
        drops: list[str],
        seals: list[tuple[str, int]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.blocks = blocks
        self.spans = spans
        self.drops = drops
        self.seals = seals or []


@dataclass
class _Request:
    session_id: Any
    chain: list[bytes] = field(default_factory=list)
    previous_reply_tokens: int | None = None
    prefix_ref_count: int = 1
    # The turn this request is storing: (session, turn, medium), placed at its first store;
    # vLLM's later stores of the request's blocks extend it.
    turn: tuple[str, int, StoreMedium] | None = None
    # The store this scheduler step made for the request, until the step ends: a request that
    # finishes in the same step seals its turn through it (FlatCakeStoreSpec.final).
    step_store: FlatCakeStoreSpec | None = None


class FlatCakeManager(OffloadingManager):
    """The scheduler-side half (module docstring)."""

    def __init__(self, spec: FlatCakeOffloadingSpec) -> None:
        self.spec = spec
        self.rule = spec.rule
        self.index = KeyIndex()
        self.pending: set[bytes] = set()  # prepared to store, not yet complete
        self.clock = Clock()
        opts = spec.options
        self.host = SessionReclaimer(opts.host_bytes)
        self.ssd = SessionReclaimer(opts.ssd_bytes)
        self.media: dict[str, set[StoreMedium]] = {}
        self.requests: dict[str, _Request] = {}
        self.replies: dict[str, int] = {}  # session -> its last reply's tokens
        self.drops: list[str] = []  # sessions the workers have yet to remove
        self.seals: list[tuple[str, int]] = []  # finished turns the workers have yet to seal
        # Sessions with a sealed SSD turn, so a file on disk: one gone has been dropped by a
        # worker that found it damaged (the only way a worker tells: vLLM reports a failed
        # load to the scheduler without saying so to the manager).
        self.on_disk: set[str] = set()
        self.events: list[OffloadingEvent] = []
        self.recorder = TraceRecorder.from_environment(spec.trace, engine=ENGINE)
        # Lookups, stores and reclaimed sessions (the worker counts the loads): vllm:flatcake_*.
        self.metrics = AdapterMetrics(ENGINE)
        register_if_available(self.metrics)
        self.markers: dict[str, str] = {}  # session -> its seal marker (seal_marker)
        self._remove_stale_markers()
        self._index_recovered()

    def _remove_stale_markers(self) -> None:
        # An earlier run's markers name turns that did not survive it (open turns are lost
        # with their worker): left, one would seal a new turn of the same number at once.
        opts = self.spec.options
        prefix = f".n{opts.node}-"
        if not os.path.isdir(opts.directory):
            return  # a first start: the workers create it
        with os.scandir(opts.directory) as entries:
            for e in entries:
                if e.name.startswith(prefix) and e.name.endswith(SEAL_SUFFIX):
                    os.unlink(e.path)

    def _index_recovered(self) -> None:
        """Index what the workers' stores recover from an earlier run: the same files, read
        here without writing (the worker of this rank owns them)."""
        opts = self.spec.options
        found = scan_sessions(opts.directory, node=opts.node, rank=opts.rank)
        now = self.clock()
        per_block = self.spec.config.worker_kv_bytes_per_block
        for session, turns in found.items():
            for tokens, tag in turns:
                keys = unpack_keys(tag)
                if len(keys) != tokens or any(k in self.index for k in keys):
                    break
                self.index.add(session, keys)
                self.ssd.add(session, tokens * per_block, now)
            if session in self.index.sessions:
                self.media[session] = {StoreMedium.SSD}
                self.on_disk.add(session)

    def _session_file(self, session: str) -> str:
        opts = self.spec.options
        return os.path.join(opts.directory, session_file_name(opts.node, opts.rank, session))

    # requests ---------------------------------------------------------------------------
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        p = _params(req_context)
        self.requests[req_context.req_id] = _Request(
            session_id=p.get("session_id"),
            previous_reply_tokens=_optional_int(p.get("previous_reply_tokens")),
            prefix_ref_count=int(p.get("prefix_ref_count", 1)),
        )
        return RequestOffloadingContext()

    def _request(self, req_context: ReqContext) -> _Request:
        r = self.requests.get(req_context.req_id)
        if r is None:
            r = self.requests[req_context.req_id] = _Request(_params(req_context).get("session_id"))
        return r

    def _see(self, r: _Request, keys: Iterable[bytes]) -> None:
        known = set(r.chain)
        r.chain += [k for k in keys if k not in known]

    def on_request_finished(self, req_context: ReqContext) -> None:
        r = self.requests.pop(req_context.req_id, None)
        if r is None:
            return
        self._close_turn(r)
        prompt, total = req_context.num_prompt_tokens, req_context.num_tokens
        reply = None if prompt is None or total is None else max(0, total - prompt)
        stored = [k for k in r.chain if k in self.index]
        if reply is not None and stored:
            self.replies[self.index.where[stored[-1]][0]] = reply
        if self.recorder is not None and r.chain:
            hits = self.index.prefix_hits(r.chain)
            if r.session_id is not None:
                name, source = session_name(r.session_id), SESSION_SOURCE
            elif hits:
                name, source = self.index.where[r.chain[hits - 1]][0], "chained"
            else:
                name, source = self.index.session_for([], r.chain, None)[0], "chained"
            self.recorder.record(
                timestamp_s=self.clock(),
                session_id=name,
                session_source=source,
                keys=r.chain,
                block_size_tokens=self.spec.tokens_per_key,
                input_tokens=prompt,
                output_tokens=reply,
            )

    # lookups and loads ------------------------------------------------------------------
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        self._see(self._request(req_context), [key])
        self.metrics.add("blocks_looked_up")
        if key in self.pending:
            self.metrics.add("blocks_hit")
            return LookupResult.HIT_PENDING
        if key in self.index:
            self.metrics.add("blocks_hit")
            return LookupResult.HIT
        return LookupResult.MISS

    def prepare_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> LoadStoreSpec:
        now = self.clock()
        sessions, blocks = [], []
        wanted: dict[str, list[int]] = {}
        for k in keys:
            name, block = self.index.where[k]
            sessions.append(name)
            blocks.append(block)
            wanted.setdefault(name, []).append(block)
        spans = {s: self.index.turn_span(s, min(b), max(b)) for s, b in wanted.items()}
        for s in spans:  # never reclaimed while a worker reads it
            self.ssd.begin_read(s, now)
            self.host.begin_read(s, now)
        return FlatCakeLoadSpec(sessions, blocks, spans, self._take_drops(), self._take_seals())

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        now = self.clock()
        for s in {self.index.where[k][0] for k in keys if k in self.index}:
            for reclaimer in (self.ssd, self.host):
                if reclaimer.being_read(s):
                    reclaimer.end_read(s, now)
            if s in self.on_disk and not os.path.exists(self._session_file(s)):
                # The worker found it damaged and dropped it: a miss from now on, and the
                # next request's blocks are stored again.
                self._forget(s)

    # stores -----------------------------------------------------------------------------
    def prepare_store(
        self, keys: Collection[OffloadKey], req_context: ReqContext
    ) -> PrepareStoreOutput | None:
        r = self._request(req_context)
        keys = list(keys)
        self._see(r, keys)
        new = [k for k in keys if k not in self.index and k not in self.pending]
        if not new:
            return None
        nbytes = len(new) * self.spec.config.worker_kv_bytes_per_block
        now = self.clock()
        open_turn = r.turn
        if open_turn is not None and open_turn[0] in self.index.sessions:
            # vLLM stores a request's blocks as they complete, step by step: one turn still,
            # placed once (docs/layout.md, section 6, "Whole turns").
            session, turn, medium = open_turn
            indexed = self.index.add(session, new, extend=True)
        else:
            at = r.chain.index(new[0])
            session, _ = self.index.session_for(r.chain[:at], new, r.session_id)
            self._close_open_turn_of(session)
            self._unmark(session)  # the workers sealed it; this spec carries the seal too
            known = self.index.sessions.get(session)
            turn = len(known.turn_ends) if known else 0
            reply = r.previous_reply_tokens
            if reply is None:
                reply = self.replies.get(session)
            medium = self.rule.place(
                PlacementSignals(
                    turn=turn,
                    context_tokens=(at + len(new)) * self.spec.tokens_per_key,
                    previous_reply_tokens=reply if turn else None,
                    prefix_ref_count=r.prefix_ref_count,
                    memory_free_bytes=self.host.free_bytes,
                    bytes_to_write=nbytes,
                )
            ).medium
            r.turn = (session, turn, medium)
            indexed = self.index.add(session, new)
        (self.host if medium == StoreMedium.MEMORY else self.ssd).add(session, nbytes, now)
        self.media.setdefault(session, set()).add(medium)
        self.pending.update(new)
        self.metrics.add("stores")
        self.metrics.observe("segments_per_session", len(indexed.turn_ends))
        spec = FlatCakeStoreSpec(
            session, turn, int(medium), new, self._take_drops(), self._take_seals()
        )
        r.step_store = spec
        return PrepareStoreOutput(keys_to_store=new, store_spec=spec, evicted_keys=[])

    def _close_turn(self, r: _Request) -> None:
        """``r``'s turn is whole: written whole by this step's store of it, if it made one (in
        vLLM not yet sent to the workers when the request finishes), and in any case sealed by
        the workers in this step (seal marker) or at their next transfer (``seals``); sealing a
        sealed turn does nothing."""
        if r.turn is not None:
            session, turn, _ = r.turn
            store = r.step_store
            if store is not None and (store.session, store.turn) == (session, turn):
                store.final = True
            if session in self.index.sessions:
                self.seals.append((session, turn))
                self._mark_sealed(session, turn)
            r.turn = None

    def _mark_sealed(self, session: str, turn: int) -> None:
        """Create the seal marker (seal_marker), so an idle engine's workers seal the turn in
        the step that tells them the request finished, not at the next transfer."""
        self._unmark(session)
        opts = self.spec.options
        path = seal_marker(opts.directory, opts.node, session, turn)
        try:
            with open(path, "a"):
                pass
        except OSError as e:  # the seal still travels with the next transfer
            log.warning("flatcake: cannot create seal marker %s: %s", path, e)
            return
        self.markers[session] = path

    def _unmark(self, session: str) -> None:
        path = self.markers.pop(session, None)
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        # The step's specs go to the workers now: later finishes seal through self.seals.
        for r in self.requests.values():
            r.step_store = None

    def _close_open_turn_of(self, session: str) -> None:
        # A new turn of a session whose last turn's request still runs (a second request of
        # one chat at once): that turn ends here.
        for r in self.requests.values():
            if r.turn is not None and r.turn[0] == session:
                self._close_turn(r)

    def _take_seals(self) -> list[tuple[str, int]]:
        seals, self.seals = self.seals, []
        for session, _ in seals:
            if StoreMedium.SSD in self.media.get(session, ()):
                self.on_disk.add(session)
        return seals

    def complete_store(
        self, keys: Collection[OffloadKey], req_context: ReqContext, success: bool = True
    ) -> None:
        keys = list(keys)
        self.pending.difference_update(keys)
        if not success:
            self.metrics.add("stores_failed")
            # A turn that did not land leaves its session unrestorable past it: drop it whole.
            for s in {self.index.where[k][0] for k in keys if k in self.index}:
                self._drop(s)
            return
        if self.spec.kv_events_config.enable_kv_cache_events:
            self.events.append(OffloadingEvent(keys=keys, medium=Medium.STORAGE, removed=False))
        now = self.clock()
        for reclaimer in (self.ssd, self.host):
            for gone in reclaimer.reclaim(now):
                self._drop(str(gone.session))

    def _drop(self, session: str) -> None:
        self._forget(session)
        self.drops.append(session)

    def _forget(self, session: str) -> None:
        self._unmark(session)
        keys = self.index.forget(session)
        if keys:
            self.metrics.add("sessions_reclaimed")
        self.pending.difference_update(keys)
        self.host.remove(session)
        self.ssd.remove(session)
        self.media.pop(session, None)
        self.on_disk.discard(session)
        self.seals = [seal for seal in self.seals if seal[0] != session]
        for r in self.requests.values():
            if r.turn is not None and r.turn[0] == session:
                r.turn = None
        if keys and self.spec.kv_events_config.enable_kv_cache_events:
            self.events.append(OffloadingEvent(keys=keys, medium=Medium.STORAGE, removed=True))

    def _take_drops(self) -> list[str]:
        drops, self.drops = self.drops, []
        return drops

    def take_events(self) -> Iterable[OffloadingEvent]:
        events, self.events = self.events, []
        return events

    def reset_cache(self) -> None:
        for s in list(self.index.sessions):
            self._drop(s)

    def shutdown(self) -> None:
        for session in list(self.markers):
            self._unmark(session)
        if self.recorder is not None:
            self.recorder.close()


class FlatCakeWorker(OffloadingWorker):
    """The worker-side half: one rank's :class:`..store.FlatStore` (module docstring)."""

    def __init__(self, spec: FlatCakeOffloadingSpec, kv_caches: CanonicalKVCaches) -> None:
        if len(kv_caches.group_data_refs) != 1:
            raise ValueError(
                f"kv_caches: one KV cache group supported; got {len(kv_caches.group_data_refs)}"
            )
        refs = kv_caches.group_data_refs[0]
        page = refs[0].page_size_bytes
        if any(r.page_size_bytes != page for r in refs):
            raise ValueError(
                "kv_caches: every layer's page must be one size; got "
                f"{sorted({r.page_size_bytes for r in refs})}"
            )
        self.page_bytes = page
        # One uint8 [blocks, page] table per layer (padded rows viewed to the page's bytes).
        self.tensors = [kv_caches.tensors[r.tensor_idx].tensor for r in refs]
        self.layers = [t.view(torch.uint8)[:, :page] for t in self.tensors]
        self.device = self.tensors[0].device
        self.clock = Clock()
        opts = self.options = spec.options
        extra = {} if opts.extent_bytes is None else {"extent_bytes": opts.extent_bytes}
        # The manager is the authority on capacity (it places and reclaims); this store only
        # executes, so its own budgets never refuse what the manager decided.
        self.store = FlatStore.open(
            opts.directory,
            page_geometry(ENGINE, len(refs), page),
            block_tokens=1,
            host_bytes=1 << 62,
            ssd_bytes=1 << 62,
            rule=spec.rule,
            now_s=self.clock(),
            node=opts.node,
            rank=opts.rank,
            **extra,
        )
        self.engine: Any = None
        self.engine_note = ""
        if self.device.type == "cuda":
            try:
                self.engine = open_engine("kvikio")
            except EngineUnavailable as e:
                self.engine_note = f"GDS not used, host reads instead: {e}"
                log.warning("flatcake: %s", self.engine_note)
        self.finished: list[TransferResult] = []
        self.turns: dict[str, int] = {}
        self.window_restores = 0  # loads that went through the staging window
        self.host_restores = 0  # loads that went through host memory
        self.metrics = AdapterMetrics(ENGINE)  # loads and bytes (the manager counts lookups)
        register_if_available(self.metrics)

    def _block_ids(self, device_ptrs: DevicePointers) -> np.ndarray:
        n = int(device_ptrs.group_block_counts[0])
        base = self.tensors[0].data_ptr()
        stride = self.tensors[0].stride(0) * self.tensors[0].element_size()
        ids: np.ndarray = ((device_ptrs.ptrs[:n].astype(np.int64) - base) // stride).astype(
            np.int64
        )
        return ids

    def _drop(self, drops: list[str]) -> None:
        now = self.clock()
        for s in drops:
            self.turns.pop(s, None)
            if self.store.turns(s):
                self.store.drop(s, now)

    def _seal(self, seals: list[tuple[str, int]]) -> None:
        now = self.clock()
        for session, turn in seals:
            open_turn = [t for t in self.store.turns(session) if t.turn == turn]
            if open_turn and session in self.store.open_sessions():
                self.store.seal(session, now)
            if self.turns.get(session) == turn:
                del self.turns[session]

    def submit_store(
        self, job_id: int, device_ptrs: DevicePointers, dst_spec: LoadStoreSpec
    ) -> bool:
        assert isinstance(dst_spec, FlatCakeStoreSpec)
        ok = True
        try:
            self._drop(dst_spec.drops)
            self._seal(dst_spec.seals)
            ids = torch.as_tensor(self._block_ids(device_ptrs), device=self.device)
            rows = [layer.index_select(0, ids).reshape(-1) for layer in self.layers]
            kv = torch.stack(rows).cpu().numpy()
            # Open until the manager says the request finished: one segment per turn.
            if dst_spec.final:  # written whole by this call: nothing left to seal
                self.turns.pop(dst_spec.session, None)
            else:
                self.turns[dst_spec.session] = dst_spec.turn  # open: see get_finished
            self.store.write_turn(
                dst_spec.session,
                dst_spec.turn,
                kv,
                tokens=len(dst_spec.keys),
                medium=StoreMedium(dst_spec.medium),
                now_s=self.clock(),
                final=dst_spec.final,
                tag=pack_keys(dst_spec.keys),
            )
            if StoreMedium(dst_spec.medium) == StoreMedium.SSD:
                self.metrics.add("bytes_written", kv.nbytes)
        except Exception:
            log.exception("flatcake: store of session %s failed", dst_spec.session)
            ok = False
        self.finished.append(TransferResult(job_id, ok, len(dst_spec.keys) * self.page_bytes))
        return True

    def submit_load(
        self,
        job_id: int,
        src_spec: LoadStoreSpec,
        device_ptrs: DevicePointers,
        expedited: bool = False,
    ) -> bool:
        assert isinstance(src_spec, FlatCakeLoadSpec)
        ok = True
        t0 = self.clock()
        self.metrics.add("loads")
        try:
            self._drop(src_spec.drops)
            self._seal(src_spec.seals)
            ids = self._block_ids(device_ptrs)
            for session, (start, stop) in src_spec.spans.items():
                mine = [i for i, s in enumerate(src_spec.sessions) if s == session]
                self._load(session, start, stop, [src_spec.blocks[i] for i in mine], ids[mine])
        except Exception:
            log.exception("flatcake: load failed")
            ok = False
            self.metrics.add("loads_failed")
            self.metrics.add("blocks_failed", len(src_spec.blocks))
        else:
            self.metrics.add("blocks_delivered", len(src_spec.blocks))
            self.metrics.observe("load_seconds", self.clock() - t0)
        self.finished.append(TransferResult(job_id, ok, len(src_spec.blocks) * self.page_bytes))
        return True

    def _load(
        self, session: str, start: int, stop: int, blocks: list[int], page_ids: np.ndarray
    ) -> None:
        now = self.clock()
        plan = self.store.plan_restore(session, stop, now_s=now, start_tokens=start)
        if max(blocks) >= start + plan.tokens:
            raise RuntimeError(f"session {session!r}: blocks {start}..{stop} are not all stored")
        self.metrics.add("bytes_read", plan.ssd_read_bytes)
        # The manager's span may end past an open turn's stores not yet run here.
        stop = start + plan.tokens
        if blocks == list(range(start, stop)):
            # Exactly whole turns: straight into the KV tensors through the staging window.
            self.store.restore_to_pages(
                plan, self.layers, torch.as_tensor(page_ids), now_s=now, engine=self.engine
            )
            self.window_restores += 1
            return
        buf = np.empty((len(self.layers), plan.layer_bytes), dtype=np.uint8)
        self.store.restore(plan, buf, now_s=now)
        rows = torch.from_numpy(buf.reshape(len(self.layers), stop - start, self.page_bytes))
        pick = torch.as_tensor([b - start for b in blocks], dtype=torch.long)
        dst = torch.as_tensor(page_ids, dtype=torch.long, device=self.device)
        for layer, table in enumerate(self.layers):
            table.index_copy_(0, dst, rows[layer].index_select(0, pick).to(self.device))
        self.host_restores += 1

    def get_finished(self) -> list[TransferResult]:
        # vLLM calls this every step, including the step that tells the workers a request
        # finished: seal the open turns whose request the manager marked finished. One stat
        # per open turn (one per request decoding here).
        opts = self.options
        for session, turn in list(self.turns.items()):
            if os.path.exists(seal_marker(opts.directory, opts.node, session, turn)):
                self._seal([(session, turn)])
        done, self.finished = self.finished, []
        return done

    def wait(self, job_ids: set[int]) -> None:
        return None  # every transfer completed inside its submit call

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.store.close()


class FlatCakeOffloadingSpec(OffloadingSpec):
    """FlatCake for vLLM's ``OffloadingConnector`` (module docstring).

    ``kv_connector_extra_config``: ``directory`` (or ``$FLATCAKE_DIR``), ``host_bytes``,
    ``ssd_bytes``, ``node``, ``extent_bytes``, ``thresholds`` (a TOML file; else
    ``$FLATCAKE_THRESHOLDS``, else the package's), ``trace`` (else ``$FLATCAKE_TRACE``).
    """

    def __init__(
        self,
        config: OffloadingConfig,
        *,
        rule: PlacementRule | str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(config)
        extra = dict(config.extra_config)
        # vLLM's OffloadingSpec offloads only prompt blocks unless told otherwise
        # (vllm/v1/kv_offload/base.py, 0.34.0: ``offload_prompt_only`` defaults to True, for
        # engines that drop a turn's generated tokens). In a chat the reply is the next turn's
        # prefix, and the design stores turns whole: FlatCake offloads the blocks decode
        # completes too, unless the deployment sets it.
        self.offload_prompt_only = bool(extra.get("offload_prompt_only", False))
        if len(config.groups) != 1:
            raise ValueError(f"groups: one KV cache group supported; got {len(config.groups)}")
        if self.blocks_per_chunk != 1:
            raise ValueError(
                f"blocks_per_chunk: one offloaded block per GPU block supported; got "
                f"{self.blocks_per_chunk}"
            )
        self.options = StoreOptions.from_config(extra, rank=config.parallel.rank)
        self.rule = resolve_rule(rule if rule is not None else extra.get("thresholds"))
        self.trace = extra.get("trace")
        self.tokens_per_key = int(self.tokens_per_block[0])
        self._manager: FlatCakeManager | None = None

    def get_manager(self) -> OffloadingManager:
        if self._manager is None:
            self._manager = FlatCakeManager(self)
        return self._manager

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        return FlatCakeWorker(self, kv_caches)


__all__ = [
    "FlatCakeLoadSpec",
    "FlatCakeManager",
    "FlatCakeOffloadingSpec",
    "FlatCakeStoreSpec",
    "FlatCakeWorker",
]
