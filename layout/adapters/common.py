"""What the engine adapters share: block keys to sessions, placement, FC-CIO writes, restores.

Engines key KV by prefix block hashes and know nothing of sessions. :class:`KeyIndex` maps each
stored block key to ``(session, block)`` and decides, at write time, which session a write
extends (:meth:`KeyIndex.session_for`):

1. the session id the engine's side channel carries (vLLM ``kv_transfer_params``, SGLang
   ``extra_info``, LMCache ``cache_salt``), when one arrives;
2. otherwise (**the fallback**) the session of the last stored block of the request's prefix
   chain, when that block is the last one its session holds (the request continues the
   session: a next turn whose prompt repeats the previous turn's prompt, reply and new input);
3. otherwise a new session named ``h-`` and the first new block's key, so a prompt that
   shares only a system prompt with another starts a session of its own.

:class:`SessionKV` is the single-process part (SGLang, LMCache): one :class:`..store.FlatStore`
whose *token* is one engine page (``block_tokens=1``; a page is ``layers x layer_page_bytes``
bytes), so a write of ``n`` new pages is one turn of ``n`` "tokens" appended to the session's
FC-CIO file (or kept in host memory) where :meth:`..store.FlatStore.place` puts it with the
emitted thresholds, and a load is one coalesced restore per session
(:meth:`..store.FlatStore.plan_restore` with ``start_tokens``: only the turns that hold the
requested pages). Reclamation is the core's (whole sessions at the watermark); a session the
store reclaims on either medium is dropped whole and its keys forgotten, so a lookup never
promises a page the store no longer has.

Placement signals: ``context_tokens`` is the prefix chain's length in engine tokens;
``previous_reply_tokens`` comes from the side channel (or, in vLLM, from the request's own
token counts when it finished), else ``None``, which the rule treats as a first turn (SSD);
``prefix_ref_count`` from the side channel, else 1.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..alignment import PAGE_BYTES
from ..buffers import aligned_buffer
from ..checksum import crc32, crc32_combine
from ..engines.base import describe_extent
from ..errors import CorruptSessionFile, InputError, VerificationError
from ..geometry import KvGeometry
from ..placement import Medium, Placement, PlacementRule
from ..rule_file import resolve_rule
from ..session_format import NAME_BYTES
from ..store import FlatStore, StoredTurn
from .metrics import AdapterMetrics, register_if_available
from .trace import TraceRecorder

#: Session sources, as trace records name them.
FALLBACK_SOURCE = "chained"


def key_hex(key: Hashable) -> str:
    """A block key as hex (bytes as they are; other keys by their text)."""
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key).hex()
    return str(key).encode().hex()


def session_name(session_id: object) -> str:
    """A side-channel session id as a store session name (at most 64 bytes of UTF-8)."""
    text = str(session_id)
    if len(text.encode()) <= NAME_BYTES:
        return text
    return "id-" + hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass
class IndexedSession:
    """One session as the index knows it: its block keys in stored order, where each turn
    ends (blocks), and the previous reply's length when the engine told it."""

    name: str
    keys: list[Hashable] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    previous_reply_tokens: int | None = None


class KeyIndex:
    """Block key -> (session, block); the write-time session rule (module docstring)."""

    def __init__(self) -> None:
        self.where: dict[Hashable, tuple[str, int]] = {}
        self.sessions: dict[str, IndexedSession] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self.where

    def prefix_hits(self, keys: Sequence[Hashable]) -> int:
        """How many of ``keys``, from the first, are stored."""
        n = 0
        for k in keys:
            if k not in self.where:
                break
            n += 1
        return n

    def session_for(
        self,
        prefix: Sequence[Hashable],
        new_keys: Sequence[Hashable],
        session_id: object | None,
    ) -> tuple[str, str | None]:
        """``(session, None)`` for a side-channel id, else ``(session, "chained")``."""
        if session_id is not None and str(session_id):
            return session_name(session_id), None
        for k in reversed(prefix):
            found = self.where.get(k)
            if found is None:
                continue
            name, block = found
            if block == len(self.sessions[name].keys) - 1:
                return name, FALLBACK_SOURCE
            break
        return "h-" + key_hex(new_keys[0])[:40], FALLBACK_SOURCE

    def add(
        self, session: str, keys: Sequence[Hashable], *, extend: bool = False
    ) -> IndexedSession:
        """Record a turn of ``keys`` appended to ``session`` (with ``extend``, more keys of its
        last turn: an engine that stores one turn in pieces)."""
        s = self.sessions.setdefault(session, IndexedSession(session))
        for k in keys:
            self.where[k] = (session, len(s.keys))
            s.keys.append(k)
        if extend and s.turn_ends:
            s.turn_ends[-1] = len(s.keys)
        else:
            s.turn_ends.append(len(s.keys))
        return s

    def forget(self, session: str) -> list[Hashable]:
        """Drop ``session``; the keys it held."""
        s = self.sessions.pop(session, None)
        if s is None:
            return []
        for k in s.keys:
            self.where.pop(k, None)
        return s.keys

    def turn_span(self, session: str, first_block: int, last_block: int) -> tuple[int, int]:
        """``(start, end)`` in blocks of the whole turns holding blocks ``first..last``."""
        ends = self.sessions[session].turn_ends
        start = 0
        for end in ends:
            if end > first_block:
                break
            start = end
        stop = next(end for end in ends if end > last_block)
        return start, stop


