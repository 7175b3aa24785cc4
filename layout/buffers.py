"""Read destinations: page-aligned host buffers, and flat byte views of numpy, buffer-protocol,
torch and CuPy destinations.

torch and CuPy are imported only when a destination is one of theirs.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from .alignment import PAGE_BYTES
from .errors import LayoutError
from .optional import import_optional

# What an engine reads into: a numpy array, a writable buffer (bytearray, memoryview), or a
# torch tensor / CuPy array (host or GPU). torch and CuPy are optional, so their types cannot
# be named here.
Destination = Any


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


def is_aligned(value: int, align: int = PAGE_BYTES) -> bool:
    return value % align == 0


def is_torch(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def is_cuda(obj: Destination) -> bool:
    """True for a destination in GPU memory (a CUDA torch tensor or a CUDA array interface)."""
    if is_torch(obj):
        return bool(obj.is_cuda)
    return hasattr(obj, "__cuda_array_interface__")


def host_bytes(out: Destination, need: int) -> np.ndarray:
    """A writable flat ``uint8`` numpy view of a host destination (no copy)."""
    arr: np.ndarray
    if is_torch(out):
        if not out.is_contiguous():
            raise LayoutError("read destination: torch tensor must be contiguous")
        torch = import_optional("torch", "a torch destination")
        arr = out.detach().reshape(-1).view(torch.uint8).numpy()
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


def device_bytes(out: Destination, need: int) -> Any:
    """A flat ``uint8`` view of a GPU destination (torch or CuPy), sliceable by byte offsets."""
    if is_torch(out):
        torch = import_optional("torch", "a torch destination")
        if not out.is_contiguous():
            raise LayoutError("read destination: torch tensor must be contiguous")
        flat = out.detach().reshape(-1).view(torch.uint8)
        size = int(flat.numel())
    else:
        cupy = import_optional("cupy", "a CUDA array destination")
        flat = cupy.ascontiguousarray(out).reshape(-1).view(cupy.uint8)
        size = int(flat.size)
    if size < need:
        raise LayoutError(f"read destination: must hold the plan's buffer_bytes={need}")
    return flat


def copy_host_to_device(dev_flat: Any, host: np.ndarray) -> None:
    if is_torch(dev_flat):
        torch = import_optional("torch", "a torch destination")
        dev_flat[: host.nbytes].copy_(torch.from_numpy(host))
    else:
        dev_flat[: host.nbytes].set(host)


def device_to_bytes(dev: Any) -> bytes:
    if is_torch(dev):
        return bytes(dev.cpu().numpy())
    return bytes(dev.get())
