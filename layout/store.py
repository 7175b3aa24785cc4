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
import struct
import threading
import weakref
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .address import MAX_NODE, MEDIUM_MEMORY, MEDIUM_SSD, encode_address
from .buffers import aligned_buffer
from .engines.posix import PosixEngine
from .errors import (
    CorruptSessionFile,
    InputError,
    LayoutError,
    SessionFileExists,
    StoreBusy,
    VerificationError,
)
from .geometry import KvGeometry
from .placement import Medium, Placement, PlacementRule, PlacementSignals
from .planner import ReadPlan
from .reclaim import DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK, Reclaimed, SessionReclaimer
from .scheduler import TwoQueueScheduler
from .session_file import SessionFile, is_session_file
from .session_format import (
    DEFAULT_EXTENT_BYTES,
    NAME_BYTES,
    TurnRecord,
    segment_bytes,
    turn_blocks,
)
from .staging import StagingWindow, import_torch, kv_view, restore_session

#: Restores in flight at once: two layer buffers per stream, two streams (FlatCake's window).
DEFAULT_PREFETCH_SLOTS = 2
SESSION_SUFFIX = ".fccio"
#: Beside each session file: one record per SSD turn (its session turn and the caller's tag).
TAGS_SUFFIX = ".fctags"
# A tag record: magic, file turn, session turn, token start, tag length; then the tag and the
# CRC-32 of everything before it (docs/layout.md, section 6, "Restart").
_TAG = struct.Struct("<4sIIQI")
_TAG_MAGIC = b"FCTG"


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


