"""The SGLang adapter against SGLang's real ``HiCacheStorage`` (``sglang==0.5.23``), loaded the
way SGLang loads it (``StorageBackendFactory.create_backend("dynamic", ...)``) and driven
through the cache controller's calls: back up a session's pages over several turns
(``batch_set`` / ``batch_set_v1``), query the stored prefix (``batch_exists``), prefetch it
(``batch_get`` / ``batch_get_v1``), clear. Every byte is checked. Skips, naming the failed
import, where SGLang is not installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import engine_helpers
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")
adapter = import_or_skip("fcctl.layout.adapters.sglang", "the SGLang adapter")
hicache = import_or_skip("sglang.srt.mem_cache.hicache_storage", "SGLang's HiCacheStorage")
factory = import_or_skip("sglang.srt.mem_cache.storage.backend_factory", "SGLang's loader")

PAGE_TOKENS = 4


def _config(tmp_path: Path, **extra: Any) -> Any:
    return hicache.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="test-model",
        extra_config={
            "backend_name": "flatcake",
            "module_path": adapter.__name__,
            "class_name": "FlatCakeHiCacheStorage",
            "directory": str(tmp_path / "kv"),
            "page_size": PAGE_TOKENS,
            "extent_bytes": 1 << 16,
            **extra,
        },
    )


def _pages(n: int, seed: int) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((2, 3, PAGE_TOKENS, 2, 8), generator=g).half() for _ in range(n)]


def test_dynamic_backend_over_several_turns(tmp_path: Path) -> None:
    backend = factory.StorageBackendFactory.create_backend("dynamic", _config(tmp_path), None)
    assert isinstance(backend, adapter.FlatCakeHiCacheStorage)
    assert isinstance(backend, hicache.HiCacheStorage)
    keys = [f"{i:064x}" for i in range(9)]
    pages = _pages(9, 1)
    assert backend.batch_exists(keys) == 0
    # Turn 1 backs up pages 0-3, turn 2 pages 4-8 (as write-through does after each prefill).
    assert backend.batch_set(keys[:4], pages[:4])
    assert (
        backend.batch_exists(keys) == 4 and backend.exists(keys[3]) and not backend.exists(keys[4])
    )
    assert backend.batch_set(keys[4:], pages[4:])
    assert backend.batch_exists(keys) == 9
    # Prefetch: into the host pool's page buffers, every byte as written.
    targets = [torch.empty_like(p) for p in pages]
    got = backend.batch_get(keys, targets)
    assert all(g is t for g, t in zip(got, targets, strict=True))
    assert all(torch.equal(t, p) for t, p in zip(targets, pages, strict=True))
    one = backend.get(keys[6], torch.empty_like(pages[6]))
    assert one is not None and torch.equal(one, pages[6])
    # A prefix that stops at a missing page: only the stored part comes back.
    missing = [*keys[:2], "f" * 64, keys[3]]
    assert backend.batch_exists(missing) == 2
    assert [g is None for g in backend.batch_get(missing, None)] == [False, False, True, True]
    # The store placed each write with the thresholds and keeps sessions in FC-CIO files (its
    # writer thread writes them in the background).
    assert backend.kv is not None and backend.kv.flush(timeout_s=60)
    assert len(backend.kv.placements) == 2
    assert sum(1 for _ in (tmp_path / "kv").glob("*.fccio")) >= 1
    backend.clear()
    assert backend.batch_exists(keys) == 0 and not list((tmp_path / "kv").glob("*.fccio"))
    backend.close()


def test_prefix_keys_chain_turns_into_one_session_and_trace(tmp_path: Path) -> None:
    """The zero-copy path's side channel: ``extra_info.prefix_keys`` (what SGLang's cache
    controller sends) links a later turn to the session, ``extra_info.extra_info["session_id"]``
    names it. The pages go in through ``write_pages``, where ``batch_set_v1`` ends once it has
    read them from the host pool (that pool is exercised in the next test, where importable)."""
    trace = tmp_path / "t.jsonl"
    backend = adapter.FlatCakeHiCacheStorage(_config(tmp_path), None, trace=trace)
    keys = [f"{i:064x}" for i in range(6)]
    pages = _pages(6, 2)
    info = hicache.HiCacheStorageExtraInfo
    # The controller queries in batches, each batch's prefix_keys the chain so far.
    assert backend.batch_exists(keys[:3], info(prefix_keys=None)) == 0
    assert backend.batch_exists(keys[3:], info(prefix_keys=keys[:3])) == 0
    backend.write_pages(keys[:3], [adapter.tensor_bytes(p) for p in pages[:3]], [], "chat-9")
    backend.write_pages(keys[3:], [adapter.tensor_bytes(p) for p in pages[3:]], keys[:3], None)
    assert backend.kv is not None
    assert {backend.kv.index.where[k][0] for k in keys} == {"chat-9"}  # chained on the prefix
    assert backend.batch_exists(keys, info(prefix_keys=[])) == 6
    got = backend.batch_get(keys, [torch.empty_like(p) for p in pages])
    assert all(torch.equal(g, p) for g, p in zip(got, pages, strict=True))
    backend.close()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    # Two queries: the first (two batches, one record) and the last.
    assert [len(r["hash_ids"]) for r in rows] == [6, 6]
    assert rows[0]["engine"] == "sglang" and rows[0]["input_tokens"] == 6 * PAGE_TOKENS
    engine_helpers.check_trace(trace, requests=2, block_accesses=12, distinct_blocks=6)


def test_zero_copy_v1_with_sglangs_host_pool(tmp_path: Path) -> None:
    mha = import_or_skip("sglang.srt.mem_cache.pool_host.mha", "SGLang's host KV pool")
    info_mod = import_or_skip("sglang.srt.mem_cache.device_pool_info", "SGLang's pool info")
    layers, heads, dim, size = 3, 2, 8, 64
    k = tuple(
        torch.zeros(size + PAGE_TOKENS, heads, dim, dtype=torch.float16) for _ in range(layers)
    )
    v = tuple(
        torch.zeros(size + PAGE_TOKENS, heads, dim, dtype=torch.float16) for _ in range(layers)
    )
    ptrs = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64)  # noqa: E731
    buffers = info_mod.KVBuffers(
        k=k, v=v, k_data_ptrs=ptrs(k), v_data_ptrs=ptrs(v), layout=info_mod.KVBufferLayout.NHD
    )
    buffer_info = info_mod.MHABufferInfo(
        buffers=buffers,
        page_size=PAGE_TOKENS,
        head_num=heads,
        head_dim=dim,
        v_head_dim=dim,
        dtype=torch.float16,
        device=torch.device("cpu"),
    )
    host = mha.MHATokenToKVPoolHost(
        buffer_info,
        2,
        0,
        PAGE_TOKENS,
        "page_first",
        pin_memory=False,
        device_capacity_tokens=size,
        start_layer=0,
        end_layer=layers,
    )
    backend = adapter.FlatCakeHiCacheStorage(_config(tmp_path, interface_v1=1), None)
    backend.register_mem_pool_host(host)
    keys = [f"{i:064x}" for i in range(4)]
    src = torch.arange(4 * PAGE_TOKENS) + PAGE_TOKENS
    for i in range(4):
        page = host.get_dummy_flat_data_page()
        host.set_from_flat_data_page(
            int(src[i * PAGE_TOKENS]), torch.randn(page.shape).to(page.dtype)
        )
    expected = [host.get_data_page(int(src[i * PAGE_TOKENS])).clone() for i in range(4)]
    info = hicache.HiCacheStorageExtraInfo
    assert backend.batch_set_v1(keys, src, info(extra_info={"session_id": "s"})) == [True] * 4
    dst = src + 8 * PAGE_TOKENS
    assert backend.batch_get_v1(keys, dst, info(prefix_keys=[])) == [True] * 4
    for i in range(4):
        assert torch.equal(host.get_data_page(int(dst[i * PAGE_TOKENS])), expected[i])
    backend.close()
