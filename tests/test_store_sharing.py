"""Stores that share one directory (issue #20, item 1): a ``FlatStore`` never replaces,
writes into or removes a session file another store owns, within one process and across
processes; every committed turn of each store restores byte for byte."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fcctl.layout import FlatStore, KvGeometry, StoreBusy
from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium
from fcctl.layout.session_file import SessionFile

GEOMETRY = KvGeometry("sharing-test", layers=3, kv_heads=2, head_dim=16, tp=2)
BLOCK = 4
TOKENS = (9, 4, 13)  # three SSD turns per session
REPO = Path(__file__).resolve().parents[1]


def _store(directory: Path, **options: object) -> FlatStore:
    values: dict[str, object] = dict(
        block_tokens=BLOCK, host_bytes=2**20, ssd_bytes=2**26, now_s=0.0, extent_bytes=2**16
    )
    values.update(options)
    return FlatStore.open(directory, GEOMETRY, **values)


def _kv(store: FlatStore, tokens: int, seed: int) -> np.ndarray:
    shape = (GEOMETRY.layers, store.layer_bytes_for(tokens))
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _write(store: FlatStore, session: str, seed: int, start_s: float = 1.0) -> list[np.ndarray]:
    data = [_kv(store, t, seed * 100 + i) for i, t in enumerate(TOKENS)]
    for i, (t, kv) in enumerate(zip(TOKENS, data, strict=True)):
        store.write_turn(session, i, kv, tokens=t, medium=Medium.SSD, now_s=start_s + i)
    return data


def _restored(store: FlatStore, session: str) -> np.ndarray:
    plan = store.plan_restore(session, sum(TOKENS), now_s=100.0)
    assert plan.tokens == sum(TOKENS)
    out = np.zeros((GEOMETRY.layers, plan.layer_bytes), dtype=np.uint8)
    store.restore(plan, out, now_s=100.0)
    return out


def test_a_second_store_of_the_same_rank_is_refused_and_the_first_keeps_its_kv(
    tmp_path: Path,
) -> None:
    # Two stores of the same (default) node and rank on one directory, writing one session
    # name: the old store created the file with overwrite=True and renamed its own over the
    # first one's, whose committed KV was gone (a CRC mismatch at restore).
    first = _store(tmp_path)
    written = _write(first, "chat-1", seed=1)
    with pytest.raises(StoreBusy) as info:
        _store(tmp_path)
    assert isinstance(info.value, InputError) and info.value.parameter == "rank"
    assert str(tmp_path) in str(info.value) and f"pid {os.getpid()}" in str(info.value)
    assert np.array_equal(_restored(first, "chat-1"), np.concatenate(written, axis=1))
    # Another rank is no competitor: its own lock and its own files.
    with _store(tmp_path, rank=1) as other:
        _write(other, "chat-1", seed=2)
    first.close()
    # Closed, the (node, rank) is free again; the file an earlier store left is recovered,
    # never replaced: its turns are not written again.
    again = _store(tmp_path)
    assert again.recovery.sessions == ("chat-1",)
    with pytest.raises(InputError) as refused:
        again.write_turn("chat-1", 0, _kv(again, 9, 7), tokens=9, medium=Medium.SSD, now_s=1.0)
    assert refused.value.parameter == "turn" and "chat-1" in str(refused.value)
    again.close()
    with SessionFile.open(first.session_path("chat-1")) as left:
        for turn, data in enumerate(written):
            for layer in range(GEOMETRY.layers):
                assert left.read_layer(turn, layer) == data[layer].tobytes()


def test_ranks_and_nodes_share_a_directory_with_their_own_files(tmp_path: Path) -> None:
    # A TP=2 engine (ranks 0 and 1) and a second node's rank 0 on one directory, all writing
    # the same session names: each has its own files, every byte comes back.
    stores = [_store(tmp_path, rank=0), _store(tmp_path, rank=1), _store(tmp_path, node=1)]
    written = {}
    for j, session in enumerate(("a", "b")):
        for i, store in enumerate(stores):
            written[i, session] = _write(store, session, seed=10 * i + j, start_s=10.0 * j)
    paths = {store.session_path(s) for store in stores for s in ("a", "b")}
    assert len(paths) == 6 and all(p.exists() for p in paths)
    assert {p.name[:6] for p in paths} == {"n0-r0-", "n0-r1-", "n1-r0-"}
    for (i, session), data in written.items():
        assert np.array_equal(_restored(stores[i], session), np.concatenate(data, axis=1))
    for store in stores:
        store.close()


@pytest.mark.parametrize(
    ("options", "parameter"),
    [
        ({"rank": -1}, "rank"),
        ({"rank": 1.0}, "rank"),
        ({"rank": True}, "rank"),
        ({"node": 4096}, "node"),
        ({"node": -1}, "node"),
    ],
)
def test_bad_node_or_rank_names_the_parameter(
    tmp_path: Path, options: dict[str, object], parameter: str
) -> None:
    with pytest.raises(InputError) as info:
        _store(tmp_path, **options)
    assert info.value.parameter == parameter and str(info.value).startswith(f"{parameter}:")
    assert "got" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # refused before taking a lock


def test_a_closed_or_dropped_store_gives_up_its_rank(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _write(store, "s", seed=1)
    store.close()
    with _store(tmp_path):  # a successor holds the rank
        # The closed store would be a second writer of that rank.
        with pytest.raises(InputError, match="is closed") as info:
            store.write_turn("t", 0, _kv(store, 4, 0), tokens=4, medium=Medium.SSD, now_s=9.0)
        assert info.value.parameter == "session"
        assert not store.session_path("t").exists()
    dropped = _store(tmp_path)
    del dropped  # never closed: collecting it frees the rank
    gc.collect()
    _store(tmp_path).close(remove=True)


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


def test_close_remove_deletes_only_the_files_this_store_created(tmp_path: Path) -> None:
    directory = tmp_path / "kv"
    rank0, rank1 = _store(directory, rank=0), _store(directory, rank=1)
    written = {rank: _write(store, "s", seed=rank) for rank, store in ((0, rank0), (1, rank1))}
    _write(rank0, "t", seed=5, start_s=10.0)
    # A file put in place of one of rank 0's (an older store that still renamed over names,
    # an operator's copy): it is not rank 0's to delete.
    foreign = directory / "foreign.fccio"
    with SessionFile.create(foreign, GEOMETRY, block_tokens=BLOCK, session_id="theirs"):
        pass
    os.replace(foreign, rank0.session_path("t"))
    rank0.close(remove=True)
    assert not rank0.session_path("s").exists()
    with SessionFile.open(rank0.session_path("t")) as kept:
        assert kept.session_id == "theirs"
    rank0.session_path("t").unlink()
    # Rank 1's files, lock and data are untouched; the directory stays while it has them.
    path = rank1.session_path("s")
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [path.name, path.name.replace(".fccio", ".fctags"), "n0-r1.lock"]
    )
    assert np.array_equal(_restored(rank1, "s"), np.concatenate(written[1], axis=1))
    rank1.close(remove=True)
    assert list(directory.iterdir()) == []  # rank 1 did not create the directory: it stays
    directory.rmdir()


def test_reclaim_removes_only_its_own_file(tmp_path: Path) -> None:
    store = _store(tmp_path, ssd_bytes=100_000)  # two sessions of 49,152 bytes: over the mark
    _write(store, "old", seed=1)
    foreign = tmp_path / "foreign.fccio"
    with SessionFile.create(foreign, GEOMETRY, block_tokens=BLOCK, session_id="theirs"):
        pass
    os.replace(foreign, store.session_path("old"))
    _write(store, "new", seed=2, start_s=10.0)
    assert [r.session for r in store.reclaim(20.0)] == ["old"]
    with SessionFile.open(store.session_path("old")) as kept:
        assert kept.session_id == "theirs"
    store.close(remove=True)


# --------------------------------------------------------------------------- two processes

SESSIONS = ("chat-1", "chat-2", "agent-7")

# One engine process: waits for the start signal, writes every session's turns (interleaved
# across sessions, as requests arrive), then optionally says so and waits to be released or
# killed. A refused store prints its one-line error and exits 2, as a CLI would.
_ENGINE = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import numpy as np
    from fcctl.layout import FlatStore, KvGeometry
    from fcctl.layout.errors import StoreBusy
    from fcctl.layout.placement import Medium
    directory, rank, go, hold = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    TOKENS, SESSIONS = json.loads(sys.argv[5])
    geometry = KvGeometry("sharing-test", layers=3, kv_heads=2, head_dim=16, tp=2)
    while not go.exists():
        time.sleep(0.002)
    try:
        store = FlatStore(directory, geometry, block_tokens=4, host_bytes=0, ssd_bytes=2**30,
                          now_s=0.0, extent_bytes=2**16, rank=rank)
    except StoreBusy as e:
        print(e)
        sys.exit(2)
    now = 0.0
    for turn, tokens in enumerate(TOKENS):
        for s, session in enumerate(SESSIONS):
            shape = (geometry.layers, store.layer_bytes_for(tokens))
            kv = np.random.default_rng([rank, s, turn]).integers(0, 256, shape, dtype=np.uint8)
            store.write_turn(session, turn, kv, tokens=tokens, medium=Medium.SSD, now_s=now)
            now += 1.0
    if hold:
        Path(hold + ".ready").touch()
        while not Path(hold).exists():
            time.sleep(0.01)
    store.close()
    """
)


