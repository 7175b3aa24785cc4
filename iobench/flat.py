"""The flat layout: each session as one FC-CIO session file (``layout.session_file``).

Turns are appended in the workload's arrival order, so files grow the way a serving engine
would grow them. Each file is pre-allocated to exactly the bytes its turns take (the extent size
is the whole file), so no pre-allocated but unwritten space is left for fio to read as zeros.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fcctl.layout.alignment import align_up
from fcctl.layout.session_file import SessionFile
from fcctl.layout.session_format import DATA_START, file_bytes, fit_name

from .pattern import fill_pieces, piece_keys
from .workload import IoWorkload


def session_file_bytes(workload: IoWorkload, session: int) -> int:
    """Bytes the session's file takes on disk: headers, then per turn a record and padded layers."""
    turn_blocks = workload.sessions[session].turn_blocks
    return file_bytes(workload.geometry, workload.block_tokens, turn_blocks)


def flat_bytes_needed(workload: IoWorkload) -> int:
    return sum(session_file_bytes(workload, s) for s in range(len(workload.sessions)))


@dataclass(frozen=True)
class FlatLayout:
    directory: Path
    session_files: tuple[Path, ...]
    bytes_written: int


# Session files open for appending at once. Turns arrive interleaved, so without a bound every
# session's file (a descriptor and a scratch buffer of one turn's layer) stays open until the
# last round: a workload of many sessions would run out of descriptors and memory.
MAX_OPEN_WRITERS = 64


def write_flat_layout(
    workload: IoWorkload,
    directory: Path,
    *,
    on_bytes: Callable[[int], None] | None = None,
    max_open: int = MAX_OPEN_WRITERS,
) -> FlatLayout:
    """Write every session's file under ``directory``; block content from ``iobench.pattern``.

    At most ``max_open`` files are open at once (least recently appended closed first, and
    reopened for the session's next turn), so memory and descriptors stay bounded.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"session-{s.index:05d}.fcc" for s in workload.sessions]
    open_files: OrderedDict[int, SessionFile] = OrderedDict()
    created = [False] * len(paths)
    next_block = [0] * len(paths)
    written = 0

    def writer(s: int) -> SessionFile:
        f = open_files.pop(s, None)
        if f is None:
            while len(open_files) >= max(1, max_open):
                open_files.popitem(last=False)[1].close()
            if created[s]:
                f = SessionFile.open(paths[s], writable=True)
            else:
                size = align_up(session_file_bytes(workload, s))
                f = SessionFile.create(
                    paths[s],
                    workload.geometry,
                    block_tokens=workload.block_tokens,
                    # The header holds a bounded session id; longer ids are cut.
                    session_id=fit_name(workload.sessions[s].session_id),
                    reserve_bytes=size - DATA_START,
                    extent_bytes=size,
                )
                created[s] = True
        open_files[s] = f  # most recently used last
        return f

    try:
        for s, turn in workload.arrivals:
            f = writer(s)
            blocks = workload.sessions[s].turn_blocks[turn]
            first = next_block[s]
            block_ids = np.arange(first, first + blocks, dtype=np.uint64)

            def fill(
                layer: int, view: memoryview, _s: int = s, _ids: np.ndarray = block_ids
            ) -> None:
                fill_pieces(view, piece_keys(_s, _ids, layer), workload.piece_bytes)

            f.append_turn(blocks * workload.block_tokens, fill)
            next_block[s] += blocks
            written += blocks * workload.block_bytes
            if on_bytes is not None:
                on_bytes(blocks * workload.block_bytes)
    finally:
        for f in open_files.values():
            f.close()
    return FlatLayout(directory, tuple(paths), written)
