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
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from fcctl.layout.adapters.trace import TraceRecorder, key_id
from tests import engine_helpers
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")
adapter = import_or_skip("fcctl.layout.adapters.lmcache", "the LMCache adapter")
backends = import_or_skip("lmcache.v1.storage_backend", "LMCache's storage backends")
config_mod = import_or_skip("lmcache.v1.config", "LMCache's config")
memory = import_or_skip("lmcache.v1.memory_management", "LMCache's memory objects")
utils = import_or_skip("lmcache.utils", "LMCache's keys")

CHUNK = 16
SHAPE = (2, 3, CHUNK, 32)  # KV_2LTD: K/V, layers, tokens, hidden


def _extra_config(tmp_path: Path, **ours: Any) -> dict[str, Any]:
    """LMCache's ``extra_config`` that loads the plugin, with ``flatcake.*`` settings."""
    return {
        "storage_plugin.flatcake.module_path": adapter.__name__,
        "storage_plugin.flatcake.class_name": "FlatCakeStoragePlugin",
        "flatcake.directory": str(tmp_path / "kv"),
        "flatcake.extent_bytes": 1 << 16,
        **{f"flatcake.{k}": v for k, v in ours.items()},
    }


def _plugin(tmp_path: Path, trace: Path | None = None) -> Any:
    config = config_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=False,
        storage_plugins=["flatcake"],
        extra_config=_extra_config(tmp_path),
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


# LMCache's own engine ------------------------------------------------------------------------
# ``LMCacheEngine`` as vLLM's LMCache connector drives it: ``store`` after a prefill, ``lookup``
# when a request arrives, ``retrieve`` into the paged KV; its ``StorageManager`` loads the
# plugin from ``storage_plugins`` and calls it. The GPU side is a CPU implementation of
# LMCache's ``GPUConnectorInterface`` over one KV tensor per request (what the connector's
# kernels do between the paged GPU KV and LMCache's ``KV_2LTD`` chunks, done with torch ops).

cache_engine = import_or_skip("lmcache.v1.cache_engine", "LMCache's cache engine")
connectors = import_or_skip("lmcache.v1.gpu_connector.gpu_connectors", "LMCache's GPU connectors")
metadata_mod = import_or_skip("lmcache.v1.metadata", "LMCache's engine metadata")
lookup = import_or_skip(
    "lmcache.v1.lookup_client.lmcache_async_lookup_client", "LMCache's async lookup"
)

LAYERS, HEADS, HEAD_DIM = 3, 2, 16


class CpuConnector(connectors.GPUConnectorInterface):  # type: ignore[misc]
    """``kv`` (keyword): a request's KV, ``(layers, 2, tokens, heads, head_dim)``; a chunk is
    ``(2, layers, tokens, heads x head_dim)`` (``KV_2LTD``)."""

    def get_shape(self, num_tokens: int) -> Any:
        return torch.Size([2, LAYERS, num_tokens, HEADS * HEAD_DIM])

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        self.batched_from_gpu([memory_obj], [start], [end], **kwargs)

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        self.batched_to_gpu([memory_obj], [start], [end], **kwargs)

    def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
        kv = kwargs["kv"]
        for obj, s, e in zip(memory_objs, starts, ends, strict=True):
            chunk = kv[:, :, s:e].permute(1, 0, 2, 3, 4).reshape(2, LAYERS, e - s, -1)
            obj.tensor.copy_(chunk)

    def batched_to_gpu(
        self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kwargs: Any
    ) -> None:
        kv = kwargs["kv"]
        for obj, s, e in zip(memory_objs, starts, ends, strict=True):
            chunk = obj.tensor.reshape(2, LAYERS, e - s, HEADS, HEAD_DIM)
            kv[:, :, s:e] = chunk.permute(1, 0, 2, 3, 4)


def _engine(tmp_path: Path, name: str, *, async_loading: bool, **ours: Any) -> Any:
    """An ``LMCacheEngine`` whose storage manager loads the plugin; with ``async_loading``, also
    LMCache's own async lookup server (zmq over ipc), which the scheduler's client talks to."""
    config = config_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=False,
        max_local_cpu_size=0.05,
        storage_plugins=["flatcake"],
        extra_config=_extra_config(tmp_path, **ours),
        enable_async_loading=async_loading,
    )
    meta = metadata_mod.LMCacheMetadata(
        model_name="test-model",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.float16,
        kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_DIM),
        chunk_size=CHUNK,
        engine_id=name,
    )
    engine = cache_engine.LMCacheEngineBuilder.get_or_create(
        name, config, meta, CpuConnector(), lambda t, r: None, lambda o, r: o
    )
    engine.test_lookup_server = engine.test_lookup_client = None
    try:
        if async_loading:
            engine.test_lookup_server = lookup.LMCacheAsyncLookupServer(engine, meta)
            engine.test_lookup_client = lookup.LMCacheAsyncLookupClient(config, meta)
        engine.post_init(async_lookup_server=engine.test_lookup_server)
    except BaseException:
        _close(name, engine)
        raise
    return engine


