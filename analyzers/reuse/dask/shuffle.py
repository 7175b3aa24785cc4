"""The Dask engine's block passes: each piece exploded into shuffle rows and its SHARDS sample,
the P2P block shuffle, each partition's exact kernel, the exact head on one worker, and the
gathered sample's stack distances (:func:`dask_passes`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
from numba import njit

from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress

from ...traces.dataset import Dataset
from ..bounded import (
    BlockTotals,
    BoundedPasses,
    MemoryPlan,
    seconds_values_limit,
)
from ..shards import (
    HASH_SPACE,
    ROW_ACCESSES,
    SampledStack,
    exact_head,
    rate_threshold,
    splitmix64,
    stack_count_of_rows,
)
from .failures import Stage
from .parts import piece_blocks, plan_pieces
from .room import ShufflePlan

if TYPE_CHECKING:
    from distributed import Client, Future

#: ``position = rank * 2**POSITION_BITS + pos``: an access's place in the analysis order as
#: one int64 (requests < 2**32, a request's blocks < 2**31), sorted as the pair would be.
POSITION_BITS = 31


@njit(cache=True)
def _positions(rank: np.ndarray, lens: np.ndarray, total: int) -> np.ndarray:  # pragma: no cover
    """Every access's ``position`` (:data:`POSITION_BITS`), one row of ``lens`` after another."""
    out = np.empty(total, dtype=np.int64)
    i = 0
    for r in range(lens.shape[0]):
        base = rank[r] << POSITION_BITS
        for j in range(lens[r]):
            out[i] = base | j
            i += 1
    return out


def _partition_dtype(partitions: int) -> np.dtype:
    """The dtype of partition numbers: Dask's own for its P2P shuffle's partition column."""
    return np.min_scalar_type(-partitions - 1)


def _rows_meta(partitions: int) -> Any:
    """The shuffle rows' (empty) frame: index ``position`` int64; ``block``, ``partition``."""
    import pandas as pd

    return pd.DataFrame(
        {
            "block": np.zeros(0, np.uint64),
            "partition": np.zeros(0, _partition_dtype(partitions)),
        },
        index=pd.Index(np.zeros(0, np.int64), name="position"),
    )


def _shuffle_rows(rows: Any, partitions: int) -> Any:
    """``rows`` shuffled by P2P so that partition ``p`` holds the rows whose ``partition`` is p.

    The shuffle is Dask's P2P ``Shuffle`` on the partition numbers as they are (the public
    ``DataFrame.shuffle`` hashes the column first, a third of the shuffle's time for nothing);
    the ``partition`` column is dropped on the way, so the rows land as (position, block).
    """
    try:
        from dask.dataframe.dask_expr._collection import new_collection
        from dask.dataframe.dask_expr._shuffle import Shuffle
    except ImportError:  # pragma: no cover - another dask: its public shuffle, by hash
        shuffled = rows.shuffle(on="partition", npartitions=partitions, shuffle_method="p2p")
        return shuffled.drop(columns="partition")
    return new_collection(Shuffle(rows.expr, "partition", partitions, False, "p2p", None))


def _explode_piece(
    path: str,
    rows: int,
    start: int,
    stop: int,
    rank: np.ndarray,
    accesses: int,
    partitions: int,
    threshold: int,
) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    """One piece's accesses as shuffle rows, and its SHARDS sample (module docstring).

    Rows: index ``position`` (int64), ``block`` (uint64), ``partition`` (``splitmix64(block)
    mod P``, int8 or int16): 17 or 18 bytes an access, and the index is what the P2P shuffle
    carries anyway. The sample: the kept accesses' (position, block id). ``rank``: the rows'
    analysis positions (a task argument, so a lost worker's input is in the graph and the task
    can run again elsewhere).
    """
    import pandas as pd

    lens, ids = piece_blocks(Path(path), rows, start, stop, accesses)
    if rank.shape[0] and (int(rank[-1]) >> 32 or int(lens.max()) >> POSITION_BITS):
        raise FcctlInputError(
            f"{path}: a request at analysis position {int(rank[-1]):,} or one of "
            f"{int(lens.max()):,} blocks is past what the Dask engine encodes (2^32 requests, "
            f"2^{POSITION_BITS} blocks a request); use the local `engine`"
        )
    position = _positions(np.ascontiguousarray(rank, dtype=np.int64), lens, ids.shape[0])
    del lens
    h = splitmix64(ids)
    kept = h < np.uint64(threshold)
    sample = (position[kept], ids[kept])
    del kept
    h %= np.uint64(partitions)
    partition = h.astype(_partition_dtype(partitions))
    del h
    frame = pd.DataFrame(
        {"block": ids, "partition": partition},
        index=pd.Index(position, name="position", copy=False),
        copy=False,
    )
    return frame, sample


