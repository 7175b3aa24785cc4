"""Hostile input: bounded memory, no hangs, one line for every refusal (issue #7 §2).

The big cases run ``fcctl convert`` in a child process, on real files in tmp_path, and measure
its wall time and its peak RSS (the child's own ``VmHWM`` from /proc, read at its exit).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fcctl.analyzers.traces.readers import TraceFormatError, detect_format, read_trace

GOOD = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}
MIB = 2**20


# The child reports its own high-water RSS (VmHWM) at exit. ru_maxrss from wait4 is not used:
# a child forked from a large pytest process starts with the parent's RSS as its maximum.
_CHILD = """
import atexit, os, runpy, sys
def report():
    with open("/proc/self/status") as status:
        hwm = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["FCCTL_TEST_HWM"], "w") as out:
        out.write(hwm)
atexit.register(report)
sys.argv = ["fcctl", *sys.argv[1:]]
runpy.run_module("fcctl", run_name="__main__")
"""


def convert_child(*args: str, timeout_s: float = 60) -> tuple[int, str, float, float]:
    """Run ``fcctl convert ARGS``; ``(exit status, stderr, wall s, the child's peak RSS MiB)``."""
    import tempfile

    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to measure the child's peak RSS")
    with tempfile.TemporaryDirectory() as scratch:
        hwm = Path(scratch) / "hwm"
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, "convert", *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "FCCTL_TEST_HWM": str(hwm)},
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"fcctl convert {args} ran past {timeout_s} s")
        wall = time.perf_counter() - start
        peak_mib = int(hwm.read_text()) / 1024  # VmHWM is in kB
    return done.returncode, done.stderr.decode(errors="replace"), wall, peak_mib


