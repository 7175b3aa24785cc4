"""FC-CIO session files: round trips, layout rules, allocation, and crash/corruption detection."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from layout_helpers import (
    PAGED,
    PAGED_BLOCK_TOKENS,
    SMALL,
    SMALL_BLOCK_TOKENS,
    turn_bytes,
    write_session,
)

from fcctl.layout.errors import CorruptSessionFile, LayoutError, VerificationError
from fcctl.layout.planner import Extent, plan_reads
from fcctl.layout.session_file import SessionFile
from fcctl.layout.session_format import (
    DATA_START,
    SLOT_BYTES,
    file_bytes,
    fit_name,
    segment_bytes,
)

REPO = Path(__file__).resolve().parents[1]


def test_round_trip_appended_turns(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    turns = [10, 5, 33, 4]
    written = write_session(path, turns)
    with SessionFile.open(path) as s:
        assert [t.tokens for t in s.turns] == turns
        assert [t.token_start for t in s.turns] == [0, 10, 15, 48]
        assert s.token_count == 52
        bpb = SMALL.bytes_per_block_per_layer(SMALL_BLOCK_TOKENS)
        assert s.bytes_per_block_per_layer == bpb == 512
        for t, rec in enumerate(s.turns):
            assert rec.blocks == -(-turns[t] // SMALL_BLOCK_TOKENS)
            assert rec.layer_bytes == rec.blocks * bpb
            assert all(off % 4096 == 0 for off in rec.layer_offsets)
            for layer in range(SMALL.layers):
                data = s.read_layer(t, layer)
                assert data == written[t][layer].tobytes()
                assert s.verify_layer(t, layer, data)
                assert rec.layer_checksums[layer] == zlib.crc32(data)
        assert s.geometry == SMALL
        assert s.block_tokens == SMALL_BLOCK_TOKENS


def test_callback_writer_and_array_writer_agree(tmp_path: Path) -> None:
    layer_bytes = 3 * 512
    data = turn_bytes(7, SMALL.layers, layer_bytes)

    def fill(layer: int, buf: memoryview) -> None:
        assert len(buf) == layer_bytes
        buf[:] = data[layer].tobytes()

    a, b = tmp_path / "a.fc", tmp_path / "b.fc"
    for path, source in ((a, data), (b, fill)):
        with SessionFile.create(path, SMALL, block_tokens=4, extent_bytes=1 << 20) as s:
            rec = s.append_turn(12, source)
            assert rec.layer_bytes == layer_bytes
    with SessionFile.open(a) as sa, SessionFile.open(b) as sb:
        assert sa.turns[0].layer_checksums == sb.turns[0].layer_checksums
        assert [sa.read_layer(0, i) for i in range(4)] == [sb.read_layer(0, i) for i in range(4)]


def test_layer_ranges_are_contiguous_per_layer(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [40])
    with SessionFile.open(path) as s:
        rec = s.turns[0]
        for layer in range(s.layers):
            pieces = [s.block_extent(0, layer, b) for b in range(rec.blocks)]
            # The blocks of one layer tile one range: offsets step by one page.
            assert [p.offset for p in pieces] == [
                rec.layer_offsets[layer] + b * 512 for b in range(rec.blocks)
            ]
            assert pieces[0].tag == (0, layer, 0)
        assert s.layer_extents(2) == [
            Extent(
                str(path),
                rec.layer_offsets[2],
                rec.layer_bytes,
                (0, 2),
                checksum=rec.layer_checksums[2],
            )
        ]


def test_one_batch_restore_is_exactly_layers_commands(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [1000], geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    with SessionFile.open(path) as s:
        blocks = s.turns[0].blocks
        assert blocks == 63
        # Block-granular restore: layers x blocks pieces collapse to one command per layer.
        pieces = [s.block_extent(0, layer, b) for layer in range(s.layers) for b in range(blocks)]
        assert len(pieces) == PAGED.layers * blocks
        per_layer = [
            plan_reads([p for p in pieces if p.tag[1] == layer], align=4096)
            for layer in range(s.layers)
        ]
        assert sum(p.read_commands for p in per_layer) == PAGED.layers
        assert all(p.read_amplification == 1.0 for p in per_layer)
        plans = s.restore_plans()
        assert sum(p.read_commands for p in plans) == PAGED.layers
        assert sum(len(s.layer_extents(layer)) for layer in range(s.layers)) == PAGED.layers


@pytest.mark.parametrize("gap_bytes", [0, 64 * 1024])
def test_t_turns_take_at_most_layers_times_t_commands(tmp_path: Path, gap_bytes: int) -> None:
    path = tmp_path / "s.fc"
    turns = [300, 17, 128, 64, 1]
    write_session(path, turns, geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    with SessionFile.open(path) as s:
        plans = s.restore_plans(gap_bytes=gap_bytes)
        commands = sum(p.read_commands for p in plans)
        assert commands <= PAGED.layers * len(turns)
        if (
            gap_bytes == 0
        ):  # other layers lie between a layer's turns: one command per (layer, turn)
            assert commands == PAGED.layers * len(turns)
        blocks = sum(t.blocks for t in s.turns)
        assert commands < PAGED.layers * blocks


def test_preallocated_and_grown_by_whole_extents(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    extent = 64 * 1024
    with SessionFile.create(path, SMALL, block_tokens=4, extent_bytes=extent) as s:
        assert os.path.getsize(path) == extent == s.capacity_bytes
        for i in range(6):
            s.append_turn(64, turn_bytes(i, 4, s.layer_bytes_for(64)))
            size = os.path.getsize(path)
            assert size % extent == 0 and size >= s.data_end
        assert s.capacity_bytes == os.path.getsize(path) > extent
    with SessionFile.create(
        tmp_path / "r.fc", SMALL, block_tokens=4, reserve_bytes=10**6, extent_bytes=extent
    ):
        assert os.path.getsize(tmp_path / "r.fc") == -(-(DATA_START + 10**6) // extent) * extent


def test_create_refuses_existing_and_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [4])
    with pytest.raises(LayoutError, match="already exists"):
        SessionFile.create(path, SMALL, block_tokens=4)
    with SessionFile.open(path, writable=True) as w:
        with pytest.raises(LayoutError, match="another writer"):
            SessionFile.open(path, writable=True)
        w.append_turn(4, turn_bytes(1, 4, 512))
    with SessionFile.open(path) as r:
        assert len(r.turns) == 2
        with pytest.raises(LayoutError, match="read-only"):
            r.append_turn(4, turn_bytes(1, 4, 512))
    # No temporary file is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.fc"]


def test_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    with pytest.raises(LayoutError, match="block_tokens"):
        SessionFile.create(path, SMALL, block_tokens=0)
    with pytest.raises(LayoutError, match="extent_bytes"):
        SessionFile.create(path, SMALL, block_tokens=4, extent_bytes=1000)
    with pytest.raises(LayoutError, match="session_id"):
        SessionFile.create(path, SMALL, block_tokens=4, session_id="x" * 65)
    with SessionFile.create(
        path, SMALL, block_tokens=4, extent_bytes=1 << 20, session_id="sess-1"
    ) as s:
        with pytest.raises(LayoutError, match="tokens must be an integer >= 1; got 0"):
            s.append_turn(0, np.zeros((4, 0), np.uint8))
        with pytest.raises(LayoutError, match="4 x 512 bytes"):
            s.append_turn(4, np.zeros((4, 100), np.uint8))
        s.append_turn(4, turn_bytes(0, 4, 512))
        with pytest.raises(LayoutError, match="turn must be in"):
            s.layer_extents(0, [1])
        with pytest.raises(LayoutError, match="layer must be in"):
            s.layer_extents(4)
        with pytest.raises(LayoutError, match="block must be in"):
            s.block_extent(0, 0, 1)
        assert not s.verify_layer(0, 0, s.read_layer(0, 0)[:-1])
        assert not s.verify_layer(0, 0, bytes(512))
    with SessionFile.open(path) as s:
        assert s.session_id == "sess-1"
    with pytest.raises(LayoutError, match="not found"):
        SessionFile.open(tmp_path / "missing.fc")


# --------------------------------------------------------------------------- crashes

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from fcctl.layout.session_file import SessionFile
    path, mode = sys.argv[1], sys.argv[2]
    s = SessionFile.open(path, writable=True)
    def fill(layer, buf):
        buf[:] = bytes([layer + 1]) * len(buf)
        if layer == 2:
            if mode == "exit":
                os._exit(3)  # die between data write and index commit
            open(path + ".ready", "w").close()
            time.sleep(60)  # wait here to be killed
    s.append_turn(8, fill)
    """
)


