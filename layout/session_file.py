"""FC-CIO session files: one pre-allocated, contiguous, layer-ordered file per session.

The byte layout (header slots, segments, turn records) is :mod:`.session_format`, specified in
``docs/layout.md``; this module does the file I/O: create, open and validate, append a turn
durably, plan and check reads.

Committing a turn (crash safety):

1. write the *other* header slot with generation g+1 and state WRITING (turn count unchanged),
   fdatasync;
2. write the segment (layer ranges, then the turn record), fdatasync;
3. write the slot of generation g with generation g+2, state CLEAN, the new turn count, the
   new end of data and the chained CRC32 of all turn records, fdatasync.

A torn header write fails its CRC and the other slot wins: a torn step 1 leaves generation g
(CLEAN; the half-written segment lies past its end of data and is never referenced), a torn
step 3 leaves generation g+1 (WRITING). :meth:`SessionFile.open` refuses a WRITING file with
:class:`CorruptSessionFile`; ``recover=True`` opens it from the newest valid, possible header
slot plus every following turn whose record and layer data checksums hold (so bit rot in a
header or a torn commit never drops an intact turn), and ignores the partial segment.

Reads verify: :meth:`SessionFile.read_layer` checks the layer's CRC-32 and raises
:class:`VerificationError` on a mismatch, and the extents it plans carry the CRC-32 for the
engines to check.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .alignment import align_up
from .checksum import crc32
from .errors import CorruptSessionFile, LayoutError, SessionFileExists, VerificationError
from .geometry import KvGeometry
from .planner import DEFAULT_GAP_BYTES, Extent, ReadPlan, plan_reads
from .session_format import (
    ALIGN,
    DATA_START,
    DEFAULT_EXTENT_BYTES,
    MAGIC,
    NEVER_WRITTEN,
    SLOT_BYTES,
    STATE_CLEAN,
    STATE_WRITING,
    Header,
    TurnRecord,
    check_generations,
    encode_name,
    pack_header,
    pack_record,
    record_bytes,
    record_len,
    slot_offset,
    turn_blocks,
    unpack_header,
    unpack_record,
)

# What ``append_turn`` takes as a turn's bytes: a callback filling one layer's buffer, or an
# array of ``layers x layer_bytes`` bytes.
LayerData = Callable[[int, memoryview], None] | np.ndarray


@dataclass(frozen=True)
class _Segment:
    """Where one turn's segment goes and how big its parts are (bytes)."""

    offset: int
    tokens: int
    blocks: int
    layer_bytes: int  # one layer range's data
    stride: int  # one layer range padded to the page
    record_bytes: int
    layers: int

    @property
    def first_layer(self) -> int:
        return self.offset + self.record_bytes

    @property
    def nbytes(self) -> int:
        return self.record_bytes + self.layers * self.stride

    def layer_offset(self, layer: int) -> int:
        return self.first_layer + layer * self.stride


def _write_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