def _close(name: str, engine: Any) -> None:
    client, server = engine.test_lookup_client, engine.test_lookup_server
    if client is not None:
        # Each side's thread waits in recv() on a zmq socket that close() would close under
        # it (zmq sockets are not thread-safe: the process aborts), and an open socket keeps
        # the interpreter from exiting. So stop both loops, wake each thread with one message
        # through LMCache's own calls (a cleanup for no lookup; a reply to none), then close.
        client.running = server.running = False
        client._send_cleanup_message("flatcake-test-shutdown")
        server.send_response_to_scheduler("flatcake-test-shutdown", 0)
        client.thread.join(timeout=10)
        server.thread.join(timeout=10)
        client.close()
        server.close()
    cache_engine.LMCacheEngineBuilder.destroy(name)


def _plugin_of(engine: Any) -> Any:
    plugin = engine.storage_manager.storage_backends["flatcake"]
    assert isinstance(plugin, adapter.FlatCakeStoragePlugin)
    return plugin


def _request(engine: Any, rid: str, tokens: Any, kv: Any, configs: dict) -> int:
    """One request as vLLM's LMCache connector serves it: the scheduler looks the prompt up
    (async: through LMCache's lookup client, which waits for the worker's prefetch), the
    worker retrieves the hit prefix into fresh KV (checked byte for byte against what was
    computed), then stores the rest after the prefill. Returns the hit tokens."""
    client = engine.test_lookup_client
    if client is not None:
        assert client.lookup_cache(rid) == -1  # not asked yet: the scheduler sends it
        client.lookup(tokens, rid, request_configs=configs)
        hit = None
        for _ in range(4000):  # the scheduler polls each step until the prefetch answers
            hit = client.lookup_cache(rid)
            if hit is not None:
                break
            time.sleep(0.005)
        assert hit is not None, "the async lookup never answered"
        client.clear_lookup_status(rid)
    else:
        hit = engine.lookup(tokens, lookup_id=rid, pin=True, request_configs=configs)
    if hit:
        got = torch.zeros_like(kv)
        mask = engine.retrieve(tokens[:hit], kv=got, req_id=rid, request_configs=configs)
        assert int(mask.sum()) == hit
        assert torch.equal(got[:, :, :hit], kv[:, :, :hit])
    if client is None:
        engine.lookup_unpin(rid)
    new = torch.zeros(len(tokens), dtype=torch.bool)
    new[hit:] = True
    engine.store(tokens, mask=new, kv=kv, request_configs=configs)
    return int(hit)


