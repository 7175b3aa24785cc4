"""The emitted package's facade, ``layout/store.py`` (``FlatStore``), tested in the core: bytes
back as written across media, whole-turn prefixes, addresses, reclamation, the scheduler, the
clock, and bad input as ``InputError`` naming the parameter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fcctl.layout import FlatStore, KvGeometry
from fcctl.layout.address import MEDIUM_MEMORY, MEDIUM_SSD, decode_address
from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium, PlacementRule, Reason

GEOMETRY = KvGeometry("store-test", layers=3, kv_heads=1, head_dim=32)
BLOCK = 8


def _store(tmp_path: Path, **options: object) -> FlatStore:
    values: dict[str, object] = dict(
        block_tokens=BLOCK, host_bytes=2**20, ssd_bytes=2**24, now_s=0.0, extent_bytes=2**16
    )
    values.update(options)
    return FlatStore.open(tmp_path / "kv", GEOMETRY, **values)


def _kv(store: FlatStore, tokens: int, seed: int) -> np.ndarray:
    shape = (GEOMETRY.layers, store.layer_bytes_for(tokens))
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_turns_on_both_media_restore_in_order(tmp_path: Path) -> None:
    store = _store(tmp_path)
    media = [Medium.SSD, Medium.MEMORY, Medium.SSD, Medium.MEMORY]
    tokens = [17, 8, 30, 5]
    data = [_kv(store, t, i) for i, t in enumerate(tokens)]
    for i, (m, t, kv) in enumerate(zip(media, tokens, data, strict=True)):
        rec = store.write_turn("sess", i, kv, tokens=t, medium=m, now_s=float(i))
        medium, node, _ = decode_address(rec.address)
        assert medium == (MEDIUM_SSD if m == Medium.SSD else MEDIUM_MEMORY) and node == 0
        assert rec.token_start == sum(tokens[:i])
    plan = store.plan_restore("sess", sum(tokens), now_s=5.0)
    assert plan.tokens == sum(tokens) and len(plan.ssd_plans) == GEOMETRY.layers
    # The two SSD turns of one file are read per layer; the planner merges nothing across the
    # layer-ordered segments of other layers, so at most one command per turn per layer.
    assert all(p.read_commands <= 2 for p in plan.ssd_plans)
    out = np.zeros((GEOMETRY.layers, plan.layer_bytes), dtype=np.uint8)
    read = store.restore(plan, out, now_s=5.0)
    assert np.array_equal(out, np.concatenate(data, axis=1))
    assert read == plan.ssd_read_bytes >= data[0].nbytes + data[2].nbytes
    # A prefix stops at whole turns.
    assert store.plan_restore("sess", 24, now_s=5.0).tokens == 17
    assert store.plan_restore("sess", 25, now_s=5.0).tokens == 25
    store.close(remove=True)
    assert not (tmp_path / "kv").exists()


def test_place_uses_the_rule_and_free_memory(tmp_path: Path) -> None:
    store = _store(tmp_path, host_bytes=4096 * 3, rule=PlacementRule(100, 1000))
    kw = dict(turn=1, context_tokens=500, previous_reply_tokens=50, prefix_ref_count=1)
    assert store.place(**kw, new_tokens=8, now_s=0.0).reason == Reason.SHORT_REPLY_CHAT
    assert store.place(**kw, new_tokens=64, now_s=0.0).reason == Reason.MEMORY_FULL
    kw["previous_reply_tokens"] = 101
    assert store.place(**kw, new_tokens=8, now_s=0.0).reason == Reason.LONG_REPLY


def test_reclaim_drops_whole_sessions_and_never_one_being_read(tmp_path: Path) -> None:
    store = _store(tmp_path, ssd_bytes=120_000)  # 3 x 40,960-byte segments
    for i, name in enumerate(("old", "mid", "new")):
        store.write_turn(name, 0, _kv(store, 80, i), tokens=80, medium=Medium.SSD, now_s=i)
    assert store.ssd.over_high_watermark()
    store.ssd.begin_read("old", 3.0)  # a restore of "old" is running
    dropped = store.reclaim(3.0)
    assert [d.session for d in dropped] == ["mid"]
    assert store.turns("mid") == () and not store.session_path("mid").exists()
    assert store.plan_restore("mid", 80, now_s=3.0).tokens == 0
    store.ssd.end_read("old", 3.0)
    store.close(remove=True)


def test_scheduler_calls(tmp_path: Path) -> None:
    store = _store(tmp_path, prefetch_slots=1)
    store.submit("a", arrival_s=0.0, ssd_bytes=10**9, now_s=0.0)
    store.submit("b", arrival_s=0.1, ssd_bytes=4 * 10**9, now_s=0.1)
    store.submit("c", arrival_s=0.2, ssd_bytes=0, now_s=0.2)
    assert store.ready(0.2) == ["c"]
    assert store.start_prefetches(2.0) == ["a"]  # one window slot
    assert store.start_prefetches(2.0) == []
    store.prefetch_done("a", 3.0)
    assert store.start_prefetches(3.0) == ["b"]
    store.prefetch_done("b", 4.0)
    assert store.ready(4.0) == ["a", "b"]


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda s, kv: s.write_turn("x", 1, kv, tokens=8, medium=Medium.SSD, now_s=1.0), "turn"),
        (
            lambda s, kv: s.write_turn("x", 0, kv[:, :5], tokens=8, medium=Medium.SSD, now_s=1.0),
            "kv",
        ),
        (
            lambda s, kv: s.write_turn("x" * 65, 0, kv, tokens=8, medium=Medium.SSD, now_s=1.0),
            "session",
        ),
        (lambda s, kv: s.write_turn("x", 0, kv, tokens=8, medium=Medium.SSD, now_s=-1.0), "now_s"),
        (lambda s, kv: s.plan_restore("never", 8, now_s=1.0), "session"),
    ],
)
def test_bad_input_names_the_parameter(tmp_path: Path, call: object, parameter: str) -> None:
    store = _store(tmp_path)
    kv = _kv(store, 8, 0)
    with pytest.raises(InputError) as info:
        call(store, kv)  # type: ignore[operator]
    assert info.value.parameter == parameter and str(info.value).startswith(f"{parameter}:")
    store.close(remove=True)


def test_memory_write_over_free_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, host_bytes=100)
    with pytest.raises(InputError, match="medium: host memory has 100 bytes free"):
        store.write_turn("x", 0, _kv(store, 8, 0), tokens=8, medium=Medium.MEMORY, now_s=1.0)
    with pytest.raises(InputError, match="directory: must be an existing directory"):
        FlatStore(
            tmp_path / "absent", GEOMETRY, block_tokens=BLOCK, host_bytes=0, ssd_bytes=0, now_s=0.0
        )


@pytest.mark.parametrize("split", [False, True])
def test_restore_to_pages_through_the_window_with_torch(tmp_path: Path, split: bool) -> None:
    torch = pytest.importorskip("torch")
    store = _store(tmp_path)
    media = [Medium.SSD, Medium.MEMORY, Medium.SSD]
    data = [_kv(store, t, i) for i, t in enumerate((16, 24, 9))]
    for i, (m, kv) in enumerate(zip(media, data, strict=True)):
        tokens = (16, 24, 9)[i]
        store.write_turn("s", i, kv, tokens=tokens, medium=m, now_s=float(i))
    plan = store.plan_restore("s", 49, now_s=3.0)
    blocks = plan.layer_bytes // store.piece_bytes
    pages = torch.randperm(blocks + 5)[:blocks]  # scattered page slots
    piece = store.piece_bytes
    shape = (
        (GEOMETRY.layers, 2, blocks + 5, piece // 2)
        if split
        else (GEOMETRY.layers, blocks + 5, piece)
    )
    kv_cache = torch.zeros(shape, dtype=torch.uint8)
    done: list[int] = []
    read = store.restore_to_pages(
        plan, kv_cache, pages, now_s=3.0, kv_split=split, on_layer=done.append
    )
    assert done == list(range(GEOMETRY.layers))
    assert read == plan.ssd_read_bytes > 0
    expected = np.concatenate(data, axis=1).reshape(GEOMETRY.layers, blocks, piece)
    for i, page in enumerate(pages.tolist()):
        if split:
            got = torch.cat([kv_cache[:, 0, page], kv_cache[:, 1, page]], dim=1).numpy()
        else:
            got = kv_cache[:, page].numpy()
        assert np.array_equal(got, expected[:, i]), i
    with pytest.raises(InputError) as info:
        store.restore_to_pages(plan, kv_cache, pages[:-1], now_s=3.0, kv_split=split)
    assert info.value.parameter == "page_ids"
    store.close(remove=True)
