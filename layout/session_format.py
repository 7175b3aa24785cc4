"""The FC-CIO on-disk format: struct layouts, pack / unpack / validate, and sizes.

This module is the part of ``docs/layout.md`` written as code, with no file I/O (that is
:mod:`.session_file`). In short (all integers little-endian)::

    offset 0      header slot 0 (4096 bytes)   } two slots, written alternately; the valid one
    offset 4096   header slot 1 (4096 bytes)   } with the highest generation is current
    offset 8192   segment of turn 0:
                    turn record (4096-aligned size): token range, per-layer CRC32s
                    layer 0 range:  all blocks of the turn at layer 0, padded to 4096
                    layer 1 range:  ...
                    layer L-1 range
                  segment of turn 1 ... (segments follow each other, each 4096-aligned)
                  pre-allocated, unused space up to a whole number of extents

Sizes are in bytes. A writer that lays files out without this package (iobench sizes its
files before writing them) uses :func:`file_bytes` and :func:`fit_name`, not its own copy of
the rules.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from .alignment import PAGE_BYTES, align_up
from .errors import CorruptSessionFile, LayoutError
from .geometry import KvGeometry

MAGIC = b"FCCIO\x00\x00\x00"
TURN_MAGIC = b"FCTURN\x00\x00"
FORMAT_VERSION = 1
ALIGN = PAGE_BYTES
SLOT_BYTES = PAGE_BYTES
DATA_START = 2 * SLOT_BYTES
DEFAULT_EXTENT_BYTES = 64 * 2**20
STATE_CLEAN = 0
STATE_WRITING = 1
NAME_BYTES = 64

# Header slot: fixed fields, zero padding, CRC32 of bytes [0, 4092) in the last 4 bytes.
_HEADER = struct.Struct("<8sIIQIIIIIIIIQQQQQQQIIQ64s64s")
HEADER_FIXED_BYTES = 256
_HEADER_CRC = struct.Struct("<I")
_HEADER_CRC_AT = SLOT_BYTES - 4

# Turn record: fixed part, then one CRC32 per layer, then the record's own CRC32.
_TURN = struct.Struct("<8sQQQQQQQQQII")
TURN_FIXED_BYTES = 88

# The spec fixes these sizes; a struct format edited by mistake must fail at import, also
# under ``python -O`` (which strips asserts).
if _HEADER.size != HEADER_FIXED_BYTES or _TURN.size != TURN_FIXED_BYTES:
    raise RuntimeError(
        f"FC-CIO struct layouts drifted from docs/layout.md: header {_HEADER.size} bytes "
        f"(spec {HEADER_FIXED_BYTES}), turn record {_TURN.size} bytes (spec {TURN_FIXED_BYTES})"
    )


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
class Header:
    """The fields of one header slot that vary; the constants (magic, version, slot size,
    data start) are written by :func:`pack_header` and checked by :func:`unpack_header`."""

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


# --------------------------------------------------------------------------- sizes


def record_len(layers: int) -> int:
    """Bytes of a turn record's content: fixed part, one CRC32 per layer, its own CRC32."""
    return TURN_FIXED_BYTES + 4 * layers + 4


def record_bytes(layers: int) -> int:
    """Bytes a turn record takes in its segment (padded to the page)."""
    return align_up(record_len(layers))


def segment_bytes(layers: int, layer_bytes: int) -> int:
    """Bytes of one turn's segment: its record, then ``layers`` ranges each padded to the page."""
    return record_bytes(layers) + layers * align_up(layer_bytes)


def file_bytes(geometry: KvGeometry, block_tokens: int, turn_blocks: Iterable[int]) -> int:
    """Bytes a session file's committed data takes (headers plus one segment per turn), for
    turns of ``turn_blocks`` blocks each of ``block_tokens`` tokens; the file's end of data."""
    per_layer = geometry.bytes_per_block_per_layer(block_tokens)
    return DATA_START + sum(
        segment_bytes(geometry.layers, blocks * per_layer) for blocks in turn_blocks
    )


def turn_blocks(tokens: int, block_tokens: int) -> int:
    """Blocks (pages) a turn of ``tokens`` tokens takes: a partial last page is a whole one."""
    return math.ceil(tokens / block_tokens)


# --------------------------------------------------------------------------- names