def _chat(engine: Any, configs: dict, seed: int, turns: tuple[int, ...]) -> list[int]:
    """A chat whose turn ``i`` sends ``turns[i]`` tokens: the previous prompt, its reply and
    new input (the KV of a prefix is the same in every turn, as a causal model's is)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 30000, (turns[-1],), generator=g)
    kv = torch.randn((LAYERS, 2, turns[-1], HEADS, HEAD_DIM), generator=g).half()
    return [
        _request(engine, f"{seed}-{i}", tokens[:n], kv[:, :, :n].clone(), configs)
        for i, n in enumerate(turns)
    ]


@pytest.mark.parametrize("async_loading", [False, True], ids=["blocking", "async"])
def test_lmcache_engine_serves_chats_through_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, async_loading: bool
) -> None:
    trace = tmp_path / "capture.jsonl"
    monkeypatch.setenv("FLATCAKE_TRACE", str(trace))
    name = f"flatcake-{'async' if async_loading else 'blocking'}"
    engine = _engine(tmp_path, name, async_loading=async_loading)
    try:
        plugin = _plugin_of(engine)
        # A tagged chat of three turns, then an untagged one that chains on its lookups.
        tagged = {"lmcache.tag.session_id": "chat-1"}
        assert _chat(engine, tagged, 1, (48, 80, 112)) == [0, 48, 80]
        assert _chat(engine, {}, 2, (32, 64)) == [0, 32]
        # Every chunk went to the plugin (LMCache's CPU tier is off): one FlatCake session per
        # chat, one turn per request that stored (written in the background: waited for).
        assert plugin.kv is not None and plugin.kv.flush(timeout_s=60)
        assert [t.tokens for t in plugin.kv.store.turns("chat-1")] == [3, 2, 2]
        untagged = set(plugin.kv.index.sessions) - {"chat-1"}
        assert len(untagged) == 1
        assert [t.tokens for t in plugin.kv.store.turns(untagged.pop())] == [2, 2]
        assert len(plugin.kv.placements) == 5
    finally:
        _close(name, engine)
    # One record per request, though LMCache asked about each prompt twice (lookup, then the
    # retrieve's own lookup): 5 requests of 3 + 5 + 7 + 2 + 4 = 21 chunk accesses.
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [len(r["hash_ids"]) for r in rows] == [3, 5, 7, 2, 4]
    assert [r["session_id"] for r in rows[:3]] == ["chat-1"] * 3
    assert len({r["session_id"] for r in rows[3:]}) == 1
    engine_helpers.check_trace(trace, requests=5, block_accesses=21, distinct_blocks=11)


def test_the_reply_length_travels_as_a_request_config(tmp_path: Path) -> None:
    """``lmcache.flatcake.previous_reply_tokens`` sent with each later turn reaches the
    placement (a short reply keeps the chat in host memory, a long one sends it to SSD), and,
    not being a tag, leaves the keys alone: every turn still hits its prefix."""
    name = "flatcake-reply"
    engine = _engine(tmp_path, name, async_loading=False, host_bytes=1 << 26)
    try:
        plugin = _plugin_of(engine)
        g = torch.Generator().manual_seed(5)
        tokens = torch.randint(0, 30000, (112,), generator=g)
        kv = torch.randn((LAYERS, 2, 112, HEADS, HEAD_DIM), generator=g).half()
        tag = {"lmcache.tag.session_id": "chat-r"}
        turns = [(48, None), (80, 16), (112, 5000)]  # (prompt tokens, previous reply tokens)
        hits = []
        for i, (n, reply) in enumerate(turns):
            configs = tag if reply is None else {**tag, adapter.REPLY_CONFIG: reply}
            hits.append(_request(engine, f"r-{i}", tokens[:n], kv[:, :, :n].clone(), configs))
        assert hits == [0, 48, 80]
        assert plugin.kv.flush(timeout_s=60)  # placed as each turn is written, in the background
        assert [p.reason.value for p in plugin.kv.placements] == [
            "first_turn",
            "short_reply_chat",
            "long_reply",
        ]
        with pytest.raises(ValueError, match=r"request_configs: lmcache\.flatcake\.previous_reply"):
            bad = {**tag, adapter.REPLY_CONFIG: "many"}
            engine.store(tokens, kv=kv, request_configs={**bad, "lmcache.tag.session_id": "x"})
    finally:
        _close(name, engine)


def test_a_write_still_queued_when_the_engine_closes_keeps_its_bytes(tmp_path: Path) -> None:
    """LMCache's ``StorageManager.close`` closes its ``LocalCPUBackend`` (whose allocator frees
    every memory object's buffer, whatever its reference count) before the plugin. A write
    still queued then must not read LMCache's memory: the writer is held until that
    allocator is closed, and what it writes afterwards is the chunks as stored, byte for
    byte (before the fix the writer copied from the freed buffer: SIGSEGV or other bytes)."""
    name = "flatcake-close-order"
    engine = _engine(tmp_path, name, async_loading=False)
    try:
        plugin = _plugin_of(engine)
        g = torch.Generator().manual_seed(5)
        tokens = torch.randint(0, 30000, (48,), generator=g)
        kv = torch.randn((LAYERS, 2, 48, HEADS, HEAD_DIM), generator=g).half()
        configs = {"lmcache.tag.session_id": "chat-close"}
        assert plugin.kv is not None
        with plugin.kv.lock:  # the writer waits on this before it touches the turn
            engine.store(tokens, kv=kv, request_configs=configs)
            assert plugin.kv.stats()["stores_pending"] == 1
            engine.storage_manager.storage_backends["LocalCPUBackend"].close()
        assert plugin.kv.flush(timeout_s=60)
        assert plugin.kv.take_write_failures() == []
        keys = plugin.kv.index.sessions["chat-close"].keys
        got = plugin.kv.read(keys)
        assert got is not None and len(keys) == 3
        for i in range(3):
            chunk = kv[:, :, i * CHUNK : (i + 1) * CHUNK].permute(1, 0, 2, 3, 4)
            expected = chunk.reshape(2, LAYERS, CHUNK, -1).contiguous().view(torch.uint8)
            assert bytes(got[i].reshape(-1)) == bytes(expected.reshape(-1).numpy())
    finally:
        _close(name, engine)


def test_a_plugin_that_cannot_start_stops_the_engine(tmp_path: Path) -> None:
    """LMCache's launcher swallows a plugin constructor's ``Exception``; the plugin's startup
    failure is not one, so the engine's own startup fails with the cause."""
    (tmp_path / "kv").write_text("a file where the store's directory should be")
    with pytest.raises(adapter.PluginStartupFailure, match="cannot start") as caught:
        _engine(tmp_path, "flatcake-broken", async_loading=False)
    assert "kv" in str(caught.value)
    assert cache_engine.LMCacheEngineBuilder.get("flatcake-broken") is None


def test_a_bad_trace_path_stops_the_engine_at_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLATCAKE_TRACE", str(tmp_path / "missing" / "t.jsonl"))
    with pytest.raises(adapter.PluginStartupFailure, match=r"\$FLATCAKE_TRACE: the folder"):
        _engine(tmp_path, "flatcake-bad-trace", async_loading=False)