@contextmanager
def no_hang(seconds: int = 20) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the block runs past ``seconds``."""

    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(call: Callable[[], object], *fragments: str) -> str:
    with no_hang(), pytest.raises(TraceFormatError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- one line longer than the limit -------------------------------------------------------


def one_long_line_gzip(path: Path, total_bytes: int) -> Path:
    """A gzip of one JSON line of ``total_bytes`` (a hash_ids list that never ends).

    Written as concatenated gzip members of one 16 MiB piece each (gzip allows that), so the
    1.5 GiB line costs one compression of 16 MiB and the file stays ~1.5 MB.
    """
    piece = b"1," * (8 * MIB)
    member = gzip.compress(piece, compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(b'{"timestamp": 0, "input_length": 1, "hash_ids": ['))
        for _ in range(total_bytes // len(piece)):
            f.write(member)
    return path


@pytest.mark.parametrize("fmt", [None, "mooncake"])
def test_gzip_bomb_one_line_fails_fast_in_bounded_memory(fmt: str | None, tmp_path: Path) -> None:
    bomb = one_long_line_gzip(tmp_path / "bomb.jsonl.gz", 1536 * MIB)
    assert bomb.stat().st_size < 3 * MIB
    args = [str(bomb), "-o", str(tmp_path / "out.parquet")] + (["--format", fmt] if fmt else [])
    # A hang guard, not a speed test: past 60 s the child is stopped and the test fails.
    status, err, wall, rss = convert_child(*args, timeout_s=60)
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "line 1" in err and "longer than the limit of 64 MiB" in err, err
    print(f"gzip bomb ({fmt}): {wall:.1f} s, peak RSS <= {rss:.0f} MiB")
    assert rss < 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.jsonl.gz"]


@pytest.mark.parametrize("fmt", [None, "mooncake", "claude-code", "azure"])
def test_sparse_2_gib_of_nul_bytes(fmt: str | None, tmp_path: Path) -> None:
    nul = tmp_path / "zeros.jsonl"
    with nul.open("wb") as f:
        f.truncate(2 * 1024 * MIB)  # sparse: no disk used
    args = [str(nul), "-o", str(tmp_path / "out.parquet")] + (["--format", fmt] if fmt else [])
    # A hang guard, not a speed test: past 60 s the child is stopped and the test fails.
    status, err, wall, rss = convert_child(*args, timeout_s=60)
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    expected = "unknown trace format" if fmt is None else "longer than the limit of 64 MiB"
    assert expected in err, err
    print(f"2 GiB of NULs ({fmt}): {wall:.1f} s, peak RSS <= {rss:.0f} MiB")
    assert rss < 400


def test_line_limit_is_a_parameter(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    long = json.dumps({**GOOD, "hash_ids": list(range(400))})
    path.write_text(json.dumps(GOOD) + "\n" + long + "\n")
    refused(lambda: read_trace(path, max_line_bytes=len(long) - 1), "line 2", "longer than")
    assert read_trace(path, max_line_bytes=len(long)).num_requests == 2
    refused(lambda: read_trace(path, max_line_bytes=0), "max_line_bytes", "got 0")


def test_line_limit_across_chunks(tmp_path: Path) -> None:
    # A 12 MiB line spans two 8 MiB chunks: the limit holds on the part kept between them.
    path = tmp_path / "t.jsonl"
    ids = ",".join(["7"] * (6 * MIB))
    path.write_text(json.dumps(GOOD) + "\n" + '{"timestamp": 1, "hash_ids": [' + ids + "]}\n")
    refused(lambda: read_trace(path, "mooncake", max_line_bytes=10 * MIB), "line 2", "10 MiB")


def test_claude_code_member_larger_than_the_limit(tmp_path: Path) -> None:
    session = {
        "id": "s",
        "block_size": 64,
        "requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": [1]}],
    }
    (tmp_path / "trace_0001.json").write_text(json.dumps(session))
    refused(lambda: read_trace(tmp_path, max_line_bytes=20), "trace_0001.json", "larger than")


def test_detection_reads_a_long_first_record(tmp_path: Path) -> None:
    # A valid 10 MB first line is detected (the head used to stop at 64 KiB).
    big = {**GOOD, "hash_ids": list(range(1_300_000)), "input_length": 512 * 1_300_000}
    path = tmp_path / "long_first.jsonl"
    path.write_text(json.dumps(big) + "\n" + json.dumps(GOOD) + "\n")
    assert path.stat().st_size > 10 * 10**6
    assert detect_format(path) == "mooncake"
    gz = tmp_path / "long_first.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    assert detect_format(gz) == "mooncake"
    assert read_trace(gz).num_requests == 2


# --- only regular files -------------------------------------------------------------------


def test_fifo_device_directory_symlink_as_trace(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for fmt in (None, "mooncake", "claude-code", "parquet"):
        refused(lambda: read_trace(fifo, fmt), "pipe.jsonl", "FIFO")  # noqa: B023
    for fmt in (None, "mooncake", "azure"):
        refused(lambda: read_trace("/dev/zero", fmt), "/dev/zero", "character device")  # noqa: B023
    refused(lambda: read_trace(tmp_path, "mooncake"), "is a directory")
    dangling = tmp_path / "gone.jsonl"
    dangling.symlink_to(tmp_path / "missing-target.jsonl")
    refused(lambda: read_trace(dangling), "symbolic link", "missing-target.jsonl")


def cc_session(name: str) -> str:
    return json.dumps(
        {"id": name, "block_size": 64, "requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": [1]}]}
    )


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "dangling"])
def test_bad_member_of_a_trace_directory(kind: str, tmp_path: Path) -> None:
    (tmp_path / "trace_0001.json").write_text(cc_session("a"))
    member = tmp_path / "trace_0002.json"
    expected = {
        "fifo": "FIFO",
        "device": "character device",
        "directory": "is a directory",
        "dangling": "symbolic link",
    }[kind]
    if kind == "fifo":
        os.mkfifo(member)
    elif kind == "device":
        member.symlink_to("/dev/zero")
    elif kind == "directory":
        member.mkdir()
    else:
        member.symlink_to(tmp_path / "nowhere.json")
    refused(lambda: read_trace(tmp_path), "trace_0002.json", expected)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_trace_and_member(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    path.chmod(0)
    refused(lambda: read_trace(path), "t.jsonl", "Permission denied")
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "trace_0001.json").write_text(cc_session("a"))
    (folder / "trace_0001.json").chmod(0)
    refused(lambda: read_trace(folder), "trace_0001.json", "Permission denied")


def test_cli_fifo_is_one_line_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    status, err, _, _ = convert_child(str(fifo), "-o", str(tmp_path / "o.parquet"), timeout_s=30)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "FIFO" in err, err


# --- damaged gzip -------------------------------------------------------------------------


def gzip_lines(n: int) -> bytes:
    rows = (
        json.dumps({**GOOD, "timestamp": i, "hash_ids": [i, i + 1, i * 7 % 1000]}) for i in range(n)
    )
    return gzip.compress(("\n".join(rows) + "\n").encode())


def complete_lines(data: bytes) -> int:
    """Lines a perfect reader gets out of ``data`` before the damage."""
    d = zlib.decompressobj(wbits=31)
    out = b""
    for i in range(0, len(data), 1024):
        try:
            out += d.decompress(data[i : i + 1024])
        except zlib.error:
            break
    return out.count(b"\n")


def test_truncated_gzip_names_the_last_line_read(tmp_path: Path) -> None:
    data = gzip_lines(20_000)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    message = refused(lambda: read_trace(path), "gzip", "truncated", "after line")
    last = int(message.split("after line ")[1].split(",")[0])
    # Every complete line before the cut was read (zlib is fed 64 KiB at a time).
    assert last == complete_lines(data[: len(data) // 2]), message


@pytest.mark.parametrize("where", [0.3, 0.5, 0.7])
def test_flipped_bytes_in_a_gzip_name_the_damage(where: float, tmp_path: Path) -> None:
    data = bytearray(gzip_lines(20_000))
    middle = int(len(data) * where)
    data[middle : middle + 16] = b"\xff" * 16
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(bytes(data))
    # The garbage fails to parse before zlib's CRC check notices: the damage is the error.
    message = refused(lambda: read_trace(path), "gzip stream is broken", "last line read")
    last = int(message.split("damage is line ")[1].split(" ")[0])
    assert 0 < last < 20_000


# --- hash ids -----------------------------------------------------------------------------


BAD_IDS = {
    "true": ([0, True], "got True"),
    "false": ([False], "got False"),
    "float": ([1, 2.0], "got 2.0"),
    "string": (["3"], "got '3'"),
    "negative": ([4, -1], "got -1"),
    "past_2_64": ([2**64 + 1], "beyond 64 bits"),
}


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_hash_ids_must_be_integers_in_every_format(case: str, tmp_path: Path) -> None:
    ids, got = BAD_IDS[case]
    raw = json.dumps(ids)
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(
        json.dumps(GOOD)
        + "\n"
        + json.dumps(GOOD)[:-1].rsplit('"hash_ids"', 1)[0]
        + f'"hash_ids": {raw}}}\n'
    )
    refused(lambda: read_trace(mooncake, "mooncake"), "m.jsonl", "line 2", "hash_ids[", got)
    bailian = tmp_path / "q.jsonl"
    row = {
        "chat_id": 1,
        "parent_chat_id": -1,
        "timestamp": 1.0,
        "input_length": 32,
        "output_length": 1,
        "type": "text",
        "turn": 1,
    }
    bailian.write_text(json.dumps(row)[:-1] + f', "hash_ids": {raw}}}\n')
    refused(lambda: read_trace(bailian), "q.jsonl", "line 1", "hash_ids[", got)
    session = '{"id": "s", "block_size": 64, "requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": '
    cc = tmp_path / "cc.jsonl"
    cc.write_text(session + raw + "}]}\n")
    refused(lambda: read_trace(cc), "cc.jsonl", "line 1", "requests[0]", "hash_ids[", got)
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "trace_0001.json").write_text(session + raw + "}]}")
    refused(lambda: read_trace(folder), "trace_0001.json", "requests[0]", got)


def test_many_requests_with_a_true_far_in(tmp_path: Path) -> None:
    # The check runs in batches of lists: a true in the 10,000th list is still found.
    rows = [json.dumps({**GOOD, "hash_ids": [0, 1, 2]}) for _ in range(10_000)]
    rows.append(json.dumps({**GOOD, "hash_ids": [5, True]}))
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n")
    refused(lambda: read_trace(path), "line 10001", "hash_ids[1]", "got True")
