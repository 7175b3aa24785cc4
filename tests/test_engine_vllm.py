"""The vLLM adapter against vLLM's real offloading interfaces (``vllm==0.34.0``): the spec loaded
by ``OffloadingSpecFactory`` from ``spec_module_path``, its ``OffloadingManager`` and
``OffloadingWorker`` driven through the connector's call sequence (``on_new_request``,
``lookup``, ``prepare_store`` -> ``submit_store`` -> ``complete_store``, ``prepare_load`` ->
``submit_load`` -> ``complete_load``, ``on_request_finished``), with KV caches as
``CanonicalKVCaches`` and device pointers from vLLM's own ``resolve_device_pointers``. A chat
of three turns is stored and loaded back into other blocks of the KV tensors, every byte
checked; sessions are reclaimed whole; the capture analyses to the chat's figures. The GPU
test (marked ``gpu``) runs the same on CUDA tensors, through the kvikio engine when usable.
Skips, naming the failed import, where vLLM is not installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fcctl import api
from tests import engine_helpers
from tests.engine_helpers import import_or_skip

torch = pytest.importorskip("torch")
adapter = import_or_skip("fcctl.layout.adapters.vllm", "the vLLM adapter")
base = import_or_skip("vllm.v1.kv_offload.base", "vLLM's offloading interfaces")
cfg = import_or_skip("vllm.v1.kv_offload.config", "vLLM's offloading config")
factory = import_or_skip("vllm.v1.kv_offload.factory", "vLLM's spec loader")
pointers = import_or_skip("vllm.v1.kv_offload.pointer_utils", "vLLM's pointer resolution")

LAYERS, PAGE, BLOCKS, TOKENS = 3, 512, 64, 16


def _spec(tmp_path: Path, **extra: Any) -> Any:
    config = cfg.OffloadingConfig(
        groups=(
            cfg.OffloadingGroupConfig(
                tokens_per_block=TOKENS,
                layer_names=tuple(f"l{i}" for i in range(LAYERS)),
                group_id=0,
            ),
        ),
        worker_kv_bytes_per_block=LAYERS * PAGE,
        enable_kv_cache_events=True,
        extra_config={
            "spec_name": "FlatCakeOffloadingSpec",
            "spec_module_path": adapter.__name__,
            "directory": str(tmp_path / "kv"),
            "extent_bytes": 1 << 16,
            **extra,
        },
        engine_id="test",
        model=cfg.OffloadingModelConfig("test-model", "float16"),
        cache=cfg.OffloadingCacheConfig(tokens_per_hash=TOKENS, blocks_per_chunk=1),
        parallel=cfg.OffloadingParallelConfig(
            rank=0,
            world_size=1,
            tp_size=1,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
    )
    spec = factory.OffloadingSpecFactory.create_spec(config)
    assert isinstance(spec, adapter.FlatCakeOffloadingSpec)
    assert isinstance(spec, base.OffloadingSpec)
    return spec


def _caches(device: str, seed: int) -> tuple[Any, list[Any]]:
    g = torch.Generator().manual_seed(seed)
    # Padded rows, as vLLM pads pages: the page is the first PAGE bytes of each row.
    tensors = [
        torch.randint(-128, 127, (BLOCKS, PAGE + 64), dtype=torch.int8, generator=g).to(device)
        for _ in range(LAYERS)
    ]
    caches = base.CanonicalKVCaches(
        tensors=[base.CanonicalKVCacheTensor(t, PAGE + 64) for t in tensors],
        group_data_refs=[[base.CanonicalKVCacheRef(i, PAGE) for i in range(LAYERS)]],
    )
    return caches, tensors


def _ptrs(caches: Any, block_ids: list[int], first_index: int) -> Any:
    spec = base.GPULoadStoreSpec(block_ids, [len(block_ids)], [first_index])
    return pointers.resolve_device_pointers(spec, caches)


def _blocks(tensors: list[Any], ids: list[int]) -> Any:
    return torch.stack([t[ids, :PAGE] for t in tensors]).cpu()


def _keys(n: int, salt: str = "") -> list[bytes]:
    return [base.make_offload_key(f"{salt}{i:08d}".encode(), 0) for i in range(n)]


class Engine:
    """The connector's call sequence for one request, as OffloadingConnector makes it."""

    def __init__(self, spec: Any, caches: Any, tensors: list[Any]) -> None:
        self.manager = spec.get_manager()
        self.worker = spec.get_worker(caches)
        self.caches, self.tensors, self.job = caches, tensors, 0

    def request(
        self,
        rid: str,
        keys: list[bytes],
        params: dict,
        store_ids: list[int],
        load_ids: list[int] | None = None,
    ) -> tuple[int, Any]:
        ctx = base.ReqContext(rid, kv_transfer_params=params)
        self.manager.on_new_request(ctx)
        hits = 0
        for key in keys:
            if self.manager.lookup(key, ctx) != base.LookupResult.HIT:
                break
            hits += 1
        loaded = None
        if hits and load_ids is not None:
            spec = self.manager.prepare_load(keys[:hits], ctx)
            self.job += 1
            assert self.worker.submit_load(self.job, spec, _ptrs(self.caches, load_ids[:hits], 0))
            assert [r.success for r in self.worker.get_finished()] == [True]
            self.manager.complete_load(keys[:hits], ctx)
            loaded = _blocks(self.tensors, load_ids[:hits])
        out = self.manager.prepare_store(keys[hits:], ctx)
        if out is not None:
            self.job += 1
            ptrs = _ptrs(self.caches, store_ids[: len(out.keys_to_store)], hits)
            assert self.worker.submit_store(self.job, ptrs, out.store_spec)
            assert [r.success for r in self.worker.get_finished()] == [True]
            self.manager.complete_store(out.keys_to_store, ctx)
        self.manager.on_request_finished(ctx)
        return hits, loaded


