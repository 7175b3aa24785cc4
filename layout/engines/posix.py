"""The ``posix`` engine: ``os.preadv`` from a thread pool, O_DIRECT where the filesystem allows.

``os.preadv`` releases the GIL, so commands really run concurrently. Files are opened with
``O_DIRECT`` and read into 4096-aligned memory: straight into the destination when the command's
file offset, length and destination address are all aligned, else through a per-thread aligned
bounce buffer. Where the filesystem refuses ``O_DIRECT`` (tmpfs answers ``EINVAL``), the file is
read buffered after ``posix_fadvise(DONTNEED)`` drops its cached pages, and :class:`ReadResult`
says so (``o_direct=False`` plus a ``note``). A CUDA destination is filled through a host buffer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..alignment import PAGE_BYTES
from ..buffers import (
    Destination,
    aligned_buffer,
    copy_host_to_device,
    device_bytes,
    host_bytes,
    is_aligned,
    is_cuda,
)
from ..errors import LayoutError
from ..planner import Extent, ReadCommand, ReadPlan, plan_reads
from .base import (
    MapFn,
    ReadResult,
    Verification,
    check_short_read,
    probe_file,
    probe_once,
    verification_note,
    verify_placements,
)

DEFAULT_THREADS = 8


def drop_file_cache(path: str | os.PathLike[str]) -> None:
    """fsync ``path`` and evict its pages from the page cache (``posix_fadvise(DONTNEED)``).

    Dirty pages cannot be evicted, hence the fsync first. No privileges needed.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # fsync of a read-only fd fails on some systems
            os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class _OpenFile:
    __slots__ = ("direct", "fd", "ident", "note")

    def __init__(self, fd: int, direct: bool, note: str) -> None:
        self.fd = fd
        self.direct = direct
        self.note = note
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)


