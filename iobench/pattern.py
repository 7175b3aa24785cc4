"""Deterministic KV block content, so both layouts hold identical bytes and every read is checked.

A *piece* is one block's bytes at one layer (``geometry.bytes_per_block_per_layer``): the unit
both layouts store and a layer-wise restore reads. Each piece is a run of 64-bit words::

    word[i] = piece_key(session, block, layer) XOR word_salt[i]

``piece_key`` is a splitmix64 chain over (seed, session, block, layer); ``word_salt[i]`` is
splitmix64 of the word index. So a flipped byte changes one word, a piece read from the wrong
place carries another key (every word differs), and a piece shifted by whole words lands on the
wrong salts. Generating and checking are a few vectorized numpy passes, fast enough that every
byte of every restore run is verified (outside the timed region; see ``iobench.restore``).
"""

from __future__ import annotations

import numpy as np

from fcctl.common.errors import FcctlInputError

WORD_BYTES = 8
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
DEFAULT_SEED = 0x466C617443616B65  # "FlatCake"
# Pieces verified per numpy call: bounds the temporaries to a few MiB whatever the piece size.
_CHUNK_WORDS = 1 << 19


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer over a uint64 array (wrapping arithmetic, a new array)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def piece_keys(
    session: np.ndarray | np.integer | int,
    blocks: np.ndarray | np.integer | int,
    layers: np.ndarray | np.integer | int,
    *,
    seed: int = DEFAULT_SEED,
) -> np.ndarray:
    """64-bit keys of pieces ``(session, block, layer)``; the three arguments broadcast."""
    with np.errstate(over="ignore"):
        s = splitmix64(np.uint64(seed) ^ np.asarray(session, dtype=np.uint64))
        b = splitmix64(s ^ np.asarray(blocks, dtype=np.uint64))
        return splitmix64(b ^ np.asarray(layers, dtype=np.uint64))


_salt_cache: dict[int, np.ndarray] = {}


def word_salt(words: int) -> np.ndarray:
    """``splitmix64(i)`` for the word indices of one piece (cached per piece size)."""
    salt = _salt_cache.get(words)
    if salt is None:
        with np.errstate(over="ignore"):
            salt = splitmix64(np.arange(words, dtype=np.uint64))
        salt.setflags(write=False)
        _salt_cache[words] = salt
    return salt


def check_piece_bytes(piece_bytes: int) -> int:
    """Words per piece; the piece must be a whole number of 64-bit words."""
    if piece_bytes <= 0 or piece_bytes % WORD_BYTES:
        raise FcctlInputError(
            f"geometry: bytes per block per layer must be a positive multiple of {WORD_BYTES} "
            f"for the verification pattern; got {piece_bytes!r}"
        )
    return piece_bytes // WORD_BYTES


def _as_words(buf: np.ndarray | memoryview, pieces: int, words: int) -> np.ndarray:
    arr = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, memoryview) else buf
    arr = arr.reshape(-1)
    need = pieces * words * WORD_BYTES
    if arr.nbytes < need:
        raise ValueError(f"buffer holds {arr.nbytes} bytes; {pieces} pieces need {need}")
    return arr[:need].view(np.uint64).reshape(pieces, words)


def fill_pieces(buf: np.ndarray | memoryview, keys: np.ndarray, piece_bytes: int) -> None:
    """Write the pattern of pieces ``keys`` (in order) into the start of ``buf``."""
    words = check_piece_bytes(piece_bytes)
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    view = _as_words(buf, keys.size, words)
    np.bitwise_xor(keys[:, None], word_salt(words)[None, :], out=view)


def mismatched_pieces(
    buf: np.ndarray | memoryview, keys: np.ndarray, piece_bytes: int
) -> np.ndarray:
    """Indices (into ``keys``) of the pieces whose bytes in ``buf`` differ from the pattern."""
    words = check_piece_bytes(piece_bytes)
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    view = _as_words(buf, keys.size, words)
    salt = word_salt(words)
    step = max(1, _CHUNK_WORDS // words)
    bad: list[np.ndarray] = []
    for start in range(0, keys.size, step):
        rows = view[start : start + step]
        # XOR with the salt leaves each row filled with its key when the bytes are right.
        ok = ((rows ^ salt[None, :]) == keys[start : start + step, None]).all(axis=1)
        if not ok.all():
            bad.append(start + np.flatnonzero(~ok))
    return np.concatenate(bad) if bad else np.empty(0, dtype=np.int64)