def _chat(tmp_path: Path, device: str, trace: Path | None = None) -> Engine:
    extra = {} if trace is None else {"trace": str(trace)}
    caches, tensors = _caches(device, 1)
    engine = Engine(_spec(tmp_path, **extra), caches, tensors)
    keys = _keys(12)
    params = {"session_id": "chat-5", "previous_reply_tokens": 40}
    # Turn 1: blocks 0-3 computed into GPU blocks 10-13 and stored.
    turn1 = _blocks(tensors, [10, 11, 12, 13])
    assert engine.request("r1", keys[:4], params, [10, 11, 12, 13]) == (0, None)
    # Turn 2 (after preemption, say): its prefix comes back into other blocks, then 4-7 stored.
    hits, loaded = engine.request("r2", keys[:8], params, [20, 21, 22, 23], [30, 31, 32, 33])
    assert hits == 4 and torch.equal(loaded, turn1)
    turn2 = _blocks(tensors, [20, 21, 22, 23])
    hits, loaded = engine.request(
        "r3", keys[:12], params, [40, 41, 42, 43], [50, 51, 52, 53, 54, 55, 56, 57]
    )
    assert hits == 8 and torch.equal(loaded, torch.cat([turn1, turn2], dim=1))
    return engine


def test_a_chat_stored_and_loaded_byte_for_byte(tmp_path: Path) -> None:
    engine = _chat(tmp_path, "cpu")
    worker, manager = engine.worker, engine.manager
    # Whole turns went straight into the KV tensors through the staging window.
    assert worker.window_restores == 2 and worker.host_restores == 0
    store = worker.store
    turns = store.turns("chat-5")
    assert [t.tokens for t in turns] == [4, 4, 4]
    # The first turn is a first turn (SSD); later ones follow the thresholds (a 40-token
    # reply is short by the defaults: memory).
    assert [int(t.medium) for t in turns] == [1, 0, 0]
    assert store.session_path("chat-5").is_file()
    # A load that starts inside a turn goes through host memory and copies only its blocks.
    keys = _keys(12)
    ctx = base.ReqContext("r4", kv_transfer_params={"session_id": "chat-5"})
    manager.on_new_request(ctx)
    for k in keys[:6]:
        assert manager.lookup(k, ctx) == base.LookupResult.HIT
    spec = manager.prepare_load(keys[2:6], ctx)
    expected = torch.stack([t[[12, 13, 20, 21], :PAGE] for t in engine.tensors]).cpu()
    assert worker.submit_load(99, spec, _ptrs(engine.caches, [60, 61, 62, 63], 2))
    assert worker.get_finished()[0].success and worker.host_restores == 1
    assert torch.equal(_blocks(engine.tensors, [60, 61, 62, 63]), expected)
    manager.complete_load(keys[2:6], ctx)
    # Evict: the whole session goes, its file with it, at the next transfer.
    manager.reset_cache()
    assert manager.lookup(keys[0], ctx) == base.LookupResult.MISS
    events = list(manager.take_events())
    assert any(e.removed and set(e.keys) == set(keys) for e in events)
    other = _keys(1, "other")
    fresh = base.ReqContext("r5", kv_transfer_params={"session_id": "chat-6"})
    manager.on_new_request(fresh)
    out = manager.prepare_store(other, fresh)
    assert worker.submit_store(100, _ptrs(engine.caches, [5], 0), out.store_spec)
    assert not store.session_path("chat-5").exists() and store.turns("chat-5") == ()
    worker.shutdown()