class PosixEngine:
    """``os.preadv`` with O_DIRECT (buffered + cache drop where refused) over a thread pool.

    ``threads``: commands in flight at once (shared by concurrent ``read`` calls).
    ``o_direct``: try O_DIRECT (default); False reads buffered.
    ``drop_cache``: for files read buffered, drop their cached pages before each ``read`` so the
    reads are cold.
    ``verify``: check every extent that carries a checksum (session files' layer ranges) after
    reading it, on the host, before a GPU destination gets the bytes; a mismatch raises
    :class:`VerificationError`. On by default; ``False`` is for callers that check elsewhere.
    ``read(..., verify=...)`` overrides it for one call; :meth:`verify_read` checks a host
    destination later (see :class:`~.base.DeferredVerifyEngine`).
    ``checksum_threads``: the CRC pieces' own pool (default ``min(threads, CPUs)``; 1 runs them
    on the calling thread). Not the read pool: a check queued there would hold up other reads'
    commands behind CPU work while the disk idles.
    """

    name = "posix"

    def __init__(
        self,
        *,
        threads: int = DEFAULT_THREADS,
        o_direct: bool = True,
        drop_cache: bool = True,
        verify: bool = True,
        checksum_threads: int | None = None,
    ) -> None:
        if not isinstance(threads, int) or threads < 1:
            raise LayoutError(f"posix engine: threads must be an integer >= 1; got {threads!r}")
        if checksum_threads is None:
            checksum_threads = min(threads, os.cpu_count() or 1)
        if not isinstance(checksum_threads, int) or checksum_threads < 1:
            raise LayoutError(
                f"posix engine: checksum_threads must be an integer >= 1; got {checksum_threads!r}"
            )
        self.threads = threads
        self.checksum_threads = checksum_threads
        self.want_direct = bool(o_direct) and hasattr(os, "O_DIRECT")
        self.drop_cache = drop_cache
        self.verify = bool(verify)
        self._files: dict[str, _OpenFile] = {}
        self._retired: list[_OpenFile] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fc-posix")
        self._crc_pool = (
            ThreadPoolExecutor(max_workers=checksum_threads, thread_name_prefix="fc-posix-crc")
            if checksum_threads > 1
            else None
        )
        self._closed = False

    # -- files
    def _open(self, path: str, *, check: bool = False) -> _OpenFile:
        """The cached descriptor for ``path``; with ``check``, reopen it if the path now names
        another file (a benchmark that deletes and rewrites its files must not read stale data)."""
        with self._lock:
            f = self._files.get(path)
            if f is not None and check:
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    raise LayoutError(f"{path}: file to read not found") from None
                if (st.st_dev, st.st_ino) != f.ident:
                    self._retired.append(f)  # another thread may still be reading it
                    f = None
            if f is not None:
                return f
            f = self._open_new(path)
            self._files[path] = f
            return f

    def _open_new(self, path: str) -> _OpenFile:
        note = ""
        if self.want_direct:
            try:
                return _OpenFile(os.open(path, os.O_RDONLY | os.O_DIRECT), True, "")
            except FileNotFoundError:
                raise LayoutError(f"{path}: file to read not found") from None
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                note = f"O_DIRECT refused by the filesystem of {path} (EINVAL)"
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise LayoutError(f"{path}: file to read not found") from None
        return _OpenFile(fd, False, note)

    def _demote(self, path: str, f: _OpenFile) -> _OpenFile:
        """O_DIRECT open worked but a read gave EINVAL: reopen this file buffered."""
        with self._lock:
            cur = self._files.get(path)
            if cur is not f:  # another thread already demoted it
                return cur  # type: ignore[return-value]
            fd = os.open(path, os.O_RDONLY)
            if self.drop_cache:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            nf = _OpenFile(fd, False, f"O_DIRECT read refused by the filesystem of {path} (EINVAL)")
            self._files[path] = nf
            self._retired.append(f)  # may still be in use by another thread; closed at close()
            return nf

    def _bounce(self, nbytes: int) -> np.ndarray:
        buf = getattr(self._local, "bounce", None)
        if buf is None or buf.nbytes < nbytes:
            buf = aligned_buffer(max(nbytes, 1 << 20))
            self._local.bounce = buf
        return buf[:nbytes]

    def _cuda_host(self, nbytes: int) -> np.ndarray:
        """Per-thread host buffer for reads bound for the GPU: pinned (page-locked, so the
        host-to-device copy is a direct DMA) when torch can pin, page-aligned either way."""
        buf = getattr(self._local, "cuda_host", None)
        if buf is None or buf.nbytes < nbytes:
            buf = None
            try:
                import torch

                pinned = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
                arr = pinned.numpy()
                if arr.ctypes.data % PAGE_BYTES == 0:
                    self._local.cuda_host_tensor = pinned  # keeps the pinned memory alive
                    buf = arr
            except (ImportError, RuntimeError):
                pass
            if buf is None:
                buf = aligned_buffer(max(nbytes, 1 << 20))
            self._local.cuda_host = buf
        return buf[:nbytes]

    # -- reads
    def _pread_into(self, fd: int, dst: np.ndarray, offset: int) -> int:
        """Read into ``dst`` until full or EOF; returns the bytes read."""
        view = dst.data
        done = 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n == 0:
                break
            done += n
        return done

    def _run(self, plan: ReadPlan, cmd: ReadCommand, host: np.ndarray) -> bool:
        """Execute one command; returns whether it ran O_DIRECT."""
        f = self._open(cmd.file)
        dst = host[cmd.buffer_offset : cmd.buffer_offset + cmd.length]
        for _attempt in range(2):
            try:
                if not f.direct:
                    got = self._pread_into(f.fd, dst, cmd.offset)
                elif (
                    is_aligned(cmd.offset)
                    and is_aligned(cmd.length)
                    and is_aligned(dst.ctypes.data)
                ):
                    got = self._pread_into(f.fd, dst, cmd.offset)
                else:
                    start = cmd.offset - cmd.offset % PAGE_BYTES
                    end = cmd.end + (-cmd.end % PAGE_BYTES)
                    bounce = self._bounce(end - start)
                    n = self._pread_into(f.fd, bounce, start)
                    got = max(0, min(cmd.length, n - (cmd.offset - start)))
                    dst[:got] = bounce[cmd.offset - start : cmd.offset - start + got]
                break
            except OSError as e:
                if e.errno == errno.EINVAL and f.direct:
                    f = self._demote(cmd.file, f)
                    continue
                raise
        if got < cmd.length:
            check_short_read(plan, cmd, cmd.offset + got)
            dst[got:] = 0
        return f.direct

    def read(self, plan: ReadPlan, out: Destination, *, verify: bool | None = None) -> ReadResult:
        """Read ``plan`` into ``out``; check its layer checksums when ``verify`` (``None``: the
        engine's ``verify``) before returning, and before a GPU destination gets the bytes."""
        if self._closed:
            raise LayoutError("posix engine: closed")
        check = self.verify if verify is None else bool(verify)
        cuda_out = is_cuda(out)
        if cuda_out:
            dev = device_bytes(out, plan.buffer_bytes)
            host = self._cuda_host(plan.buffer_bytes)
        else:
            host = host_bytes(out, plan.buffer_bytes)
        files = [self._open(p, check=True) for p in plan.files]
        if self.drop_cache:
            for f in files:
                if not f.direct:
                    os.posix_fadvise(f.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0 = time.perf_counter()
        if len(plan.commands) <= 1 or self.threads == 1:
            direct = [self._run(plan, c, host) for c in plan.commands]
        else:
            direct = list(self._pool.map(lambda c: self._run(plan, c, host), plan.commands))
        seconds = time.perf_counter() - t0
        verified, verified_bytes, verify_s = False, 0, 0.0
        if check:
            # Before the GPU copy: damaged bytes must not reach the KV cache.
            verified, verified_bytes, verify_s = verify_placements(plan, host, self._map())
        if cuda_out:
            c0 = time.perf_counter()
            copy_host_to_device(dev, host[: plan.buffer_bytes])
            seconds += time.perf_counter() - c0
        all_direct = bool(direct) and all(direct)
        notes = sorted({self._files[p].note for p in plan.files if self._files[p].note})
        note = "; ".join(notes)
        if notes:
            note += "; used buffered reads" + (
                " after posix_fadvise(DONTNEED)" if self.drop_cache else ""
            )
        elif not self.want_direct:
            note = "buffered reads (O_DIRECT off)" + (
                " after posix_fadvise(DONTNEED)" if self.drop_cache else ""
            )
        if cuda_out:
            note = (note + "; " if note else "") + "copied to the GPU through a host buffer"
        unverified = verification_note(check, verified)
        if unverified:
            note = (note + "; " if note else "") + unverified
        return ReadResult(
            engine=self.name,
            o_direct=all_direct if plan.commands else self.want_direct,
            gds=None,
            commands=len(plan.commands),
            bytes_read=plan.bytes_read,
            seconds=seconds,
            note=note,
            verified=verified,
            verified_bytes=verified_bytes,
            verify_seconds=verify_s,
        )

    def _map(self) -> MapFn | None:
        return self._crc_pool.map if self._crc_pool is not None else None

    def verify_read(self, plan: ReadPlan, out: Destination) -> Verification:
        """Check the bytes an earlier ``read(plan, out, verify=False)`` left in host ``out``
        against the plan's layer checksums, CRC pieces on the engine's checksum pool (so it
        may run while the next read is in flight). Raises :class:`VerificationError` at a mismatch.

        A GPU ``out`` got its bytes through a per-thread host buffer that later reads reuse:
        it cannot be checked afterwards (read it with ``verify=True``), and says so.
        """
        if self._closed:
            raise LayoutError("posix engine: closed")
        if is_cuda(out):
            why = "GPU destination: posix checks it only inside read"
            return Verification(False, 0, 0.0, verification_note(True, False, why))
        host = host_bytes(out, plan.buffer_bytes)
        verified, verified_bytes, seconds = verify_placements(plan, host, self._map())
        return Verification(verified, verified_bytes, seconds, verification_note(True, verified))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        if self._crc_pool is not None:
            self._crc_pool.shutdown(wait=True)
        with self._lock:
            for f in [*self._files.values(), *self._retired]:
                with contextlib.suppress(OSError):
                    os.close(f.fd)
            self._files.clear()
            self._retired.clear()

    def __enter__(self) -> PosixEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@probe_once("posix")
def probe_posix(directory: str | None) -> tuple[bool, str]:
    """Read a fresh file back through a one-thread engine; says whether O_DIRECT worked."""
    payload = os.urandom(2 * PAGE_BYTES)
    path = probe_file(directory, payload)
    try:
        with PosixEngine(threads=1) as eng:
            plan = plan_reads([Extent(path, 0, len(payload))], align=PAGE_BYTES)
            buf = aligned_buffer(plan.buffer_bytes)
            res = eng.read(plan, buf)
        if bytes(buf[: len(payload)]) != payload:
            return False, "posix probe: bytes read back differ from bytes written"
        where = os.path.dirname(path)
        return True, (f"O_DIRECT works in {where}" if res.o_direct else f"{res.note} (in {where})")
    finally:
        os.unlink(path)
