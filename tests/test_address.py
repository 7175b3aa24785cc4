"""Block address codec: round trips, boundaries, and errors that name the field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fcctl.layout.address import (
    MAX_NODE,
    MAX_OFFSET,
    MEDIUM_MEMORY,
    MEDIUM_SSD,
    BlockAddress,
    decode_address,
    decode_addresses,
    encode_address,
    encode_addresses,
)
from fcctl.layout.errors import InputError, LayoutError

media = st.sampled_from([MEDIUM_MEMORY, MEDIUM_SSD])
nodes = st.integers(0, MAX_NODE)
offsets = st.integers(0, MAX_OFFSET)


@given(media, nodes, offsets)
def test_round_trip(medium: int, node: int, offset: int) -> None:
    addr = encode_address(medium, node, offset)
    assert 0 <= addr < 2**64
    assert decode_address(addr) == BlockAddress(medium, node, offset)


@given(st.integers(0, 15), nodes, offsets)
def test_round_trip_reserved_media_when_allowed(medium: int, node: int, offset: int) -> None:
    assert decode_address(encode_address(medium, node, offset, allow_reserved=True)) == (
        medium,
        node,
        offset,
    )


@given(st.integers(0, 2**64 - 1))
def test_decode_then_encode_is_identity(addr: int) -> None:
    m, n, o = decode_address(addr)
    assert encode_address(m, n, o, allow_reserved=True) == addr


def test_bit_positions() -> None:
    assert encode_address(MEDIUM_SSD, 0, 0) == 1 << 60
    assert encode_address(MEDIUM_MEMORY, 1, 0) == 1 << 48
    assert encode_address(MEDIUM_MEMORY, MAX_NODE, 0) == 0xFFF << 48
    assert encode_address(MEDIUM_MEMORY, 0, MAX_OFFSET) == 2**48 - 1
    assert encode_address(15, MAX_NODE, MAX_OFFSET, allow_reserved=True) == 2**64 - 1
    assert decode_address(2**64 - 1) == (15, 4095, 2**48 - 1)
    assert decode_address(0) == (0, 0, 0)
    # Fields do not bleed into each other at their maxima.
    assert decode_address(encode_address(1, MAX_NODE, 0)) == (1, MAX_NODE, 0)
    assert decode_address(encode_address(0, 0, MAX_OFFSET)).node == 0


@pytest.mark.parametrize(
    ("args", "field", "got"),
    [
        ((2, 0, 0), "medium", "got 2"),
        ((16, 0, 0), "medium", "got 16"),
        ((-1, 0, 0), "medium", "got -1"),
        ((1, 4096, 0), "node", "got 4096"),
        ((1, -1, 0), "node", "got -1"),
        ((1, 0, 2**48), "offset", f"got {2**48}"),
        ((1, 0, -5), "offset", "got -5"),
    ],
)
def test_out_of_range_fields_are_named(args: tuple[int, int, int], field: str, got: str) -> None:
    with pytest.raises(LayoutError) as info:
        encode_address(*args)
    msg = str(info.value)
    assert f"'{field}'" in msg and got in msg
    assert isinstance(info.value, InputError) and isinstance(info.value, ValueError)


def test_reserved_medium_message_says_how_to_allow() -> None:
    with pytest.raises(LayoutError, match="allow_reserved"):
        encode_address(7, 0, 0)
    with pytest.raises(LayoutError, match="medium"):
        encode_address(16, 0, 0, allow_reserved=True)


@pytest.mark.parametrize("bad", [1.0, "1", True, None])
def test_non_integers_rejected(bad: object) -> None:
    with pytest.raises(LayoutError, match="integer"):
        encode_address(MEDIUM_SSD, 0, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("addr", [-1, 2**64, 2**70])
def test_decode_range(addr: int) -> None:
    with pytest.raises(LayoutError, match=r"2\*\*64"):
        decode_address(addr)


def test_numpy_integers_accepted() -> None:
    assert (
        encode_address(np.int64(1), np.uint16(3), np.uint64(4096)) == (1 << 60) | (3 << 48) | 4096
    )


@given(
    hnp.arrays(np.uint64, st.integers(0, 50), elements=st.integers(0, MAX_OFFSET)),
    st.integers(0, MAX_NODE),
    media,
)
def test_vectorised_matches_scalar(offs: np.ndarray, node: int, medium: int) -> None:
    addrs = encode_addresses(medium, node, offs)
    assert addrs.dtype == np.uint64
    assert [int(a) for a in addrs] == [encode_address(medium, node, int(o)) for o in offs]
    m, n, o = decode_addresses(addrs)
    assert (m == medium).all() and (n == node).all() and (o == offs).all()


def test_vectorised_per_element_fields_and_errors() -> None:
    med = np.array([0, 1, 1])
    nod = np.array([0, 4095, 7])
    off = np.array([0, 2**48 - 1, 12288], dtype=np.int64)
    addrs = encode_addresses(med, nod, off)
    assert [decode_address(int(a)) for a in addrs] == [
        (0, 0, 0),
        (1, 4095, 2**48 - 1),
        (1, 7, 12288),
    ]
    with pytest.raises(LayoutError, match=r"'offset'.*got -1"):
        encode_addresses(1, 0, np.array([0, -1]))
    with pytest.raises(LayoutError, match=r"'node'.*got 4096"):
        encode_addresses(1, np.array([4096]), np.array([0]))
    with pytest.raises(LayoutError, match=r"'medium'.*got 3"):
        encode_addresses(np.array([1, 3]), 0, np.array([0, 0]))
    assert int(encode_addresses(np.array([3]), 0, np.array([0]), allow_reserved=True)[0]) == 3 << 60
    with pytest.raises(LayoutError, match="integer array"):
        encode_addresses(1, 0, np.array([0.5]))
    with pytest.raises(LayoutError, match=r"2\*\*64"):
        decode_addresses(np.array([-1], dtype=np.int64))