def _partition_totals(
    rows: Any,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    num_requests: int,
    num_sessions: int,
    max_seconds_values: int,
) -> BlockTotals:
    """The exact block totals of one shuffle partition (whole blocks), in analysis order."""
    position = rows.index.to_numpy(dtype=np.int64)
    # The rows arrive as runs already in order (one per piece and shuffle shard): timsort.
    order = np.argsort(position, kind="stable")
    ids = rows["block"].to_numpy(dtype=np.uint64)[order]
    del order
    lens = np.bincount(position >> POSITION_BITS, minlength=num_requests).astype(np.int64)
    del rows, position
    totals = BlockTotals(num_requests, num_sessions, max_seconds_values=max_seconds_values)
    totals.add_bucket(ids, lens, timestamp_s, session)
    return totals


def _head_pass(dataset: Dataset, depth: int) -> np.ndarray:
    """The exact head (:func:`~fcctl.analyzers.reuse.shards.exact_head`) over the ordered stream."""
    return exact_head(lambda: (ids for _, ids in dataset.iter_blocks()), depth)


def dask_passes(client: Client, shuffle: ShufflePlan, stage: Stage) -> BoundedPasses:
    """The bounded analysis's passes (:data:`bounded.BoundedPasses`) on the cluster."""

    def passes(
        dataset: Dataset,
        plan: MemoryPlan,
        timestamp_s: np.ndarray,
        session: np.ndarray | None,
        n_sessions: int,
        progress: Progress,
    ) -> tuple[SampledStack, BlockTotals]:
        from distributed import as_completed

        assert plan.sample_rate is not None
        threshold = rate_threshold(plan.sample_rate)
        limit = seconds_values_limit(plan.budget_bytes)
        n_req = dataset.num_requests
        totals = BlockTotals(n_req, n_sessions, max_seconds_values=limit)
        samples: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        head_count = np.zeros(0, dtype=np.int64)
        # Each future is dropped once its result is here, so that the worker frees it.
        pending: dict[Any, Future] = {}
        role: dict[Any, tuple[str, int]] = {}
        try:
            stage.name = "the block shuffle"
            if plan.exact_below_blocks > 0:
                # The parts' ranks travel in the task; the request table stays here.
                light = dataclasses.replace(dataset, requests=dataset.requests.clear())
                head = client.submit(_head_pass, light, plan.exact_below_blocks, pure=False)
                pending[head.key], role[head.key] = head, ("head", 0)
                del light
            partial, sampled = _graph(
                dataset, plan, shuffle, threshold, timestamp_s, session, n_sessions, limit
            )
            # One graph: each piece is read once, for both the shuffle and the sample.
            computed = client.compute(partial + sampled)
            for i, f in enumerate(computed):
                pending[f.key] = f
                role[f.key] = ("totals", i) if i < len(partial) else ("sample", i)
            del computed, partial, sampled
            label = (
                f"Dask: {plan.block_passes} block partitions, SHARDS sample at "
                f"{plan.sample_rate:g}" + (", exact head" if plan.exact_below_blocks else "")
            )
            with progress.task(label, len(pending)) as task:
                done = 0
                for f in as_completed(list(pending.values()), loop=client.loop):
                    kind, i = role[f.key]
                    stage.task = f.key
                    value = f.result()
                    del pending[f.key], f
                    if kind == "head":
                        head_count = value
                    elif kind == "totals":
                        totals.add_totals(value)
                    else:
                        samples[i] = value
                    del value
                    done += 1
                    task.update(done)
        finally:
            client.cancel(list(pending.values()))
            pending.clear()
        stage.name, stage.task = "the SHARDS sample (here)", None
        sampled_stack = _sample_stack(
            samples,
            threshold=threshold,
            accesses=dataset.block_accesses,
            exact_below_blocks=plan.exact_below_blocks,
            head_count=head_count,
        )
        return sampled_stack, totals

    return passes


