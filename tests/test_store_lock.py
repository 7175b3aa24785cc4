"""One writing process per store directory and (node, rank) (issue #36, item 0): two engine
processes configured alike open the emitted package's store on one directory and write the
same session. The second meets the first's lock when it opens, with one line naming the
directory, and writes nothing; the first's committed turns restore byte for byte, before and
after the first dies by ``kill -9``. Real processes, the emitted package as ``--emit`` writes
it, and the adapters' store glue (``SessionKV``) as an engine opens it at start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from fcctl.analyzers.recommend.emit import emit_package

# One engine worker: opens the store (the emitted package's FlatStore, or SessionKV as the
# adapters do at start), writes two turns of "chat-1", says so, then waits to be killed.
# A refused open prints its one-line error and exits 2, as an engine's startup would fail.
_WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import flatcake_store as fc
    from flatcake_store.placement import Medium
    directory, how, ready = sys.argv[2], sys.argv[3], Path(sys.argv[4])
    geometry = fc.KvGeometry("lock-test", layers=3, kv_heads=2, head_dim=16)
    try:
        if how == "store":
            store = fc.FlatStore.open(directory, geometry, block_tokens=4, host_bytes=0,
                                      ssd_bytes=2**30, now_s=0.0, extent_bytes=2**16)
        else:
            from flatcake_store.adapters.common import SessionKV, StoreOptions
            kv = SessionKV(StoreOptions(directory, host_bytes=0, ssd_bytes=2**30), engine="t",
                           layers=3, layer_page_bytes=512, tokens_per_key=16)
            store = kv.store
    except ValueError as e:  # StoreBusy is one
        print(e)
        sys.exit(2)
    for turn in range(2):
        # 8 tokens (2 pages of 4) of the store's geometry; 1 page of 512 bytes of the adapters'
        tokens = 8 if how == "store" else 1
        kv_bytes = np.full((3, store.layer_bytes_for(tokens)), 17 + turn, dtype=np.uint8)
        store.write_turn("chat-1", turn, kv_bytes, tokens=tokens, medium=Medium.SSD, now_s=1.0)
    ready.touch()
    while True:
        time.sleep(1)
    """
)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emit") / "pkg"
    emit_package(
        out,
        name="flatcake_store",
        short_reply_tokens=300,
        agent_context_tokens=20000,
        source={"trace": "hand-made", "rate_per_s": 1.0, "fcctl_version": "test"},
        toml_text="[thresholds]\nshort_reply_tokens = 300\nagent_context_tokens = 20000\n",
    )
    return out


def _worker(emitted: Path, directory: Path, how: str, ready: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the emitted copy only
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(emitted), str(directory), how, str(ready)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _committed(emitted: Path, directory: Path, how: str) -> list[bytes]:
    """Every layer of chat-1's turns, read by a fresh process's reopened store."""
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        import flatcake_store as fc
        from flatcake_store.adapters.common import page_geometry
        if sys.argv[3] == "store":
            geometry, block = fc.KvGeometry("lock-test", layers=3, kv_heads=2, head_dim=16), 4
        else:
            geometry, block = page_geometry("t", 3, 512), 1
        with fc.FlatStore.open(sys.argv[2], geometry, block_tokens=block, host_bytes=0,
                               ssd_bytes=2**30, now_s=9.0, extent_bytes=2**16) as store:
            plan = store.plan_restore("chat-1", 16 if block == 4 else 2, now_s=9.0)
            import numpy as np
            out = np.zeros((3, plan.layer_bytes), dtype=np.uint8)
            store.restore(plan, out, now_s=9.0)
            sys.stdout.write(out.tobytes().hex())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(emitted), str(directory), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = np.frombuffer(bytes.fromhex(proc.stdout), dtype=np.uint8).reshape(3, -1)
    return [row.tobytes() for row in data]


@pytest.mark.parametrize("how", ["store", "adapter"])
def test_a_second_process_alike_meets_the_lock_at_open(
    emitted: Path, tmp_path: Path, how: str
) -> None:
    directory = tmp_path / "kv"
    ready = tmp_path / "first.ready"
    first = _worker(emitted, directory, how, ready)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first worker never wrote its turns"
            time.sleep(0.02)
        before = {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}
        second = _worker(emitted, directory, how, tmp_path / "second.ready")
        out, _ = second.communicate(timeout=120)
        # Refused at open, one line naming the directory and the holder; nothing written.
        assert second.returncode == 2, out
        lines = out.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rank: node 0 rank 0 already has")
        assert str(directory) in lines[0] and f"pid {first.pid}" in lines[0]
        assert not (tmp_path / "second.ready").exists()
        assert {p.name: p.stat().st_mtime_ns for p in directory.iterdir()} == before
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    # Killed holding the lock: the kernel frees it, and the next process finds both of the
    # first's committed turns intact.
    layers = _committed(emitted, directory, how)
    per_turn = 1024 if how == "store" else 512  # a layer's bytes in one turn
    expected = np.concatenate(
        [np.full((3, per_turn), 17, np.uint8), np.full((3, per_turn), 18, np.uint8)], axis=1
    )
    assert layers == [row.tobytes() for row in expected]