def _run_child(path: Path, mode: str) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), mode], env=env)
    if mode == "kill":
        ready = Path(str(path) + ".ready")
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "writer died before reaching the kill point"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=30)


@pytest.mark.parametrize("mode", ["exit", "kill"])
def test_interrupted_writer_is_detected_and_committed_turns_survive(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, [10, 6])
    rc = _run_child(path, mode)
    assert rc == (3 if mode == "exit" else -signal.SIGKILL)
    with pytest.raises(CorruptSessionFile) as info:
        SessionFile.open(path)
    msg = str(info.value)
    assert str(path) in msg and "interrupted writer" in msg and "2 turns" in msg
    # recover=True: the committed turns, byte for byte.
    with SessionFile.open(path, recover=True) as s:
        assert len(s.turns) == 2
        for t in range(2):
            for layer in range(4):
                assert s.read_layer(t, layer) == written[t][layer].tobytes()
    # A writer may resume: the partial segment is overwritten and the file is clean again.
    with SessionFile.open(path, writable=True, recover=True) as s:
        s.append_turn(5, turn_bytes(99, 4, s.layer_bytes_for(5)))
    with SessionFile.open(path) as s:
        assert [t.tokens for t in s.turns] == [10, 6, 5]
        assert s.read_layer(2, 3) == turn_bytes(99, 4, 1024)[3].tobytes()


