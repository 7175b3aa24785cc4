"""A ``FlatStore`` reopened on its directory (issue #35, items 2 to 4): it recovers every
committed session from the files (records, checksums, tag records) and restores it byte for
byte, reclaims what cannot be recovered, survives ``kill -9`` during a write with no committed
turn lost and no orphan kept, keeps its watermarks over what it recovered, turns damage into
one miss, and keeps a turn written in pieces as one layer-ordered segment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fcctl.layout import FlatStore, KvGeometry
from fcctl.layout.errors import InputError, VerificationError
from fcctl.layout.placement import Medium
from fcctl.layout.session_file import SessionFile
from fcctl.layout.session_format import DATA_START, segment_bytes
from fcctl.layout.store import read_tags, tags_path

GEOMETRY = KvGeometry("recovery-test", layers=3, kv_heads=2, head_dim=16)
BLOCK = 4
REPO = Path(__file__).resolve().parents[1]


def _store(directory: Path, now_s: float = 0.0, **options: object) -> FlatStore:
    values: dict[str, object] = dict(
        block_tokens=BLOCK, host_bytes=2**20, ssd_bytes=2**26, now_s=now_s, extent_bytes=2**16
    )
    values.update(options)
    return FlatStore.open(directory, GEOMETRY, **values)


def _kv(store: FlatStore, tokens: int, seed: int) -> np.ndarray:
    shape = (GEOMETRY.layers, store.layer_bytes_for(tokens))
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _restored(store: FlatStore, session: str, now_s: float | None = None) -> np.ndarray:
    if now_s is None:
        now_s = store.now_s  # the latest time the store saw: a restore then never goes back
    tokens = sum(t.tokens for t in store.turns(session))
    plan = store.plan_restore(session, tokens, now_s=now_s)
    out = np.zeros((GEOMETRY.layers, plan.layer_bytes), dtype=np.uint8)
    store.restore(plan, out, now_s=now_s)
    return out


def test_a_reopened_store_recovers_every_committed_session_byte_for_byte(tmp_path: Path) -> None:
    store = _store(tmp_path)
    written: dict[str, list[np.ndarray]] = {}
    now = 1.0
    for s, session in enumerate(("chat-1", "chat-2", "agent-7")):
        for turn, tokens in enumerate((9, 4, 13)):
            kv = _kv(store, tokens, 10 * s + turn)
            store.write_turn(
                session,
                turn,
                kv,
                tokens=tokens,
                medium=Medium.SSD,
                now_s=now,
                tag=f"{session}/{turn}".encode(),
            )
            written.setdefault(session, []).append(kv)
            now += 1.0
    # A memory turn after the SSD turns is lost with the process; the SSD turns before it stay.
    store.write_turn("chat-1", 3, _kv(store, 4, 99), tokens=4, medium=Medium.MEMORY, now_s=now)
    used = store.ssd.used_bytes
    store.close()

    again = _store(tmp_path, now_s=now)
    r = again.recovery
    assert sorted(r.sessions) == ["agent-7", "chat-1", "chat-2"] and r.turns == 9
    assert r.reclaimed == () and r.skipped == ()
    # The watermarks count what was recovered, exactly what the first store counted.
    assert r.ssd_bytes == again.ssd.used_bytes == used
    for session, data in written.items():
        assert [t.tokens for t in again.turns(session)] == [9, 4, 13]
        assert all(t.medium == Medium.SSD for t in again.turns(session))
        assert np.array_equal(_restored(again, session), np.concatenate(data, axis=1))
        assert [again.tag(session, t) for t in range(3)] == [
            f"{session}/{t}".encode() for t in range(3)
        ]
    # The sessions continue where they stopped; earlier turns are never written again.
    with pytest.raises(InputError) as refused:
        again.write_turn("chat-2", 0, _kv(again, 4, 0), tokens=4, medium=Medium.SSD, now_s=now)
    assert refused.value.parameter == "turn"
    extra = _kv(again, 4, 7)
    again.write_turn("chat-2", 3, extra, tokens=4, medium=Medium.SSD, now_s=now)
    expected = np.concatenate([*written["chat-2"], extra], axis=1)
    assert np.array_equal(_restored(again, "chat-2"), expected)
    again.close()


def test_a_memory_turn_between_ssd_turns_ends_what_a_restart_restores(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = _kv(store, 8, 1)
    store.write_turn("s", 0, first, tokens=8, medium=Medium.SSD, now_s=1.0)
    store.write_turn("s", 1, _kv(store, 4, 2), tokens=4, medium=Medium.MEMORY, now_s=2.0)
    store.write_turn("s", 2, _kv(store, 4, 3), tokens=4, medium=Medium.SSD, now_s=3.0)
    store.close()
    again = _store(tmp_path, now_s=3.0)
    # Turn 1 died with the process: turn 2, in the file, cannot be reached from the start.
    assert [t.turn for t in again.turns("s")] == [0]
    assert np.array_equal(_restored(again, "s"), first)
    # Its bytes stay counted until the session goes.
    with SessionFile.open(again.session_path("s")) as f:
        assert len(f.turns) == 2
        assert again.ssd.used_bytes == sum(t.segment_bytes for t in f.turns)
    nxt = _kv(again, 4, 4)
    again.write_turn("s", 1, nxt, tokens=4, medium=Medium.SSD, now_s=4.0)
    assert np.array_equal(_restored(again, "s"), np.concatenate([first, nxt], axis=1))
    again.close()


def test_what_cannot_be_recovered_is_reclaimed_and_the_rest_left_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    kept = _kv(store, 8, 1)
    store.write_turn("kept", 0, kept, tokens=8, medium=Medium.SSD, now_s=1.0)
    store.write_turn("broken", 0, _kv(store, 8, 2), tokens=8, medium=Medium.SSD, now_s=2.0)
    store.write_turn("untagged", 0, _kv(store, 8, 3), tokens=8, medium=Medium.SSD, now_s=3.0)
    paths = {name: store.session_path(name) for name in ("kept", "broken", "untagged", "x")}
    store.close()
    with _store(tmp_path, rank=1) as other:  # another rank's files are never touched
        other.write_turn("kept", 0, kept, tokens=8, medium=Medium.SSD, now_s=1.0)
        theirs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("n0-r1"))
    # Both header slots of "broken" destroyed: not recoverable.
    with open(paths["broken"], "r+b") as f:
        f.write(b"FCCIO\x00\x00\x00" + bytes(DATA_START - 8))
    # A turn without its tag record cannot be looked up: the file holds nothing restorable.
    tags_path(paths["untagged"]).unlink()
    # What a creator killed before publishing leaves, and tags whose file is gone.
    orphan = tmp_path / f".{paths['x'].name}.creating-4242-00ff00ff00ff00ff"
    orphan.write_bytes(b"\0" * 100)
    tags_path(paths["x"]).write_bytes(b"FCTG")
    # A file of this rank's naming that is not a session file: not ours to judge.
    stranger = paths["x"].with_name(paths["x"].name.replace("n0-r0-", "n0-r0-0"))
    stranger.write_text("someone's notes")

    again = _store(tmp_path, now_s=5.0)
    r = again.recovery
    assert r.sessions == ("kept",)
    reclaimed = dict(r.reclaimed)
    assert set(reclaimed) == {
        paths["broken"].name,
        paths["untagged"].name,
        orphan.name,
        tags_path(paths["x"]).name,
    }
    assert "cannot be recovered" in reclaimed[paths["broken"].name]
    assert "no turn restorable" in reclaimed[paths["untagged"].name]
    assert [name for name, _ in r.skipped] == [stranger.name]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        [
            paths["kept"].name,
            tags_path(paths["kept"]).name,
            stranger.name,
            "n0-r0.lock",
            *theirs,  # with rank 1's lock
        ]
    )
    assert np.array_equal(_restored(again, "kept"), kept)
    assert again.ssd.used_bytes == segment_bytes(GEOMETRY.layers, again.layer_bytes_for(8))
    again.close()


def test_the_watermark_holds_over_what_was_recovered(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i, session in enumerate(("oldest", "middle", "newest")):
        store.write_turn(session, 0, _kv(store, 16, i), tokens=16, medium=Medium.SSD, now_s=i)
        os.utime(store.session_path(session), (1_000_000 + i, 1_000_000 + i))
    one = store.ssd.session_bytes("oldest")
    store.close()
    # A smaller budget this time: three sessions are over its high watermark (0.9 x 2), and
    # only one is under its low watermark (0.8 x 2).
    again = _store(tmp_path, now_s=10.0, ssd_bytes=2 * one)
    assert again.ssd.used_bytes <= again.ssd.capacity_bytes * again.ssd.low_watermark
    # The least recently written went first, its file with it.
    assert again.sessions() == ("newest",)
    assert not again.session_path("oldest").exists()
    assert ("oldest", "over the SSD watermark after the restart") in again.recovery.reclaimed
    assert not again.session_path("middle").exists()
    again.close()


# One writer process: SSD turns of a few MiB each, one line on stdout per committed turn.
_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from fcctl.layout import FlatStore, KvGeometry
    from fcctl.layout.placement import Medium
    geometry = KvGeometry("recovery-test", layers=3, kv_heads=2, head_dim=16)
    store = FlatStore.open(sys.argv[1], geometry, block_tokens=4, host_bytes=0,
                           ssd_bytes=2**40, now_s=0.0, extent_bytes=2**16)
    tokens = 4096  # 3 layers x 256 KiB: long enough to be killed inside
    for turn in range(10_000):
        for session in ("a", "b"):
            shape = (3, store.layer_bytes_for(tokens))
            kv = np.random.default_rng([turn, ord(session)]).integers(0, 256, shape, np.uint8)
            store.write_turn(session, turn, kv, tokens=tokens, medium=Medium.SSD,
                             now_s=float(turn), tag=f"{session}{turn}".encode())
            print(session, turn, flush=True)
    """
)


