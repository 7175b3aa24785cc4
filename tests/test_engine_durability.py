"""The adapters' durability driven by the engines' own code (issue #35, items 2 to 4).

* vLLM (``vllm==0.34.0``): vLLM's own ``Scheduler`` with the ``OffloadingConnector`` (its
  ``OffloadingConnectorScheduler`` builds the store jobs on every step, ``_build_store_jobs``)
  and vLLM's ``OffloadingConnectorWorker`` executing them through the FlatCake worker on CPU
  KV tensors; only the model's forward pass is played by the test (each block computed gets
  bytes derived from its token prefix). A 3-turn chat with chunked prefill and decode steps
  gives one segment per layer per turn; a restarted engine serves the same hits byte for
  byte; a damaged file is one failed load, then a miss and a fresh store.
* SGLang (``sglang==0.5.23``): the HiCache backend loaded by ``StorageBackendFactory``,
  reopened on its directory, and damaged.
* LMCache (``lmcache==0.5.6``): the plugin loaded by ``storage_plugin_launcher``, reopened (the
  issue saw 3 hits become 0) and damaged.

Each part skips, naming the import that failed, where its engine is not installed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fcctl.layout.session_file import SessionFile
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")


def _damage(directory: Path, turn: int, layer: int) -> None:
    """Flip one byte of a committed turn's layer in the one session file of rank 0."""
    (path,) = sorted(directory.glob("n0-r0-*.fccio"))
    with SessionFile.open(path) as f:
        offset = f.turns[turn].layer_offsets[layer] + 7
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x5A]))


# --------------------------------------------------------------------------- vLLM

BLOCK, LAYERS = 16, 3
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": LAYERS,
    "head_dim": 32,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


def _vllm() -> Any:
    """vLLM's modules this part drives (imported once; vLLM takes ~25 s to import)."""
    import_or_skip("fcctl.layout.adapters.vllm", "the vLLM adapter")
    names = {
        "config": "vllm.config",
        "sampling": "vllm",
        "worker": "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker",
        "hashing": "vllm.utils.hashing",
        "kv_utils": "vllm.v1.core.kv_cache_utils",
        "scheduler": "vllm.v1.core.sched.scheduler",
        "kv_interface": "vllm.v1.kv_cache_interface",
        "base": "vllm.v1.kv_offload.base",
        "outputs": "vllm.v1.outputs",
        "request": "vllm.v1.request",
        "structured": "vllm.v1.structured_output",
    }
    return type("Vllm", (), {k: import_or_skip(v, f"vLLM ({v})") for k, v in names.items()})