def _engine(directory: Path, rank: int, go: Path, hold: str = "") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            _ENGINE,
            str(directory),
            str(rank),
            str(go),
            hold,
            json.dumps([TOKENS, SESSIONS]),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _check_committed(directory: Path, rank: int) -> None:
    """Every turn the engine of ``rank`` wrote, byte for byte, from its files alone."""
    names = _store(directory, rank=rank)  # the naming rule, and proof the rank is free again
    for s, session in enumerate(SESSIONS):
        with SessionFile.open(names.session_path(session)) as f:
            assert f.session_id == session and len(f.turns) == len(TOKENS)
            for turn, tokens in enumerate(TOKENS):
                shape = (GEOMETRY.layers, f.layer_bytes_for(tokens))
                rng = np.random.default_rng([rank, s, turn])
                expected = rng.integers(0, 256, shape, dtype=np.uint8)
                for layer in range(GEOMETRY.layers):
                    assert f.read_layer(turn, layer) == expected[layer].tobytes()
    names.close()


def test_two_processes_of_two_ranks_write_the_same_sessions_at_once(tmp_path: Path) -> None:
    go = tmp_path / "go"
    directory = tmp_path / "kv"
    directory.mkdir()
    procs = [_engine(directory, rank, go) for rank in (0, 1)]
    go.touch()  # both start writing the same session names together
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    for rank in (0, 1):
        _check_committed(directory, rank)
    assert len(list(directory.glob("*.fccio"))) == 2 * len(SESSIONS)


