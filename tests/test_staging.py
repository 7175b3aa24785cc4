"""Staging window: layer-wise restore into a paged KV cache on CPU tensors; waits, never drops."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from layout_helpers import PAGED, PAGED_BLOCK_TOKENS, SMALL, blocks_by_layer, write_session

from fcctl.layout.engines import PosixEngine, ReadResult, open_engine, probe_engine
from fcctl.layout.errors import LayoutError, VerificationError
from fcctl.layout.planner import plan_reads
from fcctl.layout.session_file import SessionFile

torch = pytest.importorskip("torch")

from fcctl.layout.staging import StagingWindow, restore_session  # noqa: E402


def _session(tmp_path: Path, turns: list[int], geometry=PAGED, block_tokens=PAGED_BLOCK_TOKENS):
    path = tmp_path / "s.fc"
    written = write_session(path, turns, geometry=geometry, block_tokens=block_tokens)
    return path, written


class CountingEngine:
    """A real posix engine that also records how many layers are read but not yet scattered."""

    name = "posix"

    def __init__(self, inner: PosixEngine) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.outstanding = 0
        self.max_outstanding = 0
        self.reads = 0

    def read(self, plan, out) -> ReadResult:
        res = self.inner.read(plan, out)
        with self.lock:
            self.reads += 1
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
        return res

    def scattered(self, layer: int) -> None:
        with self.lock:
            self.outstanding -= 1

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("streams", [1, 2])
def test_restore_into_shuffled_pages_joint_layout(tmp_path: Path, streams: int) -> None:
    path, written = _session(tmp_path, [100, 37, 250])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        page_bytes = s.bytes_per_block_per_layer
        nblocks = s.block_count
    expected = blocks_by_layer(written, page_bytes)  # (layers, blocks, page_bytes)
    num_pages = nblocks + 9
    kv = torch.zeros(PAGED.layers, num_pages, page_bytes, dtype=torch.uint8)
    pages = torch.randperm(num_pages, generator=torch.Generator().manual_seed(3))[:nblocks]
    with PosixEngine() as eng:
        stats = restore_session(plans, eng, kv, pages, streams=streams)
    for layer in range(PAGED.layers):
        got = kv[layer].numpy()
        for b in range(nblocks):
            assert (got[int(pages[b])] == expected[layer, b]).all(), (layer, b)
        unused = sorted(set(range(num_pages)) - {int(p) for p in pages})
        assert not got[unused].any()
    assert stats.layers == PAGED.layers and stats.blocks == nblocks
    assert stats.bytes_scattered == PAGED.layers * nblocks * page_bytes
    assert stats.read_commands == sum(p.read_commands for p in plans)
    assert stats.o_direct and stats.engine == "posix" and stats.gds is None
    assert stats.restore_bytes_per_s > 0
    # Every layer range was checked against its CRC-32 before it was scattered.
    assert stats.verified and stats.verified_bytes == PAGED.layers * nblocks * page_bytes


def test_restore_into_split_kv_cache_bf16(tmp_path: Path) -> None:
    path, written = _session(tmp_path, [64, 20])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        page_bytes = s.bytes_per_block_per_layer
        nblocks = s.block_count
    expected = blocks_by_layer(written, page_bytes)
    # [layers, 2, pages, page_tokens, kv_heads, head_dim], bf16: K half then V half of a block.
    kv = torch.zeros(PAGED.layers, 2, 12, PAGED_BLOCK_TOKENS, 1, 64, dtype=torch.bfloat16)
    pages = torch.tensor([11, 0, 5, 3, 7, 1])
    assert nblocks == len(pages)
    with PosixEngine() as eng:
        restore_session(plans, eng, kv, pages)
    u8 = kv.view(-1).view(torch.uint8).view(PAGED.layers, 2, 12, -1).numpy()
    half = page_bytes // 2
    for layer in range(PAGED.layers):
        for b, p in enumerate(pages.tolist()):
            assert (u8[layer, 0, p] == expected[layer, b, :half]).all()
            assert (u8[layer, 1, p] == expected[layer, b, half:]).all()


def test_block_granular_plans_with_page_aligned_offsets(tmp_path: Path) -> None:
    path, written = _session(tmp_path, [160])
    with SessionFile.open(path) as s:
        # A subset of blocks, each its own extent: the vectorised gather path.
        picks = [0, 2, 3, 7, 9]
        plans = [
            plan_reads([s.block_extent(0, layer, b) for b in picks], gap_bytes=0, align=4096)
            for layer in range(s.layers)
        ]
        page_bytes = s.bytes_per_block_per_layer
    assert page_bytes == 4096
    expected = blocks_by_layer(written, page_bytes)
    kv = torch.zeros(PAGED.layers, 8, page_bytes, dtype=torch.uint8)
    pages = torch.tensor([4, 0, 6, 2, 1])
    with PosixEngine() as eng:
        stats = restore_session(plans, eng, kv, pages)
    for layer in range(PAGED.layers):
        for i, b in enumerate(picks):
            assert (kv[layer, int(pages[i])].numpy() == expected[layer, b]).all()
    assert stats.read_commands == PAGED.layers * 4  # 2,3 merge; 0, 7, 9 alone


def test_slow_consumer_makes_the_producer_wait_never_drop(tmp_path: Path) -> None:
    path, written = _session(tmp_path, [200])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        page_bytes = s.bytes_per_block_per_layer
        nblocks = s.block_count
    expected = blocks_by_layer(written, page_bytes)
    kv = torch.zeros(PAGED.layers, nblocks, page_bytes, dtype=torch.uint8)
    pages = torch.arange(nblocks).flip(0)
    eng = CountingEngine(PosixEngine())

    def slow(layer: int) -> None:
        eng.scattered(layer)
        time.sleep(0.2)  # far slower than a ~100 KiB read, even on a loaded 2-core machine

    window = StagingWindow(max(p.buffer_bytes for p in plans), device="cpu", streams=1)
    assert window.buffer_bytes == 2 * window.slot_bytes
    try:
        stats = window.restore_session(plans, eng, kv, pages, on_layer=slow)
    finally:
        eng.close()
    assert eng.reads == PAGED.layers  # every layer read exactly once: nothing dropped or redone
    assert eng.max_outstanding <= 2  # the window never holds more than its double buffer
    # Layers 0 and 1 fill the window; after that every prefetch must wait for the consumer.
    assert stats.producer_waits >= PAGED.layers - 3
    assert stats.producer_wait_seconds > 0.2
    for layer in range(PAGED.layers):
        for b in range(nblocks):
            assert (kv[layer, int(pages[b])].numpy() == expected[layer, b]).all()
    # The same window serves a second restore.
    kv2 = torch.zeros_like(kv)
    with PosixEngine() as e2:
        window.restore_session(plans, e2, kv2, pages)
    assert torch.equal(kv, kv2)


def test_restore_errors(tmp_path: Path) -> None:
    path, _ = _session(tmp_path, [64])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        pb = s.bytes_per_block_per_layer
    kv = torch.zeros(PAGED.layers, 8, pb, dtype=torch.uint8)
    with PosixEngine() as eng:
        with pytest.raises(LayoutError, match="distinct"):
            restore_session(plans, eng, kv, [0, 1, 1, 2])
        with pytest.raises(LayoutError, match=r"page_ids must be in \[0, 8\); got 8"):
            restore_session(plans, eng, kv, [0, 1, 2, 8])
        with pytest.raises(LayoutError, match="holds 4 blocks; page_ids has 3"):
            restore_session(plans, eng, kv, [0, 1, 2])
        with pytest.raises(LayoutError, match="6 layer plans"):
            restore_session(plans, eng, kv[:2], [0, 1, 2, 3])
        with pytest.raises(LayoutError, match="make the window larger"):
            StagingWindow(4096, device="cpu").restore_session(plans, eng, kv, [0, 1, 2, 3])
        with pytest.raises(LayoutError, match="kv_split"):
            restore_session(plans, eng, kv.view(PAGED.layers, 8, 2, -1), [0, 1, 2, 3])
        with pytest.raises(LayoutError, match="contiguous"):
            restore_session(plans, eng, kv.transpose(1, 2), [0, 1, 2, 3])
    # A failing read surfaces in the caller; nothing hangs.
    path.unlink()
    with PosixEngine() as eng, pytest.raises(LayoutError, match="not found"):
        restore_session(plans, eng, kv, [0, 1, 2, 3])


def test_pages_must_be_whole(tmp_path: Path) -> None:
    path, _ = _session(tmp_path, [10], geometry=SMALL, block_tokens=4)
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
    kv = torch.zeros(SMALL.layers, 8, 300, dtype=torch.uint8)  # 300 does not divide 512-byte blocks
    with PosixEngine() as eng, pytest.raises(LayoutError, match="whole number"):
        restore_session(plans, eng, kv, [0, 1, 2])


def test_cuda_window_needs_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(LayoutError, match="device='cpu'"):
        StagingWindow(4096)


def test_a_damaged_layer_is_never_scattered(tmp_path: Path) -> None:
    path, _ = _session(tmp_path, [100])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        page_bytes = s.bytes_per_block_per_layer
        nblocks = s.block_count
        off = s.turns[0].layer_offsets[4]
    with open(path, "r+b") as f:
        f.seek(off + page_bytes)
        f.write(bytes(page_bytes))  # a zeroed page in layer 4
    kv = torch.zeros(PAGED.layers, nblocks, page_bytes, dtype=torch.uint8)
    with PosixEngine() as eng, pytest.raises(VerificationError, match="turn 0 layer 4"):
        restore_session(plans, eng, kv, torch.arange(nblocks), streams=2)
    assert not kv[4].any()  # the damaged layer never reached the cache


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["posix", "kvikio"])
def test_restore_into_a_cuda_paged_cache(tmp_path: Path, name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ok, why = probe_engine(name)
    if not ok:
        # Falling back to posix here would pass without testing the engine named in the id.
        pytest.skip(f"{name} cannot read here: {why}")
    path, written = _session(tmp_path, [100, 37, 250])
    with SessionFile.open(path) as s:
        plans = s.restore_plans()
        page_bytes = s.bytes_per_block_per_layer
        nblocks = s.block_count
    expected = blocks_by_layer(written, page_bytes)
    kv = torch.zeros(PAGED.layers, nblocks + 3, page_bytes, dtype=torch.uint8, device="cuda")
    pages = torch.randperm(nblocks + 3)[:nblocks]
    with open_engine(name) as eng:
        stats = restore_session(plans, eng, kv, pages)
    got = kv.cpu().numpy()
    for layer in range(PAGED.layers):
        for b in range(nblocks):
            assert (got[layer, int(pages[b])] == expected[layer, b]).all()
    assert stats.engine == name
    np.testing.assert_equal(stats.blocks, nblocks)
    # posix checks on the host before the GPU copy; kvikio into GPU memory cannot, and says so.
    assert stats.verified == (name == "posix")
    if name == "kvikio":
        assert "not verified (GPU destination)" in stats.note
