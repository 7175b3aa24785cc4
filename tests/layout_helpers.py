"""Small builders shared by the layout tests: real session files with known bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fcctl.layout.geometry import KvGeometry
from fcctl.layout.session_file import SessionFile

# 4 layers, 2 KV heads, head dim 16, bf16: 128 bytes per token per layer; 4-token pages of 512 B.
SMALL = KvGeometry("test-small", layers=4, kv_heads=2, head_dim=16)
SMALL_BLOCK_TOKENS = 4
# A geometry whose page is a whole 4096-byte unit at one layer (16 tokens x 256 B).
PAGED = KvGeometry("test-paged", layers=6, kv_heads=1, head_dim=64)
PAGED_BLOCK_TOKENS = 16


def turn_bytes(seed: int, layers: int, layer_bytes: int) -> np.ndarray:
    """Deterministic random bytes for one turn, shape (layers, layer_bytes)."""
    return np.random.default_rng(seed).integers(0, 256, (layers, layer_bytes), dtype=np.uint8)


def write_session(
    path: Path,
    turns: list[int],
    *,
    geometry: KvGeometry = SMALL,
    block_tokens: int = SMALL_BLOCK_TOKENS,
    extent_bytes: int = 1 << 20,
    seed: int = 0,
) -> list[np.ndarray]:
    """Write a session of ``turns`` (token counts); return each turn's (layers, layer_bytes)."""
    written = []
    with SessionFile.create(
        path, geometry, block_tokens=block_tokens, extent_bytes=extent_bytes
    ) as s:
        for i, tokens in enumerate(turns):
            data = turn_bytes(seed + i, geometry.layers, s.layer_bytes_for(tokens))
            s.append_turn(tokens, data)
            written.append(data)
    return written


def blocks_by_layer(written: list[np.ndarray], page_bytes: int) -> np.ndarray:
    """All turns' blocks in session order: shape (layers, blocks, page_bytes)."""
    layers = written[0].shape[0]
    return np.concatenate([w.reshape(layers, -1, page_bytes) for w in written], axis=1)
