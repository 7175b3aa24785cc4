"""Readers: posix O_DIRECT and buffered agree with each other and with the bytes written."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import numpy as np
import pytest
from layout_helpers import PAGED, PAGED_BLOCK_TOKENS, write_session

from fcctl.layout.buffers import aligned_buffer
from fcctl.layout.engines import (
    ENGINES,
    EngineUnavailable,
    PosixEngine,
    ReadEngine,
    drop_file_cache,
    open_engine,
    probe_engine,
    read_plan,
)
from fcctl.layout.errors import InputError, LayoutError
from fcctl.layout.planner import Extent, plan_reads
from fcctl.layout.session_file import SessionFile


def _random_file(path: Path, nbytes: int, seed: int = 0) -> bytes:
    data = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


def _check(plan, buf, files: dict[str, bytes]) -> None:
    for e, at in plan.placements:
        assert bytes(buf[at : at + e.length]) == files[e.file][e.offset : e.end], e


def test_aligned_buffer_is_page_aligned() -> None:
    for n in (0, 1, 4096, 10_000):
        b = aligned_buffer(n)
        assert b.nbytes == n and b.dtype == np.uint8
        if n:
            assert b.ctypes.data % 4096 == 0 and not b.any()


@pytest.mark.parametrize("align", [1, 4096])
@pytest.mark.parametrize("threads", [1, 4])
def test_direct_and_buffered_agree(tmp_path: Path, align: int, threads: int) -> None:
    files = {
        str(tmp_path / f"f{i}"): _random_file(tmp_path / f"f{i}", 300_000 + i * 4096, i)
        for i in range(3)
    }
    rng = np.random.default_rng(1)
    extents = [
        Extent(name, int(rng.integers(0, 250_000)), int(rng.integers(1, 40_000)))
        for name in files
        for _ in range(6)
    ]
    plan = plan_reads(
        extents, gap_bytes=8192, align=align, max_command_bytes=None if align == 1 else 65536
    )
    outs = []
    for direct in (True, False):
        with PosixEngine(threads=threads, o_direct=direct) as eng:
            buf = aligned_buffer(plan.buffer_bytes)
            res = eng.read(plan, buf)
        assert res.engine == "posix" and res.gds is None
        assert res.o_direct is direct  # ext4 and recent tmpfs both accept O_DIRECT
        assert res.commands == plan.read_commands and res.bytes_read == plan.bytes_read
        assert (res.note == "") is direct
        _check(plan, buf, files)
        outs.append(buf.copy())
    assert (outs[0] == outs[1]).all()


def test_session_file_restore_plans_read_back_verified(tmp_path: Path) -> None:
    path = tmp_path / "s.fc"
    written = write_session(path, [100, 37, 250], geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    with SessionFile.open(path) as s, PosixEngine() as eng:
        for layer, plan in enumerate(s.restore_plans()):
            buf = aligned_buffer(plan.buffer_bytes)
            res = eng.read(plan, buf)
            assert res.o_direct
            for e, at in plan.placements:
                turn, lay = e.tag
                assert lay == layer
                assert s.verify_layer(turn, layer, buf[at : at + e.length])
                assert bytes(buf[at : at + e.length]) == written[turn][layer].tobytes()


def test_destinations_memoryview_bytearray_unaligned(tmp_path: Path) -> None:
    data = _random_file(tmp_path / "f", 50_000)
    plan = plan_reads(
        [Extent(str(tmp_path / "f"), 5, 20_000), Extent(str(tmp_path / "f"), 30_001, 7)]
    )
    with PosixEngine() as eng:
        ba = bytearray(plan.buffer_bytes)
        eng.read(plan, ba)
        _check(plan, ba, {str(tmp_path / "f"): data})
        raw = np.zeros(plan.buffer_bytes + 3, np.uint8)[3:]  # deliberately misaligned
        res = eng.read(plan, memoryview(raw))
        assert res.o_direct  # through the aligned bounce buffer
        _check(plan, raw, {str(tmp_path / "f"): data})
        with pytest.raises(LayoutError, match="buffer_bytes"):
            eng.read(plan, bytearray(10))
        with pytest.raises(LayoutError, match="read-only"):
            eng.read(plan, bytes(plan.buffer_bytes))


def test_torch_cpu_destination(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    data = _random_file(tmp_path / "f", 20_000)
    plan = plan_reads([Extent(str(tmp_path / "f"), 0, 20_000)], align=4096)
    out = torch.zeros(plan.buffer_bytes // 2, dtype=torch.bfloat16)
    with PosixEngine() as eng:
        eng.read(plan, out)
    assert out.view(torch.uint8).numpy()[:20_000].tobytes() == data


def test_short_read_is_an_error_but_padding_past_eof_reads_zeros(tmp_path: Path) -> None:
    data = _random_file(tmp_path / "f", 5000)  # not a multiple of 4096
    name = str(tmp_path / "f")
    with PosixEngine() as eng:
        plan = plan_reads([Extent(name, 4100, 900)], align=4096)  # padding runs past EOF
        buf = aligned_buffer(plan.buffer_bytes)
        buf[:] = 0xAA
        eng.read(plan, buf)
        _check(plan, buf, {name: data})
        assert not buf[5000 - 4096 :].any()
        with pytest.raises(LayoutError, match=r"short read: the file is 5000 bytes long"):
            eng.read(plan_reads([Extent(name, 4000, 2000)]), aligned_buffer(2000))
        # A command that starts past the end reads nothing: the message still gives the size.
        with pytest.raises(LayoutError, match=r"the file is 5000 bytes long.*\[8192, 12288\)"):
            eng.read(plan_reads([Extent(name, 8192, 4096)]), aligned_buffer(4096))
        with pytest.raises(LayoutError, match="not found"):
            eng.read(plan_reads([Extent(str(tmp_path / "nope"), 0, 10)]), aligned_buffer(10))


def test_drop_file_cache_keeps_contents(tmp_path: Path) -> None:
    data = _random_file(tmp_path / "f", 100_000)
    drop_file_cache(tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == data
    with pytest.raises(FileNotFoundError):
        drop_file_cache(tmp_path / "missing")


def test_registry_and_protocol() -> None:
    assert set(ENGINES) >= {"posix", "kvikio"}
    with open_engine("posix", threads=2) as eng:
        assert isinstance(eng, ReadEngine) and eng.name == "posix"
    with pytest.raises(EngineUnavailable) as e:
        open_engine("nope")
    assert e.value.parameter == "engine"
    assert str(e.value) == "engine: unknown I/O engine (known: kvikio, posix); got 'nope'"
    with pytest.raises(EngineUnavailable, match="bad options"):
        open_engine("posix", colour="blue")
    with pytest.raises(LayoutError, match="threads"):
        PosixEngine(threads=0)
    assert issubclass(EngineUnavailable, InputError)


def test_probe_posix_and_unknown() -> None:
    ok, reason = probe_engine("posix")
    assert ok and "O_DIRECT" in reason
    ok, reason = probe_engine("nope")
    assert not ok and "unknown" in reason


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="this checks the CPU-only answer")
def test_kvikio_probe_says_no_on_a_cpu_machine_without_raising() -> None:
    ok, reason = probe_engine("kvikio")
    assert ok is False
    assert "kvikio" in reason and len(reason) > 20
    with pytest.raises(EngineUnavailable, match="kvikio"):
        open_engine("kvikio")


@pytest.mark.gpu
def test_kvikio_reads_into_gpu_memory_like_posix(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("kvikio", exc_type=ImportError)  # a broken install skips too
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ok, reason = probe_engine("kvikio")
    assert ok, reason
    path = tmp_path / "s.fc"
    write_session(path, [100, 37, 250], geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS)
    with SessionFile.open(path) as s, open_engine("kvikio") as kv, PosixEngine() as px:
        for plan in s.restore_plans():
            dev = torch.zeros(plan.buffer_bytes, dtype=torch.uint8, device="cuda")
            res = kv.read(plan, dev)
            assert res.engine == "kvikio" and res.gds is not None and "GDS" in res.note
            host, _ = read_plan(plan, px)
            assert (dev.cpu().numpy() == host).all()


def test_read_plan_helper(tmp_path: Path) -> None:
    data = _random_file(tmp_path / "f", 9000)
    plan = plan_reads([Extent(str(tmp_path / "f"), 100, 8000)], align=4096)
    buf, res = read_plan(plan)
    assert res.bytes_read == 8192 and buf.ctypes.data % 4096 == 0
    _check(plan, buf, {str(tmp_path / "f"): data})
    assert os.path.getsize(tmp_path / "f") == 9000


def test_rewritten_file_is_reopened_not_read_stale(tmp_path: Path) -> None:
    name = str(tmp_path / "f")
    first = _random_file(tmp_path / "f", 8192, seed=1)
    plan = plan_reads([Extent(name, 0, 8192)], align=4096)
    with PosixEngine() as eng:
        buf = aligned_buffer(8192)
        eng.read(plan, buf)
        assert bytes(buf) == first
        os.unlink(name)
        second = _random_file(tmp_path / "f", 8192, seed=2)  # same path, new inode
        eng.read(plan, buf)
        assert bytes(buf) == second


# Fault injection: this machine's filesystems accept O_DIRECT, so a refusing filesystem is
# simulated by making the O_DIRECT open (or read) fail the way tmpfs on older kernels does.


def test_o_direct_refused_at_open_falls_back_and_says_so(tmp_path: Path, monkeypatch) -> None:
    name = str(tmp_path / "f")
    data = _random_file(tmp_path / "f", 20_000)
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    plan = plan_reads([Extent(name, 10, 15_000)], align=4096)
    with PosixEngine() as eng:
        buf = aligned_buffer(plan.buffer_bytes)
        res = eng.read(plan, buf)
    assert res.o_direct is False
    assert "O_DIRECT refused" in res.note and "posix_fadvise(DONTNEED)" in res.note
    _check(plan, buf, {name: data})


def test_o_direct_refused_at_read_falls_back_and_says_so(tmp_path: Path, monkeypatch) -> None:
    name = str(tmp_path / "f")
    data = _random_file(tmp_path / "f", 20_000)
    real_preadv = os.preadv

    def refusing_preadv(fd, buffers, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", refusing_preadv)
    plan = plan_reads([Extent(name, 0, 20_000)], align=4096)
    with PosixEngine() as eng:
        buf = aligned_buffer(plan.buffer_bytes)
        res = eng.read(plan, buf)
    assert res.o_direct is False and "O_DIRECT read refused" in res.note
    _check(plan, buf, {name: data})


def _kvikio_threads() -> int:
    import kvikio.defaults as defaults

    if hasattr(defaults, "get"):
        return int(defaults.get("num_threads"))
    return int(defaults.num_threads())


@pytest.mark.gpu
def test_kvikio_engine_restores_the_thread_count_it_changed() -> None:
    pytest.importorskip("kvikio", exc_type=ImportError)  # a broken install skips too
    ok, reason = probe_engine("kvikio")
    if not ok:
        pytest.skip(f"kvikio cannot read here: {reason}")
    before = _kvikio_threads()
    with open_engine("kvikio", threads=before + 3):
        assert _kvikio_threads() == before + 3
    assert _kvikio_threads() == before  # the setting is process-wide: close() puts it back
