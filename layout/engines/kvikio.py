"""The ``kvikio`` engine: ``kvikio.CuFile(path, "r").pread(...)`` into GPU (or host) memory.

KvikIO needs a CUDA driver for any file I/O, even into host memory, so availability is decided
by a real read (:func:`probe_kvikio`), never by an import. ``gds`` in the result is true only
when KvikIO is not in its compatibility mode *and* the cuFile driver reports GDS available;
otherwise the reads were POSIX reads plus bounce buffers inside KvikIO ("compat mode"), and the
note says so. kvikio (and torch, CuPy) are imported only when the engine is used.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from ..alignment import PAGE_BYTES
from ..buffers import (
    Destination,
    aligned_buffer,
    device_bytes,
    device_to_bytes,
    host_bytes,
    is_cuda,
    is_torch,
)
from ..errors import LayoutError
from ..optional import import_optional
from ..planner import ReadPlan
from .base import (
    EngineUnavailable,
    ReadResult,
    Verification,
    check_short_read,
    probe_file,
    probe_once,
    verification_note,
    verify_placements,
)


def _import_kvikio() -> Any:
    return import_optional("kvikio", "the kvikio engine", error=EngineUnavailable)


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
    ``verify``: check extents that carry a checksum when the destination is host memory. GPU
    destinations are not checked (that would need a copy back to the host, or a CRC kernel):
    the result then says ``verified=False`` and its note says so, never silently.
    Raises :class:`EngineUnavailable` if a real probe read fails.
    """

    name = "kvikio"

    def __init__(
        self, *, threads: int | None = None, task_size: int | None = None, verify: bool = True
    ) -> None:
        kvikio = _import_kvikio()
        ok, reason = probe_kvikio(None)
        if not ok:
            raise EngineUnavailable(reason)
        self._kvikio = kvikio
        self._task_size = task_size
        self.verify = bool(verify)
        # KvikIO's thread pool is process-wide: remember what it was, put it back at close().
        self._restore_threads: int | None = None
        if threads is not None:
            self._restore_threads = _kvikio_get("num_threads")
            _kvikio_set("num_threads", threads)
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

    def read(self, plan: ReadPlan, out: Destination, *, verify: bool | None = None) -> ReadResult:
        """Read ``plan`` into ``out``; check host destinations' layer checksums when ``verify``
        (``None``: the engine's ``verify``)."""
        if self._closed:
            raise LayoutError("kvikio engine: closed")
        check = self.verify if verify is None else bool(verify)
        flat = (
            device_bytes(out, plan.buffer_bytes)
            if is_cuda(out)
            else host_bytes(out, plan.buffer_bytes)
        )
        t0 = time.perf_counter()
        futures = []
        for cmd in plan.commands:
            dst = flat[cmd.buffer_offset : cmd.buffer_offset + cmd.length]
            fut = self._cufile(cmd.file).pread(dst, cmd.length, cmd.offset, self._task_size)
            futures.append((cmd, fut))
        short = [(cmd, fut.get()) for cmd, fut in futures]
        if is_cuda(out) and is_torch(out):
            import torch

            torch.cuda.synchronize(out.device)
        seconds = time.perf_counter() - t0
        for cmd, got in short:
            if got < cmd.length:
                check_short_read(plan, cmd, cmd.offset + got)
                flat[cmd.buffer_offset + got : cmd.buffer_offset + cmd.length] = 0
        where = "GPU" if is_cuda(out) else "host"
        verified, verified_bytes, verify_s = False, 0, 0.0
        if check and not is_cuda(out):
            verified, verified_bytes, verify_s = verify_placements(plan, flat)
        note = f"{self.mode_note}; into {where} memory"
        unverified = verification_note(check, verified, "GPU destination" if is_cuda(out) else "")
        if unverified:
            note += f"; {unverified}"
        return ReadResult(
            engine=self.name,
            o_direct=self.gds,
            gds=self.gds,
            commands=len(plan.commands),
            bytes_read=plan.bytes_read,
            seconds=seconds,
            note=note,
            verified=verified,
            verified_bytes=verified_bytes,
            verify_seconds=verify_s,
        )

    def verify_read(self, plan: ReadPlan, out: Destination) -> Verification:
        """Check the bytes an earlier ``read(plan, out, verify=False)`` left in host ``out``;
        GPU memory is not checked (as in ``read``) and the result says so."""
        if self._closed:
            raise LayoutError("kvikio engine: closed")
        if is_cuda(out):
            return Verification(False, 0, 0.0, verification_note(True, False, "GPU destination"))
        flat = host_bytes(out, plan.buffer_bytes)
        verified, verified_bytes, seconds = verify_placements(plan, flat)
        return Verification(verified, verified_bytes, seconds, verification_note(True, verified))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for f in self._files.values():
                with contextlib.suppress(Exception):
                    f.close()
            self._files.clear()
        if self._restore_threads is not None:
            _kvikio_set("num_threads", self._restore_threads)
            self._restore_threads = None

    def __enter__(self) -> KvikioEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kvikio_defaults() -> Any:
    # kvikio does not import its defaults submodule on `import kvikio` (26.10).
    return import_optional("kvikio.defaults", "the kvikio engine", error=EngineUnavailable)


def _kvikio_get(name: str) -> Any:
    """A KvikIO setting: ``defaults.get(name)`` (>= 25.04) or ``defaults.<name>()`` (older)."""
    defaults = _kvikio_defaults()
    if hasattr(defaults, "get"):
        return defaults.get(name)
    return getattr(defaults, name)()


def _kvikio_set(name: str, value: Any) -> None:
    """Set a KvikIO setting for the process: ``defaults.set`` (>= 25.04; two call forms) or the
    older ``defaults.<name>_reset``."""
    defaults = _kvikio_defaults()
    if hasattr(defaults, "set"):
        try:
            defaults.set(name, value)
            return
        except TypeError:
            defaults.set({name: value})
            return
    legacy = {"num_threads": "num_threads_reset", "task_size": "task_size_reset"}
    getattr(defaults, legacy[name])(value)


@probe_once("kvikio")
def probe_kvikio(directory: str | None) -> tuple[bool, str]:
    """Write a small file and read it back through ``CuFile.pread`` into GPU memory (host memory
    when neither torch CUDA nor CuPy is usable), checking the bytes."""
    try:
        kvikio = _import_kvikio()
    except EngineUnavailable as e:
        return False, str(e)
    payload = os.urandom(PAGE_BYTES)
    path = probe_file(directory, payload)
    try:
        target = "host"
        got: bytes
        dev = _probe_device_buffer(PAGE_BYTES)
        with kvikio.CuFile(path, "r") as f:
            if dev is not None:
                target = "GPU"
                n = f.pread(dev, PAGE_BYTES, 0).get()
                got = device_to_bytes(dev)
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