@pytest.mark.parametrize("after", [3, 8])
def test_kill_9_during_writes_loses_no_committed_turn(tmp_path: Path, after: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    committed: dict[str, int] = {"a": 0, "b": 0}
    assert proc.stdout is not None
    for _ in range(after):
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        session, turn = line.split()
        committed[session] = int(turn) + 1
    proc.send_signal(signal.SIGKILL)  # inside the next turn's write, or between two
    assert proc.wait(timeout=60) == -signal.SIGKILL
    for line in proc.stdout:  # turns committed before the kill landed
        session, turn = line.split()
        committed[session] = int(turn) + 1

    store = _store(tmp_path, now_s=0.0, host_bytes=0, ssd_bytes=2**40)
    for session, turns in committed.items():
        got = store.turns(session)
        # Every reported turn is back; at most the one in flight more (committed, unreported).
        assert turns <= len(got) <= turns + 1, (session, turns, len(got))
        for t in range(len(got)):
            assert store.tag(session, t) == f"{session}{t}".encode()
        data = _restored(store, session)
        shape = (3, store.layer_bytes_for(4096))
        expected = [
            np.random.default_rng([t, ord(session)]).integers(0, 256, shape, np.uint8)
            for t in range(len(got))
        ]
        assert np.array_equal(data, np.concatenate(expected, axis=1))
    # No orphan kept; the watermark counts the files' committed segments.
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in names if ".creating-" in n]
    on_disk = 0
    for session in committed:
        with SessionFile.open(store.session_path(session)) as f:
            on_disk += sum(t.segment_bytes for t in f.turns)
        records, intact = read_tags(tags_path(store.session_path(session)))
        assert intact == tags_path(store.session_path(session)).stat().st_size
        assert len(records) >= len(store.turns(session))
    assert store.ssd.used_bytes == on_disk
    # And it writes on: the next turn of each session follows the recovered ones.
    for session in committed:
        n = len(store.turns(session))
        store.write_turn(session, n, _kv(store, 4, 5), tokens=4, medium=Medium.SSD, now_s=1.0)
        with SessionFile.open(store.session_path(session)) as f:
            assert len(f.turns) == n + 1
    store.close()