def test_a_second_process_of_the_same_rank_is_refused(tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.touch()
    directory = tmp_path / "kv"
    directory.mkdir()
    hold = tmp_path / "release"
    first = _engine(directory, 0, go, hold=str(hold))
    _wait_for(Path(f"{hold}.ready"), first)  # it has written everything and holds rank 0
    second = _engine(directory, 0, go)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 2, out
    assert out.startswith("rank: node 0 rank 0 already has an open store") and (
        f"pid {first.pid}" in out
    )
    # The holder dies without closing: the kernel frees the lock, no committed turn is lost
    # and the next store of rank 0 opens.
    first.send_signal(signal.SIGKILL)
    assert first.wait(timeout=60) == -signal.SIGKILL
    _check_committed(directory, 0)


def test_the_emitted_readme_tells_each_rank_to_open_its_own_store() -> None:
    from fcctl.analyzers.recommend.emit import readme_text

    text = readme_text("pkg", 256, 32768, {"trace": "t.jsonl"})
    assert "its own `rank=`" in text and "`node=`" in text
    assert "n{node}-r{rank}-*.fccio" in text and "StoreBusy" in text


def test_the_rank_lock_has_one_holder_while_holders_remove_it(tmp_path: Path) -> None:
    # Stores of one rank opened and closed with remove=True (which unlinks the lock file while
    # holding it) from several threads: a taker that locked the unlinked file must see that
    # and retry, or it and the taker of the new file would both hold the rank.
    holders: list[int] = []
    overlaps: list[int] = []
    guard = threading.Lock()

    def churn(worker: int) -> None:
        for _ in range(300):
            try:
                store = _store(tmp_path)
            except StoreBusy:
                continue
            with guard:
                holders.append(worker)
                if len(holders) > 1:
                    overlaps.append(len(holders))
            time.sleep(0)
            with guard:
                holders.remove(worker)
            store.close(remove=True)

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