@dataclass(frozen=True)
class Recovery:
    """What :class:`FlatStore` found on its directory when it opened (docs/layout.md, section
    6, "Restart"): the ``sessions`` it recovered with their ``turns`` and the ``ssd_bytes``
    they hold (what the SSD watermark counts), the files it removed (``reclaimed``: name and
    why; an interrupted creation, a file with no turn restorable from its session's start, one
    that cannot be recovered) and those of its (node, rank) it left alone (``skipped``: not a
    session file, or named for another session)."""

    sessions: tuple[str, ...] = ()
    turns: int = 0
    ssd_bytes: int = 0
    reclaimed: tuple[tuple[str, str], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


class _Session:
    """One session's state: its turns, its file (when a turn went to SSD), its memory turns."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.turns: list[StoredTurn | None] = []  # None: reclaimed
        self.file: SessionFile | None = None
        self.identity: tuple[int, int] | None = None  # the file this store created, if any
        self.file_turn: dict[int, int] = {}  # session turn -> turn index in the file
        self.memory: dict[int, np.ndarray] = {}  # session turn -> (layers, layer_bytes)
        self.chunks: dict[int, list[np.ndarray]] = {}  # host rows of a turn not joined yet
        self.tags: dict[int, bytes] = {}  # session turn -> the caller's tag
        self.tokens = 0
        # The turn still growing (write_turn(final=False)): its number, where it goes when
        # sealed, and its tag so far. It is held in host memory until then.
        self.open_turn: int | None = None
        self.open_medium = Medium.MEMORY
        self.open_tag: list[bytes] = []

    def held_in_memory(self) -> set[int]:
        return set(self.memory) | set(self.chunks)

    def parts(self, turn: int) -> list[np.ndarray]:
        """A turn held in host memory as the ``(layers, bytes)`` parts it was written in."""
        joined = [self.memory[turn]] if turn in self.memory else []
        return joined + self.chunks.get(turn, [])

    def rows(self, turn: int) -> np.ndarray:
        """A turn held in host memory, as ``(layers, layer_bytes)``; parts written since the
        last read are joined once here, not at every extension."""
        parts = self.chunks.pop(turn, [])
        if turn in self.memory:
            parts.insert(0, self.memory[turn])
        if len(parts) > 1:
            self.memory[turn] = np.concatenate(parts, axis=1)
        elif parts:
            self.memory[turn] = parts[0]
        return self.memory[turn]


def _layer_source(parts: list[np.ndarray]) -> np.ndarray | Callable[[int, memoryview], None]:
    """What ``SessionFile.append_turn`` writes a turn from: its one part, or a fill that lays
    each layer's parts end to end in the writer's buffer (one copy, no joined turn)."""
    if len(parts) == 1:
        return parts[0]

    def fill(layer: int, buffer: memoryview) -> None:
        out = np.frombuffer(buffer, dtype=np.uint8)
        at = 0
        for part in parts:
            out[at : at + part.shape[1]] = part[layer]
            at += part.shape[1]

    return fill


def tags_path(session_path: Path) -> Path:
    """The tag file beside a session file."""
    return session_path.with_name(session_path.name[: -len(SESSION_SUFFIX)] + TAGS_SUFFIX)


def _append_tag(
    path: Path, file_turn: int, session_turn: int, token_start: int, tag: bytes
) -> None:
    """Append one tag record, durably: it reaches the disk before the turn it names commits,
    so every committed turn has one (a record for a turn that never committed is ignored)."""
    body = _TAG.pack(_TAG_MAGIC, file_turn, session_turn, token_start, len(tag)) + tag
    record = body + struct.pack("<I", zlib.crc32(body))
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(record)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if created:  # the new name must survive a crash too
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def restorable_turns(
    turns: Sequence[TurnRecord], tags: dict[int, tuple[int, int, bytes]]
) -> list[tuple[TurnRecord, tuple[int, int, bytes]]]:
    """A recovered file's turns that restore from its session's start, with their tag records.

    The file's turns are the session's from its start while each has its tag record (its
    session turn and token start); past a memory turn (lost with the process) the history has
    a hole and the rest cannot be restored.
    """
    out = []
    for rec in turns:
        record = tags.get(rec.index)
        if record is None or record[:2] != (rec.index, rec.token_start):
            break
        out.append((rec, record))
    return out


def session_file_name(node: int, rank: int, session: str) -> str:
    """The file name of ``session`` for a (node, rank): ``n{node}-r{rank}-`` and a hash of the
    id (any id is a safe file name), so the ranks and nodes sharing a directory never share a
    file."""
    digest = hashlib.sha256(session.encode()).hexdigest()[:32]
    return f"n{node}-r{rank}-{digest}{SESSION_SUFFIX}"


def scan_sessions(
    directory: str | os.PathLike[str],
    *,
    node: int = 0,
    rank: int = 0,
    geometry: KvGeometry | None = None,
) -> dict[str, list[tuple[int, bytes]]]:
    """What a store of (``node``, ``rank``) opened on ``directory`` would recover, read only:
    ``session -> [(tokens, tag) per turn]``. For a process that indexes a store another process
    owns (vLLM's scheduler beside its workers); files it cannot read, or written for another
    ``geometry`` when one is given, are left out."""
    found: dict[str, list[tuple[int, bytes]]] = {}
    mine = f"n{node}-r{rank}-"
    for path in sorted(Path(directory).glob(f"{mine}*{SESSION_SUFFIX}")):
        try:
            with SessionFile.open(path, recover=True) as f:
                if path.name != session_file_name(node, rank, f.session_id):
                    continue
                if geometry is not None and (f.layers, f.bytes_per_block_per_layer) != (
                    geometry.layers,
                    geometry.bytes_per_block_per_layer(f.block_tokens),
                ):
                    continue  # another model's: the owner leaves it alone too
                turns = restorable_turns(f.turns, read_tags(tags_path(path))[0])
                if turns:
                    found[f.session_id] = [(rec.tokens, tag[2]) for rec, tag in turns]
        except (LayoutError, OSError):
            continue  # what the owner reclaims, or removed meanwhile
    return found


def read_tags(path: Path) -> tuple[dict[int, tuple[int, int, bytes]], int]:
    """A tag file's records by file turn, ``file turn -> (session turn, token start, tag)``
    (a later record for a turn replaces an earlier one), and the bytes of its intact prefix:
    reading stops at the first torn or damaged record."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, 0
    records: dict[int, tuple[int, int, bytes]] = {}
    at = 0
    while at + _TAG.size + 4 <= len(data):
        magic, file_turn, session_turn, token_start, length = _TAG.unpack_from(data, at)
        end = at + _TAG.size + length
        if magic != _TAG_MAGIC or end + 4 > len(data):
            break
        if zlib.crc32(data[at:end]) != struct.unpack_from("<I", data, end)[0]:
            break
        records[file_turn] = (session_turn, token_start, data[at + _TAG.size : end])
        at = end + 4
    return records, at


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
        # Holding it, no other store writes these files: what an earlier store of this (node,
        # rank) committed is this one's now.
        try:
            self.recovery = self._recover(now_s)
        except BaseException:
            self.close()
            raise

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

    # restart ----------------------------------------------------------------------------
    def _recover(self, now_s: float) -> Recovery:
        """Take over what an earlier store of this (node, rank) left in the directory (the
        class :class:`Recovery` says what is kept and what goes)."""
        mine = f"{self._prefix}-"
        reclaimed: list[tuple[str, str]] = []
        skipped: list[tuple[str, str]] = []
        files: list[Path] = []
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.startswith(f".{mine}") and ".creating-" in name:
                # SessionFile.create's temporary name: its creator died before publishing it.
                path.unlink(missing_ok=True)
                reclaimed.append((name, "a session file whose creation was interrupted"))
            elif name.startswith(mine) and name.endswith(SESSION_SUFFIX):
                files.append(path)
            elif name.startswith(mine) and name.endswith(TAGS_SUFFIX):
                session_file = path.with_name(name[: -len(TAGS_SUFFIX)] + SESSION_SUFFIX)
                if not session_file.exists():
                    path.unlink(missing_ok=True)
                    reclaimed.append((name, "tags of a session file that is gone"))
        found: list[tuple[float, _Session, int]] = []
        for path in files:
            outcome = self._recover_file(path)
            if isinstance(outcome, tuple):
                found.append(outcome)
            elif outcome.startswith("skipped: "):
                skipped.append((path.name, outcome[len("skipped: ") :]))
            else:
                reclaimed.append((path.name, outcome))
        # Least recently written first, as the reclaimer orders sessions.
        for _, s, nbytes in sorted(found, key=lambda f: f[0]):
            self._sessions[s.name] = s
            self.ssd.add(s.name, nbytes, now_s)
        recovery = Recovery(
            sessions=tuple(self._sessions),
            turns=sum(len(s.turns) for s in self._sessions.values()),
            ssd_bytes=self.ssd.used_bytes,
            reclaimed=tuple(reclaimed),
            skipped=tuple(skipped),
        )
        # A smaller budget than the last run's: back under the watermark at once.
        for r in self.reclaim(now_s):
            reclaimed.append((str(r.session), "over the SSD watermark after the restart"))
        return replace(recovery, reclaimed=tuple(reclaimed))

    def _recover_file(self, path: Path) -> tuple[float, _Session, int] | str:
        """One session file of this (node, rank): ``(last write time, session, bytes)`` when
        it holds turns restorable from its session's start, else why it was removed (or,
        prefixed ``skipped: ``, left alone)."""
        if not is_session_file(path):
            return "skipped: not an FC-CIO session file (left as it is)"
        try:
            f = SessionFile.open(path, writable=True, recover=True)
        except CorruptSessionFile as e:
            path.unlink(missing_ok=True)
            tags_path(path).unlink(missing_ok=True)
            return f"cannot be recovered: {e}"
        except LayoutError as e:
            return f"skipped: {e}"
        if self.session_path(f.session_id) != path:
            f.close()
            return f"skipped: holds session {f.session_id!r}, whose file has another name"
        if f.block_tokens != self.block_tokens or (
            (f.layers, f.bytes_per_block_per_layer) != (self.geometry.layers, self.piece_bytes)
        ):
            # Another model's or page size's KV: not this store's to serve, nor to destroy.
            f.close()
            return (
                f"skipped: written for {f.layers} layers of {f.bytes_per_block_per_layer}-byte "
                f"pages of {f.block_tokens} tokens; this store has {self.geometry.layers} of "
                f"{self.piece_bytes} of {self.block_tokens}"
            )
        tags, intact = read_tags(tags_path(path))
        if intact and tags_path(path).stat().st_size > intact:
            os.truncate(tags_path(path), intact)  # a torn last record: the next one follows
        s = _Session(f.session_id)
        for rec, record in restorable_turns(f.turns, tags):
            address = encode_address(MEDIUM_SSD, self.node, rec.segment_offset)
            s.turns.append(
                StoredTurn(
                    s.name,
                    rec.index,
                    rec.token_start,
                    rec.tokens,
                    Medium.SSD,
                    address,
                    rec.segment_bytes,
                )
            )
            s.file_turn[rec.index] = rec.index
            s.tags[rec.index] = record[2]
            s.tokens += rec.tokens
        if not s.turns:
            f.close()
            path.unlink(missing_ok=True)
            tags_path(path).unlink(missing_ok=True)
            return "no turn restorable from the session's start"
        s.file, s.identity = f, f.identity
        # Turns past the restorable ones still take their space until the session goes.
        nbytes = sum(rec.segment_bytes for rec in f.turns)
        return path.stat().st_mtime, s, nbytes

    # clock ------------------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        """The latest time a call gave this store (seconds)."""
        return self._now

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
        return self.directory / session_file_name(self.node, self.rank, session)

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
        self,
        session: str,
        turn: int,
        kv: np.ndarray,
        *,
        tokens: int,
        medium: Medium,
        now_s: float,
        final: bool = True,
        tag: bytes = b"",
    ) -> StoredTurn:
        """Store turn ``turn`` (the session's next, 0-based) of ``tokens`` tokens on ``medium``.

        ``kv`` holds the turn's new KV in layer order: ``layers x layer_bytes_for(tokens)``
        bytes (e.g. a ``(layers, layer_bytes)`` uint8 array; the last page's tail is whatever
        the caller supplies). A memory write that does not fit the free host memory is refused:
        :meth:`place` sends such a write to SSD.

        A turn an engine stores in pieces (vLLM stores the blocks a request completed at every
        scheduler step) stays one turn: ``final=False`` keeps it open in host memory, and a
        later call with the same ``turn`` extends it (same ``medium``; the turn so far must end
        on a page boundary). It is sealed (an SSD turn written as one layer-ordered segment)
        by a ``final`` call, by the session's next turn, by :meth:`seal` or by :meth:`close`.
        Until then it restores from host memory and a crash loses it: it was never committed.

        ``tag`` is the caller's bytes for this turn (an adapter's block keys), kept with an SSD
        turn on disk and given back by :meth:`tag` after a restart; an extension's tag is
        appended to the turn's. Returns the turn as stored so far.
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
        if medium not in (Medium.SSD, Medium.MEMORY):
            raise InputError(f"medium: must be a Medium; got {medium!r}", parameter="medium")
        if not isinstance(tag, bytes):
            raise InputError(f"tag: must be bytes; got {tag!r}", parameter="tag")
        s = self._session(session, create=True)
        extend = s.open_turn is not None and turn == s.open_turn
        if extend:
            so_far = s.turns[turn]
            assert so_far is not None  # an open turn is never reclaimed while open
            if Medium(medium) != s.open_medium:
                raise InputError(
                    f"medium: turn {turn} of session {session!r} is open for "
                    f"{s.open_medium.name}; got {Medium(medium).name}",
                    parameter="medium",
                )
            if so_far.tokens % self.block_tokens:
                raise InputError(
                    f"tokens: turn {turn} of session {session!r} ends inside a page "
                    f"({so_far.tokens} tokens, pages of {self.block_tokens}); it cannot grow",
                    parameter="tokens",
                )
        else:
            if s.open_turn is not None:
                self._seal(s, now_s)
            if turn != len(s.turns):
                raise InputError(
                    f"turn: session {session!r} appends turn {len(s.turns)} next; got {turn!r}",
                    parameter="turn",
                )
        _check_int("tokens", tokens, 1)
        layers = self.geometry.layers
        layer_bytes = self.layer_bytes_for(tokens)
        contiguous = np.ascontiguousarray(kv)
        copied = contiguous is not kv and not np.may_share_memory(contiguous, kv)
        data = contiguous.view(np.uint8).reshape(-1)
        if data.shape[0] != layers * layer_bytes:
            raise InputError(
                f"kv: a turn of {tokens} tokens holds {layers} x {layer_bytes} bytes; got "
                f"{data.shape[0]} bytes",
                parameter="kv",
            )
        nbytes = layers * layer_bytes
        if medium == Medium.MEMORY and nbytes > self.memory.free_bytes:
            raise InputError(
                f"medium: host memory has {self.memory.free_bytes} bytes free; got a "
                f"memory write of {nbytes} bytes (place() sends it to SSD)",
                parameter="medium",
            )
        rows = data.reshape(layers, layer_bytes)
        if (not final or medium == Medium.MEMORY or extend) and not copied:
            rows = rows.copy()  # kept past this call: the caller may reuse its buffer
        if medium == Medium.MEMORY:
            self.memory.add(session, nbytes, now_s)
        s.chunks.setdefault(turn, []).append(rows)
        if extend:
            so_far = s.turns[turn]
            assert so_far is not None
            record = replace(
                so_far, tokens=so_far.tokens + tokens, stored_bytes=so_far.stored_bytes + nbytes
            )
            s.open_tag.append(tag)
        else:
            address = encode_address(MEDIUM_MEMORY, self.node, self._arena_end)
            record = StoredTurn(session, turn, s.tokens, tokens, Medium.MEMORY, address, nbytes)
            s.turns.append(record)
            s.open_turn, s.open_medium, s.open_tag = turn, Medium(medium), [tag]
        self._arena_end += nbytes
        s.turns[turn] = record
        s.tokens += tokens
        if final:
            return self._seal(s, now_s)
        return record

    def seal(self, session: str, now_s: float) -> StoredTurn | None:
        """Seal ``session``'s open turn (:meth:`write_turn`); the sealed turn, or ``None`` when
        none was open."""
        self._clock(now_s)
        s = self._sessions.get(session)
        if s is None or s.open_turn is None:
            return None
        return self._seal(s, now_s)

    def open_sessions(self) -> tuple[str, ...]:
        """The sessions with an open turn."""
        return tuple(name for name, s in self._sessions.items() if s.open_turn is not None)

    def _seal(self, s: _Session, now_s: float) -> StoredTurn:
        turn = s.open_turn
        assert turn is not None
        so_far = s.turns[turn]
        assert so_far is not None
        tag = b"".join(s.open_tag)
        s.open_turn, s.open_tag = None, []
        s.tags[turn] = tag
        if s.open_medium == Medium.MEMORY:
            return so_far  # already where it stays
        parts = s.parts(turn)
        layer_bytes = sum(p.shape[1] for p in parts)
        if s.file is None:
            s.file = self._create_file(s.name)
            s.identity = s.file.identity
        file_turn = len(s.file.turns)
        # The tag first: a tag without its turn is ignored at a restart, a turn without its
        # tag could not be looked up.
        try:
            _append_tag(tags_path(s.file.path), file_turn, turn, so_far.token_start, tag)
            rec = s.file.append_turn(so_far.tokens, _layer_source(parts))
        except BaseException:
            # Not written (disk full, say): the turn is gone, as if reclaimed, so no later
            # restore reaches past it.
            s.turns[turn] = None
            s.memory.pop(turn, None)
            s.chunks.pop(turn, None)
            raise
        s.memory.pop(turn, None)
        s.chunks.pop(turn, None)
        s.file_turn[turn] = file_turn
        stored = segment_bytes(self.geometry.layers, layer_bytes)
        self.ssd.add(s.name, stored, now_s)
        address = encode_address(MEDIUM_SSD, self.node, rec.segment_offset)
        record = replace(so_far, medium=Medium.SSD, address=address, stored_bytes=stored)
        s.turns[turn] = record
        return record

    def tag(self, session: str, turn: int) -> bytes:
        """The tag :meth:`write_turn` stored with a sealed turn (``b""`` when none)."""
        s = self._session(session, create=False)
        return s.tags.get(turn, b"")

    def sessions(self) -> tuple[str, ...]:
        """Every session this store holds a turn of, in the order they became known."""
        return tuple(
            name for name, s in self._sessions.items() if any(t is not None for t in s.turns)
        )

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
        own_engine = None
        if plan.ssd_plans and engine is None:
            engine = own_engine = PosixEngine(o_direct=False, drop_cache=False)
        self.ssd.begin_read(plan.session, now_s)
        try:
            try:
                self._restore_layers(plan, s, out, at, engine)
            finally:
                self.ssd.end_read(plan.session, now_s)
                if own_engine is not None:
                    own_engine.close()
        except (VerificationError, CorruptSessionFile):
            self._discard(plan.session)
            raise
        self.memory.touch(plan.session, now_s)
        return plan.ssd_read_bytes

    def _restore_layers(
        self, plan: RestorePlan, s: _Session, out: np.ndarray, at: dict[int, int], engine: Any
    ) -> None:
        by_file_turn = {s.file_turn[t.turn]: t.turn for t in plan.ssd_turns}
        for layer in range(self.geometry.layers):
            if plan.ssd_plans:
                lp = plan.ssd_plans[layer]
                buf = aligned_buffer(lp.buffer_bytes)
                engine.read(lp, buf)
                for extent, offset in lp.placements:
                    file_turn = int(extent.tag[0])  # type: ignore[index]
                    dst = at[by_file_turn[file_turn]]
                    out[layer, dst : dst + extent.length] = buf[offset : offset + extent.length]
            for t in plan.turns:
                if t.medium == Medium.MEMORY:
                    # As planned: an open turn may have grown since.
                    n = self.layer_bytes_for(t.tokens)
                    out[layer, at[t.turn] : at[t.turn] + n] = s.rows(t.turn)[layer, :n]

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
            damaged = False

            def copy_memory_turns(layer: int) -> None:
                # Memory turns' pages of this layer, then the layer is whole.
                for i, t in enumerate(plan.turns):
                    if t.medium != Medium.MEMORY:
                        continue
                    idx = pages[starts[i] : starts[i + 1]]
                    row = s.rows(t.turn)[layer, : self.layer_bytes_for(t.tokens)]
                    src = torch.from_numpy(row).view(-1, page_bytes).to(kv.device)
                    if split:
                        kv[layer][0].index_copy_(0, idx, src[:, :half])
                        kv[layer][1].index_copy_(0, idx, src[:, half:])
                    else:
                        kv[layer].index_copy_(0, idx, src)
                if on_layer is not None:
                    on_layer(layer)

            if plan.ssd_plans:
                try:
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
                except (VerificationError, CorruptSessionFile):
                    # The layers before the damaged one may be in kv_cache already: the
                    # caller treats every page of this restore as not loaded.
                    damaged = True
                    raise
            else:
                for layer in range(self.geometry.layers):
                    copy_memory_turns(layer)
        finally:
            self.ssd.end_read(plan.session, now_s)
            if own_engine is not None:
                own_engine.close()
            if damaged:
                self._discard(plan.session)
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
            for turn in s.held_in_memory():
                if turn == s.open_turn and s.open_medium == Medium.SSD:
                    continue  # bound for SSD, not counted in memory
                if turn == s.open_turn:
                    s.open_turn, s.open_tag = None, []
                s.turns[turn] = None
                s.memory.pop(turn, None)
                s.chunks.pop(turn, None)
            dropped.append(r)
        return tuple(dropped)

    def drop(self, session: str, now_s: float) -> int:
        """Remove ``session`` whole, whatever the watermark (an engine's own eviction decision,
        made where this store's reclaimer does not run): its file deleted, its memory turns
        freed; the name may start again at turn 0. Refused while a restore of it runs. Returns
        the bytes freed on both media."""
        self._clock(now_s)
        self._session(session, create=False)  # names the session when unknown
        if self.ssd.being_read(session):
            raise InputError(
                f"session: {session!r} is being restored; it cannot be dropped now",
                parameter="session",
            )
        return self._discard(session)

    def _discard(self, session: str) -> int:
        """Forget ``session`` and delete its file (a drop, or damage found by a read: the next
        write of the name starts again at turn 0)."""
        s = self._sessions.pop(session, None)
        if s is None:
            return 0
        freed = self.ssd.remove(session) + self.memory.remove(session)
        self._drop_file(s, remove=True)
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
            tags_path(path).unlink(missing_ok=True)  # written by this store alone
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
        :meth:`open` created it and nothing else is left in it. Without ``remove`` open turns
        are sealed first, so what was stored survives a restart."""
        failed: list[BaseException] = []
        for s in self._sessions.values():
            if s.open_turn is not None and not remove and self._lock.held:
                try:
                    self._seal(s, self._now)
                except Exception as e:  # closed all the same; the first failure is raised
                    failed.append(e)
            self._drop_file(s, remove=remove)
        self._lock.release(remove=remove)
        if remove and self._made_directory:
            try:
                self.directory.rmdir()  # only when empty: other stores' files stay
            except OSError:
                pass
        if failed:
            raise failed[0]

    def __enter__(self) -> FlatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