def encode_name(path: object, field: str, text: str, *, truncate: bool) -> bytes:
    """``text`` as the header stores it: at most :data:`NAME_BYTES` UTF-8 bytes, cut at a
    character boundary with ``truncate``, else refused."""
    raw = text.encode("utf-8")
    if len(raw) > NAME_BYTES:
        if not truncate:
            raise LayoutError(
                f"{path}: {field} must be at most {NAME_BYTES} UTF-8 bytes; got {text!r}"
            )
        raw = raw[:NAME_BYTES].decode("utf-8", "ignore").encode("utf-8")
    return raw


def fit_name(text: str) -> str:
    """The longest prefix of ``text`` a header name field holds (a session id that fits)."""
    return encode_name("", "name", text, truncate=True).decode("utf-8")


# --------------------------------------------------------------------------- header slots


def pack_header(path: object, h: Header) -> bytes:
    """One whole header slot (:data:`SLOT_BYTES`), CRC32 sealed."""
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
        encode_name(path, "model name", g.name, truncate=True),
        encode_name(path, "session_id", h.session_id, truncate=False),
    )
    slot = bytearray(SLOT_BYTES)
    slot[: len(fixed)] = fixed
    _HEADER_CRC.pack_into(slot, _HEADER_CRC_AT, zlib.crc32(slot[:_HEADER_CRC_AT]))
    return bytes(slot)


def slot_offset(generation: int) -> int:
    """Generation ``g`` lives in slot ``g mod 2``."""
    return SLOT_BYTES * (generation % 2)


