"""FlatStore: the engine-facing facade of the core (placement, session files, reclaim, scheduling).

One object an engine opens per serving instance and rank (sizes are one rank's KV). Ranks,
engine processes and nodes may share a directory: a store names its files
``n{node}-r{rank}-<hash>.fccio``, holds ``n{node}-r{rank}.lock`` while open (a second store of
that (node, rank) raises :class:`.errors.StoreBusy`), never replaces a file it did not create
and removes only its own (docs/layout.md, section 6). It ties together what the rest of the
core defines and fcctl's simulator runs:

* :meth:`FlatStore.place` applies :class:`.placement.PlacementRule` to the signals an engine
  has before prefill (turn, context, previous reply, prefix reference count) and the store's
  own free host memory.
* :meth:`FlatStore.write_turn` stores one turn's new KV, ``layers x layer_bytes`` bytes in
  layer order, where the placement said: an SSD turn is appended as one layer-ordered segment
  to the session's FC-CIO file (:class:`.session_file.SessionFile`); a memory turn is kept as
  a host array. Each turn gets one 64-bit block address (:mod:`.address`: medium, node, byte
  offset; the offset is into the session's file on SSD, into the store's host arena in
  memory) and never moves.
* :meth:`FlatStore.plan_restore` / :meth:`FlatStore.restore` (into the caller's buffers) or
  :meth:`FlatStore.restore_to_pages` (into paged GPU KV through the staging window) bring a
  session's history back layer by layer: the SSD turns through one read plan per layer
  (:func:`.planner.plan_reads`: sorted, merged, small gaps read through), the memory turns by
  copy. A restore covers whole
  turns from the session's start; it stops at the first turn that was reclaimed.
* :meth:`FlatStore.reclaim` drops whole sessions per medium at the high watermark
  (:class:`.reclaim.SessionReclaimer`), never one being restored.
* :meth:`FlatStore.submit`, :meth:`FlatStore.start_prefetches`, :meth:`FlatStore.prefetch_done`
  and :meth:`FlatStore.ready` are the two-queue scheduler (:class:`.scheduler.TwoQueueScheduler`).

Every call takes the caller's clock ``now_s`` (seconds, non-decreasing): no threads, no wall
clock, so an engine and a simulator drive the same code. Sizes are bytes, lengths tokens.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .address import MAX_NODE, MEDIUM_MEMORY, MEDIUM_SSD, encode_address
from .buffers import aligned_buffer
from .engines.posix import PosixEngine
from .errors import InputError, SessionFileExists, StoreBusy
from .geometry import KvGeometry
from .placement import Medium, Placement, PlacementRule, PlacementSignals
from .planner import ReadPlan
from .reclaim import DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK, Reclaimed, SessionReclaimer
from .scheduler import TwoQueueScheduler
from .session_file import SessionFile
from .session_format import DEFAULT_EXTENT_BYTES, NAME_BYTES, segment_bytes, turn_blocks
from .staging import StagingWindow, import_torch, kv_view, restore_session

#: Restores in flight at once: two layer buffers per stream, two streams (FlatCake's window).
DEFAULT_PREFETCH_SLOTS = 2
SESSION_SUFFIX = ".fccio"


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        rule = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise InputError(f"{name}: must be an integer {rule}; got {value!r}", parameter=name)
    return value


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


# Lock files this process holds, by (st_dev, st_ino). flock excludes two open file
# descriptions in one process on local file systems, but where it is emulated with POSIX
# record locks (NFS) those are per process and a second store of the same process would get
# the lock too; this registry refuses it there as well.
_HELD: set[tuple[int, int]] = set()
_HELD_GUARD = threading.Lock()


class _RankLock:
    """The exclusive lock of one (node, rank) on a directory: ``n{node}-r{rank}.lock``, held
    with ``flock`` for the store's life, across processes and within one.

    The lock file may be removed (``close(remove=True)``) while held, so a taker checks after
    ``flock`` that the name still leads to the inode it locked; otherwise it locked a removed
    file and tries again on the new one.
    """

    def __init__(self, path: Path, node: int, rank: int) -> None:
        self.path = path
        for _ in range(100):  # each retry means a holder removed the file in between
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:  # removed meanwhile, read-only, not ours to write
                raise InputError(
                    f"directory: cannot create the store's lock file {path.name} there "
                    f"({e.strerror}); got {str(path.parent)!r}",
                    parameter="directory",
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                os.close(fd)
                raise StoreBusy(path.parent, node, rank, holder) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same = _identity(os.stat(path)) == _identity(os.fstat(fd))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            self.identity = _identity(os.fstat(fd))
            with _HELD_GUARD:
                if self.identity in _HELD:
                    os.close(fd)
                    raise StoreBusy(path.parent, node, rank, f"pid {os.getpid()}, this process")
                _HELD.add(self.identity)
            # Who holds it, for the message a refused store gets.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
            # A store dropped without close() still frees its (node, rank) when collected.
            self._unlock = weakref.finalize(self, _unlock, fd, self.identity)
            return
        raise StoreBusy(path.parent, node, rank, "a holder that keeps removing its lock")

    @property
    def held(self) -> bool:
        return self._unlock.alive

    def release(self, *, remove: bool) -> None:
        if not self.held:
            return
        if remove:
            # Unlinked while still held: a later taker finds the name gone or new (see above).
            try:
                if _identity(os.stat(self.path)) == self.identity:
                    self.path.unlink()
            except FileNotFoundError:
                pass
        self._unlock()


def _unlock(fd: int, identity: tuple[int, int]) -> None:
    with _HELD_GUARD:
        _HELD.discard(identity)
    os.close(fd)  # releases the flock


@dataclass(frozen=True)
class StoredTurn:
    """One turn of a session as stored: where it lives (``medium``, 64-bit ``address``) and
    which tokens it holds (``token_start`` .. ``token_start + tokens``)."""

    session: str
    turn: int
    token_start: int
    tokens: int
    medium: Medium
    address: int
    stored_bytes: int  # bytes it takes on its medium (SSD: the whole aligned segment)


@dataclass(frozen=True)
class RestorePlan:
    """What :meth:`FlatStore.restore` reads for ``session``: whole turns from its start.

    ``layer_bytes`` is one layer of the destination (``blocks x bytes_per_block_per_layer``
    of the restored turns, in turn order). ``ssd_plans[l]`` reads layer ``l`` of the SSD turns
    (empty tuple when none is on SSD); ``ssd_read_bytes`` is what those plans read in all
    (alignment and gaps included), ``memory_bytes`` the bytes copied from host memory.
    """

    session: str
    tokens: int
    turns: tuple[StoredTurn, ...]
    layer_bytes: int
    ssd_plans: tuple[ReadPlan, ...]
    ssd_read_bytes: int
    memory_bytes: int

    @property
    def ssd_turns(self) -> tuple[StoredTurn, ...]:
        return tuple(t for t in self.turns if t.medium == Medium.SSD)


class _Session:
    """One session's state: its turns, its file (when a turn went to SSD), its memory turns."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.turns: list[StoredTurn | None] = []  # None: reclaimed
        self.file: SessionFile | None = None
        self.identity: tuple[int, int] | None = None  # the file this store created, if any
        self.file_turn: dict[int, int] = {}  # session turn -> turn index in the file
        self.memory: dict[int, np.ndarray] = {}  # session turn -> (layers, layer_bytes)
        self.tokens = 0


