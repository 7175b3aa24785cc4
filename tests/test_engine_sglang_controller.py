"""The SGLang adapter driven by SGLang's own ``HiCacheController`` (``sglang==0.5.23``) on CPU:
the controller built as the scheduler builds it (a paged device pool and allocator, the host KV
pool, ``storage_backend="dynamic"`` naming the adapter), its backup thread writing pages from
the host pool to the adapter (``write_storage``, as write-through does after a prefill), and its
prefetch threads querying the stored prefix and reading the pages back into fresh host-pool slots
(``prefetch``, then the scheduler-side allocation ``UnifiedRadixCache`` does, then the I/O
thread). Every byte is checked against what the host pool held.

What the test does itself is only the tree cache's bookkeeping around those calls: the radix
tree (``UnifiedRadixCache``) needs a running scheduler (requests, a model config, the forward
stream), which this CPU test does not build. Skips, naming the import that failed, where SGLang
does not import (tests/engines-cpu.sh installs what it needs)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import pytest

from tests import engine_helpers  # noqa: F401  (makes torchvision importable first)
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")
adapter = import_or_skip("fcctl.layout.adapters.sglang", "the SGLang adapter")
controller = import_or_skip("sglang.srt.managers.cache_controller", "SGLang's HiCacheController")
memory_pool = import_or_skip("sglang.srt.mem_cache.memory_pool", "SGLang's device KV pool")
host_pool = import_or_skip("sglang.srt.mem_cache.pool_host.mha", "SGLang's host KV pool")
paged = import_or_skip("sglang.srt.mem_cache.allocator.paged", "SGLang's paged allocator")
runtime = import_or_skip("sglang.srt.runtime_context", "SGLang's parallel context")
hashing = import_or_skip("sglang.srt.mem_cache.utils", "SGLang's page hashes")

PAGE, LAYERS, HEADS, DIM, SIZE = 4, 3, 2, 8, 64


def _one_rank_group() -> Any:
    """A one-rank gloo group: the controller all-reduces prefetch hits over its TP group."""
    dist = torch.distributed
    if not dist.is_initialized():
        with socket.socket() as s:  # a free port, so parallel CI jobs do not collide
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=0, world_size=1)
    return dist.new_group([0], backend="gloo")


def _controller(tmp_path: Path) -> Any:
    # One rank of everything, stated the way SGLang's error message says to state it when no
    # launcher published a topology.
    ranks = ("tp", "attn_tp", "pp", "attn_cp", "attn_dcp")
    values = {f"{r}_rank": 0 for r in ranks} | {f"{r}_size": 1 for r in ranks}
    runtime.get_parallel().override_permanently(**values, attn_dp_rank=0)
    device = memory_pool.MHATokenToKVPool(
        size=SIZE,
        page_size=PAGE,
        dtype=torch.float16,
        head_num=HEADS,
        head_dim=DIM,
        layer_num=LAYERS,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
    )
    allocator = paged.PagedTokenToKVPoolAllocator(SIZE, PAGE, torch.float16, "cpu", device, False)
    host = host_pool.MHATokenToKVPoolHost(
        device._mha_buffer_info(),
        2.0,
        0,
        PAGE,
        "page_first",
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=SIZE,
        start_layer=0,
        end_layer=LAYERS,
    )
    extra = {
        "backend_name": "flatcake",
        "module_path": adapter.__name__,
        "class_name": "FlatCakeHiCacheStorage",
        "directory": str(tmp_path / "kv"),
        "page_size": PAGE,
        "extent_bytes": 1 << 16,
    }
    return controller.HiCacheController(
        allocator,
        host,
        PAGE,
        _one_rank_group(),
        threading.Event(),
        write_policy="write_through",
        io_backend="direct",
        storage_backend="dynamic",
        prefetch_threshold=PAGE,
        model_name="test-model",
        storage_backend_extra_config=extra,
    )


def _get(queue: Queue[Any]) -> Any:
    try:
        return queue.get(timeout=30)
    except Empty:
        pytest.fail("the controller's thread did not answer within 30 s")


def _prefetch(ctl: Any, rid: str, tokens: list[int]) -> tuple[int, Any]:
    """SGLang's prefetch of ``tokens``: the prefetch thread's hit query, then what the tree cache
    does on the scheduler thread (host slots for the hit, the operation handed to the I/O
    thread), then the I/O thread's read into those slots, acknowledged through the sync thread
    as the scheduler sees it. Returns the tokens read and the slots they went to."""
    operation = ctl.prefetch(rid, tokens)
    assert _get(ctl.prefetch_hit_queue) is operation
    hit = operation.storage_hit_count
    if not hit:
        return 0, None
    slots = ctl.alloc_prefetch_host_buffers(operation, hit)
    operation.host_indices = slots
    ctl.prefetch_buffer.put(operation)
    read = 0
    while not (ack := _get(ctl.ack_prefetch_queue)).completed_req:
        assert ack.operation is operation
        read += ack.completed_tokens or 0
    return read, slots


def test_controller_backs_up_and_prefetches_through_the_adapter(tmp_path: Path) -> None:
    ctl = _controller(tmp_path)
    assert isinstance(ctl.storage_backend, adapter.FlatCakeHiCacheStorage)
    host = ctl.mem_pool_host
    tokens = list(range(100, 100 + 6 * PAGE))  # a prompt of 6 pages
    src = host.alloc(len(tokens))
    g = torch.Generator().manual_seed(3)
    for p in range(6):
        page = host.get_dummy_flat_data_page()
        host.set_from_flat_data_page(int(src[p * PAGE]), torch.randn(page.shape, generator=g))
    written = [host.get_data_page(int(src[p * PAGE])).clone() for p in range(6)]
    # Write-through after the prefill: SGLang hashes the pages, the backup thread stores them.
    pages = hashing.get_storage_hash_str(tokens, None, page_size=PAGE)
    assert len(pages) == 6
    ctl.write_storage(src[: 4 * PAGE], tokens[: 4 * PAGE], hash_value=pages[:4])
    assert _get(ctl.ack_backup_queue).completed_tokens == 4 * PAGE
    # Only the backed-up prefix is a storage hit; its pages come back byte-equal in new slots.
    read, slots = _prefetch(ctl, "r1", tokens)
    assert read == 4 * PAGE
    for p in range(4):
        assert int(slots[p * PAGE]) != int(src[p * PAGE])
        assert torch.equal(host.get_data_page(int(slots[p * PAGE])), written[p])
    # The next turn backs up the rest, continuing the session; now all six pages hit.
    ctl.write_storage(src[4 * PAGE :], tokens[4 * PAGE :], hash_value=pages[4:])
    assert _get(ctl.ack_backup_queue).completed_tokens == 2 * PAGE
    read, slots = _prefetch(ctl, "r2", tokens)
    assert read == 6 * PAGE
    got = [host.get_data_page(int(slots[p * PAGE])) for p in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(got, written, strict=True))
    # A prompt whose first page differs hits nothing: the chain of page hashes breaks at once.
    read, slots = _prefetch(ctl, "r3", [7, *tokens[1:]])
    assert read == 0 and slots is None
    ctl.detach_storage_backend()
