from __future__ import annotations

import os
import threading
import time
from dataclasses import replace

import pytest

from fcctl.iobench.eviction import write_eviction_layout
from fcctl.iobench.flat import write_flat_layout
from fcctl.iobench.restore import (
    BufferPool,
    allocate_pool,
    eviction_restores,
    flat_restores,
    pool_slots,
    run_restore,
)
from fcctl.layout.engines import DeferredVerifyEngine, PosixEngine, drop_file_cache
from fcctl.layout.errors import VerificationError
from tests.iobench_helpers import tiny_workload


@pytest.fixture
def engine():
    # Checksums off: these tests look at the pattern check after the timed region.
    eng = PosixEngine(threads=4, verify=False)
    yield eng
    eng.close()


def _run(name, restores, engine, wl, concurrency=2, files=(), pool=None):
    def drop():
        for f in files:
            drop_file_cache(f)

    return run_restore(
        name,
        restores,
        pool or allocate_pool(restores, concurrency=concurrency),
        engine,
        concurrency=concurrency,
        piece_bytes=wl.piece_bytes,
        drop_cache=drop,
    )


def test_both_layouts_restore_every_byte_verified(tmp_path, engine):
    wl = tiny_workload(sessions=4, blocks=20, turns=4)
    fl = write_flat_layout(wl, tmp_path / "flat")
    ev = write_eviction_layout(wl, tmp_path / "ev", bucket_bytes=128 * 1024)
    layers = wl.geometry.layers
    for name, restores, files in (
        ("flat", flat_restores(wl, fl), fl.session_files),
        ("eviction", eviction_restores(wl, ev), ev.bucket_files),
    ):
        for conc in (1, 3):
            r = _run(name, restores, engine, wl, conc, files)
            assert r.mismatched_blocks == 0, r.mismatch_examples
            assert r.verified_bytes == wl.bytes
            assert r.bytes_requested == wl.bytes
            assert len(r.restore_s) == 4 and all(s > 0 for s in r.restore_s)
            assert r.restore_bytes_per_s > 0 and r.restore_p50_s <= r.restore_p99_s
            # Flat: one command per (turn, layer); eviction: one per (block, layer) piece.
            expected = 4 * 4 * layers if name == "flat" else wl.blocks * layers
            assert r.read_commands == expected
            assert r.read_amplification == pytest.approx(1.0)


def test_eviction_needs_ten_times_the_flat_commands_on_the_default_shape(tmp_path, engine):
    # The default workload's shape (64 pages per session in 4 turns), scaled down.
    wl = tiny_workload(sessions=2, blocks=64, turns=4, layers=8)
    fl = write_flat_layout(wl, tmp_path / "flat")
    ev = write_eviction_layout(wl, tmp_path / "ev", bucket_bytes=256 * 1024)
    flat_cmds = sum(r.read_commands for r in flat_restores(wl, fl))
    ev_cmds = sum(r.read_commands for r in eviction_restores(wl, ev))
    assert flat_cmds == 2 * 4 * 8
    assert ev_cmds == 2 * 64 * 8
    assert ev_cmds >= 10 * flat_cmds


@pytest.mark.parametrize("layout", ["flat", "eviction"])
def test_a_flipped_byte_on_disk_is_counted(tmp_path, engine, layout):
    wl = tiny_workload(sessions=2, blocks=8, turns=2)
    if layout == "flat":
        written = write_flat_layout(wl, tmp_path / "flat")
        restores = flat_restores(wl, written)
        # Somewhere inside session 1's turn 1, layer 2.
        cmd = restores[1].plans[2].commands[-1]
        path, offset, files = cmd.file, cmd.offset + 100, written.session_files
    else:
        written = write_eviction_layout(wl, tmp_path / "ev", bucket_bytes=64 * 1024)
        restores = eviction_restores(wl, written)
        e = written.piece_extents(1, 2)[5]
        path, offset, files = e.file, e.offset + 100, written.bucket_files
    _flip(path, offset)
    r = _run(layout, restores, engine, wl, 2, files)
    assert r.mismatched_blocks == 1
    assert "session 1 layer 2" in r.mismatch_examples[0]
    assert r.verified_bytes == wl.bytes


