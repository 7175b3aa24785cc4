"""The adapters' copy paths (``layout/adapters/common.py``): restores read with ``preadv`` straight
into the engine's buffers and checked as they land, writes gathered once and written by the
store's own writer thread, pages in flight served from the write's buffers. Every byte is
compared with what went in and with the core's reference restore (``FlatStore.restore``)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from fcctl.layout.adapters import common
from fcctl.layout.adapters.common import SessionKV, StoreOptions, copy_pieces, page_layers
from fcctl.layout.alignment import PAGE_BYTES
from fcctl.layout.buffers import aligned_buffer
from fcctl.layout.errors import InputError
from fcctl.layout.placement import Medium, PlacementRule

LAYERS, PAGE = 3, 4096 + 100  # a page that is not a multiple of anything
REPO = Path(__file__).resolve().parents[1]


def _kv(tmp_path: Path, host_bytes: int = 0, layers: int = LAYERS) -> SessionKV:
    return SessionKV(
        StoreOptions(str(tmp_path / "kv"), host_bytes=host_bytes, ssd_bytes=1 << 28),
        engine="test",
        layers=layers,
        layer_page_bytes=PAGE,
        tokens_per_key=16,
        rule=PlacementRule(100, 10_000),
    )


def _pages(n: int, seed: int, layers: int = LAYERS) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, layers, PAGE), dtype=np.uint8)


def _split(buf: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    """``buf`` (flat) as views cut at ``cuts``."""
    edges = [0, *sorted(set(cuts)), buf.size]
    return [buf[a:b] for a, b in itertools.pairwise(edges) if b > a]


def test_page_layers_and_copy_pieces_are_views_cut_at_layer_edges() -> None:
    page = np.arange(3 * 10, dtype=np.uint8)
    layers = page_layers(_split(page, [4, 15, 16, 27]), 3, 10)
    assert [[int(v[0]) for v in vs] for vs in layers] == [[0, 4], [10, 15, 16], [20, 27]]
    assert all(np.shares_memory(v, page) for vs in layers for v in vs)
    # A short page: the last layer's views stop early (its tail is padding).
    assert [sum(v.size for v in vs) for vs in page_layers([page[:23]], 3, 10)] == [10, 10, 3]
    with pytest.raises(InputError, match="pages: a page holds at most 3 x 10 bytes; got 31"):
        page_layers([np.zeros(31, dtype=np.uint8)], 3, 10)
    dest = np.full(12, 7, dtype=np.uint8)
    copy_pieces([page[:5], page[5:9]], _split(dest, [3, 10]))
    assert dest.tolist() == [*range(9), 0, 0, 0]  # a shorter source leaves zeros


def test_restore_straight_into_split_buffers_byte_for_byte(tmp_path: Path) -> None:
    kv = _kv(tmp_path)  # no host memory: every turn on SSD, read by preadv
    pages = _pages(9, 1)
    keys = [f"k{i}" for i in range(9)]
    kv.write(keys[:4], pages[:4], session_id="chat")
    kv.write(keys[4:], pages[4:], prefix=keys[:4], session_id="chat")
    kv.write(["o0", "o1"], _pages(2, 2), session_id="other")
    assert all(p.medium == Medium.SSD for p in kv.placements)
    rng = np.random.default_rng(3)
    for wanted in ([0, 1, 2, 3, 4, 5, 6, 7, 8], [7, 2], [4], [8, 0, 5]):
        dest = np.zeros((len(wanted), LAYERS * PAGE), dtype=np.uint8)
        # Each page's buffer in pieces cut anywhere, across the layer edges too.
        views = [_split(row, rng.integers(1, row.size, 5).tolist()) for row in dest]
        assert kv.read_into([keys[i] for i in wanted], views)
        assert np.array_equal(dest.reshape(-1, LAYERS, PAGE), pages[wanted]), wanted
    # Two sessions in one load; a buffer shorter than its page gets the page's head.
    short = np.zeros(PAGE + 10, dtype=np.uint8)
    both = np.zeros((1, LAYERS * PAGE), dtype=np.uint8)
    assert kv.read_into(["k3", "o1"], [[short], [both[0]]])
    assert np.array_equal(short, pages[3].reshape(-1)[: PAGE + 10])
    assert np.array_equal(both.reshape(LAYERS, PAGE), _pages(2, 2)[1])
    # The same bytes as the core's reference restore of the session's whole turns.
    plan = kv.store.plan_restore("chat", 9, now_s=kv.clock())
    ref = np.empty((LAYERS, plan.layer_bytes), dtype=np.uint8)
    kv.store.restore(plan, ref, now_s=kv.clock())
    got = kv.read(keys)
    assert got is not None
    assert np.array_equal(got.transpose(1, 0, 2).reshape(LAYERS, -1), ref)
    assert not kv.read_into(["k0", "missing"], [[np.zeros(1, np.uint8)]] * 2)
    kv.close(remove=True)


def test_many_small_commands_combine_their_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Commands of one page and at most two buffers: every layer range is checked from
    # combined pieces, and a page split over three views spans two commands' worth of iovecs.
    monkeypatch.setattr(common, "READ_COMMAND_BYTES", PAGE)
    monkeypatch.setattr(common, "MAX_IOVECS", 2)
    kv = _kv(tmp_path)
    pages = _pages(6, 4)
    keys = [f"p{i}" for i in range(6)]
    kv.write(keys, pages, session_id="s")
    dest = np.zeros((6, LAYERS * PAGE), dtype=np.uint8)
    views = [_split(row, [PAGE // 2, PAGE + 1]) for row in dest]
    assert kv.read_into(keys, views)
    assert np.array_equal(dest.reshape(6, LAYERS, PAGE), pages)
    kv.close(remove=True)


def test_damaged_bytes_are_never_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kv = _kv(tmp_path)
    pages = _pages(3, 5)
    kv.write(["a", "b", "c"], pages, session_id="s")
    path = kv.store.session_path("s")
    plan = kv.store.plan_restore("s", 3, now_s=kv.clock())
    extent = plan.ssd_plans[1].placements[0][0]  # layer 1's range
    with open(path, "r+b") as f:
        f.seek(extent.offset + PAGE + 7)  # page "b", layer 1
        byte = f.read(1)
        f.seek(extent.offset + PAGE + 7)
        f.write(bytes([byte[0] ^ 0xFF]))
    # Damage found by the preadv path is a miss, once: the session goes with its file.
    dest = np.zeros((1, LAYERS * PAGE), dtype=np.uint8)
    assert not kv.read_into(["a"], [[dest[0]]])
    assert "turn 0 layer 1: layer checksum mismatch" in caplog.text
    assert kv.stats()["loads_failed"] == 1 and kv.damaged == 1
    assert kv.lookup(["a", "b", "c"]) == 0 and not path.exists()
    kv.write(["a", "b", "c"], pages, session_id="s")  # the engine stores it again
    got = kv.read(["a", "b", "c"])
    assert got is not None and np.array_equal(got, pages)
    kv.close(remove=True)


def test_memory_turns_restore_into_split_buffers(tmp_path: Path) -> None:
    kv = _kv(tmp_path, host_bytes=1 << 24)
    pages = _pages(5, 6)
    keys = [f"m{i}" for i in range(5)]
    kv.write(keys[:2], pages[:2], session_id="chat")  # a first turn: SSD
    kv.set_previous_reply("chat", 20)  # a short reply: the next turn stays in host memory
    kv.write(keys[2:], pages[2:], prefix=keys[:2], session_id="chat")
    assert [p.medium for p in kv.placements] == [Medium.SSD, Medium.MEMORY]
    dest = np.zeros((5, LAYERS * PAGE), dtype=np.uint8)
    assert kv.read_into(keys, [_split(row, [PAGE - 3, 2 * PAGE + 5]) for row in dest])
    assert np.array_equal(dest.reshape(5, LAYERS, PAGE), pages)
    kv.close(remove=True)


def test_background_write_served_from_its_buffers_then_from_disk(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    pages = _pages(4, 7)
    source = pages.copy()
    keys = [f"w{i}" for i in range(4)]
    gate = threading.Event()
    released: list[int] = []
    written: list[int] = []
    # Hold the writer at the store's lock: the turn stays in flight while we look.
    with kv.store_lock:
        assert kv.submit_write(
            keys,
            [[p.reshape(-1)] for p in source],  # the engine's buffers, referenced, not copied
            session_id="s",
            copy_now=False,
            release=lambda: released.append(1),
            on_written=lambda: (written.append(1), gate.set()),
        )
        assert kv.lookup(keys) == 4 and all(k in kv.pending for k in keys)
        got = kv.read(keys[1:3])  # served from the write's buffers
        assert got is not None and np.array_equal(got, pages[1:3])
        assert not written and kv.stats()["stores_pending"] == 1
    assert gate.wait(30) and kv.flush(timeout_s=30)
    assert released == [1] and written == [1] and not kv.pending
    source[:] = 0  # the engine reuses its buffers: the store has its own bytes
    got = kv.read(keys)
    assert got is not None and np.array_equal(got, pages)
    assert kv.store.session_path("s").is_file()
    # Submitting keys already stored writes nothing and gives the buffers back at once.
    assert not kv.submit_write(
        keys[:1], [[pages[0].reshape(-1)]], release=lambda: released.append(2)
    )
    assert released == [1, 2]
    kv.close(remove=True)


def test_a_failed_background_write_is_reported_and_becomes_a_miss(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    # Something else already has this session's file name: the store never replaces it.
    kv.store.session_path("taken").mkdir(parents=True)
    assert kv.submit_write(["x", "y"], [[p.reshape(-1)] for p in _pages(2, 8)], session_id="taken")
    assert kv.flush(timeout_s=30)
    assert kv.lookup(["x", "y"]) == 0 and kv.read(["x"]) is None
    stats = kv.stats()
    assert stats["stores"] == 1 and stats["stores_failed"] == 1
    failures = kv.take_write_failures()
    assert len(failures) == 1 and "session 'taken' turn 0" in failures[0]
    assert "already has a session file" in failures[0] and kv.take_write_failures() == []
    # The next turn of another session goes through.
    kv.write(["z"], _pages(1, 9), session_id="fine")
    assert kv.lookup(["z"]) == 1
    kv.close(remove=True)


def test_a_session_dropped_while_in_flight_is_not_written(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    released: list[int] = []
    with kv.store_lock:
        kv.submit_write(["d0"], [[_pages(1, 10)[0].reshape(-1)]], session_id="gone")
        kv.submit_write(
            ["e0"],
            [[_pages(1, 11)[0].reshape(-1)]],
            session_id="dropped",
            copy_now=False,
            release=lambda: released.append(1),
        )
        threading.Thread(target=kv.evict_session, args=("dropped",)).start()
        # evict_session forgets the keys at once (the store's part waits for this lock).
        for _ in range(1000):
            if kv.lookup(["e0"], count=False) == 0:
                break
            threading.Event().wait(0.01)
    assert kv.flush(timeout_s=30)
    assert released == [1] and kv.lookup(["e0"]) == 0 and kv.lookup(["d0"]) == 1
    assert not kv.store.session_path("dropped").exists()
    kv.close(remove=True)


def test_aligned_buffers_are_read_with_o_direct(tmp_path: Path) -> None:
    page = 2 * PAGE_BYTES
    kv = SessionKV(
        StoreOptions(str(tmp_path / "kv"), host_bytes=0, ssd_bytes=1 << 26),
        engine="test",
        layers=2,
        layer_page_bytes=page,
        tokens_per_key=16,
        rule=PlacementRule(100, 10_000),
    )
    pages = np.random.default_rng(12).integers(0, 256, (5, 2, page), dtype=np.uint8)
    keys = [f"a{i}" for i in range(5)]
    kv.write(keys, pages, session_id="s")
    dest = aligned_buffer(5 * 2 * page).reshape(5, 2 * page)  # page-aligned, as allocators give
    assert kv.read_into(keys[1:4], [[row] for row in dest[:3]])
    assert np.array_equal(dest[:3].reshape(3, 2, page), pages[1:4])
    if direct_supported(str(kv.store.session_path("s"))):
        assert kv.direct_commands > 0  # the wanted pages went from the disk into dest
    # Unaligned buffers still read byte for byte, through the page cache.
    odd = np.zeros(2 * page + 1, dtype=np.uint8)[1:]
    before = kv.buffered_commands
    assert kv.read_into(["a0"], [[odd]]) and np.array_equal(odd, pages[0].reshape(-1))
    assert kv.buffered_commands > before
    kv.close(remove=True)


def direct_supported(path: str) -> bool:
    fd = common.open_direct(path)
    if fd is None:
        return False
    os.close(fd)
    return True


def test_staging_keeps_as_many_buffers_as_were_in_use_at_once(tmp_path: Path) -> None:
    kv = _kv(tmp_path)
    turn = 2 * LAYERS * PAGE  # two pages
    # The writer gathers: one buffer at a time, one kept.
    for t in range(3):
        keys = [f"g{t}-{i}" for i in range(2)]
        pages = [[p.reshape(-1)] for p in _pages(2, 20 + t)]
        kv.submit_write(keys, pages, session_id=f"g{t}", copy_now=False)
        assert kv.flush(timeout_s=30)
    assert kv.stats()["staging_bytes"] == turn
    # Gathered at submit while the writer is held (SGLang's way): two in use, two kept.
    with kv.store_lock:
        for t in range(2):
            keys = [f"c{t}-{i}" for i in range(2)]
            kv.submit_write(keys, [[p.reshape(-1)] for p in _pages(2, 30 + t)], session_id="c")
    assert kv.flush(timeout_s=30)
    assert kv.stats()["staging_bytes"] == 2 * turn
    got = kv.read([f"c1-{i}" for i in range(2)])
    assert got is not None and np.array_equal(got, _pages(2, 31))
    kv.close(remove=True)


# One engine process storing through the background writer: two sessions' turns submitted
# without waiting (at most 3 in flight), a line on stdout when a turn is committed
# (``on_written``: its tag record and segment fdatasynced, SessionKV's docstring).
_SUBMITTER = textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    from fcctl.layout.adapters.common import SessionKV, StoreOptions
    kv = SessionKV(StoreOptions(sys.argv[1], host_bytes=0, ssd_bytes=2**40), engine="t",
                   layers=3, layer_page_bytes=65536, tokens_per_key=16)
    room = threading.Semaphore(3)
    keys = {"a": [], "b": []}
    for turn in range(10_000):
        for session in ("a", "b"):
            new = [f"{session}{turn}-{j}" for j in range(16)]
            pages = np.random.default_rng([turn, ord(session)]).integers(
                0, 256, (16, 3, 65536), np.uint8)
            def written(session=session, turn=turn):
                print(session, turn, flush=True)
                room.release()
            room.acquire()
            kv.submit_write(new, [[p.reshape(-1)] for p in pages], prefix=keys[session],
                            session_id=session, on_written=written)
            keys[session] += new
    """
)


