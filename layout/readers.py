"""Readers: execute a :class:`~layout.planner.ReadPlan` into a buffer, engines chosen by name.

Every engine follows :class:`ReadEngine` and is registered in :data:`ENGINES`:

``posix``
    ``os.preadv`` from a thread pool (``os.preadv`` releases the GIL, so commands really run
    concurrently). Files are opened with ``O_DIRECT`` and read into 4096-aligned memory: straight
    into the destination when the command's file offset, length and destination address are all
    aligned, else through a per-thread aligned bounce buffer. Where the filesystem refuses
    ``O_DIRECT`` (tmpfs answers ``EINVAL``), the file is read buffered after
    ``posix_fadvise(DONTNEED)`` drops its cached pages, and :class:`ReadResult` says so
    (``o_direct=False`` plus a ``note``). A CUDA destination is filled through a host buffer.
``kvikio``
    ``kvikio.CuFile(path, "r").pread(...)`` into GPU (or host) memory. KvikIO needs a CUDA driver
    for any file I/O, even into host memory, so availability is decided by a real read
    (:func:`probe_engine`), never by an import. ``gds`` in the result is true only when KvikIO is
    not in its compatibility mode *and* the cuFile driver reports GDS available; otherwise the
    reads were POSIX reads plus bounce buffers inside KvikIO ("compat mode"), and the note says so.

A short read (the file ends inside a command) is an error when the missing bytes belong to a
requested extent; bytes past the end of the file that only alignment padding asked for read as
zeros.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import InputError, LayoutError
from .planner import Extent, ReadCommand, ReadPlan, plan_reads

PAGE_BYTES = 4096
DEFAULT_THREADS = 8
KVIKIO_INSTALL_HINT = "pip install kvikio-cu12, or kvikio-cu13 for CUDA 13"


class EngineUnavailable(InputError):
    """An I/O engine cannot run here (missing package, no CUDA driver); the message says why."""


@dataclass(frozen=True)
class ReadResult:
    """What one ``read`` did. ``o_direct``/``gds`` say what really ran, not what was asked.

    ``gds`` is ``None`` for engines that cannot do GDS (posix). ``seconds`` is wall time of the
    reads (cache dropping before them excluded).
    """

    engine: str
    o_direct: bool
    gds: bool | None
    commands: int
    bytes_read: int
    seconds: float
    note: str = ""

    @property
    def read_bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0


@runtime_checkable
class ReadEngine(Protocol):
    """Reads a plan into ``out`` (at least ``plan.buffer_bytes`` bytes; numpy array, memoryview,
    bytearray or torch tensor; GPU arrays where the engine supports them). Thread-safe."""

    name: str

    def read(self, plan: ReadPlan, out: Any) -> ReadResult: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- buffers


def aligned_buffer(nbytes: int, align: int = PAGE_BYTES) -> np.ndarray:
    """A zeroed ``np.uint8`` array of ``nbytes`` whose data pointer is ``align``-aligned.

    Anonymous ``mmap`` memory is page-aligned (what O_DIRECT needs) and zero-filled; the array
    keeps the mapping alive.
    """
    if nbytes < 0:
        raise LayoutError(f"aligned_buffer: nbytes must be >= 0; got {nbytes!r}")
    if align <= mmap.PAGESIZE and mmap.PAGESIZE % align == 0:
        m = mmap.mmap(-1, max(nbytes, 1))
        return np.frombuffer(m, dtype=np.uint8, count=nbytes)
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + nbytes]


def _is_aligned(value: int, align: int = PAGE_BYTES) -> bool:
    return value % align == 0


def _is_torch(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _is_cuda(obj: object) -> bool:
    if _is_torch(obj):
        return bool(obj.is_cuda)  # type: ignore[attr-defined]
    return hasattr(obj, "__cuda_array_interface__")


def _host_bytes(out: Any, need: int) -> np.ndarray:
    """A writable flat ``uint8`` numpy view of a host destination (no copy)."""
    if _is_torch(out):
        if not out.is_contiguous():
            raise LayoutError("read destination: torch tensor must be contiguous")
        arr = out.detach().reshape(-1).view(__import__("torch").uint8).numpy()
    elif isinstance(out, np.ndarray):
        if not out.flags.c_contiguous:
            raise LayoutError("read destination: numpy array must be C-contiguous")
        arr = out.reshape(-1).view(np.uint8)
    else:
        try:
            arr = np.frombuffer(out, dtype=np.uint8)
        except (TypeError, ValueError) as e:
            raise LayoutError(
                f"read destination: needs a writable buffer; got {type(out).__name__}: {e}"
            ) from None
    if not arr.flags.writeable:
        raise LayoutError("read destination: buffer is read-only")
    if arr.nbytes < need:
        raise LayoutError(
            f"read destination: must hold the plan's buffer_bytes={need}; got {arr.nbytes} bytes"
        )
    return arr


def _device_bytes(out: Any, need: int) -> Any:
    """A flat ``uint8`` view of a GPU destination (torch or CuPy), sliceable by byte offsets."""
    if _is_torch(out):
        import torch

        if not out.is_contiguous():
            raise LayoutError("read destination: torch tensor must be contiguous")
        flat = out.detach().reshape(-1).view(torch.uint8)
    else:
        import cupy

        flat = cupy.ascontiguousarray(out).reshape(-1).view(cupy.uint8)
    size = flat.numel() if _is_torch(flat) else flat.size
    if size < need:
        raise LayoutError(f"read destination: must hold the plan's buffer_bytes={need}")
    return flat


def _copy_host_to_device(dev_flat: Any, host: np.ndarray) -> None:
    if _is_torch(dev_flat):
        import torch

        dev_flat[: host.nbytes].copy_(torch.from_numpy(host))
    else:
        dev_flat[: host.nbytes].set(host)


def _check_short(plan: ReadPlan, cmd: ReadCommand, got_to: int) -> None:
    """After the file ended at ``got_to`` inside ``cmd``: fail if a requested extent needed more."""
    for extent, _ in plan.placements:
        if extent.file == cmd.file and extent.offset < cmd.end and extent.end > got_to:
            # The read stopped at ``got_to``; the file may end earlier than that (a command that
            # starts past the end reads nothing), so say how long it really is.
            try:
                size = f"is {os.stat(cmd.file).st_size} bytes long"
            except OSError:
                size = f"ends at or before byte {got_to}"
            raise LayoutError(
                f"{cmd.file}: short read: the file {size}, but requested extent "
                f"[{extent.offset}, {extent.end}) needs bytes up to {extent.end}"
            )


# --------------------------------------------------------------------------- posix


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
    """

    name = "posix"

    def __init__(
        self, *, threads: int = DEFAULT_THREADS, o_direct: bool = True, drop_cache: bool = True
    ) -> None:
        if not isinstance(threads, int) or threads < 1:
            raise LayoutError(f"posix engine: threads must be an integer >= 1; got {threads!r}")
        self.threads = threads
        self.want_direct = bool(o_direct) and hasattr(os, "O_DIRECT")
        self.drop_cache = drop_cache
        self._files: dict[str, _OpenFile] = {}
        self._retired: list[_OpenFile] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fc-posix")
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
        view = memoryview(dst)
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
                    _is_aligned(cmd.offset)
                    and _is_aligned(cmd.length)
                    and _is_aligned(dst.ctypes.data)
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
            _check_short(plan, cmd, cmd.offset + got)
            dst[got:] = 0
        return f.direct

    def read(self, plan: ReadPlan, out: Any) -> ReadResult:
        if self._closed:
            raise LayoutError("posix engine: closed")
        cuda_out = _is_cuda(out)
        if cuda_out:
            dev = _device_bytes(out, plan.buffer_bytes)
            host = self._cuda_host(plan.buffer_bytes)
        else:
            host = _host_bytes(out, plan.buffer_bytes)
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
        if cuda_out:
            _copy_host_to_device(dev, host[: plan.buffer_bytes])
        seconds = time.perf_counter() - t0
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
        return ReadResult(
            engine=self.name,
            o_direct=all_direct if plan.commands else self.want_direct,
            gds=None,
            commands=len(plan.commands),
            bytes_read=plan.bytes_read,
            seconds=seconds,
            note=note,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
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


# --------------------------------------------------------------------------- kvikio


def _import_kvikio() -> Any:
    try:
        import kvikio
    except ImportError as e:
        raise EngineUnavailable(
            f"kvikio is not installed ({e}; {KVIKIO_INSTALL_HINT})"
        ) from None
    return kvikio


def kvikio_gds_state(kvikio: Any) -> tuple[bool, str]:
    """``(gds, description)`` from KvikIO's compat-mode setting and the cuFile driver.

    Works with KvikIO >= 25.04 (``defaults.is_compat_mode_preferred``,
    ``cufile_driver.properties``) and older releases (``defaults.compat_mode()``,
    ``DriverProperties()``).
    """
    compat: bool | None = None
    try:  # a submodule that `import kvikio` does not load by itself (26.10)
        import kvikio.defaults as defaults
    except ImportError:
        defaults = getattr(kvikio, "defaults", None)
    for getter in (
        lambda: defaults.is_compat_mode_preferred(),
        lambda: str(defaults.get("compat_mode")).split(".")[-1] != "OFF",
        lambda: bool(defaults.compat_mode()),
    ):
        try:
            compat = bool(getter())
            break
        except Exception:
            continue
    driver_gds: bool | None = None
    why = ""
    try:
        import kvikio.cufile_driver as drv

        props = getattr(drv, "properties", None)
        if props is None:
            props = drv.DriverProperties()
        driver_gds = bool(props.is_gds_available)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    if compat is not False:
        return False, "KvikIO compat mode (POSIX reads + bounce buffers inside KvikIO), not GDS"
    if driver_gds:
        return True, "GDS: KvikIO compat mode off and the cuFile driver reports GDS available"
    detail = f" ({why})" if why else ""
    return (
        False,
        f"cuFile driver reports GDS unavailable{detail}; cuFile falls back to its own compat I/O",
    )


class KvikioEngine:
    """KvikIO ``CuFile.pread`` into GPU memory (torch CUDA tensor or CuPy array) or host memory.

    ``threads``/``task_size`` set KvikIO's own thread pool and task split when given.
    Raises :class:`EngineUnavailable` if a real probe read fails.
    """

    name = "kvikio"

    def __init__(self, *, threads: int | None = None, task_size: int | None = None) -> None:
        kvikio = _import_kvikio()
        ok, reason = probe_engine("kvikio")
        if not ok:
            raise EngineUnavailable(reason)
        self._kvikio = kvikio
        self._task_size = task_size
        if threads is not None:
            _kvikio_set(kvikio, "num_threads", threads)
        self.gds, self.mode_note = kvikio_gds_state(kvikio)
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _cufile(self, path: str) -> Any:
        with self._lock:
            f = self._files.get(path)
            if f is None:
                if not os.path.exists(path):
                    raise LayoutError(f"{path}: file to read not found")
                f = self._kvikio.CuFile(path, "r")
                self._files[path] = f
            return f

    def read(self, plan: ReadPlan, out: Any) -> ReadResult:
        if self._closed:
            raise LayoutError("kvikio engine: closed")
        flat = (
            _device_bytes(out, plan.buffer_bytes)
            if _is_cuda(out)
            else _host_bytes(out, plan.buffer_bytes)
        )
        t0 = time.perf_counter()
        futures = []
        for cmd in plan.commands:
            dst = flat[cmd.buffer_offset : cmd.buffer_offset + cmd.length]
            fut = self._cufile(cmd.file).pread(dst, cmd.length, cmd.offset, self._task_size)
            futures.append((cmd, fut))
        short = [(cmd, fut.get()) for cmd, fut in futures]
        if _is_cuda(out) and _is_torch(out):
            import torch

            torch.cuda.synchronize(out.device)
        seconds = time.perf_counter() - t0
        for cmd, got in short:
            if got < cmd.length:
                _check_short(plan, cmd, cmd.offset + got)
                flat[cmd.buffer_offset + got : cmd.buffer_offset + cmd.length] = 0
        where = "GPU" if _is_cuda(out) else "host"
        return ReadResult(
            engine=self.name,
            o_direct=self.gds,
            gds=self.gds,
            commands=len(plan.commands),
            bytes_read=plan.bytes_read,
            seconds=seconds,
            note=f"{self.mode_note}; into {where} memory",
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for f in self._files.values():
                with contextlib.suppress(Exception):
                    f.close()
            self._files.clear()

    def __enter__(self) -> KvikioEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kvikio_set(kvikio: Any, name: str, value: Any) -> None:
    # kvikio does not import its defaults submodule on `import kvikio` (26.10).
    import kvikio.defaults as defaults
    if hasattr(defaults, "set"):
        try:
            defaults.set(name, value)
            return
        except TypeError:
            defaults.set({name: value})
            return
    legacy = {"num_threads": "num_threads_reset", "task_size": "task_size_reset"}
    getattr(defaults, legacy[name])(value)


# --------------------------------------------------------------------------- registry

ENGINES: dict[str, Callable[..., ReadEngine]] = {"posix": PosixEngine, "kvikio": KvikioEngine}


def open_engine(name: str, **options: Any) -> ReadEngine:
    """Instantiate the engine registered as ``name`` with ``options``.

    Raises :class:`EngineUnavailable` for an unknown name or an engine that cannot run here.
    """
    try:
        factory = ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise EngineUnavailable(
            f"--engine: unknown I/O engine (known: {known}); got {name!r}"
        ) from None
    try:
        return factory(**options)
    except TypeError as e:
        raise EngineUnavailable(f"engine {name!r}: bad options {sorted(options)}: {e}") from None


_PROBE_CACHE: dict[str, tuple[bool, str]] = {}


def probe_engine(name: str, *, directory: str | None = None) -> tuple[bool, str]:
    """``(True, description)`` when engine ``name`` really reads here, else ``(False, reason)``.

    Never raises. ``posix`` always works (it reports whether O_DIRECT works in ``directory``,
    default the temp dir). ``kvikio`` writes a small file and reads it back through
    ``CuFile.pread`` into GPU memory (host memory when neither torch CUDA nor CuPy is usable),
    checking the bytes. Results are cached per process (per engine and directory).
    """
    key = f"{name}\x00{directory}"
    if key in _PROBE_CACHE:
        return _PROBE_CACHE[key]
    try:
        if name == "posix":
            result = _probe_posix(directory)
        elif name == "kvikio":
            result = _probe_kvikio(directory)
        else:
            known = ", ".join(sorted(ENGINES))
            result = (False, f"unknown I/O engine (known: {known}); got {name!r}")
    except Exception as e:  # a probe reports, it never raises
        result = (False, f"{name} probe failed: {type(e).__name__}: {e}")
    _PROBE_CACHE[key] = result
    return result


def _probe_file(directory: str | None, payload: bytes) -> str:
    fd, path = tempfile.mkstemp(prefix=".fc-probe-", dir=directory)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _probe_posix(directory: str | None) -> tuple[bool, str]:
    payload = os.urandom(2 * PAGE_BYTES)
    path = _probe_file(directory, payload)
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


def _probe_kvikio(directory: str | None) -> tuple[bool, str]:
    try:
        kvikio = _import_kvikio()
    except EngineUnavailable as e:
        return False, str(e)
    payload = os.urandom(PAGE_BYTES)
    path = _probe_file(directory, payload)
    try:
        target = "host"
        got: bytes
        dev = _probe_device_buffer(PAGE_BYTES)
        with kvikio.CuFile(path, "r") as f:
            if dev is not None:
                target = "GPU"
                n = f.pread(dev, PAGE_BYTES, 0).get()
                got = _device_to_bytes(dev)
            else:
                host = aligned_buffer(PAGE_BYTES)
                n = f.pread(host, PAGE_BYTES, 0).get()
                got = bytes(host)
        if n != PAGE_BYTES or got != payload:
            return (
                False,
                f"kvikio probe: read {n} bytes into {target} memory and they differ from the file",
            )
        _gds, mode = kvikio_gds_state(kvikio)
        return (
            True,
            f"kvikio {getattr(kvikio, '__version__', '?')} reads into {target} memory; {mode}",
        )
    except Exception as e:
        return (
            False,
            f"kvikio cannot read files here (a real CuFile.pread failed): {type(e).__name__}: {e}",
        )
    finally:
        os.unlink(path)


def _probe_device_buffer(nbytes: int) -> Any:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy.zeros(nbytes, dtype=cupy.uint8)
    except Exception:
        pass
    return None


def _device_to_bytes(dev: Any) -> bytes:
    if _is_torch(dev):
        return bytes(dev.cpu().numpy())
    return bytes(dev.get())


def read_plan(plan: ReadPlan, engine: ReadEngine | None = None) -> tuple[np.ndarray, ReadResult]:
    """Read ``plan`` into a fresh 4096-aligned host buffer (a posix engine when none is given)."""
    buf = aligned_buffer(plan.buffer_bytes)
    if engine is not None:
        return buf, engine.read(plan, buf)
    with PosixEngine() as eng:
        return buf, eng.read(plan, buf)
