"""Reading the dataset's parts on the Dask workers: every part read and checked by a task
(pass 0, :func:`map_files`), and a part's block ids read by row range (:class:`Piece`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fcctl.common.errors import FcctlInputError

from ...traces.dataset import Dataset
from .cluster import short_message

if TYPE_CHECKING:
    from distributed import Client, Future


def map_files(client: Client) -> Callable[..., Iterable[Any]]:
    """``open_dataset``'s ``map_files``: one task per file on the workers, results in order.

    The first failed read (in file order) raises its own error, as the reads one after
    another would; the other tasks are cancelled then (and on Ctrl-C). Each result is
    released on the worker once it is here.
    """

    def map_each(read: Callable[[Path], Any], files: Sequence[Path]) -> Iterator[Any]:
        futures: list[Future[Any] | None] = [*client.map(read, list(files), pure=False)]
        try:
            for i in range(len(futures)):
                f, futures[i] = futures[i], None
                assert f is not None  # each slot is emptied once, in order
                yield f.result()
                del f
        finally:
            client.cancel([f for f in futures if f is not None])

    return map_each


@dataclass(frozen=True)
class Piece:
    """Rows ``start:stop`` of one part, holding ``accesses`` block accesses: one explode task."""

    part: int  # index into Dataset.parts
    start: int
    stop: int
    accesses: int


def plan_pieces(dataset: Dataset, max_accesses: int) -> list[Piece]:
    """Every part cut into row ranges of at most ``max_accesses`` accesses (or one row).

    The block counts come from the request table (``n_blocks`` at each row's analysis
    position), so the cut needs no read of the block ids.
    """
    n_blocks = dataset.requests["n_blocks"].to_numpy().astype(np.int64)
    pieces: list[Piece] = []
    for i, part in enumerate(dataset.parts):
        ends = np.cumsum(n_blocks[part.rank])
        start = 0
        while start < part.rows:
            base = int(ends[start - 1]) if start else 0
            stop = int(np.searchsorted(ends, base + max_accesses, side="right"))
            stop = min(max(stop, start + 1), part.rows)
            pieces.append(Piece(i, start, stop, int(ends[stop - 1]) - base))
            start = stop
    return pieces


def piece_blocks(
    path: Path, rows: int, start: int, stop: int, accesses: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of a part: (block count per row, block ids), checked.

    The file is read in batches from its first row and stops after ``stop``: only a batch's
    ids are decoded at a time, whatever the part's size.
    """
    changed = (
        f"{path}: differs from when the dataset was opened (rows {start:,} to {stop:,} should "
        f"hold {accesses:,} block accesses of {rows:,} rows): it changed during the analysis"
    )
    try:
        f = pq.ParquetFile(path)
    except OSError as e:
        raise FcctlInputError(
            f"{path}: cannot be read ({short_message(e)}) during the analysis"
        ) from None
    with f:
        if f.metadata.num_rows != rows:
            raise FcctlInputError(changed)
        batch = max(1, (stop - start + 3) // 4)
        lens: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        row = 0
        for b in f.iter_batches(batch_size=batch, columns=["hash_ids"]):
            lo, hi = max(start - row, 0), min(stop - row, b.num_rows)
            row += b.num_rows
            if hi <= lo:
                if row >= stop:
                    break
                continue
            column = b.column(0).slice(lo, hi - lo)
            lens.append(pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64))
            ids.append(
                column.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
            )
            del column, b
            if row >= stop:
                break
    lens_all = np.concatenate(lens) if lens else np.zeros(0, dtype=np.int64)
    del lens
    ids_all = np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint64)
    del ids
    if lens_all.shape[0] != stop - start or ids_all.shape[0] != accesses:
        raise FcctlInputError(changed)
    return lens_all, ids_all
