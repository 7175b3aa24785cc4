"""The 64-bit block address: where a KV block lives, baked into one integer.

Bit layout (most significant first)::

    63..60  medium   4 bits   0 = host memory, 1 = local SSD, 2..15 reserved
    59..48  node    12 bits   node number, 0..4095
    47..0   offset  48 bits   byte offset inside the medium (0 .. 256 TiB - 1)

A block never moves once written, so its address never changes and needs no table of moves;
the medium bits pick the transport (memcpy for memory, a file read for SSD). Addresses are
unsigned: ``0 <= addr < 2**64``; the vectorised forms use ``np.uint64``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeGuard

import numpy as np

from .errors import LayoutError

MEDIUM_MEMORY = 0
MEDIUM_SSD = 1
KNOWN_MEDIA: dict[int, str] = {MEDIUM_MEMORY: "memory", MEDIUM_SSD: "ssd"}

MEDIUM_BITS = 4
NODE_BITS = 12
OFFSET_BITS = 48
MEDIUM_SHIFT = NODE_BITS + OFFSET_BITS  # 60
NODE_SHIFT = OFFSET_BITS  # 48
MAX_MEDIUM = (1 << MEDIUM_BITS) - 1
MAX_NODE = (1 << NODE_BITS) - 1
MAX_OFFSET = (1 << OFFSET_BITS) - 1
ADDRESS_LIMIT = 1 << 64


class BlockAddress(NamedTuple):
    medium: int
    node: int
    offset: int


def _is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_field(name: str, value: object, upper: int) -> int:
    if not _is_int(value):
        raise LayoutError(f"block address: field {name!r} must be an integer; got {value!r}")
    v = int(value)
    if not 0 <= v <= upper:
        raise LayoutError(
            f"block address: field {name!r} must satisfy 0 <= {name} <= {upper}; got {v!r}"
        )
    return v


def _check_medium(medium: object, allow_reserved: bool) -> int:
    m = _check_field("medium", medium, MAX_MEDIUM)
    if m not in KNOWN_MEDIA and not allow_reserved:
        raise LayoutError(
            f"block address: field 'medium' must be {MEDIUM_MEMORY} (memory) or {MEDIUM_SSD} "
            "(ssd); "
            f"2..{MAX_MEDIUM} are reserved (pass allow_reserved=True to encode them); got {m!r}"
        )
    return m


def encode_address(medium: int, node: int, offset: int, *, allow_reserved: bool = False) -> int:
    """Pack (medium, node, byte offset) into one 64-bit address (a Python int in [0, 2**64))."""
    m = _check_medium(medium, allow_reserved)
    n = _check_field("node", node, MAX_NODE)
    o = _check_field("offset", offset, MAX_OFFSET)
    return (m << MEDIUM_SHIFT) | (n << NODE_SHIFT) | o


def decode_address(addr: int) -> BlockAddress:
    """Unpack a 64-bit address. Reserved media decode as they are (the caller decides)."""
    if not _is_int(addr):
        raise LayoutError(f"block address: must be an integer; got {addr!r}")
    a = int(addr)
    if not 0 <= a < ADDRESS_LIMIT:
        raise LayoutError(f"block address: must satisfy 0 <= addr < 2**64; got {a!r}")
    return BlockAddress(a >> MEDIUM_SHIFT, (a >> NODE_SHIFT) & MAX_NODE, a & MAX_OFFSET)


def _as_field_array(name: str, values: object, upper: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise LayoutError(
            f"block address: field {name!r} must be an integer array; got dtype {arr.dtype}"
        )
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > upper:
            bad = lo if lo < 0 else hi
            raise LayoutError(
                f"block address: field {name!r} must satisfy 0 <= {name} <= {upper}; got {bad!r}"
            )
    return arr.astype(np.uint64)


def encode_addresses(
    medium: int | np.ndarray,
    node: int | np.ndarray,
    offsets: np.ndarray,
    *,
    allow_reserved: bool = False,
) -> np.ndarray:
    """Vectorised :func:`encode_address`; scalars broadcast. Returns ``np.uint64`` addresses."""
    m = _as_field_array("medium", medium, MAX_MEDIUM)
    if not allow_reserved and m.size and not np.isin(m, list(KNOWN_MEDIA)).all():
        bad = int(m[~np.isin(m, list(KNOWN_MEDIA))].flat[0])
        _check_medium(bad, allow_reserved=False)
    n = _as_field_array("node", node, MAX_NODE)
    o = _as_field_array("offset", offsets, MAX_OFFSET)
    out = (m << np.uint64(MEDIUM_SHIFT)) | (n << np.uint64(NODE_SHIFT)) | o
    return np.asarray(out, dtype=np.uint64)


def decode_addresses(addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`decode_address`: ``(medium, node, offsets)`` as ``np.uint64`` arrays.

    Accepts unsigned arrays, or signed arrays whose values are all >= 0.
    """
    arr = np.asarray(addrs)
    if arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            raise LayoutError(
                f"block address: must satisfy 0 <= addr < 2**64; got {int(arr.min())!r}"
            )
    elif arr.dtype.kind != "u":
        raise LayoutError(f"block address: must be an integer array; got dtype {arr.dtype}")
    a = arr.astype(np.uint64)
    medium = a >> np.uint64(MEDIUM_SHIFT)
    node = (a >> np.uint64(NODE_SHIFT)) & np.uint64(MAX_NODE)
    offsets = a & np.uint64(MAX_OFFSET)
    return medium, node, offsets
