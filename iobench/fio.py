"""fio, the device's reference: sequential direct reads and replays of our exact read sequences.

* **Sequential reference**: ``--rw=read --direct=1`` over the benchmark's own data files (the
  caller passes those that hold the largest request; ``iobench.bench._fio_round``), one
  stonewalled job per request size (1, 4, 8 MiB) and queue depth (8, 16, 32). The best job is
  the device's limit, ``seq_read_bytes_per_s``. Each job stops after ``runtime_s`` seconds or
  one pass over the files, whichever comes first, so the pass takes about
  ``9 x runtime_s`` seconds at most.
* **Replay**: each layout's exact read commands, written as fio iolog v2 files (``fio version 2
  iolog``; ``add``/``open``/``read``/``close`` lines), replayed with ``read_iolog``,
  ``replay_no_stall=1`` (as fast as possible, order kept), ``--direct=1``. The sessions are split
  round-robin into ``streams`` logs, replayed by as many fio jobs (``numjobs``) at ``iodepth``
  each, like the restore's concurrent sessions.

ioengine: ``io_uring`` (on this machine's virtio disk it held 2.7-3.1 GB/s at QD16 where libaio
swung 1.2-3.3 GB/s); ``libaio`` when fio cannot run io_uring here. fio runs with ``--readonly``
and ``--allow_file_create=0`` so it can never write or create a file.

fio runs in a session and process group of its own (:func:`run_fio`), so the terminal's
Ctrl-C reaches only us: on Ctrl-C, SIGTERM or a timeout, fio and its job processes (which
``setsid`` themselves, so they are found as fio's children) get SIGTERM, then SIGKILL after
:data:`TERMINATE_GRACE_S`, and fio is reaped before the exception goes on, so no fio outlives
us (:func:`terminate_group`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .safety import held_signals

MiB = 2**20
SEQ_REQUEST_BYTES = (1 * MiB, 4 * MiB, 8 * MiB)
SEQ_IODEPTHS = (8, 16, 32)
IOENGINES = ("io_uring", "libaio")
# Seconds fio's process group has between SIGTERM and SIGKILL (fio stops its jobs on SIGTERM).
TERMINATE_GRACE_S = 3.0


class FioError(RuntimeError):
    """fio ran but failed or printed something we cannot parse."""


@dataclass(frozen=True)
class FioJob:
    name: str
    request_bytes: int | None
    iodepth: int
    io_bytes: int
    runtime_s: float

    @property
    def read_bytes_per_s(self) -> float:
        return self.io_bytes / self.runtime_s if self.runtime_s > 0 else 0.0


@dataclass(frozen=True)
class FioReport:
    """What fio measured; ``available`` False (and None figures) when fio could not run."""

    available: bool
    reason: str = ""
    version: str = ""
    ioengine: str | None = None
    seq_jobs: tuple[FioJob, ...] = ()
    replay_bytes_per_s: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def seq_read_bytes_per_s(self) -> float | None:
        if not self.seq_jobs:
            return None
        return max(j.read_bytes_per_s for j in self.seq_jobs)

    @property
    def best_seq_job(self) -> FioJob | None:
        return max(self.seq_jobs, key=lambda j: j.read_bytes_per_s) if self.seq_jobs else None


def find_fio() -> str | None:
    return shutil.which("fio")


def fio_version(fio_bin: str) -> str:
    _, stdout, _ = run_fio([fio_bin, "--version"], timeout_s=30)
    return stdout.strip()


def _live_children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    kids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] != b"Z" and int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[:1] != [b"Z"]


def terminate_group(proc: subprocess.Popen[str], grace_s: float = TERMINATE_GRACE_S) -> None:
    """Stop fio and every job process it forked, SIGKILL what is left after ``grace_s``, reap.

    fio's job processes call ``setsid`` (each is a session and group of its own), so a signal
    to fio's group does not reach them: they are found as fio's children in /proc and signalled
    by pid. SIGTERM first (fio then stops its jobs and writes its report), SIGKILL for whatever
    still runs after the grace period, so no job can outlive fio (an orphaned job would keep
    reading for its whole ``runtime``).
    """
    jobs = set(_live_children(proc.pid))
    for pid in (proc.pid, *jobs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is None:
            jobs |= set(_live_children(proc.pid))  # a job forked just now
        if proc.poll() is not None and not any(_alive(j) for j in jobs):
            break
        time.sleep(0.02)
    if proc.poll() is None:
        jobs |= set(_live_children(proc.pid))
    for pid in (proc.pid, *jobs):
        if pid == proc.pid and proc.poll() is not None:
            continue  # reaped already: the pid may be another process's now
        if pid != proc.pid and not _alive(pid):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=grace_s)  # reap fio and close its pipes


def run_fio(cmd: Sequence[str], *, timeout_s: float) -> tuple[int, str, str]:
    """Run ``cmd`` (fio) in its own process group; ``(returncode, stdout, stderr)``.

    Any exception while it runs (KeyboardInterrupt, SIGTERM turned into one, the timeout)
    terminates and reaps the whole group first (:func:`terminate_group`).
    """
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: our Ctrl-C is ours to pass on, and killpg-able
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        terminate_group(proc)
        raise FioError(f"fio did not finish within {timeout_s:.0f} s") from None
    except BaseException:
        # A second Ctrl-C must not cut the termination short and leave fio running.
        with held_signals():
            terminate_group(proc)
        raise
    return proc.returncode, stdout, stderr


def parse_fio_json(text: str) -> list[FioJob]:
    """Jobs from ``fio --output-format=json`` output (fio may print notes before the JSON)."""
    start = text.find("{")
    if start < 0:
        raise FioError(f"fio printed no JSON: {text.strip()[:200]!r}")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as e:
        raise FioError(f"fio JSON output does not parse at line {e.lineno}: {e.msg}") from None
    jobs = []
    for job in doc.get("jobs", []):
        if job.get("error"):
            raise FioError(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
        opts = job.get("job options", {})
        read = job.get("read", {})
        bs = opts.get("bs")
        jobs.append(
            FioJob(
                name=str(job.get("jobname", "")),
                request_bytes=_fio_size(bs) if bs else None,
                iodepth=int(opts.get("iodepth", 1)),
                io_bytes=int(read.get("io_bytes", 0)),
                runtime_s=float(read.get("runtime", 0)) / 1000.0,
            )
        )
    return jobs


def _fio_size(text: str) -> int:
    text = str(text).strip().lower().rstrip("b").rstrip("i")
    mult = {"k": 2**10, "m": 2**20, "g": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("kmg")) * mult


def _size_label(nbytes: int) -> str:
    """``1m``, ``4m`` for whole MiB; ``64k`` below (tiny workloads get small requests)."""
    return f"{nbytes // MiB}m" if nbytes % MiB == 0 else f"{nbytes // 1024}k"


def _escape(path: str) -> str:
    # fio splits --filename and --read_iolog on ':'; a backslash escapes it.
    return str(path).replace(":", "\\:")


def write_iolog(path: Path, commands: Iterable[tuple[str, int, int]]) -> int:
    """Write an iolog v2 file reading ``(file, offset, length)`` in order; returns the count."""
    commands = list(commands)
    files = list(dict.fromkeys(f for f, _, _ in commands))
    for f in files:
        if any(c.isspace() for c in f):
            raise FioError(f"iolog: fio cannot replay a path with whitespace; got {f!r}")
    lines = ["fio version 2 iolog"]
    lines += [f"{f} add" for f in files]
    lines += [f"{f} open" for f in files]
    lines += [f"{f} read {off} {length}" for f, off, length in commands]
    lines += [f"{f} close" for f in files]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return len(commands)


def _run(fio_bin: str, args: Sequence[str], timeout_s: float) -> list[FioJob]:
    cmd = [fio_bin, "--output-format=json", "--readonly", "--allow_file_create=0", *args]
    returncode, stdout, stderr = run_fio(cmd, timeout_s=timeout_s)
    if returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-1:] or [""]
        raise FioError(f"fio exited with {returncode}: {tail[0][:200]}")
    return parse_fio_json(stdout)


def seq_read_jobs(
    fio_bin: str,
    files: Sequence[str],
    *,
    ioengine: str,
    runtime_s: float = 1.5,
    request_bytes: Sequence[int] = SEQ_REQUEST_BYTES,
    iodepths: Sequence[int] = SEQ_IODEPTHS,
) -> list[FioJob]:
    """Sequential direct reads of ``files`` (one after the other) per request size and depth."""
    args = [
        f"--ioengine={ioengine}",
        "--direct=1",
        "--rw=read",
        "--file_service_type=sequential",
        f"--runtime={int(runtime_s * 1000)}ms",
        "--filename=" + ":".join(_escape(f) for f in files),
    ]
    for bs in request_bytes:
        for depth in iodepths:
            args += [
                f"--name=seq-{_size_label(bs)}-qd{depth}",
                f"--bs={bs}",
                f"--iodepth={depth}",
                "--stonewall",
            ]
    jobs = len(request_bytes) * len(iodepths)
    return _run(fio_bin, args, timeout_s=60 + jobs * (runtime_s + 10))


def replay(
    fio_bin: str,
    iologs: Sequence[Path],
    *,
    ioengine: str,
    iodepth: int = 8,
    runtime_s: float = 20,
) -> FioJob:
    """Replay ``iologs`` (one fio job each, concurrently) as fast as possible; aggregate result."""
    args = [
        "--name=replay",
        f"--ioengine={ioengine}",
        "--direct=1",
        "--replay_no_stall=1",
        f"--iodepth={iodepth}",
        f"--numjobs={len(iologs)}",
        "--group_reporting",
        f"--runtime={int(runtime_s)}",
        "--read_iolog=" + ":".join(_escape(str(p)) for p in iologs),
    ]
    jobs = _run(fio_bin, args, timeout_s=runtime_s + 60)
    if not jobs:
        raise FioError("fio replay reported no job")
    return jobs[0]


def pick_ioengine(fio_bin: str, probe_file: str) -> tuple[str, str]:
    """The first of IOENGINES that reads ``probe_file`` here, with a note on what failed."""
    failures: list[str] = []
    for engine in IOENGINES:
        try:
            _run(
                fio_bin,
                [
                    f"--name=probe-{engine}",
                    f"--ioengine={engine}",
                    "--direct=1",
                    "--rw=read",
                    "--bs=4k",
                    "--io_size=64k",
                    f"--filename={_escape(probe_file)}",
                ],
                timeout_s=30,
            )
            return engine, "; ".join(failures)
        except FioError as e:
            failures.append(f"{engine}: {e}")
    raise FioError("no fio ioengine works here: " + "; ".join(failures))