@pytest.mark.parametrize("after", [3, 8])
def test_kill_9_loses_no_turn_the_background_writer_reported_committed(
    tmp_path: Path, after: int
) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", _SUBMITTER, str(tmp_path / "kv")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reported = {"a": 0, "b": 0}
    assert proc.stdout is not None
    for _ in range(after):
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        session, turn = line.split()
        reported[session] = max(reported[session], int(turn) + 1)
    proc.send_signal(signal.SIGKILL)  # with turns queued, being gathered or being written
    assert proc.wait(timeout=60) == -signal.SIGKILL
    for line in proc.stdout:  # committed before the kill landed
        session, turn = line.split()
        reported[session] = max(reported[session], int(turn) + 1)

    again = SessionKV(
        StoreOptions(str(tmp_path / "kv"), host_bytes=0, ssd_bytes=2**40),
        engine="t",
        layers=3,
        layer_page_bytes=65536,
        tokens_per_key=16,
    )
    unreported = 0
    for session, turns in reported.items():
        indexed = again.index.sessions.get(session)
        recovered = 0 if indexed is None else len(indexed.turn_ends)
        # Every turn reported committed is back; unreported ones only from the 3 in flight.
        assert recovered >= turns, (session, turns, recovered)
        unreported += recovered - turns
        keys = [f"{session}{t}-{j}" for t in range(recovered) for j in range(16)]
        assert again.lookup(keys) == len(keys)
        got = again.read(keys)
        expected = [
            np.random.default_rng([t, ord(session)]).integers(0, 256, (16, 3, 65536), np.uint8)
            for t in range(recovered)
        ]
        assert got is not None and np.array_equal(got, np.concatenate(expected))
    assert unreported <= 3
    assert not [p for p in (tmp_path / "kv").iterdir() if ".creating-" in p.name]
    again.close()
