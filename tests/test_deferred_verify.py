"""Reading now and checking layer checksums later: ``read(..., verify=False)``, ``verify_read``,
``ReadResult.with_verification`` and the batched CRC (``crc32_many``) they use."""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from layout_helpers import PAGED, PAGED_BLOCK_TOKENS, write_session

from fcctl.layout.buffers import aligned_buffer
from fcctl.layout.checksum import crc32_many
from fcctl.layout.engines import (
    DeferredVerifyEngine,
    PosixEngine,
    ReadEngine,
    ReadResult,
    Verification,
    drop_file_cache,
)
from fcctl.layout.errors import VerificationError
from fcctl.layout.session_file import SessionFile


def _session(tmp_path: Path) -> Path:
    path = tmp_path / "s.fc"
    write_session(path, [100, 37, 250], geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    return path


def _flip(path: Path | str, offset: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([old[0] ^ 0x20]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _timeless(r: ReadResult) -> ReadResult:
    return replace(r, seconds=0.0, verify_seconds=0.0)


@pytest.mark.parametrize("threads", [1, 4])
def test_read_then_verify_read_equals_a_verified_read(tmp_path: Path, threads: int) -> None:
    path = _session(tmp_path)
    with SessionFile.open(path) as s, PosixEngine(threads=threads) as eng:
        assert isinstance(eng, DeferredVerifyEngine) and isinstance(eng, ReadEngine)
        for plan in s.restore_plans():
            whole = aligned_buffer(plan.buffer_bytes)
            at_once = eng.read(plan, whole)
            drop_file_cache(path)
            later = aligned_buffer(plan.buffer_bytes)
            bare = eng.read(plan, later, verify=False)
            assert not bare.verified and bare.verified_bytes == 0
            assert "layer checksums not verified (verify=False)" in bare.note
            check = eng.verify_read(plan, later)
            assert check.verified and check.note == ""
            assert check.verified_bytes == sum(e.length for e, _ in plan.placements)
            combined = bare.with_verification(check)
            assert _timeless(combined) == _timeless(at_once)
            assert combined.verify_seconds == check.seconds
            assert bytes(later) == bytes(whole)


def test_per_call_verify_overrides_the_engine_default(tmp_path: Path) -> None:
    path = _session(tmp_path)
    with SessionFile.open(path) as s, PosixEngine(verify=False) as eng:
        plan = s.restore_plans()[1]
        buf = aligned_buffer(plan.buffer_bytes)
        assert not eng.read(plan, buf).verified
        forced = eng.read(plan, buf, verify=True)
        assert forced.verified and forced.note == ""
        extent = plan.placements[0][0]
        _flip(extent.file, extent.offset + 7)
        drop_file_cache(path)
        eng.read(plan, buf)  # the engine's default: not checked, no error
        with pytest.raises(VerificationError, match="turn 0 layer 1: layer checksum mismatch"):
            eng.read(plan, buf, verify=True)


def test_a_damaged_layer_is_named_by_verify_read_while_the_next_read_runs(tmp_path: Path) -> None:
    """The check of layer 1 runs on another thread during layer 2's read, and still fails."""
    path = _session(tmp_path)
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
    extent = next(e for e, _ in plans[1].placements if e.tag == (2, 1))
    _flip(extent.file, extent.offset + 4096 + 3)
    drop_file_cache(path)
    with PosixEngine(threads=4) as eng, ThreadPoolExecutor(1) as checker:
        bufs = [aligned_buffer(p.buffer_bytes) for p in plans]
        eng.read(plans[1], bufs[1], verify=False)  # damaged bytes land, unchecked yet
        started = threading.Event()

        def check() -> Verification:
            started.set()
            return eng.verify_read(plans[1], bufs[1])

        pending = checker.submit(check)
        assert started.wait(10)
        nxt = eng.read(plans[2], bufs[2], verify=True)  # the pool serves both at once
        assert nxt.verified
        with pytest.raises(VerificationError) as err:
            pending.result()
    msg = str(err.value)
    assert f"{path}: turn 2 layer 1: layer checksum mismatch at offset {extent.offset}" in msg
    assert f"stored {extent.checksum:#010x}" in msg


def test_verify_read_of_extents_without_checksums_is_not_verified(tmp_path: Path) -> None:
    from fcctl.layout.planner import Extent, plan_reads

    f = tmp_path / "f"
    f.write_bytes(os.urandom(3 * 4096))
    plan = plan_reads([Extent(str(f), 0, 8192)])
    with PosixEngine() as eng:
        buf = aligned_buffer(plan.buffer_bytes)
        res = eng.read(plan, buf, verify=False)
        check = eng.verify_read(plan, buf)
        assert check == Verification(False, 0, check.seconds, "")
        combined = res.with_verification(check)
        assert not combined.verified and "not verified" not in combined.note


@pytest.mark.parametrize("piece", [4096, 5000, 1 << 20])
@pytest.mark.parametrize("pooled", [False, True])
def test_crc32_many_is_zlib_crc32_of_each_buffer(piece: int, pooled: bool) -> None:
    rng = np.random.default_rng(3)
    sizes = [0, 1, 4095, 4096, 4097, 3 * 4096 + 11, 70_000]
    bufs = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    with ThreadPoolExecutor(3) as pool:
        got = crc32_many(bufs, map_fn=pool.map if pooled else None, piece_bytes=piece)
    assert got == [zlib.crc32(b.tobytes()) for b in bufs]
    assert crc32_many([]) == []


def test_checksum_threads_must_be_a_positive_integer(tmp_path: Path) -> None:
    from fcctl.layout.errors import LayoutError

    with pytest.raises(LayoutError, match="checksum_threads must be an integer >= 1; got 0"):
        PosixEngine(checksum_threads=0)
    path = _session(tmp_path)
    with SessionFile.open(path) as s, PosixEngine(threads=4, checksum_threads=1) as eng:
        assert eng.checksum_threads == 1
        plan = s.restore_plans()[0]
        buf = aligned_buffer(plan.buffer_bytes)
        assert eng.read(plan, buf, verify=False).verified is False
        assert eng.verify_read(plan, buf).verified  # on the calling thread
