from __future__ import annotations

import os

import pytest
from fcctl.iobench.eviction import write_eviction_layout
from fcctl.iobench.flat import write_flat_layout
from fcctl.iobench.restore import allocate_buffers, eviction_restores, flat_restores, run_restore
from fcctl.layout.engines import PosixEngine, drop_file_cache

from tests.iobench_helpers import tiny_workload


@pytest.fixture
def engine():
    eng = PosixEngine(threads=4)
    yield eng
    eng.close()


def _run(name, restores, engine, wl, concurrency=2, files=()):
    def drop():
        for f in files:
            drop_file_cache(f)

    return run_restore(
        name,
        restores,
        allocate_buffers(restores),
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
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([old[0] ^ 0x40]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    r = _run(layout, restores, engine, wl, 2, files)
    assert r.mismatched_blocks == 1
    assert "session 1 layer 2" in r.mismatch_examples[0]
    assert r.verified_bytes == wl.bytes
