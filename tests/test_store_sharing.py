"""Stores that share one directory (issue #20, item 1): a ``FlatStore`` never replaces,
writes into or removes a session file another store owns, within one process and across
processes; every committed turn of each store restores byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fcctl.layout import FlatStore, KvGeometry
from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium
from fcctl.layout.session_file import SessionFile

GEOMETRY = KvGeometry("sharing-test", layers=3, kv_heads=2, head_dim=16, tp=2)
BLOCK = 4
TOKENS = (9, 4, 13)  # three SSD turns per session


def _store(directory: Path, **options: object) -> FlatStore:
    values: dict[str, object] = dict(block_tokens=BLOCK, host_bytes=2**20, ssd_bytes=2**26,
                                     now_s=0.0, extent_bytes=2**16)  # fmt: skip
    values.update(options)
    return FlatStore.open(directory, GEOMETRY, **values)


def _kv(store: FlatStore, tokens: int, seed: int) -> np.ndarray:
    shape = (GEOMETRY.layers, store.layer_bytes_for(tokens))
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _write(store: FlatStore, session: str, seed: int) -> list[np.ndarray]:
    data = [_kv(store, t, seed * 100 + i) for i, t in enumerate(TOKENS)]
    for i, (t, kv) in enumerate(zip(TOKENS, data, strict=True)):
        store.write_turn(session, i, kv, tokens=t, medium=Medium.SSD, now_s=1.0 + i)
    return data


def _restored(store: FlatStore, session: str) -> np.ndarray:
    plan = store.plan_restore(session, sum(TOKENS), now_s=10.0)
    assert plan.tokens == sum(TOKENS)
    out = np.zeros((GEOMETRY.layers, plan.layer_bytes), dtype=np.uint8)
    store.restore(plan, out, now_s=10.0)
    return out


def test_a_second_store_never_replaces_the_first_ones_file(tmp_path: Path) -> None:
    # Two stores of the same (default) node and rank on one directory, writing one session
    # name: the old store created the file with overwrite=True and renamed its own over the
    # first one's, whose committed KV was gone (a CRC mismatch at restore).
    first = _store(tmp_path)
    written = _write(first, "chat-1", seed=1)
    second = _store(tmp_path)
    with pytest.raises(InputError) as info:
        second.write_turn("chat-1", 0, _kv(second, 9, 7), tokens=9, medium=Medium.SSD, now_s=1.0)
    assert info.value.parameter == "session" and "chat-1" in str(info.value)
    assert np.array_equal(_restored(first, "chat-1"), np.concatenate(written, axis=1))
    second.close(remove=True)
    assert np.array_equal(_restored(first, "chat-1"), np.concatenate(written, axis=1))
    first.close()


def test_create_never_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "s.fccio"
    with SessionFile.create(path, GEOMETRY, block_tokens=BLOCK) as s:
        s.append_turn(4, np.ones((GEOMETRY.layers, s.layer_bytes_for(4)), np.uint8))
    before = path.stat().st_ino
    with pytest.raises(InputError, match="already exists"):
        SessionFile.create(path, GEOMETRY, block_tokens=BLOCK)
    assert path.stat().st_ino == before
    # overwrite=True replaces only a file no writer holds.
    with SessionFile.open(path, writable=True):
        with pytest.raises(InputError, match="another writer"):
            SessionFile.create(path, GEOMETRY, block_tokens=BLOCK, overwrite=True)
        assert path.stat().st_ino == before
    with SessionFile.create(path, GEOMETRY, block_tokens=BLOCK, overwrite=True) as s:
        assert s.turns == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.fccio"]  # no temporary left
