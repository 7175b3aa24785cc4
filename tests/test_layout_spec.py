"""docs/layout.md is enough to read a session file: a reader written from the page alone.

The reader below uses only ``struct`` and ``zlib`` and the offsets, sizes and rules the page
gives (header slots, turn records, CRC-32s, the chained index CRC). It must read the files
``SessionFile`` writes byte for byte; if the page and the code drift apart, this fails.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from fcctl.layout.geometry import model_geometry
from tests.layout_helpers import PAGED, SMALL, write_session


def _u32(b: bytes, o: int) -> int:
    return struct.unpack_from("<I", b, o)[0]


def _u64(b: bytes, o: int) -> int:
    return struct.unpack_from("<Q", b, o)[0]


def _align(n: int) -> int:
    return -(-n // 4096) * 4096


def read_from_spec(path: Path) -> dict:
    data = path.read_bytes()
    valid = []
    for i in (0, 1):
        slot = data[i * 4096 : (i + 1) * 4096]
        assert slot[:8] == b"FCCIO\x00\x00\x00"
        if _u32(slot, 4092) != zlib.crc32(slot[:4092]) or _u64(slot, 16) == 0:
            continue
        assert _u64(slot, 16) % 2 == i  # generation g lives in slot g mod 2
        valid.append(slot)
    h = max(valid, key=lambda s: _u64(s, 16))
    assert _u32(h, 8) == 1 and _u32(h, 12) == 4096 and _u32(h, 24) == 0  # version, CLEAN
    layers, page = _u32(h, 32), _u64(h, 56)
    turn_count, token_count = _u64(h, 64), _u64(h, 72)
    assert _u64(h, 80) == 8192
    record = _align(92 + 4 * layers)
    at, chained, turns = 8192, 0, []
    for t in range(turn_count):
        r = data[at : at + record]
        n = 88 + 4 * layers
        assert r[:8] == b"FCTURN\x00\x00" and _u32(r, n) == zlib.crc32(r[:n])
        chained = zlib.crc32(r[: n + 4], chained)
        index, token_start, tokens, blocks = (_u64(r, o) for o in (8, 16, 24, 32))
        seg, first, stride, layer_bytes, seg_bytes = (_u64(r, o) for o in (40, 48, 56, 64, 72))
        assert (index, seg, first, _u32(r, 80)) == (t, at, at + record, layers)
        assert layer_bytes == blocks * page and stride == _align(layer_bytes)
        assert seg_bytes == record + layers * stride
        ranges = []
        for layer in range(layers):
            start = first + layer * stride
            chunk = data[start : start + layer_bytes]
            assert zlib.crc32(chunk) == _u32(r, 88 + 4 * layer)
            assert not any(data[start + layer_bytes : start + stride])  # zero padding
            ranges.append(chunk)
        turns.append((token_start, tokens, blocks, ranges))
        at += seg_bytes
    assert at == _u64(h, 88) and chained == _u32(h, 112)
    assert sum(t[1] for t in turns) == token_count
    return {
        "layers": layers,
        "page": page,
        "block_tokens": _u32(h, 28),
        "model": h[128:192].rstrip(b"\x00").decode(),
        "turns": turns,
    }


@pytest.mark.parametrize(
    ("geometry", "block_tokens", "turns"),
    [
        (SMALL, 4, [10, 6, 1, 33]),
        (PAGED, 16, [300, 17]),
        (model_geometry("deepseek-v3"), 16, [40, 3]),  # MLA: 61 layers, 18 KiB pages
    ],
)
def test_a_reader_written_from_the_spec_reads_what_session_file_writes(
    tmp_path: Path, geometry, block_tokens: int, turns: list[int]
) -> None:
    path = tmp_path / "s.fcc"
    written = write_session(path, turns, geometry=geometry, block_tokens=block_tokens)
    got = read_from_spec(path)
    assert (got["layers"], got["block_tokens"], got["model"]) == (
        geometry.layers,
        block_tokens,
        geometry.name,
    )
    assert got["page"] == geometry.bytes_per_block_per_layer(block_tokens)
    start = 0
    for t, (token_start, tokens, blocks, ranges) in enumerate(got["turns"]):
        assert (token_start, tokens, blocks) == (start, turns[t], -(-turns[t] // block_tokens))
        assert ranges == [written[t][layer].tobytes() for layer in range(geometry.layers)]
        start += tokens
