"""What the engine adapters share, tested without any engine (``layout/adapters/common.py``,
``trace.py``, ``layout/rule_file.py``) and the core calls added for them: ``FlatStore.drop``,
``plan_restore(start_tokens=)``, a restore into a list of per-layer tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fcctl.analyzers.traces.readers import read_trace
from fcctl.layout import FlatStore, KvGeometry
from fcctl.layout.adapters.common import KeyIndex, SessionKV, StoreOptions, session_name
from fcctl.layout.adapters.trace import TRACE_ENV, TraceRecorder, key_id
from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium, PlacementRule, Reason
from fcctl.layout.rule_file import THRESHOLDS_ENV, read_rule, resolve_rule

LAYERS, PAGE = 3, 256


def _kv(tmp_path: Path, **options: object) -> SessionKV:
    values: dict = dict(
        directory=str(tmp_path / "kv"), host_bytes=1 << 20, ssd_bytes=1 << 24, extent_bytes=1 << 16
    )
    values.update(options)
    return SessionKV(
        StoreOptions(**values),
        engine="test",
        layers=LAYERS,
        layer_page_bytes=PAGE,
        tokens_per_key=16,
        rule=PlacementRule(100, 10_000),
    )


def _pages(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, LAYERS, PAGE), dtype=np.uint8)


def test_key_index_session_rule() -> None:
    index = KeyIndex()
    # A side-channel id names the session whatever the chain.
    assert index.session_for([], ["a"], "chat-1") == ("chat-1", None)
    # No id, nothing stored: a new session named by the first new key.
    name, how = index.session_for([], ["a", "b"], None)
    assert how == "chained" and name == "h-" + b"a".hex()
    index.add(name, ["a", "b"])
    # A request continuing the chain (its last stored key ends the session) extends it.
    assert index.session_for(["a", "b", "x"], ["c"], None) == (name, "chained")
    # A prompt sharing only the first page starts its own session.
    assert index.session_for(["a"], ["z"], None)[0] == "h-" + b"z".hex()
    assert index.prefix_hits(["a", "b", "c"]) == 2
    index.add(name, ["c", "d", "e"])
    assert index.turn_span(name, 1, 1) == (0, 2) and index.turn_span(name, 2, 4) == (2, 5)
    assert index.turn_span(name, 1, 3) == (0, 5)
    assert index.forget(name) == ["a", "b", "c", "d", "e"] and "a" not in index
    long_id = "s" * 100
    assert len(session_name(long_id).encode()) <= 64 and session_name("x") == "x"


def test_session_kv_writes_turns_and_reads_every_byte(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    keys = [f"k{i}" for i in range(7)]
    pages = _pages(7, 1)
    # Turn 0: pages 0..2 (a first turn: SSD); turn 1 continues the chain: pages 3..6.
    first = kv.write(keys[:3], pages[:3], session_id="chat")
    assert first is not None and first.medium == Medium.SSD and first.tokens == 3
    assert kv.placements[-1].reason == Reason.FIRST_TURN
    kv.set_previous_reply("chat", 20)  # a short reply: the next turn may stay in memory
    second = kv.write(keys[2:], pages[2:], prefix=keys[:2], session_id="chat")
    assert second is not None and second.turn == 1 and second.tokens == 4  # page 2 skipped
    assert kv.placements[-1].reason == Reason.SHORT_REPLY_CHAT and second.medium == Medium.MEMORY
    assert kv.write(keys[:2], pages[:2], session_id="chat") is None  # nothing new
    assert kv.lookup(keys) == 7 and kv.lookup(["k0", "nope", "k2"]) == 1
    # Any subset, any order: every byte as written.
    for wanted in ([0, 1, 2, 3, 4, 5, 6], [5, 1], [3, 4, 5, 6], [6]):
        got = kv.read([keys[i] for i in wanted])
        assert got is not None and np.array_equal(got, pages[wanted]), wanted
    assert kv.read(["k0", "missing"]) is None
    # On SSD the session is one FC-CIO file written layer by layer.
    assert kv.store.session_path("chat").is_file()
    assert kv.evict_key("k4") == keys and kv.lookup(keys) == 0
    assert not kv.store.session_path("chat").exists()
    kv.close(remove=True)


def test_session_kv_fallback_without_session_ids(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    pages = _pages(6, 2)
    kv.write(["a", "b"], pages[:2])
    kv.write(["c", "d"], pages[2:4], prefix=["a", "b"])  # continues: same session
    kv.write(["e", "f"], pages[4:], prefix=["a"])  # branches after "a": a session of its own
    sessions = {kv.index.where[k][0] for k in "abcdef"}
    assert len(sessions) == 2
    assert kv.index.where["d"] == (kv.index.where["a"][0], 3)
    got = kv.read(list("fedcba"))
    assert got is not None and np.array_equal(got, pages[::-1])
    kv.close(remove=True)


def test_reclaimed_sessions_are_forgotten_whole(tmp_path: Path) -> None:
    kv = _kv(tmp_path, ssd_bytes=3 * 4096 * LAYERS)  # about three one-page sessions on SSD
    for i in range(6):
        kv.write([f"s{i}"], _pages(1, i), session_id=f"sess-{i}")
    # The store reclaimed the oldest sessions at the watermark; the index forgot them, so a
    # lookup never promises a page the store no longer has.
    alive = [i for i in range(6) if kv.lookup([f"s{i}"])]
    assert alive and alive[0] > 0 and alive[-1] == 5
    for i in alive:
        got = kv.read([f"s{i}"])
        assert got is not None and np.array_equal(got[0], _pages(1, i)[0])
    kv.close(remove=True)


def test_trace_recorder_bounded_and_appending(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rec = TraceRecorder(path, engine="test", flush_records=2, parquet=False)
    rec.record(
        timestamp_s=1.0,
        session_id="s",
        session_source="x",
        keys=["a", "b"],
        block_size_tokens=16,
        input_tokens=40,
        output_tokens=None,
    )
    assert path.read_text() == ""  # buffered (the file is made, empty, at construction)
    rec.record(
        timestamp_s=2.0, session_id="s", session_source="x", keys=[b"a"], block_size_tokens=16
    )
    assert len(path.read_text().splitlines()) == 2  # the buffer filled: flushed
    rec.record(timestamp_s=3.0, session_id="t", session_source="x", keys=[7], block_size_tokens=16)
    rec.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["timestamp_s"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[0]["hash_ids"] == [key_id("a"), key_id("b")] and rows[0]["input_tokens"] == 40
    assert rows[1]["hash_ids"] == [key_id(b"a")] and key_id("a") == key_id(b"a")
    assert all(0 <= h < 2**64 for r in rows for h in r["hash_ids"])
    assert rows[2]["output_tokens"] is None and rows[0]["flatcake_trace"] == 1


def test_trace_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert TraceRecorder.from_environment(None, engine="x") is None
    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "env.jsonl"))
    rec = TraceRecorder.from_environment(None, engine="x")
    assert rec is not None and rec.path == tmp_path / "env.jsonl"
    given = TraceRecorder.from_environment(tmp_path / "arg.jsonl", engine="x")
    assert given is not None and given.path.name == "arg.jsonl"


def test_trace_parquet_parts(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rec = TraceRecorder(tmp_path / "t.jsonl", engine="test", flush_records=1, parquet=True)
    rec.record(
        timestamp_s=1.0, session_id="s", session_source="x", keys=["a"], block_size_tokens=16
    )
    rec.close()
    (part,) = tmp_path.glob("t.jsonl.part*.parquet")
    table = pq.read_table(part).to_pydict()
    assert table["session_id"] == ["s"] and table["input_tokens"] == [16]
    assert table["hash_ids"] == [[key_id("a")]]
    # A part is a canonical trace table of its own: fcctl reads it as one.
    trace = read_trace(part)
    assert trace.format == "parquet" and trace.has_sessions and trace.block_size_tokens == 16
    assert trace.requests["hash_ids"].to_list() == [[key_id("a")]]
    assert not list(tmp_path.glob("*.tmp"))


def test_rule_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "t.toml"
    good.write_text("[thresholds]\nshort_reply_tokens = 9\nagent_context_tokens = 99\n")
    assert read_rule(good) == PlacementRule(9, 99)
    monkeypatch.delenv(THRESHOLDS_ENV, raising=False)
    assert resolve_rule(None) == PlacementRule()  # the core has no thresholds.toml
    monkeypatch.setenv(THRESHOLDS_ENV, str(good))
    assert resolve_rule(None) == PlacementRule(9, 99)
    assert resolve_rule(PlacementRule(1, 2)) == PlacementRule(1, 2)  # the argument wins
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds]\nshort_reply_tokens = -1\nagent_context_tokens = 5\n")
    with pytest.raises(InputError, match=r"short_reply_tokens must be an integer >= 0.*got -1"):
        read_rule(bad)
    bad.write_text("not = [toml")
    with pytest.raises(InputError, match="not valid TOML"):
        read_rule(bad)
    with pytest.raises(InputError, match="cannot read the thresholds file"):
        read_rule(tmp_path / "absent.toml")


GEOMETRY = KvGeometry("drop-test", layers=2, kv_heads=1, head_dim=16)


def test_store_drop_and_start_tokens(tmp_path: Path) -> None:
    store = FlatStore.open(
        tmp_path / "s",
        GEOMETRY,
        block_tokens=4,
        host_bytes=1 << 20,
        ssd_bytes=1 << 24,
        now_s=0.0,
        extent_bytes=1 << 16,
    )
    rng = np.random.default_rng(3)
    data = []
    for turn, (tokens, medium) in enumerate(
        [(8, Medium.SSD), (4, Medium.MEMORY), (12, Medium.SSD)]
    ):
        kv = rng.integers(0, 256, (2, store.layer_bytes_for(tokens)), dtype=np.uint8)
        store.write_turn("s", turn, kv, tokens=tokens, medium=medium, now_s=1.0)
        data.append(kv)
    # start_tokens leaves out the turns that end at or before it.
    plan = store.plan_restore("s", 24, now_s=2.0, start_tokens=8)
    assert [t.turn for t in plan.turns] == [1, 2] and plan.tokens == 16
    out = np.zeros((2, plan.layer_bytes), dtype=np.uint8)
    store.restore(plan, out, now_s=2.0)
    assert np.array_equal(out, np.concatenate(data[1:], axis=1))
    assert store.plan_restore("s", 24, now_s=2.0, start_tokens=9).tokens == 16
    path = store.session_path("s")
    store.ssd.begin_read("s", 2.0)
    with pytest.raises(InputError, match="being restored"):
        store.drop("s", 2.0)
    store.ssd.end_read("s", 2.0)
    assert store.drop("s", 3.0) > 0
    assert not path.exists() and store.turns("s") == ()
    assert store.memory.used_bytes == 0 and store.ssd.used_bytes == 0
    with pytest.raises(InputError, match="session: not in this store"):
        store.drop("s", 3.0)
    store.close(remove=True)


def test_restore_into_per_layer_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    store = FlatStore.open(
        tmp_path / "s",
        GEOMETRY,
        block_tokens=4,
        host_bytes=1 << 20,
        ssd_bytes=1 << 24,
        now_s=0.0,
        extent_bytes=1 << 16,
    )
    rng = np.random.default_rng(4)
    data = []
    for turn, medium in enumerate((Medium.SSD, Medium.MEMORY)):
        kv = rng.integers(0, 256, (2, store.layer_bytes_for(8)), dtype=np.uint8)
        store.write_turn("s", turn, kv, tokens=8, medium=medium, now_s=1.0)
        data.append(kv)
    plan = store.plan_restore("s", 16, now_s=2.0)
    piece = store.piece_bytes
    # Two layer tables with padded rows (as vLLM pads pages): only the page's bytes are written.
    tables = [torch.zeros((10, piece + 64), dtype=torch.int8) for _ in range(2)]
    layers = [t[:, :piece] for t in tables]
    pages = torch.tensor([7, 1, 4, 9])
    store.restore_to_pages(plan, layers, pages, now_s=2.0)
    expected = np.concatenate(data, axis=1).reshape(2, 4, piece)
    for layer, table in enumerate(tables):
        got = table.view(torch.uint8).numpy()
        for i, page in enumerate(pages.tolist()):
            assert np.array_equal(got[page, :piece], expected[layer, i]), (layer, i)
        assert not got[:, piece:].any()  # the padding untouched
    with pytest.raises(InputError, match="every layer alike"):
        store.restore_to_pages(plan, [layers[0], layers[1][:5]], pages, now_s=2.0)
    store.close(remove=True)


@pytest.mark.gpu
def test_restore_into_per_layer_cuda_tensors(tmp_path: Path) -> None:
    """The vLLM worker's GPU path without vLLM: SSD turns through the staging window on the
    GPU into per-layer padded CUDA tables, read by the kvikio engine (GDS) when it is usable,
    else by the posix engine; every byte checked on the host."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from fcctl.layout.engines import EngineUnavailable, open_engine

    store = FlatStore.open(
        tmp_path / "s",
        GEOMETRY,
        block_tokens=4,
        host_bytes=1 << 20,
        ssd_bytes=1 << 24,
        now_s=0.0,
        extent_bytes=1 << 16,
    )
    rng = np.random.default_rng(6)
    data = []
    for turn, medium in enumerate((Medium.SSD, Medium.MEMORY, Medium.SSD)):
        kv = rng.integers(0, 256, (2, store.layer_bytes_for(8)), dtype=np.uint8)
        store.write_turn("s", turn, kv, tokens=8, medium=medium, now_s=1.0)
        data.append(kv)
    plan = store.plan_restore("s", 24, now_s=2.0)
    piece = store.piece_bytes
    tables = [torch.zeros((16, piece + 64), dtype=torch.int8, device="cuda") for _ in range(2)]
    pages = torch.tensor([3, 9, 0, 12, 7, 5], device="cuda")
    try:
        engine = open_engine("kvikio")
        used = "kvikio"
    except EngineUnavailable:
        engine, used = None, "posix"
    store.restore_to_pages(plan, [t[:, :piece] for t in tables], pages, now_s=2.0, engine=engine)
    expected = np.concatenate(data, axis=1).reshape(2, 6, piece)
    for layer, table in enumerate(tables):
        got = table.view(torch.uint8).cpu().numpy()
        for i, page in enumerate(pages.tolist()):
            assert np.array_equal(got[page, :piece], expected[layer, i]), (used, layer, i)
        assert not got[:, piece:].any()
    if engine is not None:
        engine.close()
    store.close(remove=True)