def test_a_damaged_turn_is_one_miss_and_its_session_is_reclaimed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for turn in range(2):
        store.write_turn("s", turn, _kv(store, 8, turn), tokens=8, medium=Medium.SSD, now_s=1.0)
    path = store.session_path("s")
    with SessionFile.open(path) as f:
        offset = f.turns[1].layer_offsets[2] + 5
    with open(path, "r+b") as f:  # one byte of turn 1, layer 2 rots on the disk
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(VerificationError, match="turn 1 layer 2"):
        _restored(store, "s", now_s=2.0)
    # Found once: the session is gone, its file with it; the next write starts it again.
    assert store.turns("s") == () and store.sessions() == ()
    assert not path.exists() and not tags_path(path).exists()
    assert store.ssd.used_bytes == 0
    fresh = _kv(store, 8, 9)
    store.write_turn("s", 0, fresh, tokens=8, medium=Medium.SSD, now_s=3.0)
    assert np.array_equal(_restored(store, "s", now_s=4.0), fresh)
    store.close()


def test_a_turn_written_in_pieces_is_one_layer_ordered_segment(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pieces = [_kv(store, 8, i) for i in range(4)]
    for i, kv in enumerate(pieces):
        turn = store.write_turn(
            "s", 0, kv, tokens=8, medium=Medium.SSD, now_s=float(i), final=False, tag=bytes([i])
        )
        assert turn.tokens == 8 * (i + 1)
        # Open, it restores from host memory: nothing is in the file yet.
        assert np.array_equal(_restored(store, "s"), np.concatenate(pieces[: i + 1], axis=1))
    assert store.open_sessions() == ("s",)
    # The next turn seals it: one segment, its layers each one contiguous range.
    last = _kv(store, 4, 9)
    store.write_turn("s", 1, last, tokens=4, medium=Medium.SSD, now_s=5.0, final=False)
    with SessionFile.open(store.session_path("s")) as f:
        assert [t.tokens for t in f.turns] == [32]
        whole = np.concatenate(pieces, axis=1)
        for layer in range(GEOMETRY.layers):
            assert f.read_layer(0, layer) == whole[layer].tobytes()
    assert store.tag("s", 0) == bytes([0, 1, 2, 3])
    # A piece must go where the turn goes, and a turn ending inside a page cannot grow.
    with pytest.raises(InputError) as wrong:
        store.write_turn("s", 1, last, tokens=4, medium=Medium.MEMORY, now_s=6.0, final=False)
    assert wrong.value.parameter == "medium"
    store.write_turn("s", 1, _kv(store, 3, 1), tokens=3, medium=Medium.SSD, now_s=6.0, final=False)
    with pytest.raises(InputError) as inside:
        store.write_turn("s", 1, last, tokens=4, medium=Medium.SSD, now_s=7.0, final=False)
    assert inside.value.parameter == "tokens"
    store.close()  # seals the open turn: it survives the restart
    again = _store(tmp_path, now_s=8.0)
    assert [t.tokens for t in again.turns("s")] == [32, 7]
    assert again.open_sessions() == ()
    again.close()


def test_an_open_memory_turn_grows_in_place_and_counts_its_bytes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    a, b = _kv(store, 4, 1), _kv(store, 4, 2)
    store.write_turn("m", 0, a, tokens=4, medium=Medium.MEMORY, now_s=1.0, final=False)
    store.write_turn("m", 0, b, tokens=4, medium=Medium.MEMORY, now_s=2.0)
    assert [(t.tokens, t.medium) for t in store.turns("m")] == [(8, Medium.MEMORY)]
    assert store.memory.used_bytes == a.nbytes + b.nbytes
    assert np.array_equal(_restored(store, "m"), np.concatenate([a, b], axis=1))
    assert not store.session_path("m").exists()
    store.close()


def test_another_geometrys_files_are_left_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    kv = _kv(store, 8, 1)
    store.write_turn("s", 0, kv, tokens=8, medium=Medium.SSD, now_s=1.0)
    store.close()
    # The directory reopened for another model: its files are neither served nor destroyed.
    other = KvGeometry("other-model", layers=3, kv_heads=4, head_dim=16)
    with FlatStore.open(
        tmp_path, other, block_tokens=BLOCK, host_bytes=0, ssd_bytes=2**26, now_s=2.0
    ) as foreign:
        assert foreign.sessions() == () and foreign.recovery.reclaimed == ()
        ((name, why),) = foreign.recovery.skipped
        assert name == store.session_path("s").name and "written for 3 layers" in why
    again = _store(tmp_path, now_s=3.0)
    assert np.array_equal(_restored(again, "s"), kv)
    again.close()


def test_a_damaged_restore_into_pages_drops_the_session(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    store = _store(tmp_path)
    for turn in range(2):
        store.write_turn("s", turn, _kv(store, 8, turn), tokens=8, medium=Medium.SSD, now_s=1.0)
    _flip(store.session_path("s"), turn=0, layer=1)
    plan = store.plan_restore("s", 16, now_s=2.0)
    pages = torch.zeros((GEOMETRY.layers, 8, store.piece_bytes), dtype=torch.uint8)
    with pytest.raises(VerificationError, match="turn 0 layer 1"):
        store.restore_to_pages(plan, pages, list(range(4)), now_s=2.0)
    assert store.sessions() == () and not store.session_path("s").exists()
    store.close()


def _flip(path: Path, *, turn: int, layer: int) -> None:
    with SessionFile.open(path) as f:
        offset = f.turns[turn].layer_offsets[layer] + 3
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x81]))