def pack_keys(keys: Sequence[Hashable]) -> bytes:
    """Block keys as a turn's tag (:meth:`..store.FlatStore.write_turn`), so a restart can look
    them up again: each key ``bytes`` or ``str``, length-prefixed; two packed runs joined are
    the packing of both."""
    out = bytearray()
    for k in keys:
        if isinstance(k, bytes | bytearray):
            kind, raw = 0, bytes(k)
        elif isinstance(k, str):
            kind, raw = 1, k.encode()
        else:
            raise TypeError(f"keys: bytes or str keys can be kept on disk; got {type(k).__name__}")
        out += kind.to_bytes(1, "little") + len(raw).to_bytes(4, "little") + raw
    return bytes(out)


def unpack_keys(tag: bytes) -> list[Hashable]:
    """The keys :func:`pack_keys` packed (a damaged tag: the keys before the damage)."""
    keys: list[Hashable] = []
    at = 0
    while at + 5 <= len(tag):
        kind, length = tag[at], int.from_bytes(tag[at + 1 : at + 5], "little")
        raw = tag[at + 5 : at + 5 + length]
        if len(raw) != length or kind not in (0, 1):
            break
        keys.append(raw if kind == 0 else raw.decode())
        at += 5 + length
    return keys


@dataclass(frozen=True)
class KeyCodec:
    """How an adapter keeps a turn's block keys on disk: ``pack(keys) -> bytes`` (joining two
    packed runs packs both) and ``unpack(bytes) -> keys``."""

    pack: Callable[[Sequence[Hashable]], bytes]
    unpack: Callable[[bytes], list[Hashable]]


class Clock:
    """The engine's clock for the core: monotonic seconds, never going back."""

    def __init__(self) -> None:
        self._last = 0.0
        self._origin = time.monotonic()

    def __call__(self) -> float:
        self._last = max(self._last, time.monotonic() - self._origin)
        return self._last


@dataclass(frozen=True)
class StoreOptions:
    """Where and how big: ``directory`` (created when missing), host and SSD budgets in bytes,
    this process's ``node`` and ``rank`` (each rank its own files, docs/layout.md section 6)."""

    directory: str
    host_bytes: int
    ssd_bytes: int
    node: int = 0
    rank: int = 0
    extent_bytes: int | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any], *, rank: int = 0) -> StoreOptions:
        """From an engine's config dict: ``directory`` (or ``$FLATCAKE_DIR``), ``host_bytes``,
        ``ssd_bytes``, ``node``, ``rank`` (default: the engine's), ``extent_bytes``."""
        directory = config.get("directory") or os.environ.get("FLATCAKE_DIR")
        if not directory:
            raise ValueError(
                "directory: the FlatCake store needs a directory (config 'directory' or "
                "$FLATCAKE_DIR); got none"
            )
        extent = config.get("extent_bytes")
        return cls(
            directory=str(directory),
            host_bytes=int(config.get("host_bytes", 4 << 30)),
            ssd_bytes=int(config.get("ssd_bytes", 256 << 30)),
            node=int(config.get("node", 0)),
            rank=int(config.get("rank", rank)),
            extent_bytes=None if extent is None else int(extent),
        )


def page_geometry(name: str, layers: int, layer_page_bytes: int) -> KvGeometry:
    """A geometry whose one "token" is one engine page: ``layer_page_bytes`` per layer."""
    return KvGeometry(
        name, layers=layers, kv_heads=1, head_dim=1, dtype_bytes=1, latent_dim=layer_page_bytes
    )


#: A read command's size: large enough to stream, small enough to spread a session over threads.
READ_COMMAND_BYTES = 8 << 20
#: Buffers per ``preadv`` (Linux's IOV_MAX is 1024).
MAX_IOVECS = 512
READ_THREADS = 8
#: Warm staging buffers kept for the next turns' writes (module docstring of _Staging).
STAGING_BUFFERS = 2

log = logging.getLogger(__name__)


def page_layers(
    pieces: Sequence[np.ndarray], layers: int, layer_page_bytes: int
) -> list[list[np.ndarray]]:
    """One page's bytes, given as contiguous ``pieces`` whose concatenation is the page in
    (layer, byte) order, cut at the layer boundaries: for each layer, the views holding its
    bytes (fewer than ``layer_page_bytes`` in all when the page is short: its tail is
    padding). Views, never copies."""
    out: list[list[np.ndarray]] = [[] for _ in range(layers)]
    layer, room = 0, layer_page_bytes
    for piece in pieces:
        flat = piece.reshape(-1).view(np.uint8)
        at = 0
        while at < flat.size:
            if layer == layers:
                total = sum(int(p.nbytes) for p in pieces)
                raise InputError(
                    f"pages: a page holds at most {layers} x {layer_page_bytes} bytes; got {total}",
                    parameter="pages",
                )
            n = min(room, flat.size - at)
            out[layer].append(flat[at : at + n])
            at += n
            room -= n
            if room == 0:
                layer, room = layer + 1, layer_page_bytes
    return out