def unpack_header(path: object, slot_index: int, raw: bytes) -> tuple[Header | None, str]:
    """``(header, "")`` for a valid slot, else ``(None, why)``."""
    where = f"header slot {slot_index} (offset {slot_index * SLOT_BYTES})"
    if not any(raw):
        return None, NEVER_WRITTEN  # create() zeroes slot 0 until the first append
    if raw[:8] != MAGIC:
        return (
            None,
            f"{where}: bad magic {raw[:8]!r} (expected {MAGIC!r}): not an FC-CIO session file",
        )
    (stored_crc,) = _HEADER_CRC.unpack_from(raw, _HEADER_CRC_AT)
    if zlib.crc32(raw[:_HEADER_CRC_AT]) != stored_crc:
        return None, f"{where}: header checksum mismatch (torn or corrupted header write)"
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
    ) = _HEADER.unpack_from(raw, 0)
    why = _slot_constants_problem(version, slot_bytes, data_start, generation, state)
    if why:
        return None, f"{where}: {why}"
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
    why = _slot_sizes_problem(geometry, block_tokens, bpbpl, data_end) or _slot_fields_problem(
        slot_index,
        generation,
        geometry.layers,
        turn_count,
        token_count,
        data_end,
        capacity,
        extent_bytes,
        index_crc,
    )
    if why:
        return None, f"{where}: {why}"
    header = Header(
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


def _slot_constants_problem(
    version: int, slot_bytes: int, data_start: int, generation: int, state: int
) -> str:
    if version != FORMAT_VERSION:
        return f"unsupported format version (this reader knows {FORMAT_VERSION}); got {version!r}"
    if slot_bytes != SLOT_BYTES or data_start != DATA_START:
        return (
            f"slot size/data start must be {SLOT_BYTES}/{DATA_START}; got {slot_bytes}/{data_start}"
        )
    if generation == 0:
        return NEVER_WRITTEN
    if state not in (STATE_CLEAN, STATE_WRITING):
        return f"field 'state' must be 0 (clean) or 1 (writing); got {state!r}"
    return ""


# Why a slot is invalid when it was simply never used (slot 0 of a file with one header
# write): the loader does not report it as damage.
NEVER_WRITTEN = "never written (generation 0)"


def _slot_sizes_problem(geometry: KvGeometry, block_tokens: int, bpbpl: int, data_end: int) -> str:
    if block_tokens < 1:
        return f"field 'block_tokens' must be >= 1; got {block_tokens!r}"
    if geometry.bytes_per_block_per_layer(block_tokens) != bpbpl:
        return (
            "field 'bytes_per_block_per_layer' disagrees with the geometry "
            f"({geometry.bytes_per_block_per_layer(max(block_tokens, 1))}); got {bpbpl!r}"
        )
    if data_end < DATA_START or data_end % ALIGN:
        return f"field 'data_end' must be >= {DATA_START} and 4096-aligned; got {data_end!r}"
    return ""


def _slot_fields_problem(
    slot_index: int,
    generation: int,
    layers: int,
    turn_count: int,
    token_count: int,
    data_end: int,
    capacity: int,
    extent_bytes: int,
    index_crc: int,
) -> str:
    """Fields that no writer can produce, though the slot's checksum holds (a bug or a forged
    slot): such a slot is refused, never recovered into."""
    if generation % 2 != slot_index:
        return (
            f"field 'generation' must be {'even' if slot_index == 0 else 'odd'} in slot "
            f"{slot_index} (generation g lives in slot g mod 2); got {generation!r}"
        )
    if extent_bytes < ALIGN or extent_bytes % ALIGN:
        return (
            f"field 'extent_bytes' must be a multiple of {ALIGN} >= {ALIGN}; got {extent_bytes!r}"
        )
    if capacity < data_end:
        return f"field 'capacity_bytes' must be >= data_end ({data_end}); got {capacity!r}"
    # Every turn takes at least its record and one page per layer, and at least one token.
    smallest = turn_count * (record_bytes(layers) + layers * ALIGN)
    if data_end - DATA_START < smallest:
        return (
            f"field 'turn_count' ({turn_count}) needs at least {smallest} bytes of segments; "
            f"data_end {data_end} leaves {data_end - DATA_START}"
        )
    if turn_count == 0 and (data_end != DATA_START or token_count or index_crc):
        return (
            "with turn_count 0, data_end/token_count/index_crc32 must be "
            f"{DATA_START}/0/0; got {data_end}/{token_count}/{index_crc:#x}"
        )
    if token_count < turn_count:
        return f"field 'token_count' must be >= turn_count ({turn_count}); got {token_count!r}"
    return ""


def check_generations(headers: list[Header]) -> str:
    """Why two valid slots cannot both be what a writer left (empty when they can).

    Generations advance by one per header write and alternate slots, so two valid slots are
    always one generation apart; a slot far ahead of the other is forged or stale.
    """
    if len(headers) == 2:
        lo, hi = sorted(h.generation for h in headers)
        if hi - lo != 1:
            return (
                f"header generation {hi} is {hi - lo} ahead of the other slot's {lo} "
                "(generations advance by one per header write)"
            )
    return ""


# --------------------------------------------------------------------------- turn records


def pack_record(rec: TurnRecord, layers: int, layer_stride: int) -> bytes:
    """A turn record's content (:func:`record_len` bytes, CRC32 sealed; unpadded)."""
    fixed = _TURN.pack(
        TURN_MAGIC,
        rec.index,
        rec.token_start,
        rec.tokens,
        rec.blocks,
        rec.segment_offset,
        rec.layer_offsets[0],
        layer_stride,
        rec.layer_bytes,
        rec.segment_bytes,
        layers,
        0,
    )
    body = fixed + struct.pack(f"<{layers}I", *rec.layer_checksums)
    return body + struct.pack("<I", zlib.crc32(body))


def unpack_record(
    where: str, raw: bytes, header: Header, index: int, at: int, token_start: int
) -> TurnRecord:
    """Check and decode turn record ``index`` read at offset ``at`` (``raw`` is its
    :func:`record_len` bytes): magic, CRC32, and agreement with the header and the records
    before it (``token_start`` is where this turn must start). Raises
    :class:`CorruptSessionFile` prefixed by ``where``."""
    layers = header.geometry.layers
    rec_len = record_len(layers)
    if raw[:8] != TURN_MAGIC:
        raise CorruptSessionFile(f"{where}: bad record magic {raw[:8]!r} (expected {TURN_MAGIC!r})")
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
    rec_bytes = record_bytes(layers)
    problems = []
    if t_index != index:
        problems.append(f"field 'turn' must be {index}; got {t_index!r}")
    if t_start != token_start:
        problems.append(f"field 'token_start' must be {token_start}; got {t_start!r}")
    if t_layers != layers or seg_off != at or first != at + rec_bytes:
        problems.append(
            "layers/segment/first-layer offsets disagree with the header; got "
            f"{t_layers}/{seg_off}/{first}"
        )
    if (
        blocks != turn_blocks(tokens, header.block_tokens)
        or layer_bytes != blocks * header.bytes_per_block_per_layer
    ):
        problems.append(
            f"blocks/layer_bytes disagree with tokens={tokens}; got {blocks}/{layer_bytes}"
        )
    if stride != align_up(layer_bytes) or seg_bytes != rec_bytes + layers * stride:
        problems.append(f"layer stride/segment size are inconsistent; got {stride}/{seg_bytes}")
    if problems:
        raise CorruptSessionFile(f"{where}: " + "; ".join(problems))
    checksums = struct.unpack_from(f"<{layers}I", raw, TURN_FIXED_BYTES)
    return TurnRecord(
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