def test_the_adapters_store_glue_restarts_and_turns_damage_into_a_miss(tmp_path: Path) -> None:
    # SessionKV is what the LMCache and SGLang adapters are built on; it needs no engine.
    from fcctl.layout.adapters.common import SessionKV, StoreOptions

    def opened() -> SessionKV:
        options = StoreOptions(str(tmp_path / "kv"), host_bytes=0, ssd_bytes=2**30)
        return SessionKV(options, engine="t", layers=3, layer_page_bytes=64, tokens_per_key=16)

    keys = [b"\x01" * 8, b"\x02" * 8, "page-3", "page-4"]  # bytes and str keys both kept
    pages = np.random.default_rng(5).integers(0, 256, (4, 3, 64), dtype=np.uint8)
    kv = opened()
    kv.write(keys[:2], pages[:2], session_id="chat")
    kv.write(keys[2:], pages[2:], prefix=keys[:2], session_id="chat")
    kv.write([("not", "kept")], pages[:1], session_id="other")  # a key no codec can keep
    kv.close()
    again = opened()
    assert again.lookup(keys) == 4 and again.lookup([("not", "kept")]) == 0
    got = again.read(keys)
    assert got is not None and np.array_equal(got, pages)
    assert again.store.sessions() == ("chat",)  # "other" could not be looked up: dropped
    again.close()
    _flip(sorted((tmp_path / "kv").glob("n0-r0-*.fccio"))[0], turn=1, layer=0)
    damaged = opened()
    assert damaged.lookup(keys) == 4
    assert damaged.read(keys[2:]) is None  # a miss, not an exception
    assert damaged.lookup(keys) == 0 and damaged.damaged == 1
    damaged.write(keys, pages, session_id="chat")  # stored again
    got = damaged.read(keys)
    assert got is not None and np.array_equal(got, pages)
    damaged.close()
