"""FC-CIO session files: one pre-allocated, contiguous, layer-ordered file per session.

The full on-disk format is specified in ``docs/layout.md``; in short (all integers little-endian)::

    offset 0      header slot 0 (4096 bytes)   } two slots, written alternately; the valid one
    offset 4096   header slot 1 (4096 bytes)   } with the highest generation is current
    offset 8192   segment of turn 0:
                    turn record (4096-aligned size): token range, per-layer CRC32s
                    layer 0 range:  all blocks of the turn at layer 0, padded to 4096
                    layer 1 range:  ...
                    layer L-1 range
                  segment of turn 1 ... (segments follow each other, each 4096-aligned)
                  pre-allocated, unused space up to a whole number of extents

Committing a turn (crash safety):

1. write the *other* header slot with generation g+1 and state WRITING (turn count unchanged),
   fdatasync;
2. write the segment (layer ranges, then the turn record), fdatasync;
3. write the slot of generation g with generation g+2, state CLEAN, the new turn count, the
   new end of data and the chained CRC32 of all turn records, fdatasync.

A torn header write fails its CRC and the other slot wins: a torn step 1 leaves generation g
(CLEAN; the half-written segment lies past its end of data and is never referenced), a torn
step 3 leaves generation g+1 (WRITING). :meth:`SessionFile.open` refuses a WRITING file with
:class:`CorruptSessionFile`; ``recover=True`` opens it with the turns committed before the
interrupted append (those stay intact and verified) and ignores the partial segment.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import stat
import struct
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CorruptSessionFile, LayoutError
from .geometry import KvGeometry
from .planner import DEFAULT_GAP_BYTES, Extent, ReadPlan, plan_reads

MAGIC = b"FCCIO\x00\x00\x00"
TURN_MAGIC = b"FCTURN\x00\x00"
FORMAT_VERSION = 1
ALIGN = 4096
SLOT_BYTES = 4096
DATA_START = 2 * SLOT_BYTES
DEFAULT_EXTENT_BYTES = 64 * 2**20
STATE_CLEAN = 0
STATE_WRITING = 1
NAME_BYTES = 64

# Header slot: fixed fields, zero padding, CRC32 of bytes [0, 4092) in the last 4 bytes.
_HEADER = struct.Struct("<8sIIQIIIIIIIIQQQQQQQIIQ64s64s")
assert _HEADER.size == 256
_HEADER_CRC = struct.Struct("<I")
_HEADER_CRC_AT = SLOT_BYTES - 4

# Turn record: fixed part, then one CRC32 per layer, then the record's own CRC32.
_TURN = struct.Struct("<8sQQQQQQQQQII")
assert _TURN.size == 88


def _align_up(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


@dataclass(frozen=True)
class TurnRecord:
    """One appended turn. Offsets and sizes in bytes; ``layer_bytes`` is one layer range's data
    (``blocks x bytes_per_block_per_layer``, without the padding to 4096)."""

    index: int
    token_start: int
    tokens: int
    blocks: int
    layer_offsets: tuple[int, ...]
    layer_bytes: int
    layer_checksums: tuple[int, ...]
    segment_offset: int = 0
    segment_bytes: int = 0

    @property
    def token_end(self) -> int:
        return self.token_start + self.tokens


@dataclass(frozen=True)
class _Header:
    generation: int
    state: int
    block_tokens: int
    geometry: KvGeometry
    bytes_per_block_per_layer: int
    turn_count: int
    token_count: int
    data_end: int
    capacity_bytes: int
    extent_bytes: int
    index_crc32: int
    created_unix_ns: int
    session_id: str


def _encode_name(path: object, field: str, text: str, truncate: bool) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > NAME_BYTES:
        if not truncate:
            raise LayoutError(
                f"{path}: {field} must be at most {NAME_BYTES} UTF-8 bytes; got {text!r}"
            )
        raw = raw[:NAME_BYTES].decode("utf-8", "ignore").encode("utf-8")
    return raw


def _pack_header(path: object, h: _Header) -> bytes:
    g = h.geometry
    fixed = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        SLOT_BYTES,
        h.generation,
        h.state,
        h.block_tokens,
        g.layers,
        g.kv_heads,
        g.head_dim,
        g.dtype_bytes,
        g.latent_dim,
        g.tp,
        h.bytes_per_block_per_layer,
        h.turn_count,
        h.token_count,
        DATA_START,
        h.data_end,
        h.capacity_bytes,
        h.extent_bytes,
        h.index_crc32,
        0,
        h.created_unix_ns,
        _encode_name(path, "model name", g.name, truncate=True),
        _encode_name(path, "session_id", h.session_id, truncate=False),
    )
    slot = bytearray(SLOT_BYTES)
    slot[: len(fixed)] = fixed
    _HEADER_CRC.pack_into(slot, _HEADER_CRC_AT, zlib.crc32(slot[:_HEADER_CRC_AT]))
    return bytes(slot)


def _unpack_header(path: object, slot_index: int, raw: bytes) -> tuple[_Header | None, str]:
    """``(header, "")`` for a valid slot, else ``(None, why)``."""
    where = f"header slot {slot_index} (offset {slot_index * SLOT_BYTES})"
    if raw[:8] != MAGIC:
        return (
            None,
            f"{where}: bad magic {raw[:8]!r} (expected {MAGIC!r}): not an FC-CIO session file",
        )
    (stored_crc,) = _HEADER_CRC.unpack_from(raw, _HEADER_CRC_AT)
    if zlib.crc32(raw[:_HEADER_CRC_AT]) != stored_crc:
        return None, f"{where}: header checksum mismatch (torn or corrupted header write)"
    f = _HEADER.unpack_from(raw, 0)
    (
        _,
        version,
        slot_bytes,
        generation,
        state,
        block_tokens,
        layers,
        kv_heads,
        head_dim,
        dtype_bytes,
        latent_dim,
        tp,
        bpbpl,
        turn_count,
        token_count,
        data_start,
        data_end,
        capacity,
        extent_bytes,
        index_crc,
        _,
        created,
        model,
        session_id,
    ) = f
    if version != FORMAT_VERSION:
        return (
            None,
            f"{where}: unsupported format version (this reader knows {FORMAT_VERSION}); got "
            f"{version!r}",
        )
    if slot_bytes != SLOT_BYTES or data_start != DATA_START:
        return (
            None,
            f"{where}: slot size/data start must be {SLOT_BYTES}/{DATA_START}; got "
            f"{slot_bytes}/{data_start}",
        )
    if generation == 0:
        return None, f"{where}: never written (generation 0)"
    if state not in (STATE_CLEAN, STATE_WRITING):
        return None, f"{where}: field 'state' must be 0 (clean) or 1 (writing); got {state!r}"
    try:
        geometry = KvGeometry(
            model.rstrip(b"\x00").decode("utf-8", "replace"),
            layers=layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            latent_dim=latent_dim,
            tp=tp,
        )
    except LayoutError as e:
        return None, f"{where}: bad geometry: {e}"
    if block_tokens < 1 or geometry.bytes_per_block_per_layer(block_tokens) != bpbpl:
        return None, (
            f"{where}: field 'bytes_per_block_per_layer' disagrees with the geometry "
            f"({geometry.bytes_per_block_per_layer(max(block_tokens, 1))}); got {bpbpl!r}"
        )
    if data_end < DATA_START or data_end % ALIGN:
        return (
            None,
            f"{where}: field 'data_end' must be >= {DATA_START} and 4096-aligned; got {data_end!r}",
        )
    header = _Header(
        generation=generation,
        state=state,
        block_tokens=block_tokens,
        geometry=geometry,
        bytes_per_block_per_layer=bpbpl,
        turn_count=turn_count,
        token_count=token_count,
        data_end=data_end,
        capacity_bytes=capacity,
        extent_bytes=extent_bytes,
        index_crc32=index_crc,
        created_unix_ns=created,
        session_id=session_id.rstrip(b"\x00").decode("utf-8", "replace"),
    )
    return header, ""


def _record_len(layers: int) -> int:
    return _TURN.size + 4 * layers + 4


def _pack_record(rec: TurnRecord, layers: int, layer_stride: int) -> bytes:
    first = rec.layer_offsets[0]
    fixed = _TURN.pack(
        TURN_MAGIC,
        rec.index,
        rec.token_start,
        rec.tokens,
        rec.blocks,
        rec.segment_offset,
        first,
        layer_stride,
        rec.layer_bytes,
        rec.segment_bytes,
        layers,
        0,
    )
    body = fixed + struct.pack(f"<{layers}I", *rec.layer_checksums)
    return body + struct.pack("<I", zlib.crc32(body))


def _write_all(fd: int, data: object, offset: int) -> None:
    view = memoryview(data).cast("B")  # type: ignore[arg-type]
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
        self, path: Path, fd: int, header: _Header, turns: list[TurnRecord], writable: bool
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

        The file is built under a temporary name and renamed into place, so ``path`` either
        does not exist or is a valid, empty session file. Refuses an existing ``path`` unless
        ``overwrite``. The returned object is the file's (exclusive) writer.
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
        _encode_name(p, "session_id", session_id, truncate=False)
        if p.exists() and not overwrite:
            raise LayoutError(
                f"{p}: session file already exists (pass overwrite=True to replace it)"
            )
        if not p.parent.is_dir():
            raise LayoutError(f"{p}: directory {p.parent} does not exist")
        capacity = _align_up(DATA_START + reserve_bytes, extent_bytes)
        header = _Header(
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
        tmp = p.with_name(f".{p.name}.creating-{os.getpid()}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _allocate(fd, 0, capacity)
            _write_all(fd, bytes(SLOT_BYTES), 0)  # slot 0: generation 0, invalid until used
            _write_all(fd, _pack_header(p, header), SLOT_BYTES * (header.generation % 2))
            os.fsync(fd)
            _lock(fd, p)  # flock follows the inode through the rename: no writer gap
            os.replace(tmp, p)
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
        turn-record or index checksum, or was left by an interrupted writer. With
        ``recover=True`` an interrupted writer's file opens with the turns committed before
        the interrupted append; with ``writable=True`` as well, the next append overwrites the
        partial segment.
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
            header, turns = _load(fd, p, recover)
        except BaseException:
            os.close(fd)
            raise
        return cls(p, fd, header, turns, writable=writable)

    # ---------------------------------------------------------------- properties
    @property
    def path(self) -> Path:
        return self._path

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
        return math.ceil(tokens / self.block_tokens) * self.bytes_per_block_per_layer

    # ---------------------------------------------------------------- writing
    def append_turn(
        self, tokens: int, layer_data: Callable[[int, memoryview], None] | np.ndarray
    ) -> TurnRecord:
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
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise LayoutError(
                f"{self._path}: append_turn: tokens must be an integer >= 1; got {tokens!r}"
            )
        h = self._header
        layers = h.geometry.layers
        blocks = math.ceil(tokens / h.block_tokens)
        layer_bytes = blocks * h.bytes_per_block_per_layer
        stride = _align_up(layer_bytes)
        record_bytes = _align_up(_record_len(layers))
        segment_bytes = record_bytes + layers * stride
        seg_off = h.data_end
        first_layer = seg_off + record_bytes

        rows: np.ndarray | None = None
        if isinstance(layer_data, np.ndarray):
            arr = np.ascontiguousarray(layer_data)
            if arr.nbytes != layers * layer_bytes:
                raise LayoutError(
                    f"{self._path}: append_turn: layer_data must hold layers x layer_bytes = "
                    f"{layers} x {layer_bytes} bytes for {tokens} tokens; got shape {arr.shape} "
                    f"dtype {arr.dtype} ({arr.nbytes} bytes)"
                )
            rows = arr.reshape(-1).view(np.uint8).reshape(layers, layer_bytes)
        elif not callable(layer_data):
            raise LayoutError(
                f"{self._path}: append_turn: layer_data must be a callable or an array; got "
                f"{layer_data!r}"
            )

        # Grow by whole extents before marking the file dirty, so a failed allocation
        # (disk full) leaves the file clean.
        need = seg_off + segment_bytes
        if need > h.capacity_bytes:
            new_cap = _align_up(need, h.extent_bytes)
            _allocate(fd, h.capacity_bytes, new_cap - h.capacity_bytes)
            h = _replace_header(h, capacity_bytes=new_cap)

        marker = _replace_header(h, generation=h.generation + 1, state=STATE_WRITING)
        self._write_header(fd, marker)
        self._header = marker

        checksums = []
        if rows is not None:
            pad = bytes(stride - layer_bytes)
            for layer in range(layers):
                off = first_layer + layer * stride
                _write_all(fd, rows[layer], off)
                if pad:
                    _write_all(fd, pad, off + layer_bytes)
                checksums.append(zlib.crc32(rows[layer]))
        else:
            scratch = self._scratch_buffer(stride)
            for layer in range(layers):
                scratch[layer_bytes:stride] = 0
                view = memoryview(scratch)[:layer_bytes]
                layer_data(layer, view)  # type: ignore[operator]
                checksums.append(zlib.crc32(view))
                _write_all(fd, memoryview(scratch)[:stride], first_layer + layer * stride)

        rec = TurnRecord(
            index=len(self._turns),
            token_start=h.token_count,
            tokens=tokens,
            blocks=blocks,
            layer_offsets=tuple(first_layer + layer * stride for layer in range(layers)),
            layer_bytes=layer_bytes,
            layer_checksums=tuple(checksums),
            segment_offset=seg_off,
            segment_bytes=segment_bytes,
        )
        raw = _pack_record(rec, layers, stride)
        _write_all(fd, raw + bytes(record_bytes - len(raw)), seg_off)
        os.fdatasync(fd)  # the segment is durable before the header points at it

        commit = _replace_header(
            marker,
            generation=marker.generation + 1,
            state=STATE_CLEAN,
            turn_count=h.turn_count + 1,
            token_count=h.token_count + tokens,
            data_end=seg_off + segment_bytes,
            index_crc32=zlib.crc32(raw, h.index_crc32),
        )
        self._write_header(fd, commit)
        self._header = commit
        self._turns.append(rec)
        return rec

    def _write_header(self, fd: int, header: _Header) -> None:
        _write_all(fd, _pack_header(self._path, header), SLOT_BYTES * (header.generation % 2))
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
        """
        self._check_layer(layer)
        picked = range(len(self._turns)) if turns is None else turns
        out = []
        for t in picked:
            rec = self._turn(t)
            out.append(
                Extent(str(self._path), rec.layer_offsets[layer], rec.layer_bytes, (t, layer))
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

    def read_layer(self, turn: int, layer: int) -> bytes:
        """The bytes of one (turn, layer) range, read with a plain buffered pread (for checks)."""
        fd = self._require_open()
        rec = self._turn(turn)
        self._check_layer(layer)
        data = _read_exact(fd, rec.layer_bytes, rec.layer_offsets[layer])
        if len(data) != rec.layer_bytes:
            raise CorruptSessionFile(
                f"{self._path}: turn {turn} layer {layer}: truncated at offset "
                f"{rec.layer_offsets[layer] + len(data)}; expected {rec.layer_bytes} bytes"
            )
        return data

    def verify_layer(self, turn: int, layer: int, data: object) -> bool:
        """True when ``data`` (exactly ``layer_bytes`` bytes) matches the stored CRC32."""
        rec = self._turn(turn)
        self._check_layer(layer)
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        return view.nbytes == rec.layer_bytes and zlib.crc32(view) == rec.layer_checksums[layer]

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


def _replace_header(h: _Header, **changes: object) -> _Header:
    from dataclasses import replace

    return replace(h, **changes)  # type: ignore[arg-type]


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


def _load(fd: int, path: Path, recover: bool) -> tuple[_Header, list[TurnRecord]]:
    size = os.fstat(fd).st_size
    head = _read_exact(fd, DATA_START, 0)
    if head[:8] != MAGIC:
        raise CorruptSessionFile(
            f"{path}: offset 0: bad magic {head[:8]!r} (expected {MAGIC!r}): not an FC-CIO "
            "session file"
        )
    if len(head) < DATA_START:
        raise CorruptSessionFile(
            f"{path}: truncated: the two header slots need {DATA_START} bytes; file has {size}"
        )
    found = [_unpack_header(path, i, head[i * SLOT_BYTES : (i + 1) * SLOT_BYTES]) for i in (0, 1)]
    valid = [h for h, _ in found if h is not None]
    if not valid:
        raise CorruptSessionFile(
            f"{path}: no valid header slot: " + "; ".join(why for _, why in found)
        )
    header = max(valid, key=lambda h: h.generation)
    other_bad = [why for h, why in found if h is None and "never written" not in why]
    if header.state == STATE_WRITING and not recover:
        extra = f" ({other_bad[0]})" if other_bad else ""
        raise CorruptSessionFile(
            f"{path}: left by an interrupted writer: header generation {header.generation} "
            "marks an "
            f"append in progress{extra}; the {header.turn_count} turns committed before it are "
            "intact "
            f"(open with recover=True to read them)"
        )
    if size < header.data_end:
        raise CorruptSessionFile(
            f"{path}: truncated: committed data ends at byte {header.data_end}; file has {size} "
            "bytes"
        )
    layers = header.geometry.layers
    rec_len = _record_len(layers)
    record_bytes = _align_up(rec_len)
    turns: list[TurnRecord] = []
    crc = 0
    at = DATA_START
    token_start = 0
    for index in range(header.turn_count):
        where = f"{path}: turn record {index} at offset {at}"
        if at + record_bytes > header.data_end:
            raise CorruptSessionFile(
                f"{where}: runs past the committed end of data ({header.data_end})"
            )
        raw = _read_exact(fd, rec_len, at)
        if raw[:8] != TURN_MAGIC:
            raise CorruptSessionFile(
                f"{where}: bad record magic {raw[:8]!r} (expected {TURN_MAGIC!r})"
            )
        (stored,) = struct.unpack_from("<I", raw, rec_len - 4)
        if zlib.crc32(raw[: rec_len - 4]) != stored:
            raise CorruptSessionFile(f"{where}: turn record checksum mismatch")
        (
            _,
            t_index,
            t_start,
            tokens,
            blocks,
            seg_off,
            first,
            stride,
            layer_bytes,
            seg_bytes,
            t_layers,
            _,
        ) = _TURN.unpack_from(raw, 0)
        expect_layer_bytes = blocks * header.bytes_per_block_per_layer
        problems = []
        if t_index != index:
            problems.append(f"field 'turn' must be {index}; got {t_index!r}")
        if t_start != token_start:
            problems.append(f"field 'token_start' must be {token_start}; got {t_start!r}")
        if t_layers != layers or seg_off != at or first != at + record_bytes:
            problems.append(
                "layers/segment/first-layer offsets disagree with the header; got "
                f"{t_layers}/{seg_off}/{first}"
            )
        if blocks != math.ceil(tokens / header.block_tokens) or layer_bytes != expect_layer_bytes:
            problems.append(
                f"blocks/layer_bytes disagree with tokens={tokens}; got {blocks}/{layer_bytes}"
            )
        if stride != _align_up(layer_bytes) or seg_bytes != record_bytes + layers * stride:
            problems.append(f"layer stride/segment size are inconsistent; got {stride}/{seg_bytes}")
        if problems:
            raise CorruptSessionFile(f"{where}: " + "; ".join(problems))
        checksums = struct.unpack_from(f"<{layers}I", raw, _TURN.size)
        turns.append(
            TurnRecord(
                index=index,
                token_start=t_start,
                tokens=tokens,
                blocks=blocks,
                layer_offsets=tuple(first + layer * stride for layer in range(layers)),
                layer_bytes=layer_bytes,
                layer_checksums=tuple(checksums),
                segment_offset=seg_off,
                segment_bytes=seg_bytes,
            )
        )
        crc = zlib.crc32(raw, crc)
        at += seg_bytes
        token_start += tokens
    if crc != header.index_crc32:
        raise CorruptSessionFile(
            f"{path}: index checksum mismatch: header says {header.index_crc32:#010x}, turn "
            f"records give {crc:#010x}"
        )
    if at != header.data_end or token_start != header.token_count:
        raise CorruptSessionFile(
            f"{path}: header end of data/token count ({header.data_end}/{header.token_count}) "
            "disagree "
            f"with the turn records ({at}/{token_start})"
        )
    return header, turns