def test_watermark_reclaims_whole_sessions_and_fallback_sessions(tmp_path: Path) -> None:
    caches, tensors = _caches("cpu", 2)
    # Room for about three 2-block sessions on SSD (the manager's accounting).
    engine = Engine(_spec(tmp_path, ssd_bytes=3 * 2 * LAYERS * PAGE, host_bytes=0), caches, tensors)
    for s in range(5):
        # No session id: the fallback names each new chain's session by its first key.
        engine.request(f"r{s}", _keys(2, f"s{s}-"), {}, [2 * s, 2 * s + 1])
    manager = engine.manager
    alive = [s for s in range(5) if _keys(2, f"s{s}-")[0] in manager.index]
    assert alive and alive[-1] == 4 and 0 not in alive
    assert all(name.startswith("h-") for name in manager.index.sessions)
    # A continuing request without an id extends its chain's session.
    keys = _keys(2, "s4-") + _keys(2, "s4b-")
    engine.request("r9", keys, {}, [20, 21], [30, 31])
    assert len({manager.index.where[k][0] for k in keys}) == 1
    engine.worker.shutdown()


def test_capture_analyses_to_the_chats_figures(tmp_path: Path) -> None:
    trace = tmp_path / "capture.jsonl"
    engine = _chat(tmp_path, "cpu", trace)
    engine.manager.shutdown()
    engine.worker.shutdown()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["session_id"] for r in rows] == ["chat-5"] * 3
    assert [r["session_source"] for r in rows] == ["kv_transfer_params"] * 3
    assert [len(r["hash_ids"]) for r in rows] == [4, 8, 12]
    result = api.analyze(trace)
    t = result.trace
    assert (t.format, t.requests, t.sessions, t.block_size_tokens) == ("flatcake", 3, 1, TOKENS)
    # By hand: 4 + 8 + 12 = 24 accesses of 12 blocks; blocks 0-3 read thrice, 4-7 twice,
    # 8-11 once; 4 + 8 = 12 reuses.
    assert (t.block_accesses, t.distinct_blocks) == (24, 12)
    assert result.once_only_block_share == pytest.approx(4 / 12)
    assert result.reuse_access_share == pytest.approx(12 / 24)
    engine_helpers.check_trace(trace, requests=3, block_accesses=24, distinct_blocks=12)