def _slot(path: Path, index: int) -> bytearray:
    with open(path, "rb") as f:
        f.seek(index * SLOT_BYTES)
        return bytearray(f.read(SLOT_BYTES))


def _put(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _reseal(slot: bytearray) -> bytes:
    struct.pack_into("<I", slot, SLOT_BYTES - 4, zlib.crc32(slot[: SLOT_BYTES - 4]))
    return bytes(slot)


def _current_slot(path: Path) -> int:
    gens = [struct.unpack_from("<Q", _slot(path, i), 16)[0] for i in (0, 1)]
    return int(gens[1] > gens[0])


def test_torn_commit_header_falls_back_to_the_writing_marker(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10, 6])
    cur = _current_slot(path)
    _put(path, cur * SLOT_BYTES + 64, b"\xff" * 16)  # a torn write of the newest header
    with pytest.raises(CorruptSessionFile, match=r"interrupted writer.*checksum mismatch"):
        SessionFile.open(path)
    # The marker was written before turn 2's data, but turn 2's record and data checksums hold:
    # recovery takes it back from the record chain instead of dropping it.
    with SessionFile.open(path, recover=True) as s:
        assert len(s.turns) == 2


def test_both_headers_bad(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10])
    _put(path, 100, b"\x01")
    _put(path, SLOT_BYTES + 100, b"\x01")
    with pytest.raises(CorruptSessionFile, match="no valid header slot"):
        SessionFile.open(path)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10, 20])
    with SessionFile.open(path) as s:
        end = s.data_end
    os.truncate(path, end - 4096)
    with pytest.raises(CorruptSessionFile, match=f"truncated.*{end}"):
        SessionFile.open(path)
    os.truncate(path, 5000)
    with pytest.raises(CorruptSessionFile, match="truncated"):
        SessionFile.open(path)


def test_corrupt_turn_record(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10, 20])
    with SessionFile.open(path) as s:
        at = s.turns[1].segment_offset
    _put(path, at + 20, b"\x07")
    with pytest.raises(
        CorruptSessionFile, match=f"turn record 1 at offset {at}.*checksum mismatch"
    ):
        SessionFile.open(path)


def test_index_checksum_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10, 20])
    cur = _current_slot(path)
    slot = _slot(path, cur)
    struct.pack_into("<I", slot, 112, struct.unpack_from("<I", slot, 112)[0] ^ 1)
    _put(path, cur * SLOT_BYTES, _reseal(slot))
    with pytest.raises(CorruptSessionFile, match="index checksum mismatch"):
        SessionFile.open(path)


def test_bad_version(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10])
    cur = _current_slot(path)
    slot = _slot(path, cur)
    struct.pack_into("<I", slot, 8, 99)
    _put(path, cur * SLOT_BYTES, _reseal(slot))
    with pytest.raises(CorruptSessionFile, match=r"unsupported format version.*got 99"):
        SessionFile.open(path)


def test_corrupt_data_fails_verification_not_open(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, [10])
    with SessionFile.open(path) as s:
        off = s.turns[0].layer_offsets[1]
    _put(path, off + 3, b"\x00\x01\x02")
    with SessionFile.open(path) as s:
        assert s.verify_layer(0, 0, s.read_layer(0, 0))
        with pytest.raises(VerificationError, match=f"{path}: turn 0 layer 1: layer checksum"):
            s.read_layer(0, 1)
        assert not s.verify_layer(0, 1, s.read_layer(0, 1, verify=False))


@pytest.mark.parametrize(
    "content", [b"", b"hello world\n" * 1000, b"\x00" * 8192], ids=["empty", "text", "zeros"]
)
def test_non_session_files_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "not-a-session"
    path.write_bytes(content)
    with pytest.raises(CorruptSessionFile, match="not an FC-CIO session file") as info:
        SessionFile.open(path)
    assert str(path) in str(info.value)
    with pytest.raises(LayoutError, match="directory"):
        SessionFile.open(tmp_path)


def test_file_bytes_is_the_end_of_data_the_writer_reaches(tmp_path: Path) -> None:
    # iobench sizes its files with file_bytes before writing them: it must equal data_end.
    turns = [100, 37, 250, 1]
    write_session(tmp_path / "p.fc", turns, geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    with SessionFile.open(tmp_path / "p.fc") as s:
        blocks = [t.blocks for t in s.turns]
        assert file_bytes(PAGED, PAGED_BLOCK_TOKENS, blocks) == s.data_end
        assert [t.segment_bytes for t in s.turns] == [
            segment_bytes(PAGED.layers, t.layer_bytes) for t in s.turns
        ]


def test_fit_name_cuts_at_a_character_boundary() -> None:
    assert fit_name("short") == "short"
    long_id = "é" * 40  # 80 UTF-8 bytes: 32 whole characters fit in 64 bytes
    assert fit_name(long_id) == "é" * 32
    assert len(fit_name("x" * 100).encode()) == 64  # docs/layout.md: 64-byte name fields
