from __future__ import annotations

import numpy as np
import pytest

from fcctl.common.errors import FcctlInputError
from fcctl.iobench.pattern import check_piece_bytes, fill_pieces, mismatched_pieces, piece_keys

PIECE = 4096


def _filled(keys: np.ndarray) -> np.ndarray:
    buf = np.zeros(keys.size * PIECE, dtype=np.uint8)
    fill_pieces(buf, keys, PIECE)
    return buf


def test_round_trip_has_no_mismatch_and_keys_differ():
    keys = piece_keys(3, np.arange(8, dtype=np.uint64), 2)
    assert len(set(keys.tolist())) == 8
    buf = _filled(keys)
    assert mismatched_pieces(buf, keys, PIECE).size == 0
    # Content depends on session, block and layer.
    assert piece_keys(3, 1, 2) != piece_keys(4, 1, 2)
    assert piece_keys(3, 1, 2) != piece_keys(3, 1, 3)
    assert piece_keys(3, 1, 2) == keys[1]


@pytest.mark.parametrize("byte", [0, 7, PIECE - 1, 3 * PIECE + 100])
def test_one_flipped_byte_is_caught_in_its_piece(byte):
    keys = piece_keys(0, np.arange(5, dtype=np.uint64), 0)
    buf = _filled(keys)
    buf[byte] ^= 0x01
    assert mismatched_pieces(buf, keys, PIECE).tolist() == [byte // PIECE]


def test_piece_at_the_wrong_place_is_caught():
    keys = piece_keys(1, np.arange(4, dtype=np.uint64), 0)
    buf = _filled(keys)
    swapped = buf.copy()
    swapped[:PIECE], swapped[PIECE : 2 * PIECE] = buf[PIECE : 2 * PIECE], buf[:PIECE]
    assert mismatched_pieces(swapped, keys, PIECE).tolist() == [0, 1]
    # Another layer's identical-looking piece (same session and block) is still wrong.
    other = _filled(piece_keys(1, np.arange(4, dtype=np.uint64), 1))
    assert mismatched_pieces(other, keys, PIECE).size == 4


def test_a_shift_by_one_word_is_caught():
    keys = piece_keys(0, np.arange(2, dtype=np.uint64), 0)
    buf = _filled(keys)
    shifted = np.concatenate([buf[8:], np.zeros(8, dtype=np.uint8)])
    assert mismatched_pieces(shifted, keys, PIECE).size == 2


def test_piece_size_must_be_whole_words():
    with pytest.raises(FcctlInputError, match="multiple of 8"):
        check_piece_bytes(4100)
