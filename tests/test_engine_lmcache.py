"""The LMCache adapter against LMCache's real ``StoragePluginInterface`` (``lmcache==0.5.6``),
loaded by LMCache's own ``storage_plugin_launcher`` from an ``LMCacheEngineConfig`` and driven
through the cache engine's calls: store a session's chunks over several turns
(``batched_submit_put_task`` with ``TensorMemoryObj`` chunks in ``KV_2LTD``), look the prefix up
(``batched_contains``), retrieve it (``batched_get_blocking`` / ``get_blocking`` /
``get_non_blocking``), pin, remove. Every byte is checked. Skips, naming the failed import, where
LMCache is not installed."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from fcctl.layout.adapters.trace import TraceRecorder, key_id
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")
adapter = import_or_skip("fcctl.layout.adapters.lmcache", "the LMCache adapter")
backends = import_or_skip("lmcache.v1.storage_backend", "LMCache's storage backends")
config_mod = import_or_skip("lmcache.v1.config", "LMCache's config")
memory = import_or_skip("lmcache.v1.memory_management", "LMCache's memory objects")
utils = import_or_skip("lmcache.utils", "LMCache's keys")

CHUNK = 16
SHAPE = (2, 3, CHUNK, 32)  # KV_2LTD: K/V, layers, tokens, hidden


def _plugin(tmp_path: Path, trace: Path | None = None) -> Any:
    extra = {
        "storage_plugin.flatcake.module_path": adapter.__name__,
        "storage_plugin.flatcake.class_name": "FlatCakeStoragePlugin",
        "flatcake.directory": str(tmp_path / "kv"),
        "flatcake.extent_bytes": 1 << 16,
    }
    config = config_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=False, storage_plugins=["flatcake"], extra_config=extra
    )
    loaded: OrderedDict = OrderedDict()
    loop = asyncio.new_event_loop()
    backends.storage_plugin_launcher(config, None, loop, None, "cpu", loaded)
    loop.close()
    plugin = loaded["flatcake"]
    assert isinstance(plugin, adapter.FlatCakeStoragePlugin)
    assert isinstance(plugin, backends.abstract_backend.StoragePluginInterface)
    if trace is not None:  # what FLATCAKE_TRACE gives the launcher's instance
        plugin.recorder = TraceRecorder(trace, engine="lmcache")
    return plugin


def _key(i: int, session: str | None) -> Any:
    configs = {} if session is None else {"lmcache.tag.session_id": session}
    return utils.CacheEngineKey("test-model", 1, 0, 1000 + i, torch.float16, configs)


def _chunk(seed: int, tokens: int = CHUNK) -> Any:
    g = torch.Generator().manual_seed(seed)
    data = torch.randn((2, 3, tokens, 32), generator=g).half()
    raw = data.reshape(-1).view(torch.uint8).clone()
    meta = memory.MemoryObjMetadata(
        shape=data.shape,
        dtype=torch.float16,
        address=0,
        phy_size=raw.numel(),
        ref_count=1,
        fmt=memory.MemoryFormat.KV_2LTD,
    )
    return memory.TensorMemoryObj(raw, meta, None), data


def test_plugin_over_several_turns(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, trace=tmp_path / "t.jsonl")
    keys = [_key(i, "chat-3") for i in range(7)]
    chunks = [_chunk(i) for i in range(6)] + [_chunk(6, tokens=5)]  # the last one partial
    assert plugin.batched_contains(keys[:3]) == 0
    plugin.batched_submit_put_task(keys[:3], [c[0] for c in chunks[:3]])
    assert plugin.batched_contains(keys) == 3
    assert plugin.contains(keys[2]) and not plugin.contains(keys[3])
    done: list[Any] = []
    plugin.batched_submit_put_task(
        keys[3:], [c[0] for c in chunks[3:]], on_complete_callback=done.append
    )
    assert plugin.batched_contains(keys) == 7  # in flight: served from the write's buffers
    assert plugin.kv is not None and plugin.kv.flush(timeout_s=60)  # written in the background
    assert done == keys[3:]
    # One session, two turns, on the medium the thresholds chose.
    assert plugin.kv is not None and {plugin.kv.index.where[k][0] for k in keys} == {"chat-3"}
    assert len(plugin.kv.store.turns("chat-3")) == 2
    got = plugin.batched_get_blocking(keys)
    for obj, (_, data) in zip(got, chunks, strict=True):
        assert obj is not None and obj.get_shape() == data.shape
        assert obj.get_memory_format() == memory.MemoryFormat.KV_2LTD
        assert torch.equal(obj.tensor, data)
    single = plugin.get_blocking(keys[6])
    assert single is not None and torch.equal(single.tensor, chunks[6][1])
    future = plugin.get_non_blocking(keys[1])
    assert future is not None and torch.equal(future.result().tensor, chunks[1][1])
    assert plugin.get_blocking(_key(99, "chat-3")) is None
    # A pinned chunk keeps its session from a polite removal; a forced one drops it whole.
    assert plugin.batched_contains(keys[:2], pin=True) == 2
    assert not plugin.remove(keys[5], force=False)
    assert plugin.unpin(keys[0]) and plugin.unpin(keys[1]) and not plugin.unpin(keys[1])
    assert plugin.remove(keys[5], force=False)
    assert plugin.batched_contains(keys) == 0 and not list((tmp_path / "kv").glob("*.fccio"))
    plugin.close()
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["session_id"] for r in rows] == ["chat-3"] * 5
    assert rows[0]["hash_ids"] == [key_id(1000 + i) for i in range(3)]


def test_untagged_puts_chain_on_the_lookup(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path)
    keys = [_key(i, None) for i in range(4)]
    chunks = [_chunk(10 + i) for i in range(4)]
    plugin.batched_contains(keys[:2])
    plugin.batched_submit_put_task(keys[:2], [c[0] for c in chunks[:2]])
    # The next turn looks up the whole chain, then puts only its new chunks.
    assert plugin.batched_contains(keys) == 2
    plugin.batched_submit_put_task(keys[2:], [c[0] for c in chunks[2:]])
    assert len({plugin.kv.index.where[k][0] for k in keys}) == 1  # one session, chained
    got = plugin.batched_get_blocking(list(reversed(keys)))
    assert all(torch.equal(o.tensor, c[1]) for o, c in zip(got, reversed(chunks), strict=True))
    plugin.close()