@pytest.mark.gpu
def test_gpu_chat_through_the_staging_window(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    engine = _chat(tmp_path, "cuda")
    worker = engine.worker
    assert worker.window_restores == 2
    # GDS when kvikio is usable, else posix reads, said in the note (never silently).
    assert (worker.engine is not None) or "GDS not used" in worker.engine_note
    worker.shutdown()


# vLLM's own scheduler and connector -----------------------------------------------------------
# A real ``Scheduler`` (chunked prefill, prefix caching) with vLLM's ``OffloadingConnector`` on
# both sides, the spec loaded from ``spec_module_path``; each step goes scheduler -> worker
# connector (``bind_connector_metadata``, ``start_load_kv``, ``wait_for_save``,
# ``get_finished``) -> ``update_from_output``, as vLLM's KV-connector unit tests drive it on
# CPU; the model is a local ``config.json`` (no weights: the forward pass is not run, the KV
# tensors hold random bytes standing for what it would write).

sched_mod = import_or_skip("vllm.v1.core.sched.scheduler", "vLLM's scheduler")
vllm_config = import_or_skip("vllm.config", "vLLM's config")
kv_iface = import_or_skip("vllm.v1.kv_cache_interface", "vLLM's KV cache specs")
so_mod = import_or_skip("vllm.v1.structured_output", "vLLM's structured output manager")
conn_mod = import_or_skip(
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",
    "vLLM's OffloadingConnector",
)
roles = import_or_skip("vllm.distributed.kv_transfer.kv_connector.v1", "vLLM's connector roles")
request_mod = import_or_skip("vllm.v1.request", "vLLM's requests")
hashing = import_or_skip("vllm.v1.core.kv_cache_utils", "vLLM's block hashing")
hash_fns = import_or_skip("vllm.utils.hashing", "vLLM's hash functions")
outputs = import_or_skip("vllm.v1.outputs", "vLLM's model runner outputs")
forward = import_or_skip("vllm.forward_context", "vLLM's forward context")
sampling = import_or_skip("vllm.sampling_params", "vLLM's sampling parameters")

GPU_BLOCKS, BLOCK, HEADS_V, DIM_V = 64, 16, 2, 16
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": HEADS_V,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


class VllmEngine:
    """vLLM's scheduler and a worker's connector, stepped as the engine core steps them."""

    def __init__(self, tmp_path: Path, trace: Path) -> None:
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
        config = vllm_config.VllmConfig(
            model_config=vllm_config.ModelConfig(
                model=str(model), skip_tokenizer_init=True, dtype="float16", max_model_len=1024
            ),
            cache_config=vllm_config.CacheConfig(block_size=BLOCK),
            scheduler_config=vllm_config.SchedulerConfig(
                max_num_batched_tokens=64,  # a 130-token prompt is prefilled in chunks
                max_num_seqs=4,
                max_model_len=1024,
                enable_chunked_prefill=True,
                is_encoder_decoder=False,
            ),
            device_config=vllm_config.DeviceConfig("cpu"),
            kv_transfer_config=vllm_config.KVTransferConfig(
                kv_connector="OffloadingConnector",
                kv_role="kv_both",
                kv_connector_extra_config={
                    "spec_name": "FlatCakeOffloadingSpec",
                    "spec_module_path": adapter.__name__,
                    "directory": str(tmp_path / "kv"),
                    "extent_bytes": 1 << 16,
                    "trace": str(trace),
                },
            ),
        )
        layers = ("layer.0", "layer.1")
        spec = kv_iface.FullAttentionSpec(
            block_size=BLOCK, num_kv_heads=HEADS_V, head_size=DIM_V, dtype=torch.float16
        )
        kv_config = kv_iface.KVCacheConfig(
            num_blocks=GPU_BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=[kv_iface.KVCacheGroupSpec(list(layers), spec)],
        )
        config.cache_config.num_gpu_blocks = GPU_BLOCKS
        self.scheduler = sched_mod.Scheduler(
            vllm_config=config,
            kv_cache_config=kv_config,
            log_stats=True,
            structured_output_manager=so_mod.StructuredOutputManager(config),
            block_size=BLOCK,
        )
        g = torch.Generator().manual_seed(3)
        self.kv = {
            n: torch.randn((GPU_BLOCKS, 2, BLOCK, HEADS_V, DIM_V), generator=g).half()
            for n in layers
        }
        with vllm_config.set_current_vllm_config(config):
            self.worker = conn_mod.OffloadingConnector(
                config, roles.KVConnectorRole.WORKER, kv_config
            )
            self.worker.register_kv_caches(self.kv)
        hashing.init_none_hash(hash_fns.sha256)
        self.hasher = hashing.get_request_block_hasher(BLOCK, hash_fns.sha256)
        self.ctx = forward.ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={})
        self.loaded: dict[str, int] = {}  # request -> tokens its first schedule had computed
        self.blocks: dict[str, list[int]] = {}  # request -> its GPU block ids

    def request(self, rid: str, prompt: list[int], reply: list[int], session: str) -> None:
        """Run one request to its end: its prompt prefilled in chunks, ``reply`` decoded."""
        params = sampling.SamplingParams(max_tokens=len(reply))
        params.update_from_generation_config({}, 2)
        req = request_mod.Request(
            request_id=rid,
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            block_hasher=self.hasher,
        )
        req.kv_transfer_params = {"session_id": session}
        self.scheduler.add_request(req)
        tokens, idle = iter(reply), 0
        for _ in range(4 * (len(prompt) + len(reply))):  # ample steps: a hang fails, not waits
            # Two idle steps after the request ends: the connector reports its last stores and
            # finishes the request with the manager a step after the scheduler lets it go.
            idle += not self.scheduler.requests
            if idle > 2:
                break
            out = self.scheduler.schedule()
            for new in out.scheduled_new_reqs:
                self.loaded[new.req_id] = new.num_computed_tokens
                self.blocks[new.req_id] = list(new.block_ids[0])
            cached = out.scheduled_cached_reqs  # later chunks and decode steps add blocks
            for r, more in zip(cached.req_ids, cached.new_block_ids, strict=True):
                self.blocks[r] += list(more[0]) if more else []
            meta = out.kv_connector_metadata
            self.worker.handle_preemptions(meta)
            self.worker.bind_connector_metadata(meta)
            self.worker.start_load_kv(self.ctx)
            if out.total_num_scheduled_tokens > 0:
                self.worker.wait_for_save()
            sending, recving = self.worker.get_finished(out.finished_req_ids)
            worker_meta = self.worker.build_connector_worker_meta()
            self.worker.clear_connector_metadata()
            running = [r.request_id for r in self.scheduler.running]
            # A request still in its prefill samples nothing; the last chunk samples a token.
            sampled = [
                [next(tokens, 2)]
                if out.num_scheduled_tokens.get(r, 0)
                and self.scheduler.requests[r].num_computed_tokens + out.num_scheduled_tokens[r]
                >= self.scheduler.requests[r].num_prompt_tokens
                else []
                for r in running
            ]
            self.scheduler.update_from_output(
                out,
                outputs.ModelRunnerOutput(
                    req_ids=running,
                    sampled_token_ids=sampled,
                    kv_connector_output=outputs.KVConnectorOutput(
                        finished_sending=sending,
                        finished_recving=recving,
                        kv_connector_worker_meta=worker_meta,
                    ),
                ),
            )
        assert not self.scheduler.requests, f"{rid} did not finish"