def _graph(
    dataset: Dataset,
    plan: MemoryPlan,
    shuffle: ShufflePlan,
    threshold: int,
    timestamp_s: np.ndarray,
    session: np.ndarray | None,
    n_sessions: int,
    max_seconds_values: int,
) -> tuple[list[Any], list[Any]]:
    """The Dask graph: (per shuffle partition, its block totals; per piece, its sample).

    Nothing is scattered: the per-request arrays are one node of the graph and each piece's
    analysis positions are its task's argument, so the scheduler can run any task again on
    another worker (up to ``distributed.scheduler.allowed-failures`` times) when one dies.
    """
    import dask.dataframe as dd

    partitions = plan.block_passes
    parts = dataset.parts
    exploded = [
        dask.delayed(_explode_piece, nout=2, pure=False)(
            str(parts[p.part].path),
            parts[p.part].rows,
            p.start,
            p.stop,
            parts[p.part].rank[p.start : p.stop].copy(),
            p.accesses,
            partitions,
            threshold,
        )
        for p in plan_pieces(dataset, shuffle.piece_accesses)
    ]
    rows = dd.from_delayed([e[0] for e in exploded], meta=_rows_meta(partitions), verify_meta=False)
    shuffled = _shuffle_rows(rows, partitions)
    shared = dask.delayed(timestamp_s, name=f"timestamps-{dask.base.tokenize(timestamp_s)}")
    sessions = (
        None
        if session is None
        else dask.delayed(session, name=f"sessions-{dask.base.tokenize(session)}")
    )
    partial = [
        dask.delayed(_partition_totals, pure=False)(
            part, shared, sessions, dataset.num_requests, n_sessions, max_seconds_values
        )
        for part in shuffled.to_delayed()
    ]
    return partial, [e[1] for e in exploded]


def _sample_stack(
    pieces: dict[int, tuple[np.ndarray, np.ndarray]],
    *,
    threshold: int,
    accesses: int,
    exact_below_blocks: int,
    head_count: np.ndarray,
) -> SampledStack:
    """The SHARDS result of the gathered sample: sorted to analysis order, the exact kernel.

    ``pieces`` is emptied as it is read (the gathered sample is not held twice).
    """
    total = sum(p[0].shape[0] for p in pieces.values())
    position = np.empty(total, dtype=np.int64)
    ids = np.empty(total, dtype=np.uint64)
    at = 0
    for k in sorted(pieces):
        pos, kept = pieces.pop(k)
        position[at : at + pos.shape[0]] = pos
        ids[at : at + pos.shape[0]] = kept
        at += pos.shape[0]
        del pos, kept
    order = np.argsort(position, kind="stable")
    del position
    ids = ids[order]
    del order
    # The sampled stream's stack distances, by the exact kernel of ``sampled_stack`` at rate 1
    # (fed views of the sorted ids: that call would copy them first).
    rows = [ids[s : s + ROW_ACCESSES] for s in range(0, ids.shape[0], ROW_ACCESSES)]
    del ids
    stack_count, sampled_accesses, sampled_blocks = stack_count_of_rows(rows)
    del rows
    return SampledStack(
        method="fixed-rate",
        rate=threshold / HASH_SPACE,
        threshold=threshold,
        accesses=accesses,
        sampled_accesses=sampled_accesses,
        sampled_blocks=sampled_blocks,
        stack_count=stack_count,
        exact_below_blocks=exact_below_blocks,
        head_count=head_count,
    )