def _flip(path, offset):
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([old[0] ^ 0x40]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_checksums_inside_the_timed_region_stop_a_damaged_flat_restore(tmp_path):
    """With the engine verifying (the default), damaged flat bytes never come back as data."""
    wl = tiny_workload(sessions=2, blocks=8, turns=2)
    written = write_flat_layout(wl, tmp_path / "flat")
    restores = flat_restores(wl, written)
    with PosixEngine(threads=2) as eng:
        clean = _run("flat", restores, eng, wl, 2, written.session_files)
        assert clean.checksums_verified and clean.checksum_verified_bytes == wl.bytes
        extent = next(e for e, _ in restores[1].plans[2].placements if e.tag == (1, 2))
        _flip(extent.file, extent.offset + 100)
        with pytest.raises(VerificationError, match="turn 1 layer 2"):
            _run("flat", restores, eng, wl, 2, written.session_files)


def test_a_pool_smaller_than_the_sessions_restores_in_waves_every_byte_verified(tmp_path, engine):
    wl = tiny_workload(sessions=5, blocks=8, turns=2)
    ev = write_eviction_layout(wl, tmp_path / "ev", bucket_bytes=64 * 1024)
    restores = eviction_restores(wl, ev)
    slot = max(r.buffer_bytes for r in restores)
    # A budget of two sessions: the pool holds max(concurrency, 2) buffers, not five.
    pool = allocate_pool(restores, concurrency=1, budget_bytes=2 * slot)
    assert pool.slots == 2 and pool.nbytes == 2 * slot
    r = _run("eviction", restores, engine, wl, 1, ev.bucket_files, pool=pool)
    assert r.waves == 3 and r.mismatched_blocks == 0 and r.verified_bytes == wl.bytes
    assert len(r.restore_s) == 5 and all(s > 0 for s in r.restore_s)
    # A stale byte of an earlier wave cannot pass: a buffer is zeroed before every wave.
    assert isinstance(pool, BufferPool)


def test_pool_slots_cover_the_concurrency_and_never_exceed_the_sessions():
    assert pool_slots(100, sessions=50, concurrency=16, budget_bytes=1000) == 16
    assert pool_slots(100, sessions=50, concurrency=1, budget_bytes=1000) == 10
    assert pool_slots(100, sessions=4, concurrency=16, budget_bytes=10**9) == 4


class RecordingEngine:
    """A real posix engine that logs which (session, layer) each read and check is for, and can
    hold one layer's check until the next layer's read has started (proof of the overlap)."""

    name = "posix"

    def __init__(self, inner, restores, hold=None, sleep_last_check_s=0.0):
        self.inner = inner
        self.verify = inner.verify
        self.where = {
            id(p): (r.session, layer) for r in restores for layer, p in enumerate(r.plans)
        }
        self.last_layer = max(layer for _, layer in self.where.values())
        self.hold = hold  # (session, layer) whose check waits for the read of layer + 1
        self.next_read_started = threading.Event()
        self.held_overlapped = None
        self.sleep_last_check_s = sleep_last_check_s
        self.events = []
        self.lock = threading.Lock()

    def _log(self, what, plan):
        with self.lock:
            self.events.append((what, *self.where[id(plan)]))

    def read(self, plan, out, *, verify=None):
        session, layer = self.where[id(plan)]
        if self.hold is not None and (session, layer - 1) == self.hold:
            self.next_read_started.set()
        self._log("read", plan)
        return self.inner.read(plan, out, verify=verify)

    def verify_read(self, plan, out):
        self._log("check", plan)
        session, layer = self.where[id(plan)]
        if (session, layer) == self.hold:
            self.held_overlapped = self.next_read_started.wait(10)
        if layer == self.last_layer:
            time.sleep(self.sleep_last_check_s)
        return self.inner.verify_read(plan, out)

    def close(self):
        self.inner.close()


def _comparable(r):
    return replace(r, wall_s=0.0, restore_s=())


@pytest.mark.parametrize("concurrency", [1, 3])
def test_overlapped_checksums_give_the_same_result_as_checks_inside_each_read(
    tmp_path, concurrency
):
    wl = tiny_workload(sessions=4, blocks=20, turns=4)
    written = write_flat_layout(wl, tmp_path / "flat")
    restores = flat_restores(wl, written)
    with PosixEngine(threads=4) as eng:
        assert isinstance(eng, DeferredVerifyEngine)
        got = {
            overlap: run_restore(
                "flat",
                restores,
                allocate_pool(restores, concurrency=concurrency),
                eng,
                concurrency=concurrency,
                piece_bytes=wl.piece_bytes,
                drop_cache=lambda: [drop_file_cache(f) for f in written.session_files],
                overlap_checksums=overlap,
            )
            for overlap in (True, False)
        }
    assert _comparable(got[True]) == _comparable(got[False])
    on = got[True]
    assert on.checksums_verified and on.checksum_verified_bytes == wl.bytes
    assert on.mismatched_blocks == 0 and on.verified_bytes == wl.bytes
    assert on.notes == ()  # the "not verified (verify=False)" of the bare reads is gone


def test_a_damaged_middle_layer_is_caught_and_named_while_the_next_layer_is_read(tmp_path):
    wl = tiny_workload(sessions=3, blocks=8, turns=2, layers=4)
    written = write_flat_layout(wl, tmp_path / "flat")
    restores = flat_restores(wl, written)
    extent = next(e for e, _ in restores[1].plans[1].placements if e.tag == (1, 1))
    _flip(extent.file, extent.offset + 100)
    with PosixEngine(threads=2) as inner:
        eng = RecordingEngine(inner, restores, hold=(1, 1))
        assert isinstance(eng, DeferredVerifyEngine)
        with pytest.raises(VerificationError) as err:
            _run("flat", restores, eng, wl, 1, written.session_files)
    assert f"{extent.file}: turn 1 layer 1: layer checksum mismatch" in str(err.value)
    # Layer 1's check was still running when layer 2's read began ...
    assert eng.held_overlapped is True
    # ... and no more than one check was ahead: layer 3 of session 1 was never read.
    session1 = [(what, layer) for what, s, layer in eng.events if s == 1]
    assert ("read", 2) in session1 and ("read", 3) not in session1
    assert ("check", 2) not in session1


def test_the_session_clock_stops_after_its_last_layer_check(tmp_path):
    wl = tiny_workload(sessions=2, blocks=8, turns=2, layers=4)
    written = write_flat_layout(wl, tmp_path / "flat")
    restores = flat_restores(wl, written)
    with PosixEngine(threads=2) as inner:
        eng = RecordingEngine(inner, restores, sleep_last_check_s=0.25)
        r = _run("flat", restores, eng, wl, 2, written.session_files)
    assert r.checksums_verified and r.checksum_verified_bytes == wl.bytes
    assert all(s >= 0.25 for s in r.restore_s) and r.wall_s >= 0.25
    # Every layer was read with the check left out, and checked once after.
    assert sorted(e for e in eng.events if e[0] == "check") == sorted(
        ("check", r_.session, layer) for r_ in restores for layer in range(len(r_.plans))
    )
