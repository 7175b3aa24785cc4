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

import hashlib
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptSessionFile, InputError, VerificationError
from ..geometry import KvGeometry
from ..placement import Medium, Placement, PlacementRule
from ..rule_file import resolve_rule
from ..session_format import NAME_BYTES
from ..store import FlatStore, StoredTurn
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


class SessionKV:
    """One rank's FlatCake store behind an engine's page keys (module docstring).

    ``layers`` x ``layer_page_bytes`` is one engine page; pages go in and come out as
    ``(n, layers, layer_page_bytes)`` uint8 arrays. ``tokens_per_key`` is the engine's tokens
    per page (placement signals and trace records count tokens). ``rule``: a
    :class:`..placement.PlacementRule` or a thresholds file (else ``$FLATCAKE_THRESHOLDS``,
    else the package's ``thresholds.toml``). ``trace``: a JSON Lines path (else
    ``$FLATCAKE_TRACE``). Thread-safe (engines call storage from their own threads).
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
        self.lock = threading.RLock()
        self.placements: list[Placement] = []  # every write's decision, in order
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
    def lookup(self, keys: Sequence[Hashable]) -> int:
        """How many of ``keys``, from the first, this store holds."""
        with self.lock:
            return self.index.prefix_hits(keys)

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
        """Store ``pages[i]`` (``(layers, layer_page_bytes)`` bytes) under ``keys[i]``; keys
        already stored are skipped (a prefix's pages are written once). ``prefix``: the
        chain's keys before ``keys``. Returns the turn written, or ``None`` when nothing was
        new."""
        data = np.ascontiguousarray(pages).view(np.uint8)
        data = data.reshape(len(keys), self.layers, self.layer_page_bytes)
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
            now = self.clock()
            placement = self.store.place(
                turn=turn,
                context_tokens=(len(chain) + len(new_keys)) * self.tokens_per_key,
                previous_reply_tokens=reply if turn else None,
                prefix_ref_count=prefix_ref_count,
                new_tokens=len(new_keys),
                now_s=now,
            )
            # Layer-ordered: layer l holds every new page's layer-l bytes, in key order.
            kv = np.ascontiguousarray(data[new].transpose(1, 0, 2)).reshape(self.layers, -1)
            stored = self.store.write_turn(
                session,
                turn,
                kv,
                tokens=len(new_keys),
                medium=placement.medium,
                now_s=now,
                tag=self._tag(new_keys),
            )
            self.index.add(session, new_keys)
            self.placements.append(placement)
            self._reclaim(now)
            return stored

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

    def _reclaim(self, now: float) -> None:
        for r in self.store.reclaim(now):
            self.evict_session(str(r.session))

    # reads ------------------------------------------------------------------------------
    def read(self, keys: Sequence[Hashable]) -> np.ndarray | None:
        """The pages of ``keys`` as ``(n, layers, layer_page_bytes)`` uint8, or ``None`` when
        one of them is not stored. One coalesced restore per session touched: the whole turns
        holding the requested pages, SSD layers through the read planner."""
        with self.lock:
            places = [self.index.where.get(k) for k in keys]
            if any(p is None for p in places):
                return None
            out = np.empty((len(keys), self.layers, self.layer_page_bytes), dtype=np.uint8)
            by_session: dict[str, list[tuple[int, int]]] = {}
            for i, p in enumerate(places):
                assert p is not None
                by_session.setdefault(p[0], []).append((i, p[1]))
            now = self.clock()
            for session, wanted in by_session.items():
                blocks = [b for _, b in wanted]
                start, stop = self.index.turn_span(session, min(blocks), max(blocks))
                plan = self.store.plan_restore(session, stop, now_s=now, start_tokens=start)
                if plan.tokens != stop - start:  # a turn gone since (cannot happen: see _reclaim)
                    return None
                buf = np.empty((self.layers, plan.layer_bytes), dtype=np.uint8)
                try:
                    self.store.restore(plan, buf, now_s=now)
                except (VerificationError, CorruptSessionFile):
                    # Damaged on disk: a miss, once. The store dropped the session and its
                    # file; the engine recomputes and stores it again.
                    self.index.forget(session)
                    self.damaged += 1
                    return None
                rows = buf.reshape(self.layers, stop - start, self.layer_page_bytes)
                for i, b in wanted:
                    out[i] = rows[:, b - start]
            return out

    # eviction ---------------------------------------------------------------------------
    def evict_session(self, session: str) -> list[Hashable]:
        """Drop ``session`` whole (file and memory turns); the keys it held."""
        with self.lock:
            keys = self.index.forget(session)
            try:
                self.store.drop(session, self.clock())
            except InputError:
                pass  # never written here, or dropped already
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
        )

    def close(self, *, remove: bool = False) -> None:
        if self.recorder is not None:
            self.recorder.close()
        self.store.close(remove=remove)


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
    "pack_keys",
    "page_geometry",
    "session_name",
    "unpack_keys",
]