class _Staging:
    """Reused buffers for the turns being written.

    A turn is written from one layer-ordered array, gathered from the engine's pages in one
    copy. Fresh memory costs its first-touch page faults (0.24-0.31 GB/s on the test machine,
    against 3-4 GB/s for a copy into warm memory), so the writer keeps buffers it used and
    reuses the smallest that fits: as many as were ever in use at once (one where the writer
    gathers; two where a turn is gathered at submit while the last one is written, as
    SGLang's and LMCache's adapters do), at most ``STAGING_BUFFERS``.
    """

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._out = 0  # buffers taken and not given back
        self._peak = 1  # the most ever taken at once

    def take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            self._out += 1
            self._peak = max(self._peak, self._out)
            fits = [b for b in self._free if b.nbytes >= nbytes]
            if fits:
                buf = min(fits, key=lambda b: b.nbytes)
                self._free = [b for b in self._free if b is not buf]
                return buf[:nbytes]
        return np.empty(nbytes, dtype=np.uint8)

    def give(self, buf: np.ndarray) -> None:
        base = buf.base if isinstance(buf.base, np.ndarray) else buf
        with self._lock:
            self._out -= 1
            self._free.append(base)
            self._free.sort(key=lambda b: b.nbytes)
            del self._free[: -min(self._peak, STAGING_BUFFERS)]

    @property
    def retained_bytes(self) -> int:
        with self._lock:
            return sum(int(b.nbytes) for b in self._free)


@dataclass
class _WriteJob:
    """A turn submitted and not yet written: its index entry is reserved (``indexed``, the
    session object the job extends: when the session was dropped meanwhile, the job is too)."""

    session: str
    indexed: IndexedSession
    turn: int
    keys: list[Hashable]
    context_tokens: int
    previous_reply_tokens: int | None
    prefix_ref_count: int
    tag: bytes = b""  # the keys as kept on disk, packed at submit (the codec's state is then)
    rows: np.ndarray | None = None  # the layer-ordered turn, once gathered
    sources: list[Sequence[np.ndarray]] | None = None  # the engine's pages, until gathered
    release: Callable[[], None] | None = None  # the engine's buffers may be reused after it
    on_written: Callable[[], None] | None = None  # the turn is on its medium
    done: threading.Event = field(default_factory=threading.Event)
    stored: StoredTurn | None = None
    error: BaseException | None = None
    # Guards rows / sources / finished between the writer and readers served from the job.
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: bool = False  # written, failed or cancelled: no longer served from here

    def page(self, position: int, layers: int) -> list[np.ndarray]:
        """The job's page at ``position`` as pieces in (layer, byte) order (hold ``lock``)."""
        if self.rows is not None:
            rows = self.rows.reshape(layers, len(self.keys), -1)
            return [rows[layer, position] for layer in range(layers)]
        assert self.sources is not None
        return list(self.sources[position])


def copy_pieces(source: Sequence[np.ndarray], dest: Sequence[np.ndarray]) -> None:
    """Copy the byte stream of ``source`` views into the ``dest`` views, as far as both go
    (a shorter source leaves zeros: a short page's padding)."""
    src = [s.reshape(-1).view(np.uint8) for s in source]
    si, so = 0, 0
    for d in dest:
        flat = d.reshape(-1).view(np.uint8)
        at = 0
        while at < flat.size:
            if si == len(src):
                flat[at:] = 0
                break
            n = min(flat.size - at, src[si].size - so)
            flat[at : at + n] = src[si][so : so + n]
            at += n
            so += n
            if so == src[si].size:
                si, so = si + 1, 0


