"""Layer checksums: the standard CRC-32 (zlib's), computed in parallel pieces when asked.

The session format stores one CRC-32 per layer range (``docs/layout.md``). One core runs zlib's
CRC-32 at about 1-2.5 GB/s, less than a fast SSD reads, so a verified restore would be
CPU-bound on one thread. CRC-32 is not splittable by itself, but the CRC of a concatenation
follows from the CRCs of its parts and the second part's length (zlib's ``crc32_combine``,
which Python's ``zlib`` does not expose; it is a few dozen GF(2) multiplications, written out
below). So a large range is checksummed as pieces on a thread pool (``zlib.crc32`` releases the
GIL for buffers over 5 KiB) and combined: the result is bit for bit the plain CRC-32, and the
file format stays the one every other reader already implements.

Where the optional ``isal`` package (Intel ISA-L's zlib-compatible bindings) is installed, its
CRC-32 gives the same values several times faster (about 11 GB/s on one core here, against
1.6 GB/s for zlib): one call on the whole range, no pieces, since it keeps the GIL. It is
imported lazily, at the first checksum, so the core still needs only numpy; without it zlib's
CRC-32 runs in pieces as above. ``fcctl`` installs it; an emitted package may go without.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_CRC32: tuple[Callable[..., int], bool] | None = None


def _crc32_impl() -> tuple[Callable[..., int], bool]:
    """The CRC-32 function and whether to split large buffers into pieces for threads."""
    global _CRC32
    if _CRC32 is None:
        try:
            from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]

            _CRC32 = (isal_zlib.crc32, False)
        except ImportError:
            _CRC32 = (zlib.crc32, True)
    return _CRC32


def crc32_backend() -> str:
    """``"isal"`` or ``"zlib"``: which CRC-32 this process uses (both give the same values)."""
    return "zlib" if _crc32_impl()[1] else "isal"


def crc32(data: Any, value: int = 0) -> int:
    """The standard CRC-32 of ``data`` (continuing from ``value``), by the fastest backend."""
    return _crc32_impl()[0](data, value)


# Reflected CRC-32 polynomial (IEEE 802.3), as zlib uses it.
_POLY = 0xEDB88320
# Pieces smaller than this are not worth a thread hand-off (measured: the per-task overhead of a
# ThreadPoolExecutor is tens of microseconds, 4 MiB takes about 2 ms).
DEFAULT_PIECE_BYTES = 4 * 2**20


def _multmodp(a: int, b: int) -> int:
    """``a(x) * b(x) mod p(x)`` in the reflected bit order CRC-32 uses (zlib's multmodp)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> tuple[int, ...]:
    # x^(2^k) mod p(x) for k = 0..31; x^1 is 1 << 30 in reflected order.
    p = 1 << 30
    table = [p]
    for _ in range(31):
        p = _multmodp(p, p)
        table.append(p)
    return tuple(table)


_X2N = _x2n_table()


def _x8nmodp(n: int) -> int:
    """``x^(8 n) mod p(x)``: the operator that appends ``n`` zero bytes."""
    k = 3
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of ``A + B`` from ``crc1 = crc32(A)``, ``crc2 = crc32(B)`` and ``len2 = len(B)``."""
    if len2 <= 0:
        return crc1
    return _multmodp(_x8nmodp(len2), crc1) ^ crc2


def crc32_parallel(
    data: Any,
    *,
    map_fn: Callable[[Callable[[Any], int], Iterable[Any]], Iterable[int]] | None = None,
    piece_bytes: int = DEFAULT_PIECE_BYTES,
) -> int:
    """``zlib.crc32(data)``, computed as pieces of ``piece_bytes`` through ``map_fn``.

    ``data`` is any C-contiguous buffer (numpy array, memoryview, bytes). ``map_fn`` is a
    ``map``-like callable, e.g. ``ThreadPoolExecutor.map``; without one (or for data of at most
    one piece) this is a single ``zlib.crc32`` call.
    """
    view = memoryview(data).cast("B")
    n = view.nbytes
    fn, split = _crc32_impl()
    if map_fn is None or n <= piece_bytes or not split:
        return fn(view)
    pieces: Sequence[memoryview] = [view[i : i + piece_bytes] for i in range(0, n, piece_bytes)]
    crcs = list(map_fn(fn, pieces))
    crc = crcs[0]
    for piece, part in zip(pieces[1:], crcs[1:], strict=True):
        crc = crc32_combine(crc, part, piece.nbytes)
    return crc


def crc32_many(
    buffers: Sequence[Any],
    *,
    map_fn: Callable[[Callable[[Any], int], Iterable[Any]], Iterable[int]] | None = None,
    piece_bytes: int = DEFAULT_PIECE_BYTES,
) -> list[int]:
    """``[zlib.crc32(b) for b in buffers]``, with the pieces of all buffers in one ``map_fn`` batch.

    :func:`crc32_parallel` spreads one large buffer; a layer of a session file is several ranges
    of often under one piece (one per turn), which only run side by side when handed over
    together. Without ``map_fn`` (or for a single piece in all) each is one ``zlib.crc32`` call.
    """
    views = [memoryview(b).cast("B") for b in buffers]
    fn, split = _crc32_impl()
    if not split:
        return [fn(v) for v in views]
    cuts = [[v[i : i + piece_bytes] for i in range(0, v.nbytes, piece_bytes)] or [v] for v in views]
    pieces = [piece for c in cuts for piece in c]
    if map_fn is None or len(pieces) <= 1:
        crcs = [fn(piece) for piece in pieces]
    else:
        crcs = list(map_fn(fn, pieces))
    out: list[int] = []
    at = 0
    for c in cuts:
        crc = crcs[at]
        for piece, part in zip(c[1:], crcs[at + 1 : at + len(c)], strict=True):
            crc = crc32_combine(crc, part, piece.nbytes)
        out.append(crc)
        at += len(c)
    return out