class FlatStore:
    """Per-session flat KV storage on one host-memory and one SSD budget (module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        geometry: KvGeometry,
        *,
        block_tokens: int,
        host_bytes: int,
        ssd_bytes: int,
        rule: PlacementRule | None = None,
        now_s: float,
        node: int = 0,
        rank: int = 0,
        prefetch_slots: int = DEFAULT_PREFETCH_SLOTS,
        high_watermark: float = DEFAULT_HIGH_WATERMARK,
        low_watermark: float = DEFAULT_LOW_WATERMARK,
        extent_bytes: int = DEFAULT_EXTENT_BYTES,
    ) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise InputError(
                f"directory: must be an existing directory; got {str(self.directory)!r}",
                parameter="directory",
            )
        self.geometry = geometry
        self.block_tokens = _check_int("block_tokens", block_tokens, 1)
        self.node = _check_int("node", node, 0, MAX_NODE)
        self.rank = _check_int("rank", rank, 0)
        self.rule = rule or PlacementRule()
        self.extent_bytes = extent_bytes  # session files grow by this much (SessionFile checks)
        self.piece_bytes = geometry.bytes_per_block_per_layer(block_tokens)
        self.memory = SessionReclaimer(
            _check_int("host_bytes", host_bytes, 0),
            high_watermark=high_watermark,
            low_watermark=low_watermark,
        )
        self.ssd = SessionReclaimer(
            _check_int("ssd_bytes", ssd_bytes, 0),
            high_watermark=high_watermark,
            low_watermark=low_watermark,
        )
        self.scheduler = TwoQueueScheduler(prefetch_slots)
        self._sessions: dict[str, _Session] = {}
        self._arena_end = 0  # host arena: memory addresses are bump-allocated, never reused
        self._now = float("-inf")
        self._clock(now_s)
        self._made_directory = False  # open() sets it when it created the directory
        # Last, once every argument checked: from here the store holds its (node, rank).
        self._lock = _RankLock(self.directory / f"{self._prefix}.lock", self.node, self.rank)

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], geometry: KvGeometry, **options: Any
    ) -> FlatStore:
        """Open a store on ``directory`` (created when missing); options as ``__init__``."""
        try:
            Path(directory).mkdir(parents=True)
            made = True
        except FileExistsError:
            made = False
        store = cls(directory, geometry, **options)
        store._made_directory = made
        return store

    @property
    def _prefix(self) -> str:
        return f"n{self.node}-r{self.rank}"

    # clock ------------------------------------------------------------------------------
    def _clock(self, now_s: float) -> None:
        if not isinstance(now_s, int | float) or now_s != now_s:
            raise InputError(
                f"now_s: must be a number of seconds; got {now_s!r}", parameter="now_s"
            )
        if now_s < self._now:
            raise InputError(
                f"now_s: the clock must not go back (last {self._now}); got {now_s!r}",
                parameter="now_s",
            )
        self._now = float(now_s)

    # placement --------------------------------------------------------------------------
    def layer_bytes_for(self, tokens: int) -> int:
        """Bytes of one layer of a turn of ``tokens`` tokens (whole pages)."""
        return turn_blocks(tokens, self.block_tokens) * self.piece_bytes

    def place(
        self,
        *,
        turn: int,
        context_tokens: int,
        previous_reply_tokens: int | None,
        prefix_ref_count: int,
        new_tokens: int,
        now_s: float,
    ) -> Placement:
        """Where a turn writing ``new_tokens`` tokens of KV goes (:mod:`.placement`'s rule);
        ``memory_free_bytes`` is this store's free host memory."""
        self._clock(now_s)
        signals = PlacementSignals(
            turn=turn,
            context_tokens=context_tokens,
            previous_reply_tokens=previous_reply_tokens,
            prefix_ref_count=prefix_ref_count,
            memory_free_bytes=self.memory.free_bytes,
            bytes_to_write=self.layer_bytes_for(new_tokens) * self.geometry.layers,
        )
        return self.rule.place(signals)

    # writes -----------------------------------------------------------------------------
    def _session(self, session: str, create: bool) -> _Session:
        s = self._sessions.get(session)
        if s is None:
            if not create:
                raise InputError(
                    f"session: not in this store; got {session!r}", parameter="session"
                )
            if not isinstance(session, str) or not session:
                raise InputError(
                    f"session: must be a non-empty string; got {session!r}", parameter="session"
                )
            if len(session.encode()) > NAME_BYTES:
                raise InputError(
                    f"session: at most {NAME_BYTES} bytes of UTF-8; got {session!r}",
                    parameter="session",
                )
            s = self._sessions[session] = _Session(session)
        return s

    def session_path(self, session: str) -> Path:
        """The session's file: ``n{node}-r{rank}-`` and a hash of its id (any id is a safe
        file name), so the ranks and nodes sharing a directory never share a file."""
        digest = hashlib.sha256(session.encode()).hexdigest()[:32]
        return self.directory / f"{self._prefix}-{digest}{SESSION_SUFFIX}"

    def _create_file(self, session: str) -> SessionFile:
        path = self.session_path(session)
        try:
            return SessionFile.create(
                path,
                self.geometry,
                block_tokens=self.block_tokens,
                session_id=session,
                extent_bytes=self.extent_bytes,
            )
        except SessionFileExists:
            # Another store's live file or one an earlier run left: either way its committed
            # KV is not this store's to destroy.
            raise InputError(
                f"session: {session!r} already has a session file this store did not create "
                f"({path}); it is never replaced",
                parameter="session",
            ) from None

    def write_turn(
        self, session: str, turn: int, kv: np.ndarray, *, tokens: int, medium: Medium, now_s: float
    ) -> StoredTurn:
        """Store turn ``turn`` (the session's next, 0-based) of ``tokens`` tokens on ``medium``.

        ``kv`` holds the turn's new KV in layer order: ``layers x layer_bytes_for(tokens)``
        bytes (e.g. a ``(layers, layer_bytes)`` uint8 array; the last page's tail is whatever
        the caller supplies). A memory write that does not fit the free host memory is refused:
        :meth:`place` sends such a write to SSD.
        """
        self._clock(now_s)
        if not self._lock.held:
            # Its (node, rank) may belong to another store by now: writing would be a second
            # writer after all.
            raise InputError(
                f"session: node {self.node} rank {self.rank}'s store on {self.directory} is "
                f"closed; got a write of session {session!r} (open a new FlatStore)",
                parameter="session",
            )
        s = self._session(session, create=True)
        if turn != len(s.turns):
            raise InputError(
                f"turn: session {session!r} appends turn {len(s.turns)} next; got {turn!r}",
                parameter="turn",
            )
        _check_int("tokens", tokens, 1)
        layers = self.geometry.layers
        layer_bytes = self.layer_bytes_for(tokens)
        data = np.ascontiguousarray(kv).view(np.uint8).reshape(-1)
        if data.shape[0] != layers * layer_bytes:
            raise InputError(
                f"kv: a turn of {tokens} tokens holds {layers} x {layer_bytes} bytes; got "
                f"{data.shape[0]} bytes",
                parameter="kv",
            )
        rows = data.reshape(layers, layer_bytes)
        if medium == Medium.SSD:
            if s.file is None:
                s.file = self._create_file(session)
                s.identity = s.file.identity
            rec = s.file.append_turn(tokens, rows)
            s.file_turn[turn] = len(s.file.turns) - 1
            stored = segment_bytes(layers, layer_bytes)
            address = encode_address(MEDIUM_SSD, self.node, rec.segment_offset)
            self.ssd.add(session, stored, now_s)
        elif medium == Medium.MEMORY:
            stored = layers * layer_bytes
            if stored > self.memory.free_bytes:
                raise InputError(
                    f"medium: host memory has {self.memory.free_bytes} bytes free; got a "
                    f"memory write of {stored} bytes (place() sends it to SSD)",
                    parameter="medium",
                )
            s.memory[turn] = rows.copy()
            address = encode_address(MEDIUM_MEMORY, self.node, self._arena_end)
            self._arena_end += stored
            self.memory.add(session, stored, now_s)
        else:
            raise InputError(f"medium: must be a Medium; got {medium!r}", parameter="medium")
        record = StoredTurn(session, turn, s.tokens, tokens, Medium(medium), address, stored)
        s.turns.append(record)
        s.tokens += tokens
        return record

    def turns(self, session: str) -> tuple[StoredTurn, ...]:
        """The session's turns still stored, in order."""
        s = self._sessions.get(session)
        return () if s is None else tuple(t for t in s.turns if t is not None)

    # reads ------------------------------------------------------------------------------
    def plan_restore(
        self, session: str, tokens: int, *, now_s: float, start_tokens: int = 0
    ) -> RestorePlan:
        """The restore of the session's first ``tokens`` tokens, in whole turns: every turn
        that ends at or before ``tokens``, up to the first one reclaimed. With
        ``start_tokens`` the turns that end at or before it are left out (an engine that
        holds the session's first ``start_tokens`` tokens already reads only the rest)."""
        self._clock(now_s)
        s = self._session(session, create=False)
        _check_int("tokens", tokens, 0)
        _check_int("start_tokens", start_tokens, 0)
        picked: list[StoredTurn] = []
        for t in s.turns:
            if t is None or t.token_start + t.tokens > tokens:
                break
            if t.token_start + t.tokens > start_tokens:
                picked.append(t)
        ssd_turns = [s.file_turn[t.turn] for t in picked if t.medium == Medium.SSD]
        plans: tuple[ReadPlan, ...] = ()
        if ssd_turns and s.file is not None:
            plans = tuple(s.file.restore_plans(turns=ssd_turns))
        return RestorePlan(
            session=session,
            tokens=sum(t.tokens for t in picked),
            turns=tuple(picked),
            layer_bytes=sum(self.layer_bytes_for(t.tokens) for t in picked),
            ssd_plans=plans,
            ssd_read_bytes=sum(p.bytes_read for p in plans),
            memory_bytes=sum(t.stored_bytes for t in picked if t.medium == Medium.MEMORY),
        )

    def restore(
        self, plan: RestorePlan, out: np.ndarray, *, now_s: float, engine: Any = None
    ) -> int:
        """Fill ``out`` (``(layers, plan.layer_bytes)`` uint8, host memory) layer by layer:
        layer ``l`` holds the plan's turns' layer-``l`` bytes in turn order. SSD layers are
        read by ``engine`` (a :class:`.engines.base.ReadEngine`; a posix engine when none is
        given), which checks every layer's CRC-32. Returns the bytes read from SSD.

        For a restore straight into paged GPU KV use :meth:`restore_to_pages`.
        """
        self._clock(now_s)
        s = self._session(plan.session, create=False)
        layers = self.geometry.layers
        if out.shape != (layers, plan.layer_bytes) or out.dtype != np.uint8:
            raise InputError(
                f"out: must be a uint8 array of shape ({layers}, {plan.layer_bytes}); got "
                f"{out.dtype} {out.shape}",
                parameter="out",
            )
        # Where each turn's bytes go in a destination layer.
        at: dict[int, int] = {}
        pos = 0
        for t in plan.turns:
            at[t.turn] = pos
            pos += self.layer_bytes_for(t.tokens)
        by_file_turn = {s.file_turn[t.turn]: t.turn for t in plan.ssd_turns}
        read = 0
        own_engine = None
        if plan.ssd_plans and engine is None:
            engine = own_engine = PosixEngine(o_direct=False, drop_cache=False)
        self.ssd.begin_read(plan.session, now_s)
        try:
            for layer in range(layers):
                if plan.ssd_plans:
                    lp = plan.ssd_plans[layer]
                    buf = aligned_buffer(lp.buffer_bytes)
                    engine.read(lp, buf)
                    read += lp.bytes_read
                    for extent, offset in lp.placements:
                        file_turn = int(extent.tag[0])  # type: ignore[index]
                        dst = at[by_file_turn[file_turn]]
                        out[layer, dst : dst + extent.length] = buf[offset : offset + extent.length]
                for t in plan.turns:
                    if t.medium == Medium.MEMORY:
                        rows = s.memory[t.turn]
                        out[layer, at[t.turn] : at[t.turn] + rows.shape[1]] = rows[layer]
        finally:
            self.ssd.end_read(plan.session, now_s)
            if own_engine is not None:
                own_engine.close()
        self.memory.touch(plan.session, now_s)
        return read

    def restore_to_pages(
        self,
        plan: RestorePlan,
        kv_cache: Any,
        page_ids: Any,
        *,
        now_s: float,
        engine: Any = None,
        window: StagingWindow | None = None,
        streams: int = 1,
        kv_split: bool | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> int:
        """Restore ``plan`` into an engine's paged KV: block ``i`` of the plan (turn order) goes
        to page ``page_ids[i]`` of every layer of ``kv_cache`` (a torch tensor,
        ``[layers, pages, ...]`` or split ``[layers, 2, pages, ...]``, or a list of per-layer
        ``[pages, page_bytes]`` tensors; one page = one block at one layer; ``kv_split`` as
        :func:`.staging.restore_session`). SSD turns stream through
        the double-buffered staging window (:func:`.staging.restore_session`: GDS with the
        kvikio engine, posix otherwise); memory turns are copied from host memory. Needs torch.
        ``on_layer(l)`` runs once layer ``l`` is complete in ``kv_cache`` (an engine's
        per-layer wait). Returns the bytes read from SSD."""
        self._clock(now_s)
        s = self._session(plan.session, create=False)
        torch = import_torch()
        kv, split, page_bytes = kv_view(torch, kv_cache, kv_split)
        if page_bytes != self.piece_bytes or kv.shape[0] != self.geometry.layers:
            raise InputError(
                f"kv_cache: pages of {self.piece_bytes} bytes over {self.geometry.layers} "
                f"layers expected; got {page_bytes}-byte pages over {kv.shape[0]} layers",
                parameter="kv_cache",
            )
        pages = torch.as_tensor(page_ids, dtype=torch.long).to(kv.device)
        blocks = [self.layer_bytes_for(t.tokens) // self.piece_bytes for t in plan.turns]
        if pages.numel() != sum(blocks):
            raise InputError(
                f"page_ids: the plan restores {sum(blocks)} blocks; got {pages.numel()} page ids",
                parameter="page_ids",
            )
        starts = np.concatenate([[0], np.cumsum(blocks)]).tolist()
        ssd_pages = [
            pages[starts[i] : starts[i + 1]]
            for i, t in enumerate(plan.turns)
            if t.medium == Medium.SSD
        ]
        own_engine = None
        self.ssd.begin_read(plan.session, now_s)
        try:
            if plan.ssd_plans and engine is None:
                engine = own_engine = PosixEngine(o_direct=False, drop_cache=False)
            half = page_bytes // 2

            def copy_memory_turns(layer: int) -> None:
                # Memory turns' pages of this layer, then the layer is whole.
                for i, t in enumerate(plan.turns):
                    if t.medium != Medium.MEMORY:
                        continue
                    idx = pages[starts[i] : starts[i + 1]]
                    row = s.memory[t.turn][layer]
                    src = torch.from_numpy(row).view(-1, page_bytes).to(kv.device)
                    if split:
                        kv[layer][0].index_copy_(0, idx, src[:, :half])
                        kv[layer][1].index_copy_(0, idx, src[:, half:])
                    else:
                        kv[layer].index_copy_(0, idx, src)
                if on_layer is not None:
                    on_layer(layer)

            if plan.ssd_plans:
                restore_session(
                    plan.ssd_plans,
                    engine,
                    kv_cache,
                    torch.cat(ssd_pages),
                    window=window,
                    streams=streams,
                    kv_split=kv_split,
                    on_layer=copy_memory_turns,
                )
            else:
                for layer in range(self.geometry.layers):
                    copy_memory_turns(layer)
        finally:
            self.ssd.end_read(plan.session, now_s)
            if own_engine is not None:
                own_engine.close()
        self.memory.touch(plan.session, now_s)
        return plan.ssd_read_bytes

    # reclamation ------------------------------------------------------------------------
    def reclaim(self, now_s: float) -> tuple[Reclaimed, ...]:
        """Above a medium's high watermark, drop whole sessions' parts on that medium (least
        recently active first, none being restored) down to its low watermark."""
        self._clock(now_s)
        dropped = []
        for r in self.ssd.reclaim(now_s):
            s = self._sessions[str(r.session)]
            self._drop_file(s, remove=True)
            for turn in s.file_turn:
                s.turns[turn] = None
            s.file_turn.clear()
            dropped.append(r)
        for r in self.memory.reclaim(now_s):
            s = self._sessions[str(r.session)]
            for turn in s.memory:
                s.turns[turn] = None
            s.memory.clear()
            dropped.append(r)
        return tuple(dropped)

    def drop(self, session: str, now_s: float) -> int:
        """Remove ``session`` whole, whatever the watermark (an engine's own eviction decision,
        made where this store's reclaimer does not run): its file deleted, its memory turns
        freed; the name may start again at turn 0. Refused while a restore of it runs. Returns
        the bytes freed on both media."""
        self._clock(now_s)
        s = self._session(session, create=False)
        if self.ssd.being_read(session):
            raise InputError(
                f"session: {session!r} is being restored; it cannot be dropped now",
                parameter="session",
            )
        freed = self.ssd.remove(session) + self.memory.remove(session)
        self._drop_file(s, remove=True)
        del self._sessions[session]
        return freed

    # scheduling -------------------------------------------------------------------------
    def submit(self, request: Hashable, *, arrival_s: float, ssd_bytes: int, now_s: float) -> None:
        """A request arrived needing ``ssd_bytes`` of its history from SSD (0: none)."""
        self._clock(now_s)
        self.scheduler.submit(request, arrival_s, ssd_bytes, now_s)

    def start_prefetches(self, now_s: float) -> list[Hashable]:
        """The requests whose SSD restore the engine starts now (the window permitting)."""
        self._clock(now_s)
        return self.scheduler.start_prefetches(now_s)

    def prefetch_done(self, request: Hashable, now_s: float) -> None:
        """``request``'s SSD restore finished: it joins the ready queue by arrival time."""
        self._clock(now_s)
        self.scheduler.prefetch_done(request, now_s)

    def ready(self, now_s: float) -> list[Hashable]:
        """Every request ready to prefill now, in the order to run them."""
        self._clock(now_s)
        out = []
        while (r := self.scheduler.pop_ready(now_s)) is not None:
            out.append(r)
        return out

    # lifetime ---------------------------------------------------------------------------
    def _drop_file(self, s: _Session, *, remove: bool) -> None:
        """Close the session's file; with ``remove`` delete it, but only while its name still
        leads to the file this store created: a file someone put in its place is theirs."""
        if s.file is None:
            return
        path = s.file.path
        s.file.close()
        s.file = None
        if remove and s.identity is not None:
            try:
                if _identity(os.stat(path)) == s.identity:
                    path.unlink()
            except FileNotFoundError:
                pass
        if remove:
            s.identity = None

    def close(self, *, remove: bool = False) -> None:
        """Close every session file and give up the (node, rank); with ``remove`` delete the
        files this store created (never another's) and its lock file, and the directory when
        :meth:`open` created it and nothing else is left in it."""
        for s in self._sessions.values():
            self._drop_file(s, remove=remove)
        self._lock.release(remove=remove)
        if remove and self._made_directory:
            try:
                self.directory.rmdir()  # only when empty: other stores' files stay
            except OSError:
                pass

    def __enter__(self) -> FlatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
