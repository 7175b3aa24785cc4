"""Layer CRC-32 backends: ISA-L's (the optional ``isal`` package) and zlib's give one value."""

from __future__ import annotations

import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fcctl.layout.checksum import crc32, crc32_backend, crc32_many, crc32_parallel

DATA = np.random.default_rng(7).integers(0, 256, 9 * 2**20 + 123, dtype=np.uint8)


def test_every_path_gives_zlibs_crc32() -> None:
    want = zlib.crc32(DATA)
    assert crc32(DATA) == want
    assert crc32(DATA[:1000], 12345) == zlib.crc32(DATA[:1000], 12345)
    with ThreadPoolExecutor(2) as pool:
        assert crc32_parallel(DATA, map_fn=pool.map, piece_bytes=2**20) == want
        parts = [DATA[:5], DATA[5 : 3 * 2**20], DATA[3 * 2**20 :]]
        assert crc32_many(parts, map_fn=pool.map, piece_bytes=2**20) == [
            zlib.crc32(p) for p in parts
        ]


def test_isal_is_used_when_installed() -> None:
    pytest.importorskip("isal")
    assert crc32_backend() == "isal"


def test_zlib_fallback_without_isal() -> None:
    # The core needs only numpy: without isal the same values come from zlib in pieces.
    probe = (
        "import sys, zlib\n"
        "sys.modules['isal'] = None  # import isal now fails\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from fcctl.layout.checksum import crc32_backend, crc32_parallel\n"
        "data = bytes(range(256)) * 40000\n"
        "with ThreadPoolExecutor(2) as p:\n"
        "    assert crc32_parallel(data, map_fn=p.map, piece_bytes=65536) == zlib.crc32(data)\n"
        "print(crc32_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "zlib"