def test_vllms_scheduler_drives_the_spec_over_a_three_turn_chat(tmp_path: Path) -> None:
    """Three turns of one chat, each prompt the last prompt, its reply and new input: vLLM's
    connector looks the prefix up in the manager, loads it asynchronously (the request waits in
    ``WAITING_FOR_REMOTE_KVS``, apart from runnable ones) into the blocks the scheduler gave it,
    and stores the blocks each step completes, decode's included; every loaded byte is the one
    stored. Each turn is sealed (written, nothing left open in host memory) in the step that
    tells the worker its request finished, though the engine is idle after it."""
    trace = tmp_path / "capture.jsonl"
    engine = VllmEngine(tmp_path, trace)
    g = torch.Generator().manual_seed(9)
    words = torch.randint(10, 900, (400,), generator=g).tolist()
    prompt: list[int] = words[:80]
    before: dict[str, Any] = {}
    for turn in range(3):
        rid = f"turn-{turn}"
        reply = words[300 + 20 * turn : 320 + 20 * turn]
        engine.request(rid, prompt, reply, "chat-4")
        worker = engine.worker.connector_worker.worker
        assert worker.store.open_sessions() == () and not worker.turns
        assert [t.turn for t in worker.store.turns(adapter.session_name("chat-4"))] == list(
            range(turn + 1)
        )
        hit = engine.loaded[rid]
        blocks = engine.blocks[rid]
        if turn:  # the loaded prefix is what the previous turn's blocks held
            for name, t in engine.kv.items():
                assert torch.equal(t[blocks[: hit // BLOCK]], before[name][: hit // BLOCK])
        before = {name: t[blocks].clone() for name, t in engine.kv.items()}
        # The GPU forgets everything between turns (as if evicted) and its blocks get other
        # bytes, so the next turn's prefix can only come back from FlatCake.
        assert engine.scheduler.reset_prefix_cache()
        for t in engine.kv.values():
            t.copy_(torch.randn(t.shape, generator=g).half())
        prompt = prompt + reply + words[200 + 30 * turn : 230 + 30 * turn]
    # Turn 1 found turn 0's 99 computed tokens' 6 whole blocks (5 of prompt, 1 completed by
    # decode: FlatCake sets vLLM's offload_prompt_only off), turn 2 turn 1's 149: 9 blocks. The
    # reply's last partial block never is stored.
    assert [engine.loaded[f"turn-{t}"] for t in range(3)] == [0, 6 * BLOCK, 9 * BLOCK]
    engine.worker.shutdown()
    engine.scheduler.shutdown()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["session_id"] for r in rows] == ["chat-4"] * 3
    assert [len(r["hash_ids"]) for r in rows] == [6, 9, 12]
    engine_helpers.check_trace(trace, requests=3, block_accesses=27, distinct_blocks=12)
    # The manager removed its seal markers at shutdown.
    assert not list((tmp_path / "kv").glob(f"*{adapter.SEAL_SUFFIX}"))