class SessionKV:
    """One rank's FlatCake store behind an engine's page keys (module docstring).

    ``layers`` x ``layer_page_bytes`` is one engine page; pages go in and come out as
    ``(n, layers, layer_page_bytes)`` uint8 arrays, or as lists of views of the engine's own
    buffers (:meth:`submit_write`, :meth:`read_into`). ``tokens_per_key`` is the engine's tokens
    per page (placement signals and trace records count tokens). ``rule``: a
    :class:`..placement.PlacementRule` or a thresholds file (else ``$FLATCAKE_THRESHOLDS``,
    else the package's ``thresholds.toml``). ``trace``: a JSON Lines path (else
    ``$FLATCAKE_TRACE``). ``metrics``: where to count (:mod:`.metrics`; default a new one,
    exported when prometheus_client is installed). ``key_codec``: how each turn's keys are kept
    in its tag for a restart (default :func:`pack_keys`). Thread-safe (engines call storage from
    their own threads).

    Writes submitted with :meth:`submit_write` are written by this object's own writer thread,
    in submission order; until a turn is on disk its pages are a miss to lookups and reads
    (never other bytes), and a write that fails drops its session, is logged at error and
    counted (``stores_failed``), and is returned by the next :meth:`take_write_failures`.
    **Committed** (survives ``kill -9`` and restores after a restart) is an SSD turn whose
    ``on_written`` ran (LMCache's ``on_complete_callback``), whose :meth:`write` returned, or
    that :meth:`flush` or :meth:`close` waited for: its tag record and segment are
    fdatasynced by then. A turn submitted and not yet written is served from its buffers but
    lost with the process; host-memory turns never outlive it.
    Two locks: ``lock`` guards the index (lookups never wait for I/O), ``store_lock`` the
    store (a read waits for a turn being written, and the other way round).
    """

    def __init__(
        self,
        options: StoreOptions,
        *,
        engine: str,
        layers: int,
        layer_page_bytes: int,
        tokens_per_key: int,
        rule: PlacementRule | str | os.PathLike[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
        metrics: AdapterMetrics | None = None,
        key_codec: KeyCodec | None = None,
    ) -> None:
        self.engine = engine
        self.key_codec = key_codec or KeyCodec(pack_keys, unpack_keys)
        self.damaged = 0  # reads that failed verification: each a miss, its session dropped
        self.layers = layers
        self.layer_page_bytes = layer_page_bytes
        self.tokens_per_key = tokens_per_key
        self.rule = resolve_rule(rule)
        self.clock = Clock()
        extra = {} if options.extent_bytes is None else {"extent_bytes": options.extent_bytes}
        self.store = FlatStore.open(
            Path(options.directory),
            page_geometry(engine, layers, layer_page_bytes),
            block_tokens=1,
            host_bytes=options.host_bytes,
            ssd_bytes=options.ssd_bytes,
            rule=self.rule,
            now_s=self.clock(),
            node=options.node,
            rank=options.rank,
            **extra,
        )
        self.index = KeyIndex()
        self.recorder = TraceRecorder.from_environment(trace, engine=engine)
        self.metrics = AdapterMetrics(engine) if metrics is None else metrics
        register_if_available(self.metrics)  # the engines run prometheus_client
        self.lock = threading.RLock()
        self.store_lock = threading.RLock()
        self.placements: list[Placement] = []  # every write's decision, in order
        # Keys submitted and not yet on their medium: the job and the page's position in it
        # (a read of them is served from the job's buffers).
        self.pending: dict[Hashable, tuple[_WriteJob, int]] = {}
        self._jobs: queue.SimpleQueue[_WriteJob | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._in_flight = 0
        self._idle = threading.Condition(self.lock)
        self._failures: list[str] = []
        self._staging = _Staging()
        self._reader = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="flatcake-read")
        # Read commands so far: O_DIRECT into the engine's buffers, or through the page cache.
        self.direct_commands = 0
        self.buffered_commands = 0
        self._index_recovered()

    def _index_recovered(self) -> None:
        """Index what the store recovered from an earlier run, by the keys kept in each turn's
        tag. A session with a turn whose keys cannot be read (another codec's, or keys
        already indexed) is dropped whole: its turns could not all be looked up, and the next
        write would not follow them."""
        now = self.clock()
        for session in self.store.sessions():
            turns = [
                self.key_codec.unpack(self.store.tag(session, t.turn))
                for t in self.store.turns(session)
            ]
            keys = [k for turn in turns for k in turn]
            readable = all(
                len(k) == t.tokens for k, t in zip(turns, self.store.turns(session), strict=True)
            )
            if not readable or len(set(keys)) != len(keys) or any(k in self.index for k in keys):
                self.store.drop(session, now)
                continue
            for turn_keys in turns:
                self.index.add(session, turn_keys)

    # lookups ----------------------------------------------------------------------------
    def lookup(self, keys: Sequence[Hashable], *, count: bool = True) -> int:
        """How many of ``keys``, from the first, this store holds (a page still being written
        counts: a read of it is served from the write's buffer). ``count``: add to the lookup
        metrics (an engine's own lookup; ``False`` for an adapter's check inside a load)."""
        with self.lock:
            n = self.index.prefix_hits(keys)
        if count:
            self.metrics.add("blocks_looked_up", len(keys))
            self.metrics.add("blocks_hit", n)
        return n

    # writes -----------------------------------------------------------------------------
    def write(
        self,
        keys: Sequence[Hashable],
        pages: np.ndarray,
        *,
        prefix: Sequence[Hashable] = (),
        session_id: object | None = None,
        previous_reply_tokens: int | None = None,
        prefix_ref_count: int = 1,
    ) -> StoredTurn | None:
        """Store ``pages[i]`` (``(layers, layer_page_bytes)`` bytes) under ``keys[i]`` and wait
        until it is on its medium; keys already stored are skipped (a prefix's pages are
        written once). ``prefix``: the chain's keys before ``keys``. Returns the turn written,
        or ``None`` when nothing was new. A failed write raises."""
        data = np.ascontiguousarray(pages).view(np.uint8)
        data = data.reshape(len(keys), self.layers, self.layer_page_bytes)
        job = self._reserve(keys, prefix, session_id, previous_reply_tokens, prefix_ref_count)
        if job is None:
            return None
        fresh = set(job.keys)
        new = [data[i] for i, k in enumerate(keys) if k in fresh]
        job.rows = self._gather_pages(new)
        self._publish(job)
        job.done.wait()
        if job.error is not None:
            self.take_write_failures()  # reported here, raised below
            raise job.error
        return job.stored

    def submit_write(
        self,
        keys: Sequence[Hashable],
        pages: Sequence[Sequence[np.ndarray]],
        *,
        prefix: Sequence[Hashable] = (),
        session_id: object | None = None,
        previous_reply_tokens: int | None = None,
        prefix_ref_count: int = 1,
        copy_now: bool = True,
        release: Callable[[], None] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> bool:
        """Submit one turn: ``pages[i]`` (contiguous uint8 views whose concatenation is page
        ``i`` in (layer, byte) order; a short page is padded) under ``keys[i]``. Returns at once
        (``False`` when nothing was new); the writer thread writes it. ``copy_now``: gather the
        pages now (the engine reuses its buffers when this returns); else the writer gathers
        them and then calls ``release`` (the engine keeps the buffers until then: only for an
        engine that can never free them before ``release``, whatever else it closes; LMCache's
        allocator can, so its adapter copies now). ``on_written`` runs in the writer thread
        once the turn is on its medium."""
        self._report_failures()
        job = self._reserve(keys, prefix, session_id, previous_reply_tokens, prefix_ref_count)
        if job is None:
            if release is not None:
                release()
            return False
        fresh = set(job.keys)
        new = [pages[i] for i, k in enumerate(keys) if k in fresh]
        job.on_written = on_written
        if copy_now:
            job.rows = self._gather_pieces(new)
            if release is not None:
                release()
        else:
            job.sources = new
            job.release = release
        self._publish(job)
        return True

    def _reserve(
        self,
        keys: Sequence[Hashable],
        prefix: Sequence[Hashable],
        session_id: object | None,
        previous_reply_tokens: int | None,
        prefix_ref_count: int,
    ) -> _WriteJob | None:
        """Decide the turn's session now (the index holds every submitted turn, so the next
        turn chains on this one) and reserve its keys; ``None`` when no key is new."""
        with self.lock:
            new = [i for i, k in enumerate(keys) if k not in self.index]
            if not new:
                return None
            chain = [*prefix, *keys[: new[0]]]
            new_keys = [keys[i] for i in new]
            session, _ = self.index.session_for(chain, new_keys, session_id)
            known = self.index.sessions.get(session)
            turn = len(known.turn_ends) if known else 0
            reply = previous_reply_tokens
            if reply is None and known is not None:
                reply = known.previous_reply_tokens
            indexed = self.index.add(session, new_keys)
            self._in_flight += 1
        self.metrics.add("stores")
        self.metrics.observe("segments_per_session", len(indexed.turn_ends))
        return _WriteJob(
            session=session,
            indexed=indexed,
            turn=turn,
            keys=new_keys,
            context_tokens=(len(chain) + len(new_keys)) * self.tokens_per_key,
            previous_reply_tokens=reply if turn else None,
            prefix_ref_count=prefix_ref_count,
            tag=self._tag(new_keys),
        )

    def _publish(self, job: _WriteJob) -> None:
        """Make the job's pages readable from its buffers, then queue it for the writer."""
        with self.lock:
            if self._current(job):
                for position, key in enumerate(job.keys):
                    self.pending[key] = (job, position)
        self._enqueue(job)

    def _rows_view(self, buf: np.ndarray, n: int) -> np.ndarray:
        return buf.reshape(self.layers, n, self.layer_page_bytes)

    def _gather_pages(self, pages: list[np.ndarray]) -> np.ndarray:
        """``(layers, n * layer_page_bytes)`` layer-ordered rows from whole pages, one copy."""
        buf = self._staging.take(len(pages) * self.layers * self.layer_page_bytes)
        rows = self._rows_view(buf, len(pages))
        for j, page in enumerate(pages):
            rows[:, j] = page
        return buf

    def _gather_pieces(self, pages: list[Sequence[np.ndarray]]) -> np.ndarray:
        buf = self._staging.take(len(pages) * self.layers * self.layer_page_bytes)
        self._fill_pieces(buf, pages)
        return buf

    def _fill_pieces(self, buf: np.ndarray, pages: list[Sequence[np.ndarray]]) -> None:
        rows = self._rows_view(buf, len(pages))
        for j, pieces in enumerate(pages):
            for layer, views in enumerate(page_layers(pieces, self.layers, self.layer_page_bytes)):
                at = 0
                for v in views:
                    rows[layer, j, at : at + v.size] = v
                    at += v.size
                if at < self.layer_page_bytes:
                    rows[layer, j, at:] = 0  # a short page's padding

    def _enqueue(self, job: _WriteJob) -> None:
        with self.lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name=f"flatcake-{self.engine}-writer", daemon=True
                )
                self._writer.start()
        self._jobs.put(job)

    def _write_loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._write_job(job)
            except BaseException as e:  # every failure is the engine's to hear
                job.error = e
                self._failed(job, e)
            finally:
                with self.lock:
                    for key in job.keys:
                        if self.pending.get(key, (None, 0))[0] is job:
                            del self.pending[key]
                with job.lock:  # from here no reader copies from the job's buffers
                    job.finished = True
                    rows, job.rows, job.sources = job.rows, None, None
                if rows is not None:
                    self._staging.give(rows)
                with self.lock:
                    self._in_flight -= 1
                    self._idle.notify_all()
                job.done.set()

    def _current(self, job: _WriteJob) -> bool:
        return self.index.sessions.get(job.session) is job.indexed

    def _write_job(self, job: _WriteJob) -> None:
        with self.lock:
            current = self._current(job)
        if not current:  # its session was dropped meanwhile: nothing to write
            if job.release is not None:
                job.release()
            self.metrics.add("stores_failed")
            return
        if job.rows is None:
            rows = self._staging.take(len(job.keys) * self.layers * self.layer_page_bytes)
            assert job.sources is not None
            try:
                self._fill_pieces(rows, job.sources)
            except BaseException:
                self._staging.give(rows)
                raise
            with job.lock:  # readers switch from the engine's buffers to the rows
                job.rows, job.sources = rows, None
            if job.release is not None:
                job.release()
        kv = job.rows.reshape(self.layers, -1)
        with self.store_lock:
            now = self.clock()
            placement = self.store.place(
                turn=job.turn,
                context_tokens=job.context_tokens,
                previous_reply_tokens=job.previous_reply_tokens,
                prefix_ref_count=job.prefix_ref_count,
                new_tokens=len(job.keys),
                now_s=now,
            )
            job.stored = self.store.write_turn(
                job.session,
                job.turn,
                kv,
                tokens=len(job.keys),
                medium=placement.medium,
                now_s=now,
                tag=job.tag,
            )
            reclaimed = [str(r.session) for r in self.store.reclaim(now)]
        with self.lock:
            self.placements.append(placement)
        if placement.medium == Medium.SSD:
            self.metrics.add("bytes_written", kv.nbytes)
        if job.on_written is not None:
            job.on_written()
        for session in dict.fromkeys(reclaimed):
            self.evict_session(session)

    def _failed(self, job: _WriteJob, error: BaseException) -> None:
        if job.sources is not None and job.release is not None:
            job.release()  # never gathered: the engine gets its buffers back
        message = (
            f"session {job.session!r} turn {job.turn}: the write of {len(job.keys)} pages "
            f"failed ({type(error).__name__}: {error}); the session was dropped"
        )
        self.metrics.add("stores_failed")
        with self.lock:
            self._failures.append(message)
        if self._current(job):
            self.evict_session(job.session)

    def _report_failures(self) -> None:
        for message in self.take_write_failures():
            log.error("FlatCake %s store: %s", self.engine, message)

    def take_write_failures(self) -> list[str]:
        """The background writes that failed since the last call (one message each)."""
        with self.lock:
            out, self._failures = self._failures, []
        return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted turn is written (or failed); ``False`` on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout_s)

    def _tag(self, keys: Sequence[Hashable]) -> bytes:
        try:
            return self.key_codec.pack(keys)
        except TypeError:
            return b""  # keys this codec cannot keep: served now, not after a restart

    def set_previous_reply(self, session_id: object, reply_tokens: int) -> None:
        """The engine told a session's last reply length: the next write's placement signal."""
        with self.lock:
            s = self.index.sessions.get(session_name(session_id))
            if s is not None:
                s.previous_reply_tokens = int(reply_tokens)

    # reads ------------------------------------------------------------------------------
    def read(self, keys: Sequence[Hashable]) -> np.ndarray | None:
        """The pages of ``keys`` as ``(n, layers, layer_page_bytes)`` uint8, or ``None`` when
        one of them is not stored (:meth:`read_into` into a new array)."""
        out = np.empty((len(keys), self.layers, self.layer_page_bytes), dtype=np.uint8)
        return out if self.read_into(keys, [[page.reshape(-1)] for page in out]) else None

    def read_into(self, keys: Sequence[Hashable], pages: Sequence[Sequence[np.ndarray]]) -> bool:
        """Restore the pages of ``keys`` straight into ``pages[i]`` (writable contiguous uint8
        views whose concatenation is page ``i`` in (layer, byte) order; a short one gets the
        page's head). ``False``, with nothing promised about ``pages``, when one key is not
        stored. One coalesced restore per session touched: the whole turns holding the
        requested pages, SSD turns read by ``preadv`` into the engine's buffers and checked
        against their layer checksums as they land. A damaged turn is a miss, once: ``False``,
        its session dropped with its file (``damaged`` counts them)."""
        t0 = time.perf_counter()
        self.metrics.add("loads")
        with self.lock:
            staged = {i: self.pending[k] for i, k in enumerate(keys) if k in self.pending}
        # Pages still being written: copied from the job's buffers while it is not finished.
        on_disk = [i for i in range(len(keys)) if i not in staged]
        for i, (job, position) in staged.items():
            with job.lock:
                if not job.finished:
                    copy_pieces(job.page(position, self.layers), pages[i])
                    continue
            on_disk.append(i)  # written meanwhile (or dropped: then a miss below)
        read = 0
        if on_disk:
            got = self._read_stored([keys[i] for i in on_disk], [pages[i] for i in on_disk])
            if got is None:
                self._load_failed(len(keys))
                return False
            read = got
        self.metrics.add("blocks_delivered", len(keys))
        self.metrics.add("bytes_read", read)
        self.metrics.observe("load_seconds", time.perf_counter() - t0)
        return True

    def _read_stored(
        self, keys: Sequence[Hashable], pages: Sequence[Sequence[np.ndarray]]
    ) -> int | None:
        """:meth:`read_into` for pages on their medium: the SSD bytes read, ``None`` when a
        key is not stored (or is being written again)."""
        with self.lock:
            places = [self.index.where.get(k) for k in keys]
            if any(p is None for p in places) or any(k in self.pending for k in keys):
                return None
            by_session: dict[str, dict[int, int]] = {}
            for i, p in enumerate(places):
                assert p is not None
                by_session.setdefault(p[0], {})[p[1]] = i
            spans = {
                session: (*self.index.turn_span(session, min(wanted), max(wanted)), wanted)
                for session, wanted in by_session.items()
            }
        read = 0
        try:
            with self.store_lock:
                for session, (start, stop, wanted) in spans.items():
                    try:
                        got = self._restore_session(session, start, stop, wanted, pages)
                    except (VerificationError, CorruptSessionFile) as e:
                        self._damaged(session, e)
                        return None
                    if got is None:
                        return None
                    read += got
        except BaseException:
            self._load_failed(len(keys))
            raise
        return read

    def _damaged(self, session: str, error: Exception) -> None:
        """A restore of ``session`` failed verification: a miss, once. The session is dropped
        with its file (the engine recomputes and stores it again), never served damaged."""
        log.warning("FlatCake %s store: %s; session %r dropped", self.engine, error, session)
        self.damaged += 1
        self.evict_session(session)

    def _load_failed(self, blocks: int) -> None:
        self.metrics.add("loads_failed")
        self.metrics.add("blocks_failed", blocks)

    def _restore_session(
        self,
        session: str,
        start: int,
        stop: int,
        wanted: dict[int, int],
        pages: Sequence[Sequence[np.ndarray]],
    ) -> int | None:
        """Blocks ``start..stop`` of ``session`` (whole turns) into the pages of ``wanted``
        (block -> index into ``pages``); the SSD bytes read, or ``None`` when a turn is gone."""
        now = self.clock()
        plan = self.store.plan_restore(session, stop, now_s=now, start_tokens=start)
        if plan.tokens != stop - start:  # a turn gone since (cannot happen: see _reclaim)
            return None
        if plan.memory_bytes:
            # Host-memory turns live in the store: one restore into a staging buffer, then
            # each wanted page's layers out of it (one more copy, from memory).
            buf = np.empty((self.layers, plan.layer_bytes), dtype=np.uint8)
            read = self.store.restore(plan, buf, now_s=now)
            rows = self._rows_view(buf, stop - start)
            for block, i in wanted.items():
                for layer, views in enumerate(
                    page_layers(pages[i], self.layers, self.layer_page_bytes)
                ):
                    at = 0
                    for v in views:
                        v[:] = rows[layer, block - start, at : at + v.size]
                        at += v.size
            return read
        self.store.ssd.begin_read(session, now)
        try:
            self._read_ssd(plan, wanted, pages)
        finally:
            self.store.ssd.end_read(session, self.clock())
        self.store.memory.touch(session, self.clock())
        return plan.ssd_read_bytes

    def _read_ssd(
        self,
        plan: Any,
        wanted: dict[int, int],
        pages: Sequence[Sequence[np.ndarray]],
    ) -> None:
        """Every SSD layer range of ``plan`` read with ``preadv`` straight into the wanted
        pages' views (the rest of each range into scratch), in commands of about
        ``READ_COMMAND_BYTES`` over the reader threads; each command's CRC-32 is taken as it
        lands and the layer ranges' checksums combined from them."""
        page = self.layer_page_bytes
        # block -> its views per layer; a block not wanted (or a page's padding) is scratch.
        layers_of = {block: page_layers(pages[i], self.layers, page) for block, i in wanted.items()}
        # The restored blocks in order: turn t's block j is at plan position token_start + j.
        commands: list[tuple[str, int, list[Any]]] = []
        ranges: list[tuple[Any, list[int]]] = []  # (extent, its commands)
        for layer, lp in enumerate(plan.ssd_plans):
            # A layer's placements are its turns' ranges, in the plan's SSD turn order.
            for (extent, _), record in zip(lp.placements, plan.ssd_turns, strict=True):
                first = record.token_start
                mine: list[int] = []
                iov: list[Any] = []
                iov_bytes = 0
                offset = extent.offset
                for j in range(extent.length // page):
                    views = layers_of.get(first + j)
                    parts: list[Any] = list(views[layer]) if views is not None else []
                    short = page - sum(v.size for v in parts)
                    if short:
                        parts.append(short)  # scratch, allocated by the command
                    if iov and (
                        iov_bytes + page > READ_COMMAND_BYTES or len(iov) + len(parts) > MAX_IOVECS
                    ):
                        mine.append(len(commands))
                        commands.append((extent.file, offset, iov))
                        offset += iov_bytes
                        iov, iov_bytes = [], 0
                    iov.extend(parts)
                    iov_bytes += page
                if iov:
                    mine.append(len(commands))
                    commands.append((extent.file, offset, iov))
                ranges.append((extent, mine))
        names = list(dict.fromkeys(c[0] for c in commands))
        files = {f: os.open(f, os.O_RDONLY) for f in names}
        # A second descriptor with O_DIRECT: a command whose file offset and buffers are all
        # page-aligned goes from the disk straight into the engine's memory, no page cache.
        direct = {f: open_direct(f) for f in names}
        try:
            results = list(
                self._reader.map(
                    lambda c: _read_command(files[c[0]], direct[c[0]], c[1], c[2]), commands
                )
            )
        finally:
            for fd in [*files.values(), *direct.values()]:
                if fd is not None:
                    os.close(fd)
        self.direct_commands += sum(r[2] for r in results)
        self.buffered_commands += sum(not r[2] for r in results)
        for extent, mine in ranges:
            crc = results[mine[0]][0]
            for k in mine[1:]:
                crc = crc32_combine(crc, results[k][0], results[k][1])
            if extent.checksum is not None and crc != extent.checksum:
                raise VerificationError(
                    f"{extent.file}: {describe_extent(extent)}: layer checksum mismatch at "
                    f"offset {extent.offset} ({extent.length} bytes): stored "
                    f"{extent.checksum:#010x}, read {crc:#010x} (the file is damaged; its bytes "
                    "were not returned as data)"
                )

    # eviction ---------------------------------------------------------------------------
    def evict_session(self, session: str) -> list[Hashable]:
        """Drop ``session`` whole (file and memory turns); the keys it held. A turn of it still
        being written is dropped with it."""
        with self.lock:
            keys = self.index.forget(session)
        with self.store_lock:
            try:
                self.store.drop(session, self.clock())
            except InputError:
                pass  # never written here, or dropped already
        if keys:
            self.metrics.add("sessions_reclaimed")
        return keys

    def evict_key(self, key: Hashable) -> list[Hashable]:
        """An engine asked to remove one page: a session is stored whole, so its session
        goes (pages after the key could not be restored without it anyway)."""
        with self.lock:
            found = self.index.where.get(key)
        return [] if found is None else self.evict_session(found[0])

    # trace ------------------------------------------------------------------------------
    def record(
        self,
        keys: Sequence[Hashable],
        *,
        session_id: object | None,
        source: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        trace_keys: Sequence[Hashable] | None = None,
        delivered_blocks: int | None = None,
        failed_blocks: int | None = None,
    ) -> None:
        """A request seen (its prefix chain from the start) to the trace, when capturing;
        ``trace_keys`` are what the record folds into ``hash_ids`` (default ``keys``)."""
        if self.recorder is None or not keys:
            return
        with self.lock:
            hits = self.index.prefix_hits(keys)
            if hits == len(keys) and (session_id is None or not str(session_id)):
                name, how = self.index.where[keys[-1]][0], FALLBACK_SOURCE
            else:
                name, chained = self.index.session_for(keys[:hits], keys[hits:], session_id)
                how = chained or source
        self.recorder.record(
            timestamp_s=self.clock(),
            session_id=name,
            session_source=how,
            keys=keys if trace_keys is None else trace_keys,
            block_size_tokens=self.tokens_per_key,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            delivered_blocks=delivered_blocks,
            failed_blocks=failed_blocks,
        )

    def stats(self) -> dict[str, Any]:
        """The monitors' numbers (:meth:`.metrics.AdapterMetrics.stats`), with the turns
        waiting to be written and the bytes of staging kept for the next ones."""
        out = self.metrics.stats()
        with self.lock:
            out["stores_pending"] = self._in_flight
        out["staging_bytes"] = self._staging.retained_bytes  # kept warm for the next turns
        return out

    def close(self, *, remove: bool = False) -> None:
        """Write what was submitted, then close (``remove``: delete this store's files)."""
        if self._writer is not None:
            self._jobs.put(None)
            self._writer.join()
            self._writer = None
        self._report_failures()
        self._reader.shutdown(wait=True)
        if self.recorder is not None:
            self.recorder.close()
        self.store.close(remove=remove)


def open_direct(path: str) -> int | None:
    """``path`` opened with O_DIRECT, or ``None`` where the platform or filesystem refuses."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError:
        return None  # tmpfs and others: buffered reads only


def _aligned(offset: int, bufs: list[Any]) -> bool:
    if offset % PAGE_BYTES:
        return False
    return all(b.ctypes.data % PAGE_BYTES == 0 and b.nbytes % PAGE_BYTES == 0 for b in bufs)


def _read_command(
    fd: int, direct_fd: int | None, offset: int, iov: list[Any]
) -> tuple[int, int, bool]:
    """``preadv`` the buffers of ``iov`` (views; an int is that many bytes of scratch) from
    ``offset`` to full, with ``direct_fd`` (O_DIRECT) when everything is page-aligned; returns
    the CRC-32 of the bytes read, their count and whether O_DIRECT read them. A file shorter
    than the command raises (a committed turn is never short)."""
    scratch_bytes = sum(v for v in iov if isinstance(v, int))
    # Page-aligned scratch keeps a command with an unwanted page eligible for O_DIRECT.
    scratch = aligned_buffer(scratch_bytes) if scratch_bytes else None
    bufs: list[Any] = []
    at = 0
    for v in iov:
        if isinstance(v, int):
            assert scratch is not None
            bufs.append(scratch[at : at + v])
            at += v
        else:
            bufs.append(v)
    total = sum(int(b.nbytes) for b in bufs)
    if direct_fd is not None and _aligned(offset, bufs):
        try:
            views = [memoryview(b).cast("B") for b in bufs]
            if os.preadv(direct_fd, views, offset) == total:
                return _crc_of(views), total, True
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
        # Refused or short: the buffered read below reads the whole command again.
    done = 0
    views = [memoryview(b).cast("B") for b in bufs]
    while done < total:
        rest, skip = [], done
        for v in views:
            if skip >= v.nbytes:
                skip -= v.nbytes
                continue
            rest.append(v[skip:])
            skip = 0
        n = os.preadv(fd, rest, offset + done)
        if n == 0:
            raise CorruptSessionFile(
                f"fd {fd}: a session file ends at offset {offset + done}; the read needs "
                f"{total - done} more bytes"
            )
        done += n
    return _crc_of(views), total, False


def _crc_of(views: list[memoryview]) -> int:
    crc = 0
    for v in views:
        crc = crc32(v, crc)
    return crc


__all__ = [
    "FALLBACK_SOURCE",
    "Clock",
    "IndexedSession",
    "KeyCodec",
    "KeyIndex",
    "Medium",
    "SessionKV",
    "StoreOptions",
    "key_hex",
    "open_direct",
    "pack_keys",
    "page_geometry",
    "page_layers",
    "session_name",
    "unpack_keys",
]