class VllmEngine:
    """vLLM's scheduler and offloading worker on CPU, stepped as its engine core steps them;
    the forward pass writes each block it completes with bytes derived from its tokens."""

    def __init__(
        self, v: Any, model: Path, directory: Path, *, host_bytes: int, on_failure: str = "fail"
    ) -> None:
        self.v = v
        transfer = v.config.KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_load_failure_policy=on_failure,
            kv_connector_extra_config={
                "spec_name": "FlatCakeOffloadingSpec",
                "spec_module_path": "fcctl.layout.adapters.vllm",
                "directory": str(directory),
                "extent_bytes": 1 << 16,
                "host_bytes": host_bytes,
                "offload_prompt_only": False,  # decode steps complete blocks to store too
            },
        )
        config = v.config.VllmConfig(
            model_config=v.config.ModelConfig(
                model=str(model), skip_tokenizer_init=True, dtype="float16", max_model_len=2048
            ),
            cache_config=v.config.CacheConfig(block_size=BLOCK, enable_prefix_caching=False),
            # 64 tokens a step: prompts of 100+ tokens are prefilled in chunks.
            scheduler_config=v.config.SchedulerConfig(
                max_num_batched_tokens=64,
                max_num_seqs=4,
                max_model_len=2048,
                is_encoder_decoder=False,
            ),
            kv_transfer_config=transfer,
            device_config=v.config.DeviceConfig(device="cpu"),
        )
        spec = v.kv_interface.FullAttentionSpec(
            block_size=BLOCK, num_kv_heads=1, head_size=32, dtype=torch.float16
        )
        blocks = 128
        kv_config = v.kv_interface.KVCacheConfig(
            num_blocks=blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                v.kv_interface.KVCacheGroupSpec([f"layer.{i}" for i in range(LAYERS)], spec)
            ],
        )
        config.cache_config.num_gpu_blocks = blocks
        self.scheduler = v.scheduler.Scheduler(
            vllm_config=config,
            kv_cache_config=kv_config,
            structured_output_manager=v.structured.StructuredOutputManager(config),
            block_size=BLOCK,
            log_stats=True,
        )
        self.manager = self.scheduler.connector.connector_scheduler.manager
        self.page = spec.page_size_bytes
        self.tensors = [torch.zeros(blocks, self.page, dtype=torch.int8) for _ in range(LAYERS)]
        caches = v.base.CanonicalKVCaches(
            tensors=[v.base.CanonicalKVCacheTensor(t, self.page) for t in self.tensors],
            group_data_refs=[[v.base.CanonicalKVCacheRef(i, self.page) for i in range(LAYERS)]],
        )
        # The worker process's side: its own spec from the same config, as vLLM builds it.
        worker_spec = type(self.manager.spec)(self.manager.spec.config)
        self.connector = v.worker.OffloadingConnectorWorker(worker_spec, config, kv_config)
        self.connector._init_worker(caches)  # what register_kv_caches ends in
        self.flatcake = self.connector.worker
        v.kv_utils.init_none_hash(v.hashing.sha256)
        self.hasher = v.kv_utils.get_request_block_hasher(BLOCK, v.hashing.sha256)
        self.requests = 0
        self.results: list[bool] = []  # every transfer the worker finished: success
        self.store_calls = 0  # prepare_store calls vLLM made
        self.loaded: dict[str, tuple[int, bool]] = {}  # request -> (blocks loaded, bytes right)
        prepare_store = self.manager.prepare_store

        def counted(keys: Any, ctx: Any) -> Any:
            self.store_calls += 1
            return prepare_store(keys, ctx)

        self.manager.prepare_store = counted
        get_finished = self.flatcake.get_finished

        def watched() -> Any:
            done = get_finished()
            self.results += [r.success for r in done]
            return done

        self.flatcake.get_finished = watched

    def content(self, tokens: list[int]) -> Any:
        digest = hashlib.sha256(np.asarray(tokens, np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return torch.from_numpy(rng.integers(-128, 128, (LAYERS, self.page), dtype=np.int8))

    def chat(self, prompt: list[int], reply: list[int], session: str) -> Any:
        """One request through vLLM, step by step until it finishes; returns it."""
        v = self.v
        self.requests += 1
        request = v.request.Request(
            request_id=f"r{self.requests}",
            prompt_token_ids=list(prompt),
            sampling_params=v.sampling.SamplingParams(max_tokens=len(reply)),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        request.kv_transfer_params = {"session_id": session}
        self.scheduler.add_request(request)
        replies = iter(reply)
        while self.scheduler.requests:
            out = self.scheduler.schedule()
            meta = out.kv_connector_metadata
            self.connector.handle_preemptions(meta)
            self.connector.start_kv_transfers(meta)
            self._forward(out)
            self.connector.prepare_store_kv(meta)
            sending, recving = self.connector.get_finished(out.finished_req_ids)
            failed = self.connector.take_failed_recving()
            ran = [r.request_id for r in self.scheduler.running]
            ran = [rid for rid in ran if rid in out.num_scheduled_tokens]
            sampled = []
            for rid in ran:
                r = self.scheduler.requests[rid]
                done = r.num_computed_tokens >= r.num_prompt_tokens
                sampled.append([next(replies)] if done else [])
            output = v.outputs.ModelRunnerOutput(
                req_ids=ran,
                sampled_token_ids=sampled,
                kv_connector_output=v.outputs.KVConnectorOutput(
                    finished_sending=sending,
                    finished_recving=recving,
                    kv_connector_worker_meta=self.connector.build_connector_worker_meta(),
                    failed_recving=failed,
                ),
            )
            self.scheduler.update_from_output(out, output)
        return request

    def _forward(self, out: Any) -> None:
        for rid, n in out.num_scheduled_tokens.items():
            r = self.scheduler.requests[rid]
            end = r.num_computed_tokens
            start = end - n
            ids = self.scheduler.kv_cache_manager.get_block_ids(rid)[0]
            tokens = list(r.all_token_ids)
            if rid not in self.loaded:
                # Its first step, after any load: the loaded blocks must hold their bytes.
                right = all(
                    torch.equal(
                        torch.stack([t[ids[b]] for t in self.tensors]),
                        self.content(tokens[: (b + 1) * BLOCK]),
                    )
                    for b in range(start // BLOCK)
                )
                self.loaded[rid] = (start // BLOCK, right)
            for b in range(start // BLOCK, end // BLOCK):
                expected = self.content(tokens[: (b + 1) * BLOCK])
                for layer, table in enumerate(self.tensors):
                    table[ids[b]] = expected[layer]

    def shutdown(self) -> None:
        self.connector.shutdown()
        self.manager.shutdown()


@pytest.fixture(scope="module")
def vllm_modules() -> Any:
    return _vllm()


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    return model


def _three_turns(engine: VllmEngine) -> tuple[list[int], list[int]]:
    """A chat of three turns (100 new prompt tokens and 40 reply tokens each); the history's
    tokens and each turn's end in stored blocks."""
    history: list[int] = []
    ends = []
    for turn in range(3):
        history = history + list(range(1000 * turn + 1, 1000 * turn + 101))
        reply = list(range(500 + 100 * turn, 540 + 100 * turn))
        history = list(engine.chat(history, reply, "chat-1").all_token_ids)
        ends.append(len(engine.manager.index.sessions["chat-1"].keys))
    return history, ends


def test_vllm_stores_each_turn_as_one_segment_per_layer(
    vllm_modules: Any, tiny_model: Path, tmp_path: Path
) -> None:
    engine = VllmEngine(vllm_modules, tiny_model, tmp_path / "kv", host_bytes=0)  # all SSD
    history, ends = _three_turns(engine)
    # vLLM offered the blocks step by step (chunked prefill, decode steps): many calls.
    assert engine.store_calls >= 12 and all(engine.results)
    assert engine.manager.index.sessions["chat-1"].turn_ends == ends
    engine.shutdown()  # seals the last turn
    (path,) = sorted((tmp_path / "kv").glob("n0-r0-*.fccio"))
    with SessionFile.open(path) as f:
        # One record per turn: each turn one layer-ordered segment, its blocks in order.
        starts = [0, *ends[:-1]]
        assert [t.blocks for t in f.turns] == [e - s for s, e in zip(starts, ends, strict=True)]
        for turn, (start, end) in enumerate(zip(starts, ends, strict=True)):
            blocks = [engine.content(history[: (b + 1) * BLOCK]) for b in range(start, end)]
            for layer in range(LAYERS):
                expected = b"".join(c[layer].numpy().tobytes() for c in blocks)
                assert f.read_layer(turn, layer) == expected


def test_vllm_restarted_serves_the_same_hits_byte_for_byte(
    vllm_modules: Any, tiny_model: Path, tmp_path: Path
) -> None:
    first = VllmEngine(vllm_modules, tiny_model, tmp_path / "kv", host_bytes=0)
    history, ends = _three_turns(first)
    first.shutdown()
    # A new engine on the same directory: the scheduler's manager and the worker's store
    # both recover the session from its files.
    again = VllmEngine(vllm_modules, tiny_model, tmp_path / "kv", host_bytes=0)
    assert again.flatcake.store.recovery.sessions == ("chat-1",)
    assert len(again.manager.index.sessions["chat-1"].keys) == ends[-1]
    request = again.chat([*history, *range(3001, 3033)], list(range(900, 904)), "chat-1")
    blocks, right = again.loaded[request.request_id]
    assert blocks == ends[-1] and right and all(again.results)
    # The fourth turn continues the recovered session's file.
    again.shutdown()
    (path,) = sorted((tmp_path / "kv").glob("n0-r0-*.fccio"))
    with SessionFile.open(path) as f:
        assert len(f.turns) == 4


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_vllm_damage_is_one_failed_load_then_a_miss_and_a_fresh_store(
    vllm_modules: Any, tiny_model: Path, tmp_path: Path, policy: str
) -> None:
    first = VllmEngine(vllm_modules, tiny_model, tmp_path / "kv", host_bytes=0)
    history, _ = _three_turns(first)
    first.shutdown()
    _damage(tmp_path / "kv", turn=1, layer=2)
    engine = VllmEngine(vllm_modules, tiny_model, tmp_path / "kv", host_bytes=0, on_failure=policy)
    assert engine.flatcake.store.recovery.sessions == ("chat-1",)
    prompt = [*history, *range(3001, 3033)]
    request = engine.chat(prompt, list(range(900, 904)), "chat-1")
    # The load failed verification: one failed load to vLLM, which fails the request or
    # recomputes it as its kv_load_failure_policy says; no damaged byte is used.
    assert engine.results.count(False) == 1
    if policy == "fail":
        assert request.status == engine.v.request.RequestStatus.FINISHED_ERROR
    else:
        assert request.num_output_tokens == 4 and engine.loaded[request.request_id] == (0, True)
    # The session went with its damaged file. Failed, the request stored nothing: the next
    # one misses and stores it again; recomputed, the request itself stored it again.
    second = engine.chat([*prompt, 900, 901, 902], [7], "chat-1")
    hits = 0 if policy == "fail" else len(prompt) // BLOCK
    assert engine.loaded[second.request_id] == (hits, True)
    third = engine.chat([*second.all_token_ids, 5, 6], [7], "chat-1")
    blocks, right = engine.loaded[third.request_id]
    assert blocks == len(second.all_token_ids) // BLOCK and right
    assert engine.results.count(False) == 1  # found once
    engine.shutdown()


# --------------------------------------------------------------------------- SGLang


@pytest.fixture
def sglang() -> Iterator[Any]:
    adapter = import_or_skip("fcctl.layout.adapters.sglang", "the SGLang adapter")
    hicache = import_or_skip("sglang.srt.mem_cache.hicache_storage", "SGLang's HiCacheStorage")
    factory = import_or_skip("sglang.srt.mem_cache.storage.backend_factory", "SGLang's loader")
    yield adapter, hicache, factory, import_or_skip("tests.test_engine_sglang", "SGLang tests")


def _sglang_backend(sglang: Any, directory: Path) -> Any:
    # The SGLang tests' storage config, every turn on SSD and the page size given, so the
    # store opens at construction (directory: ``tmp_path / "kv"``).
    _, _, factory, engine_tests = sglang
    config = engine_tests._config(directory.parent, host_bytes=0, page_bytes=2 * 3 * 4 * 2 * 8 * 2)
    return factory.StorageBackendFactory.create_backend("dynamic", config, None)


def _sglang_pages(n: int) -> list[Any]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn((2, 3, 4, 2, 8), generator=g).half() for _ in range(n)]


def test_sglang_restart_and_damage(sglang: Any, tmp_path: Path) -> None:
    keys = [f"{i:064x}" for i in range(8)]
    pages = _sglang_pages(8)

    def fetched(backend: Any) -> list[bool]:
        targets = [torch.zeros_like(p) for p in pages]
        got = backend.batch_get(keys, targets)
        return [g is not None and torch.equal(g, p) for g, p in zip(got, pages, strict=True)]

    first = _sglang_backend(sglang, tmp_path / "kv")
    assert first.batch_set(keys[:4], pages[:4]) and first.batch_set(keys[4:], pages[4:])
    first.close()
    # Reopened: the same pages found, every byte as written.
    again = _sglang_backend(sglang, tmp_path / "kv")
    assert again.batch_exists(keys) == 8 and fetched(again) == [True] * 8
    again.close()
    # Damaged on disk: one miss, then the pages are gone until stored again.
    _damage(tmp_path / "kv", turn=0, layer=0)
    damaged = _sglang_backend(sglang, tmp_path / "kv")
    assert damaged.batch_exists(keys) == 8  # records check at open; the bytes when read
    assert fetched(damaged)[:4] == [False] * 4
    assert damaged.batch_exists(keys[:4]) == 0 and damaged.kv.damaged == 1
    assert damaged.batch_set(keys[:4], pages[:4]) and fetched(damaged)[:4] == [True] * 4
    damaged.close()


# --------------------------------------------------------------------------- LMCache

CHUNK = 16


@pytest.fixture
def lmcache() -> Iterator[Any]:
    adapter = import_or_skip("fcctl.layout.adapters.lmcache", "the LMCache adapter")
    backends = import_or_skip("lmcache.v1.storage_backend", "LMCache's storage backends")
    config = import_or_skip("lmcache.v1.config", "LMCache's config")
    memory = import_or_skip("lmcache.v1.memory_management", "LMCache's memory objects")
    utils = import_or_skip("lmcache.utils", "LMCache's keys")
    engine_tests = import_or_skip("tests.test_engine_lmcache", "LMCache tests")
    yield adapter, backends, config, memory, utils, engine_tests


def _lmcache_plugin(lmcache: Any, directory: Path) -> Any:
    adapter, backends, config_mod = lmcache[:3]
    extra = {
        "storage_plugin.flatcake.module_path": adapter.__name__,
        "storage_plugin.flatcake.class_name": "FlatCakeStoragePlugin",
        "flatcake.directory": str(directory),
        "flatcake.extent_bytes": 1 << 16,
        "flatcake.host_bytes": 0,
        "flatcake.page_bytes": 2 * 3 * CHUNK * 32 * 2,  # one full chunk: open at start
    }
    config = config_mod.LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=False, storage_plugins=["flatcake"], extra_config=extra
    )
    loaded: OrderedDict = OrderedDict()
    loop = asyncio.new_event_loop()
    backends.storage_plugin_launcher(config, None, loop, None, "cpu", loaded)
    loop.close()
    return loaded["flatcake"]


def test_lmcache_restart_keeps_the_hits_and_damage_is_one_miss(
    lmcache: Any, tmp_path: Path
) -> None:
    utils = lmcache[4]
    keys = [
        utils.CacheEngineKey("m", 1, 0, 1000 + i, torch.float16, {"lmcache.tag.session_id": "c"})
        for i in range(3)
    ]
    chunks = [lmcache[5]._chunk(i) for i in range(3)]  # the LMCache tests' KV_2LTD chunks
    first = _lmcache_plugin(lmcache, tmp_path / "kv")
    assert first.batched_contains(keys) == 0
    first.batched_submit_put_task(keys, [c[0] for c in chunks])
    assert first.batched_contains(keys) == 3
    first.close()
    again = _lmcache_plugin(lmcache, tmp_path / "kv")
    assert again.batched_contains(keys) == 3  # the issue saw 0 here
    got = again.batched_get_blocking(keys)
    for obj, (_, data) in zip(got, chunks, strict=True):
        assert obj is not None and torch.equal(
            obj.tensor.view(torch.float16).view(data.shape), data
        )
    again.close()
    _damage(tmp_path / "kv", turn=0, layer=0)
    damaged = _lmcache_plugin(lmcache, tmp_path / "kv")
    assert damaged.batched_contains(keys) == 3
    # A miss, not a raised VerificationError: the engine retrieves nothing and recomputes.
    assert damaged.batched_get_blocking(keys) == [None, None, None]
    assert damaged.batched_contains(keys) == 0 and damaged.kv.damaged == 1
    damaged.batched_submit_put_task(keys, [c[0] for c in chunks])
    got = damaged.batched_get_blocking(keys)
    assert all(o is not None for o in got) and damaged.batched_contains(keys) == 3
    damaged.close()