def _read_exact(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length:
        b = os.pread(fd, length, offset)
        if not b:
            break
        chunks.append(b)
        length -= len(b)
        offset += len(b)
    return b"".join(chunks)


def _fsync_dir(path: Path) -> None:
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


class SessionFile:
    """An open FC-CIO session file. Create with :meth:`create`, reopen with :meth:`open`."""

    def __init__(
        self, path: Path, fd: int, header: Header, turns: list[TurnRecord], writable: bool
    ):
        # Internal: use create() or open().
        self._path = path
        self._fd: int | None = fd
        self._header = header
        self._turns = turns
        self._writable = writable
        self._scratch: np.ndarray | None = None

    # ---------------------------------------------------------------- construction
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        geometry: KvGeometry,
        *,
        block_tokens: int,
        session_id: str = "",
        reserve_bytes: int = 0,
        extent_bytes: int = DEFAULT_EXTENT_BYTES,
        overwrite: bool = False,
    ) -> SessionFile:
        """Create an empty session file, pre-allocated to whole extents of ``extent_bytes``
        holding at least the headers plus ``reserve_bytes`` of segments.

        The file is built under a temporary name and hard-linked into place, so ``path`` either
        does not exist or is a valid, empty session file, and an existing ``path`` is never
        replaced: it raises :class:`SessionFileExists`, however the two creators race. With
        ``overwrite`` an existing file is replaced, but only one no writer holds (another
        writer's file raises :class:`LayoutError`). The returned object is the file's
        (exclusive) writer.
        """
        p = Path(path)
        if not isinstance(block_tokens, int) or block_tokens < 1:
            raise LayoutError(f"{p}: block_tokens must be an integer >= 1; got {block_tokens!r}")
        if not isinstance(extent_bytes, int) or extent_bytes < ALIGN or extent_bytes % ALIGN:
            raise LayoutError(
                f"{p}: extent_bytes must be a multiple of {ALIGN} >= {ALIGN}; got {extent_bytes!r}"
            )
        if not isinstance(reserve_bytes, int) or reserve_bytes < 0:
            raise LayoutError(f"{p}: reserve_bytes must be an integer >= 0; got {reserve_bytes!r}")
        encode_name(p, "session_id", session_id, truncate=False)
        if p.exists() and not overwrite:
            raise _exists(p)  # early, before allocating; _publish decides under the race
        if not p.parent.is_dir():
            raise LayoutError(f"{p}: directory {p.parent} does not exist")
        capacity = align_up(DATA_START + reserve_bytes, extent_bytes)
        header = Header(
            generation=1,
            state=STATE_CLEAN,
            block_tokens=block_tokens,
            geometry=geometry,
            bytes_per_block_per_layer=geometry.bytes_per_block_per_layer(block_tokens),
            turn_count=0,
            token_count=0,
            data_end=DATA_START,
            capacity_bytes=capacity,
            extent_bytes=extent_bytes,
            index_crc32=0,
            created_unix_ns=time.time_ns(),
            session_id=session_id,
        )
        # Unique per call (two creators in one process share the pid), and O_EXCL: a
        # temporary name is never shared either.
        tmp = p.with_name(f".{p.name}.creating-{os.getpid()}-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _allocate(fd, 0, capacity)
            _write_all(fd, bytes(SLOT_BYTES), 0)  # slot 0: generation 0, invalid until used
            _write_all(fd, pack_header(p, header), slot_offset(header.generation))
            os.fsync(fd)
            _lock(fd, p)  # flock follows the inode through link/rename: no writer gap
            _publish(tmp, p, overwrite)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(p)
        return cls(p, fd, header, [], writable=True)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, writable: bool = False, recover: bool = False
    ) -> SessionFile:
        """Open and validate a session file.

        Raises :class:`CorruptSessionFile` (naming the path and the problem) for a file that
        is not a session file, has an unsupported version, is truncated, fails a header,
        turn-record or index checksum, has an impossible header, or was left by an interrupted
        writer. With ``recover=True`` the newest valid header slot whose turns check is used,
        followed by every intact turn of the record chain past it (docs/layout.md,
        "Recovery"); with ``writable=True`` as well, that state is committed at once and the
        next append goes after the last intact turn (overwriting only a partial segment).
        """
        p = Path(path)
        try:
            fd = os.open(p, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise LayoutError(f"{p}: session file not found") from None
        except IsADirectoryError:
            raise LayoutError(f"{p}: is a directory, not a session file") from None
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise LayoutError(f"{p}: is a directory, not a session file")
            if writable:
                _lock(fd, p)
            header, turns, recovered = _load(fd, p, recover)
            if recovered and writable:
                header = _commit_recovered(fd, p, header)
        except BaseException:
            os.close(fd)
            raise
        return cls(p, fd, header, turns, writable=writable)

    # ---------------------------------------------------------------- properties
    @property
    def path(self) -> Path:
        return self._path

    @property
    def identity(self) -> tuple[int, int]:
        """``(st_dev, st_ino)`` of the open file: which file this is, whatever now has its name
        (a caller that removes it checks the name still leads here)."""
        st = os.fstat(self._require_open())
        return (st.st_dev, st.st_ino)

    @property
    def geometry(self) -> KvGeometry:
        return self._header.geometry

    @property
    def block_tokens(self) -> int:
        return self._header.block_tokens

    @property
    def session_id(self) -> str:
        return self._header.session_id

    @property
    def bytes_per_block_per_layer(self) -> int:
        return self._header.bytes_per_block_per_layer

    @property
    def layers(self) -> int:
        return self._header.geometry.layers

    @property
    def turns(self) -> tuple[TurnRecord, ...]:
        return tuple(self._turns)

    @property
    def token_count(self) -> int:
        return self._header.token_count

    @property
    def block_count(self) -> int:
        return sum(t.blocks for t in self._turns)

    @property
    def data_end(self) -> int:
        """End of the last committed segment: the next segment starts here."""
        return self._header.data_end

    @property
    def capacity_bytes(self) -> int:
        """Bytes allocated for the file (a whole number of extents)."""
        return self._header.capacity_bytes

    @property
    def kv_bytes(self) -> int:
        """KV bytes stored (all turns, all layers; without headers and padding)."""
        return sum(t.layer_bytes for t in self._turns) * self.layers

    def layer_bytes_for(self, tokens: int) -> int:
        """Size of one layer range of a turn of ``tokens`` tokens (whole pages)."""
        return turn_blocks(tokens, self.block_tokens) * self.bytes_per_block_per_layer

    # ---------------------------------------------------------------- writing
    def append_turn(self, tokens: int, layer_data: LayerData) -> TurnRecord:
        """Append one turn of ``tokens`` tokens as a layer-ordered segment and commit it durably.

        ``layer_data`` is either a callback ``fill(layer, buffer)`` that fills the writable
        ``memoryview`` of ``layer_bytes`` bytes for that layer, or an array whose bytes are
        ``layers x layer_bytes`` (e.g. shape ``(layers, layer_bytes)`` uint8), where
        ``layer_bytes = ceil(tokens / block_tokens) * bytes_per_block_per_layer``.
        Returns the committed :class:`TurnRecord`.
        """
        fd = self._require_open()
        if not self._writable:
            raise LayoutError(f"{self._path}: opened read-only; open with writable=True to append")
        seg = self._next_segment(tokens)
        rows = self._layer_rows(seg, layer_data)
        self._grow_to(fd, seg.offset + seg.nbytes)  # step 0: may fail (disk full); file clean
        marker = self._mark_writing(fd)  # step 1
        if rows is not None:
            checksums = self._write_layer_rows(fd, seg, rows)
        else:
            # Not an array, so _layer_rows checked that it is the callback.
            checksums = self._write_layer_callback(fd, seg, layer_data)  # type: ignore[arg-type]
        rec, raw = self._write_record(fd, seg, checksums)  # step 2 ends with fdatasync
        self._commit(fd, marker, rec, raw)  # step 3
        return rec

    def _next_segment(self, tokens: int) -> _Segment:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise LayoutError(
                f"{self._path}: append_turn: tokens must be an integer >= 1; got {tokens!r}"
            )
        h = self._header
        blocks = turn_blocks(tokens, h.block_tokens)
        layer_bytes = blocks * h.bytes_per_block_per_layer
        return _Segment(
            offset=h.data_end,
            tokens=tokens,
            blocks=blocks,
            layer_bytes=layer_bytes,
            stride=align_up(layer_bytes),
            record_bytes=record_bytes(h.geometry.layers),
            layers=h.geometry.layers,
        )

    def _layer_rows(self, seg: _Segment, layer_data: LayerData) -> np.ndarray | None:
        """An array's bytes as ``(layers, layer_bytes)`` uint8 rows; ``None`` for a callback."""
        if isinstance(layer_data, np.ndarray):
            arr = np.ascontiguousarray(layer_data)
            if arr.nbytes != seg.layers * seg.layer_bytes:
                raise LayoutError(
                    f"{self._path}: append_turn: layer_data must hold layers x layer_bytes = "
                    f"{seg.layers} x {seg.layer_bytes} bytes for {seg.tokens} tokens; got shape "
                    f"{arr.shape} dtype {arr.dtype} ({arr.nbytes} bytes)"
                )
            return arr.reshape(-1).view(np.uint8).reshape(seg.layers, seg.layer_bytes)
        if not callable(layer_data):
            raise LayoutError(
                f"{self._path}: append_turn: layer_data must be a callable or an array; got "
                f"{layer_data!r}"
            )
        return None

    def _grow_to(self, fd: int, need: int) -> None:
        """Grow by whole extents before marking the file dirty, so a failed allocation (disk
        full) leaves the file clean."""
        h = self._header
        if need > h.capacity_bytes:
            new_cap = align_up(need, h.extent_bytes)
            _allocate(fd, h.capacity_bytes, new_cap - h.capacity_bytes)
            self._header = replace(h, capacity_bytes=new_cap)

    def _mark_writing(self, fd: int) -> Header:
        h = self._header
        marker = replace(h, generation=h.generation + 1, state=STATE_WRITING)
        self._write_header(fd, marker)
        self._header = marker
        return marker

    def _write_layer_rows(self, fd: int, seg: _Segment, rows: np.ndarray) -> list[int]:
        pad = bytes(seg.stride - seg.layer_bytes)
        checksums = []
        for layer in range(seg.layers):
            off = seg.layer_offset(layer)
            _write_all(fd, rows[layer].data, off)
            if pad:
                _write_all(fd, pad, off + seg.layer_bytes)
            checksums.append(crc32(rows[layer]))
        return checksums

    def _write_layer_callback(
        self, fd: int, seg: _Segment, fill: Callable[[int, memoryview], None]
    ) -> list[int]:
        scratch = self._scratch_buffer(seg.stride)
        checksums = []
        for layer in range(seg.layers):
            scratch[seg.layer_bytes : seg.stride] = 0
            view = scratch.data[: seg.layer_bytes]
            fill(layer, view)
            checksums.append(crc32(view))
            _write_all(fd, scratch.data[: seg.stride], seg.layer_offset(layer))
        return checksums

    def _write_record(
        self, fd: int, seg: _Segment, checksums: list[int]
    ) -> tuple[TurnRecord, bytes]:
        rec = TurnRecord(
            index=len(self._turns),
            token_start=self._header.token_count,
            tokens=seg.tokens,
            blocks=seg.blocks,
            layer_offsets=tuple(seg.layer_offset(layer) for layer in range(seg.layers)),
            layer_bytes=seg.layer_bytes,
            layer_checksums=tuple(checksums),
            segment_offset=seg.offset,
            segment_bytes=seg.nbytes,
        )
        raw = pack_record(rec, seg.layers, seg.stride)
        _write_all(fd, raw + bytes(seg.record_bytes - len(raw)), seg.offset)
        os.fdatasync(fd)  # the segment is durable before the header points at it
        return rec, raw

    def _commit(self, fd: int, marker: Header, rec: TurnRecord, raw: bytes) -> None:
        commit = replace(
            marker,
            generation=marker.generation + 1,
            state=STATE_CLEAN,
            turn_count=marker.turn_count + 1,
            token_count=marker.token_count + rec.tokens,
            data_end=rec.segment_offset + rec.segment_bytes,
            index_crc32=zlib.crc32(raw, marker.index_crc32),
        )
        self._write_header(fd, commit)
        self._header = commit
        self._turns.append(rec)

    def _write_header(self, fd: int, header: Header) -> None:
        _write_all(fd, pack_header(self._path, header), slot_offset(header.generation))
        os.fdatasync(fd)

    def _scratch_buffer(self, nbytes: int) -> np.ndarray:
        if self._scratch is None or self._scratch.nbytes < nbytes:
            self._scratch = np.zeros(nbytes, dtype=np.uint8)
        return self._scratch[:nbytes]

    # ---------------------------------------------------------------- reading
    def _turn(self, turn: int) -> TurnRecord:
        if not isinstance(turn, int) or not 0 <= turn < len(self._turns):
            raise LayoutError(
                f"{self._path}: turn must be in [0, {len(self._turns)}); got {turn!r}"
            )
        return self._turns[turn]

    def _check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise LayoutError(f"{self._path}: layer must be in [0, {self.layers}); got {layer!r}")

    def layer_extents(self, layer: int, turns: Iterable[int] | None = None) -> list[Extent]:
        """One :class:`Extent` per turn: that turn's whole range at ``layer``.

        ``tag`` is ``(turn, layer)``; ``turns`` defaults to all committed turns, in order.
        ``checksum`` is the layer's CRC-32, so an engine that verifies (posix by default) checks
        every layer range it reads through a plan of these extents.
        """
        self._check_layer(layer)
        picked = range(len(self._turns)) if turns is None else turns
        out = []
        for t in picked:
            rec = self._turn(t)
            out.append(
                Extent(
                    str(self._path),
                    rec.layer_offsets[layer],
                    rec.layer_bytes,
                    (t, layer),
                    checksum=rec.layer_checksums[layer],
                )
            )
        return out

    def block_extent(self, turn: int, layer: int, block: int) -> Extent:
        """One block's piece at one layer; ``tag`` is ``(turn, layer, block)``."""
        rec = self._turn(turn)
        self._check_layer(layer)
        if not isinstance(block, int) or not 0 <= block < rec.blocks:
            raise LayoutError(
                f"{self._path}: turn {turn}: block must be in [0, {rec.blocks}); got {block!r}"
            )
        bpb = self.bytes_per_block_per_layer
        return Extent(
            str(self._path), rec.layer_offsets[layer] + block * bpb, bpb, (turn, layer, block)
        )

    def restore_plans(
        self,
        *,
        turns: Iterable[int] | None = None,
        gap_bytes: int = DEFAULT_GAP_BYTES,
        max_command_bytes: int | None = None,
        align: int = ALIGN,
    ) -> list[ReadPlan]:
        """One :class:`ReadPlan` per layer covering ``turns`` (default all): a layer-wise restore.

        Each plan's placements are that layer's turn extents in turn order, so the destination
        buffer holds the session's blocks for that layer in block order (with alignment padding
        between turns; use the placements).
        """
        picked = list(range(len(self._turns)) if turns is None else turns)
        return [
            plan_reads(
                self.layer_extents(layer, picked),
                gap_bytes=gap_bytes,
                max_command_bytes=max_command_bytes,
                align=align,
            )
            for layer in range(self.layers)
        ]

    def read_layer(self, turn: int, layer: int, *, verify: bool = True) -> bytes:
        """The bytes of one (turn, layer) range, read with a plain buffered pread.

        Checked against the layer's CRC-32 unless ``verify=False`` (for callers that check
        elsewhere): a mismatch raises :class:`VerificationError` naming the file, turn, layer
        and offset, so damaged KV bytes never come back as data.
        """
        fd = self._require_open()
        rec = self._turn(turn)
        self._check_layer(layer)
        data = _read_exact(fd, rec.layer_bytes, rec.layer_offsets[layer])
        if len(data) != rec.layer_bytes:
            raise CorruptSessionFile(
                f"{self._path}: turn {turn} layer {layer}: truncated at offset "
                f"{rec.layer_offsets[layer] + len(data)}; expected {rec.layer_bytes} bytes"
            )
        if verify:
            self.check_layer(turn, layer, data)
        return data

    def verify_layer(self, turn: int, layer: int, data: object) -> bool:
        """True when ``data`` (exactly ``layer_bytes`` bytes) matches the stored CRC32."""
        rec = self._turn(turn)
        self._check_layer(layer)
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        return view.nbytes == rec.layer_bytes and crc32(view) == rec.layer_checksums[layer]

    def check_layer(self, turn: int, layer: int, data: object) -> None:
        """Raise :class:`VerificationError` unless ``data`` is the (turn, layer) range as
        written (its length and CRC-32)."""
        if self.verify_layer(turn, layer, data):
            return
        rec = self._turns[turn]
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        got = (
            f"crc32 {crc32(view):#010x}"
            if view.nbytes == rec.layer_bytes
            else f"{view.nbytes} bytes (expected {rec.layer_bytes})"
        )
        raise VerificationError(
            f"{self._path}: turn {turn} layer {layer}: layer checksum mismatch at offset "
            f"{rec.layer_offsets[layer]}: stored crc32 {rec.layer_checksums[layer]:#010x}, read "
            f"{got} (the file is damaged; its bytes were not returned as data)"
        )

    def verify_all(self, turns: Iterable[int] | None = None) -> int:
        """Read and check every layer of ``turns`` (default all), one layer at a time; returns
        the bytes checked. Raises :class:`VerificationError` at the first damaged layer."""
        checked = 0
        for t in range(len(self._turns)) if turns is None else turns:
            for layer in range(self.layers):
                checked += len(self.read_layer(t, layer))
        return checked

    # ---------------------------------------------------------------- lifecycle
    def _require_open(self) -> int:
        if self._fd is None:
            raise LayoutError(f"{self._path}: session file is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # also releases the writer's flock
            self._fd = None

    def __enter__(self) -> SessionFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SessionFile({str(self._path)!r}, turns={len(self._turns)}, "
            f"tokens={self.token_count}, "
            f"layers={self.layers}, block_tokens={self.block_tokens})"
        )


def is_session_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file that starts as an FC-CIO session file does (either
    header slot's magic), damaged or not: what a store may reclaim as its own."""
    try:
        with open(path, "rb") as f:
            head = f.read(SLOT_BYTES + len(MAGIC))
    except OSError:
        return False
    return head[:8] == MAGIC or head[SLOT_BYTES : SLOT_BYTES + 8] == MAGIC


def _commit_recovered(fd: int, path: Path, header: Header) -> Header:
    """Write the recovered state as a CLEAN header into the slot that does *not* hold the header
    it was recovered from (generation + 1), so a torn write here still leaves that one."""
    commit = replace(header, generation=header.generation + 1)
    _write_all(fd, pack_header(path, commit), slot_offset(commit.generation))
    os.fdatasync(fd)
    return commit


def _exists(path: Path) -> SessionFileExists:
    return SessionFileExists(
        f"{path}: session file already exists; it is never replaced (another writer's or an "
        "earlier run's KV: open it, or pass overwrite=True to replace a file no writer holds)"
    )


# link(2) errors of a file system without hard links (vfat, some FUSE and network mounts).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    """Give the finished file at ``tmp`` the name ``path``.

    Without ``overwrite`` it never replaces an existing ``path``: ``link`` fails atomically
    when the name exists (a rename would silently replace it, whatever was checked before).
    Where hard links are refused, ``path`` is first claimed with ``O_EXCL`` (empty, briefly,
    until the rename over it), which is just as exclusive. With ``overwrite``, the existing
    file's writer lock is taken first and held across the rename, so a file a writer holds is
    never replaced and no writer can take the old file meanwhile.
    """
    if overwrite:
        try:
            old = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            old = None
        try:
            if old is not None:
                _lock(old, path)
            os.replace(tmp, path)
        finally:
            if old is not None:
                os.close(old)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            raise _exists(path) from None
        try:
            os.replace(tmp, path)  # over the empty placeholder this call just created
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return
    os.unlink(tmp)


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LayoutError(f"{path}: another writer holds this session file open") from None


def _allocate(fd: int, offset: int, length: int) -> None:
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        # The filesystem cannot pre-allocate: at least extend the file to its final size.
        os.ftruncate(fd, offset + length)


# --------------------------------------------------------------------------- loading


def _load(fd: int, path: Path, recover: bool) -> tuple[Header, list[TurnRecord], bool]:
    """The current header and the committed turns, each checked (see :meth:`SessionFile.open`).

    The third value says whether the header was rebuilt by recovery (the caller commits it to
    disk when it opened the file for writing).
    """
    size = os.fstat(fd).st_size
    candidates, damage = _header_candidates(fd, path, size)
    if not recover:
        header = candidates[0]
        if header.state == STATE_WRITING:
            extra = f" ({damage[0]})" if damage else ""
            raise CorruptSessionFile(
                f"{path}: left by an interrupted writer: header generation {header.generation} "
                f"marks an append in progress{extra}; the {header.turn_count} turns committed "
                "before it are intact (open with recover=True to read them)"
            )
        refused = [why for why in damage if _REFUSED in why]
        if refused:
            raise CorruptSessionFile(
                f"{path}: {refused[0]} (open with recover=True to use the other slot)"
            )
        if size < header.data_end:
            raise CorruptSessionFile(
                f"{path}: truncated: committed data ends at byte {header.data_end}; file has "
                f"{size} bytes"
            )
        return header, _load_committed(fd, path, header), False
    return _recover(fd, path, size, candidates, damage)


# Marks a slot that passed its checksum but was refused (impossible next to the other slot).
_REFUSED = "refused"


def _header_candidates(fd: int, path: Path, size: int) -> tuple[list[Header], list[str]]:
    """The valid header slots, newest first, and why the others are not valid (a slot that was
    simply never written is not listed as damage)."""
    head = _read_exact(fd, DATA_START, 0)
    # Slot 0 of a file that has had no append yet is zeros, and one damaged slot must not hide
    # the other: a file is foreign only when neither slot starts with the magic.
    if head[:8] != MAGIC and head[SLOT_BYTES : SLOT_BYTES + 8] != MAGIC:
        raise CorruptSessionFile(
            f"{path}: offset 0: bad magic {head[:8]!r} (expected {MAGIC!r}): not an FC-CIO "
            "session file"
        )
    if len(head) < DATA_START:
        raise CorruptSessionFile(
            f"{path}: truncated: the two header slots need {DATA_START} bytes; file has {size}"
        )
    found = [unpack_header(path, i, head[i * SLOT_BYTES : (i + 1) * SLOT_BYTES]) for i in (0, 1)]
    valid = [h for h, _ in found if h is not None]
    damage = [why for h, why in found if h is None and NEVER_WRITTEN not in why]
    why = check_generations(valid)
    if why:
        # Generations advance by one, so the slot far ahead cannot be what the writer left.
        ahead = max(valid, key=lambda h: h.generation)
        valid.remove(ahead)
        damage.append(f"header slot {ahead.generation % 2}: {why}: {_REFUSED}")
    if not valid:
        reasons = [why for _, why in found if why] + damage
        raise CorruptSessionFile(f"{path}: no valid header slot: " + "; ".join(reasons))
    return sorted(valid, key=lambda h: h.generation, reverse=True), damage


def _load_committed(fd: int, path: Path, header: Header) -> list[TurnRecord]:
    """The turns ``header`` committed, each record checked, with the chained index CRC."""
    turns, crc, end, tokens = _load_turns(fd, path, header)
    if crc != header.index_crc32:
        raise CorruptSessionFile(
            f"{path}: index checksum mismatch: header says {header.index_crc32:#010x}, turn "
            f"records give {crc:#010x}"
        )
    if end != header.data_end or tokens != header.token_count:
        raise CorruptSessionFile(
            f"{path}: header end of data/token count ({header.data_end}/{header.token_count}) "
            f"disagree with the turn records ({end}/{tokens})"
        )
    return turns


def _recover(
    fd: int, path: Path, size: int, candidates: list[Header], damage: list[str]
) -> tuple[Header, list[TurnRecord], bool]:
    """Recovery: the newest header slot whose committed turns are all intact, then every intact
    turn that follows it in the record chain.

    A header slot that is damaged (bit rot, a torn write) or impossible falls back to the other
    slot; the record chain then brings back turns whose record and data checksums hold but
    which that slot does not count (the commit header that counted them is the damaged one).
    A turn is taken from the chain only when its record checks and every layer's data matches
    its CRC-32, so recovery never invents a turn, and the next append starts after the last
    intact turn, so it never overwrites one.
    """
    failures = list(damage)
    for header in candidates:
        if header.data_end > size:
            failures.append(
                f"header generation {header.generation}: data_end {header.data_end} lies past "
                f"the end of the file ({size} bytes)"
            )
            continue
        try:
            turns = _load_committed(fd, path, header)
        except CorruptSessionFile as e:
            failures.append(f"header generation {header.generation}: {e}")
            continue
        extra: list[TurnRecord]
        if header.state == STATE_CLEAN and not failures:
            # The last append committed and both slots check: nothing can follow its end of
            # data (a segment written without its commit leaves the header WRITING), so the
            # pre-allocated space past it is not read (on a cold cache, most of an open).
            extra, end, tokens, crc = [], header.data_end, header.token_count, header.index_crc32
        else:
            extra, end, tokens, crc = _intact_chain(fd, path, header, size)
        changed = header.state != STATE_CLEAN or bool(extra)
        recovered = replace(
            header,
            state=STATE_CLEAN,
            turn_count=header.turn_count + len(extra),
            token_count=tokens,
            data_end=end,
            index_crc32=crc,
            # A grow that happened before the crash may not be in this header; never shrink.
            capacity_bytes=max(header.capacity_bytes, size),
        )
        return recovered, turns + extra, changed
    raise CorruptSessionFile(f"{path}: cannot recover: " + "; ".join(failures))


def _intact_chain(
    fd: int, path: Path, header: Header, size: int
) -> tuple[list[TurnRecord], int, int, int]:
    """Turns past ``header.data_end`` whose record and all layer data check:
    ``(turns, end of the last, token count, chained index CRC)``."""
    layers = header.geometry.layers
    rec_len = record_len(layers)
    rec_bytes = record_bytes(layers)
    at = header.data_end
    index = header.turn_count
    tokens = header.token_count
    crc = header.index_crc32
    extra: list[TurnRecord] = []
    while at + rec_bytes <= size:
        raw = _read_exact(fd, rec_len, at)
        try:
            rec = unpack_record(
                f"{path}: turn record {index} at offset {at}", raw, header, index, at, tokens
            )
        except CorruptSessionFile:
            break  # the end of the chain: pre-allocated zeros or a partial segment
        if at + rec.segment_bytes > size or not all(
            crc32(_read_exact(fd, rec.layer_bytes, off)) == rec.layer_checksums[layer]
            for layer, off in enumerate(rec.layer_offsets)
        ):
            break  # a record written before (some of) its data reached the disk
        extra.append(rec)
        crc = zlib.crc32(raw, crc)
        at += rec.segment_bytes
        tokens += rec.tokens
        index += 1
    return extra, at, tokens, crc


def _load_turns(fd: int, path: Path, header: Header) -> tuple[list[TurnRecord], int, int, int]:
    """The header's committed turn records, each checked: ``(turns, chained CRC32, end of the
    last segment, tokens)``."""
    rec_len = record_len(header.geometry.layers)
    rec_bytes = record_bytes(header.geometry.layers)
    turns: list[TurnRecord] = []
    crc = 0
    at = DATA_START
    token_start = 0
    for index in range(header.turn_count):
        where = f"{path}: turn record {index} at offset {at}"
        if at + rec_bytes > header.data_end:
            raise CorruptSessionFile(
                f"{where}: runs past the committed end of data ({header.data_end})"
            )
        raw = _read_exact(fd, rec_len, at)
        rec = unpack_record(where, raw, header, index, at, token_start)
        turns.append(rec)
        crc = zlib.crc32(raw, crc)
        at += rec.segment_bytes
        token_start += rec.tokens
    return turns, crc, at, token_start
