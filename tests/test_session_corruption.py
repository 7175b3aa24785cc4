"""Every corruption class a session file can meet, on real files: KV bytes never come back
wrong, and recovery never drops (or lets an append overwrite) a turn that is intact.

Classes: truncation, flipped header bytes (each slot), impossible header fields under a valid
checksum, flipped or zeroed data pages, lost layer writes, a crash at each step of an append
(the named steps of ``append_turn``, and a writer killed with SIGKILL), and recovery followed
by an append.
"""

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
from layout_helpers import SMALL, turn_bytes, write_session

from fcctl.layout.engines.posix import PosixEngine
from fcctl.layout.errors import CorruptSessionFile, VerificationError
from fcctl.layout.session_file import SessionFile
from fcctl.layout.session_format import SLOT_BYTES

REPO = Path(__file__).resolve().parents[1]
TURNS = [10, 6, 33]


def _put(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _get(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def _slot(path: Path, index: int) -> bytearray:
    return bytearray(_get(path, index * SLOT_BYTES, SLOT_BYTES))


def _generation(path: Path, index: int) -> int:
    return int(struct.unpack_from("<Q", _slot(path, index), 16)[0])


def _current_slot(path: Path) -> int:
    return int(_generation(path, 1) > _generation(path, 0))


def _reseal(slot: bytearray) -> bytes:
    struct.pack_into("<I", slot, SLOT_BYTES - 4, zlib.crc32(slot[: SLOT_BYTES - 4]))
    return bytes(slot)


def _assert_turns_exact(path: Path, written: list[np.ndarray], *, recover: bool = False) -> None:
    """Every turn the file reports reads back byte-exact (and verified)."""
    with SessionFile.open(path, recover=recover) as s:
        assert len(s.turns) == len(written)
        for t, data in enumerate(written):
            for layer in range(s.layers):
                assert s.read_layer(t, layer) == data[layer].tobytes()


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("where", ["headers", "first-turn", "record", "last-layer", "last-page"])
def test_truncation_never_returns_wrong_bytes(tmp_path: Path, where: str) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    with SessionFile.open(path) as s:
        last = s.turns[-1]
        cut = {
            "headers": 5000,
            "first-turn": s.turns[0].layer_offsets[1] + 7,
            "record": last.segment_offset + 100,
            "last-layer": last.layer_offsets[-1] + 1,
            "last-page": s.data_end - 4096,
        }[where]
    os.truncate(path, cut)
    with pytest.raises(CorruptSessionFile, match="truncated") as info:
        SessionFile.open(path)
    assert str(path) in str(info.value)
    # Recovery keeps exactly the turns that lie whole inside the file, or refuses.
    intact = sum(1 for t in range(len(TURNS)) if _turn_end(written, t) <= cut)
    if intact == len(TURNS) - 1:
        _assert_turns_exact(path, written[:intact], recover=True)
    else:
        with pytest.raises(CorruptSessionFile, match=r"cannot recover|truncated"):
            SessionFile.open(path, recover=True)


def _turn_end(written: list[np.ndarray], t: int) -> int:
    # Segment ends of the written turns (record page + one padded range per layer).
    end = 2 * SLOT_BYTES
    for data in written[: t + 1]:
        end += 4096 + data.shape[0] * (-(-data.shape[1] // 4096) * 4096)
    return end


# --------------------------------------------------------------------------- header slots


@pytest.mark.parametrize("offset", [0, 20, 64, 88, 200, 4092])
def test_flipped_byte_in_the_current_slot_recovers_every_turn(tmp_path: Path, offset: int) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    cur = _current_slot(path)
    byte = _get(path, cur * SLOT_BYTES + offset, 1)[0]
    _put(path, cur * SLOT_BYTES + offset, bytes([byte ^ 0x10]))
    # Bit rot in the newest header is not a torn write: the last turn's record and data are
    # intact, so recovery brings it back from the record chain instead of dropping it.
    with pytest.raises(CorruptSessionFile, match="interrupted writer"):
        SessionFile.open(path)
    _assert_turns_exact(path, written, recover=True)


@pytest.mark.parametrize("offset", [20, 64, 200])
def test_flipped_byte_in_the_older_slot_is_harmless(tmp_path: Path, offset: int) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    old = 1 - _current_slot(path)
    byte = _get(path, old * SLOT_BYTES + offset, 1)[0]
    _put(path, old * SLOT_BYTES + offset, bytes([byte ^ 0x01]))
    _assert_turns_exact(path, written)
    _assert_turns_exact(path, written, recover=True)


@pytest.mark.parametrize(
    ("field", "pack", "offset", "value", "why"),
    [
        ("layers", "<I", 32, 0, "layers must be an int >= 1"),
        ("block_tokens", "<I", 28, 0, "field 'block_tokens' must be >= 1"),
        ("generation", "<Q", 16, 10**6 + 1, "ahead of the other slot"),
        ("generation-parity", "<Q", 16, None, "field 'generation' must be"),
        ("turn_count", "<Q", 64, 10**6, "field 'turn_count'"),
        ("capacity", "<Q", 96, 8192, "field 'capacity_bytes'"),
    ],
)
def test_impossible_header_fields_are_refused_not_recovered_into(
    tmp_path: Path, field: str, pack: str, offset: int, value: int | None, why: str
) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    cur = _current_slot(path)
    slot = _slot(path, cur)
    if value is None:
        value = _generation(path, cur) + 2 * 10**3 + 1  # odd/even swapped, far ahead too
        if value % 2 == cur:
            value += 1
    struct.pack_into(pack, slot, offset, value)
    _put(path, cur * SLOT_BYTES, _reseal(slot))  # its checksum holds
    with pytest.raises(CorruptSessionFile) as info:
        SessionFile.open(path)
    assert str(path) in str(info.value)
    # Recovery falls back to the other slot and the intact record chain: every turn, exact.
    _assert_turns_exact(path, written, recover=True)
    with SessionFile.open(path, writable=True, recover=True) as s:
        s.append_turn(4, turn_bytes(50, 4, s.layer_bytes_for(4)))
    _assert_turns_exact(path, [*written, turn_bytes(50, 4, 512)])
    del why  # the message is checked below on a fresh copy


def test_impossible_header_messages_name_the_field(tmp_path: Path) -> None:
    cases = [(32, "<I", 0, "layers"), (28, "<I", 0, "block_tokens"), (96, "<Q", 8192, "capacity")]
    for offset, pack, value, word in cases:
        path = tmp_path / f"s-{offset}.fc"
        write_session(path, TURNS)
        cur = _current_slot(path)
        slot = _slot(path, cur)
        struct.pack_into(pack, slot, offset, value)
        _put(path, cur * SLOT_BYTES, _reseal(slot))
        with pytest.raises(CorruptSessionFile, match=word):
            SessionFile.open(path)


def test_data_end_past_the_file_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    size = os.path.getsize(path)
    cur = _current_slot(path)
    slot = _slot(path, cur)
    struct.pack_into("<Q", slot, 88, size + 4096)  # data_end
    struct.pack_into("<Q", slot, 96, size + 4096)  # capacity, so only data_end is impossible
    _put(path, cur * SLOT_BYTES, _reseal(slot))
    with pytest.raises(CorruptSessionFile, match="truncated"):
        SessionFile.open(path)
    _assert_turns_exact(path, written, recover=True)


# --------------------------------------------------------------------------- data pages


@pytest.mark.parametrize("damage", ["flip", "zero-page", "lost-layer"])
def test_damaged_data_is_an_error_never_data(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    with SessionFile.open(path) as s:
        rec = s.turns[2]
        off = rec.layer_offsets[3]
    if damage == "flip":
        _put(path, off + 777, bytes([_get(path, off + 777, 1)[0] ^ 0x80]))
    elif damage == "zero-page":
        _put(path, off + 4096, bytes(4096))
    else:  # a layer write that never reached the disk: the pre-allocated zeros
        _put(path, off, bytes(rec.layer_bytes))
    with SessionFile.open(path) as s:
        for layer in range(3):
            assert s.read_layer(2, layer) == written[2][layer].tobytes()
        with pytest.raises(VerificationError) as info:
            s.read_layer(2, 3)
        assert f"{path}: turn 2 layer 3: layer checksum mismatch" in str(info.value)
        assert not s.verify_layer(2, 3, s.read_layer(2, 3, verify=False))
        with pytest.raises(VerificationError, match="turn 2 layer 3"):
            s.verify_all()
        plans = s.restore_plans()
    # The planned restore path: the posix engine checks every layer range it reads.
    with PosixEngine(threads=2) as eng:
        for layer, plan in enumerate(plans):
            buf = np.zeros(plan.buffer_bytes, np.uint8)
            if layer == 3:
                with pytest.raises(VerificationError, match=f"{path}: turn 2 layer 3"):
                    eng.read(plan, buf)
            else:
                res = eng.read(plan, buf)
                assert res.verified and res.verified_bytes == sum(
                    e.length for e, _ in plan.placements
                )
    with PosixEngine(verify=False) as eng:
        res = eng.read(plans[3], np.zeros(plans[3].buffer_bytes, np.uint8))
        assert not res.verified and "verify=False" in res.note


def test_block_extents_carry_no_checksum_and_say_so(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    write_session(path, TURNS)
    with SessionFile.open(path) as s:
        from fcctl.layout.planner import plan_reads

        plan = plan_reads([s.block_extent(0, 0, 0)], align=4096)
    with PosixEngine() as eng:
        res = eng.read(plan, np.zeros(plan.buffer_bytes, np.uint8))
    assert not res.verified and res.verified_bytes == 0


# --------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("crash_after", ["marker", "layers", "record"])
def test_crash_at_each_append_step(tmp_path: Path, crash_after: str) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    new = turn_bytes(77, SMALL.layers, 3 * 512)
    s = SessionFile.open(path, writable=True)
    seg = s._next_segment(12)
    s._grow_to(s._fd, seg.offset + seg.nbytes)  # type: ignore[arg-type]
    s._mark_writing(s._fd)  # type: ignore[arg-type]
    if crash_after in ("layers", "record"):
        checksums = s._write_layer_rows(s._fd, seg, new)  # type: ignore[arg-type]
        if crash_after == "record":
            s._write_record(s._fd, seg, checksums)  # type: ignore[arg-type]
    s.close()  # the process "dies" here: no commit header
    with pytest.raises(CorruptSessionFile, match="interrupted writer"):
        SessionFile.open(path)
    # A turn whose record and data are on disk is intact: recovery keeps it.
    expect = [*written, new] if crash_after == "record" else written
    _assert_turns_exact(path, expect, recover=True)
    # Recovery then append: every earlier turn stays byte-exact, the file is clean again.
    after = turn_bytes(78, SMALL.layers, 2 * 512)
    with SessionFile.open(path, writable=True, recover=True) as w:
        w.append_turn(8, after)
    _assert_turns_exact(path, [*expect, after])


def test_recovered_state_is_committed_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, TURNS)
    cur = _current_slot(path)
    _put(path, cur * SLOT_BYTES + 70, b"\xff")  # rot in the newest header
    with SessionFile.open(path, writable=True, recover=True) as w:
        assert len(w.turns) == len(TURNS)
    # No append happened, yet the file opens clean: recovery wrote a CLEAN header.
    _assert_turns_exact(path, written)


_LOOP_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from fcctl.layout.session_file import SessionFile
    path = sys.argv[1]
    s = SessionFile.open(path, writable=True)
    t = len(s.turns)
    while True:
        tokens = 4 * (1 + t % 5)
        s.append_turn(tokens, np.full((4, s.layer_bytes_for(tokens)), t % 251, np.uint8))
        t += 1
    """
)


def test_a_fresh_file_with_no_turns_reopens(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    with SessionFile.create(path, SMALL, block_tokens=4, extent_bytes=1 << 16):
        pass  # slot 0 stays zeros until the first append
    with SessionFile.open(path) as s:
        assert s.turns == ()


@pytest.mark.parametrize("delay_s", [0.3, 0.7])
def test_writer_killed_mid_loop_keeps_every_committed_turn(tmp_path: Path, delay_s: float) -> None:
    path = tmp_path / "s.fc"
    with SessionFile.create(path, SMALL, block_tokens=4, extent_bytes=1 << 16):
        pass
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _LOOP_WRITER, str(path)], env=env)
    deadline = time.monotonic() + 30
    while os.path.getsize(path) <= 1 << 16:  # wait until it has grown past its first extent
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL

    def expected(t: int) -> np.ndarray:
        tokens = 4 * (1 + t % 5)
        return np.full((4, -(-tokens // 4) * 512), t % 251, np.uint8)

    with SessionFile.open(path, recover=True) as s:
        count = len(s.turns)
    assert count > 0
    _assert_turns_exact(path, [expected(t) for t in range(count)], recover=True)
    with SessionFile.open(path, writable=True, recover=True) as w:
        w.append_turn(4 * (1 + count % 5), expected(count))
    _assert_turns_exact(path, [expected(t) for t in range(count + 1)])
