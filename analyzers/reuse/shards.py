"""Sampled LRU stack distances (SHARDS, Waldspurger et al., FAST'15), with exact small capacities.

The exact stack-distance pass (:mod:`analyzers.reuse.stack`) holds one tree slot per access and one
entry per distinct block, so its memory grows with the trace. SHARDS keeps a *spatial* sample:
every access to a block whose key hashes under a threshold, so a sampled block keeps all its
accesses and the sampled LRU stack is a uniform R-sample of the real one. A sampled access at
sampled stack distance ``d'`` stands for a real distance of about ``d' / R``; an LRU cache of
``C`` blocks hits it when ``d' / R < C``, i.e. ``d' < C * R``.

**Hash.** ``splitmix64`` (Steele, Lea and Flood, OOPSLA'14; the finaliser of Java's
``SplittableRandom``) of the 64-bit block id, wrapping uint64 arithmetic::

    z = id + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    h = z ^ (z >> 31)

An access is sampled when ``h < T``; the threshold ``T`` is an integer in (0, 2**64] and the
effective rate is ``R = T / 2**64``. A rate ``r`` asks for ``T = floor(r * 2**64)`` (exact in
binary floating point); ``r = 1`` keeps everything.

**Two ways to pick T.**

* *fixed rate*: ``T`` from the rate (:func:`rate_threshold`).
* *fixed size*: keep the ``s_max`` smallest distinct hashes: scanning the stream, the threshold
  starts at 2**64 and drops to the (``s_max`` + 1)-th smallest distinct hash seen so far
  whenever more than ``s_max`` blocks are under it (:func:`fixed_size_threshold`), so the
  sample ends with exactly ``min(s_max, distinct blocks)`` blocks. The paper does this in the
  same pass as the distances, rescaling the histogram each time the threshold drops and
  removing the evicted block from the tree; here the threshold is found in a first pass (memory
  ``O(s_max)``) and the distances are then those of fixed-rate SHARDS at the final rate, which
  is what the one-pass scheme approximates, unbiased and with the same sample.

**Small capacities** are where a sample is thin: at R = 0.001 a 2,048-block cache (16 GiB of
8 MiB blocks) holds two sampled blocks. So the hit counts below ``exact_below_blocks`` = K are
computed *exactly*, by a bounded-depth LRU pass over every access that keeps only the K most
recent blocks (memory ``O(K)``, :func:`exact_head`); K defaults to the capacity at which the
sample would hold :data:`DEFAULT_MIN_SAMPLED_BLOCKS` blocks (``ceil(1024 / R)``), capped at
:data:`DEFAULT_MAX_EXACT_BLOCKS`. Capacities ``C <= K`` are then exact, and above K the curve is
the exact hits below K plus the sampled hits between ``K`` and ``C``.

**Estimator.** With ``N`` accesses in all, ``N_s`` sampled accesses and ``H_s(x)`` the sampled
re-accesses with ``d' < x``::

    lru_hit_share(C) = H_exact(min(C, K)) / N + max(H_s(C * R) - H_s(K * R), 0) / N_s

(``N_s`` rather than ``R * N`` as denominator: the ratio cancels the luck of which blocks fell
in the sample, as SHARDS' own normalisation does.) Stack-distance percentiles come from the
distribution that is exact below K and, above K, the sampled distances ``d' / R`` weighted by
``N / N_s``.

The sampled stream runs through the same numba Fenwick-tree kernel as the exact analysis
(:func:`analyzers.reuse.stack.reuse_pass`). :func:`shards_error` compares a sampled result with the
exact one; ``benchmarks/shards_error.py`` prints the measured errors (recorded in
docs/analyze.md, "Sampled stack distances (SHARDS)").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit

from fcctl.common.errors import FcctlInputError

from .stack import (
    flatten_accesses,
    percentiles_from_counts,
    percentiles_from_weighted,
    reuse_pass,
)

HASH_SPACE = 1 << 64
#: K defaults to the capacity at which the sample would hold this many blocks.
DEFAULT_MIN_SAMPLED_BLOCKS = 1024
#: The most blocks the exact small-capacity pass tracks (about 40 bytes each: 2 slots, 2 map
#: entries at load 1/2): 4 M blocks is about 160 MiB.
DEFAULT_MAX_EXACT_BLOCKS = 4 << 20
#: Sampled accesses per row handed to the stack kernel: bounds its per-chunk scratch memory.
ROW_ACCESSES = 1 << 20
#: Ids hashed per call when the input is one array (bounds the temporary hash array).
_CHUNK_IDS = 1 << 22

Method = Literal["exact", "fixed-rate", "fixed-size"]
BlockIds = np.ndarray | Callable[[], Iterable[np.ndarray]]


@njit(cache=True)
def _splitmix64(ids: np.ndarray) -> np.ndarray:  # pragma: no cover - numba
    out = np.empty(ids.shape[0], dtype=np.uint64)
    for i in range(ids.shape[0]):
        z = ids[i] + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = z ^ (z >> np.uint64(31))
    return out


def splitmix64(ids: np.ndarray | Sequence[int]) -> np.ndarray:
    """The 64-bit splitmix64 hash of every id (uint64 in, uint64 out); see the module docstring."""
    return _splitmix64(np.ascontiguousarray(ids, dtype=np.uint64))


def rate_threshold(rate: float) -> int:
    """The threshold ``T = floor(rate * 2**64)`` for a sampling rate in (0, 1].

    Raises :class:`FcctlInputError` (a ``ValueError``) for any other rate.
    """
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
        raise FcctlInputError(f"rate: must be a number with 0 < rate <= 1; got {rate!r}")
    if not 0 < rate <= 1:
        raise FcctlInputError(f"rate: must satisfy 0 < rate <= 1; got {rate!r}")
    # A float times a power of two is exact, and int() of an exact float is exact.
    return max(int(float(rate) * HASH_SPACE), 1)


def sample_mask(ids: np.ndarray, threshold: int) -> np.ndarray:
    """Boolean mask of the accesses kept at ``threshold`` (``splitmix64(id) < threshold``)."""
    if threshold >= HASH_SPACE:
        return np.ones(ids.shape[0], dtype=bool)
    return splitmix64(ids) < np.uint64(threshold)


def _chunks(ids: BlockIds) -> Iterator[np.ndarray]:
    """The id stream as uint64 chunks, whether given as one array or as a chunk factory."""
    if isinstance(ids, np.ndarray):
        flat = ids.reshape(-1)
        for start in range(0, flat.shape[0], _CHUNK_IDS):
            yield np.ascontiguousarray(flat[start : start + _CHUNK_IDS], dtype=np.uint64)
        return
    for chunk in ids():
        yield np.ascontiguousarray(chunk, dtype=np.uint64).reshape(-1)


def fixed_size_threshold(ids: BlockIds, sample_blocks: int) -> int:
    """The threshold under which exactly ``min(sample_blocks, distinct)`` block hashes fall.

    One pass that keeps the ``sample_blocks`` smallest distinct hashes seen so far (a sorted
    array, merged chunk by chunk) and lowers the threshold to the next-smallest hash each time
    more blocks than that fall under it. Memory: ``O(sample_blocks + chunk)``.
    Returns ``2**64`` (keep everything) when the stream has at most ``sample_blocks`` blocks.
    """
    if isinstance(sample_blocks, bool) or not isinstance(sample_blocks, int) or sample_blocks < 1:
        raise FcctlInputError(f"sample_blocks: must be an integer >= 1; got {sample_blocks!r}")
    kept = np.zeros(0, dtype=np.uint64)
    threshold = HASH_SPACE
    for chunk in _chunks(ids):
        h = splitmix64(chunk)
        if threshold < HASH_SPACE:
            h = h[h < np.uint64(threshold)]
        if h.shape[0] == 0:
            continue
        kept = np.union1d(kept, h)  # sorted, distinct
        if kept.shape[0] > sample_blocks:
            threshold = int(kept[sample_blocks])
            kept = kept[:sample_blocks]
    return threshold


# ---------------------------------------------------------------------------------------------
# Exact hit counts below K: an LRU stack kept only K blocks deep.


@njit(cache=True)
def _map_find(keys: np.ndarray, vals: np.ndarray, key: np.uint64) -> int:  # pragma: no cover
    """Index of ``key`` in the open-addressing table, or -1 (vals: -1 empty, -2 deleted)."""
    mask = keys.shape[0] - 1
    slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    while True:
        v = vals[slot]
        if v == -1:
            return -1
        if v >= 0 and keys[slot] == key:
            return slot
        slot = (slot + 1) & mask


@njit(cache=True)
def _map_insert(
    keys: np.ndarray, vals: np.ndarray, key: np.uint64, val: int
) -> None:  # pragma: no cover
    mask = keys.shape[0] - 1
    slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    while vals[slot] >= 0:
        slot = (slot + 1) & mask
    keys[slot] = key
    vals[slot] = val


@njit(cache=True)
def _exact_head_chunk(  # pragma: no cover - numba
    ids: np.ndarray,
    depth: int,
    slot_block: np.ndarray,
    slot_used: np.ndarray,
    tree: np.ndarray,
    keys: np.ndarray,
    vals: np.ndarray,
    state: np.ndarray,
    head_count: np.ndarray,
) -> None:
    """Feed ``ids`` through an LRU stack truncated at ``depth`` blocks.

    Each resident block holds a mark at its latest access's slot (a Fenwick tree over
    ``2 * depth`` slots); a re-access of a resident block at slot ``p`` has stack distance =
    marks after ``p`` (< depth, exact), counted in ``head_count``. A block pushed below
    ``depth`` is forgotten: its next access is a miss for every capacity <= depth, which is
    all this pass answers. When the slots run out the residents are renumbered in order and
    the tree and table rebuilt (every ``depth`` accesses at most: amortised O(1)).
    ``state`` = [next free slot, residents, lowest slot that may hold a mark, deleted entries].
    """
    n_slots = slot_block.shape[0]
    nxt = state[0]
    resident = state[1]
    low = state[2]
    deleted = state[3]
    for i in range(ids.shape[0]):
        key = ids[i]
        pos = _map_find(keys, vals, key)
        if pos >= 0:
            p = vals[pos]
            # Marks at slots p+1 .. nxt-1 = resident - prefix(p + 1).
            s = 0
            j = p + 1
            while j > 0:
                s += tree[j]
                j -= j & (-j)
            head_count[resident - s] += 1
            j = p + 1
            while j <= n_slots:
                tree[j] -= 1
                j += j & (-j)
            slot_used[p] = False
            vals[pos] = -2
            deleted += 1
            resident -= 1
        elif resident == depth:
            # Evict the least recent resident: the lowest marked slot.
            while not slot_used[low]:
                low += 1
            q = _map_find(keys, vals, slot_block[low])
            vals[q] = -2
            deleted += 1
            slot_used[low] = False
            j = low + 1
            while j <= n_slots:
                tree[j] -= 1
                j += j & (-j)
            resident -= 1
        if nxt == n_slots or deleted * 4 > keys.shape[0]:
            # Renumber residents 0..resident-1 in recency order; rebuild tree and table.
            r = 0
            for s2 in range(nxt):
                if slot_used[s2]:
                    slot_block[r] = slot_block[s2]
                    r += 1
            slot_used[:] = False
            slot_used[:r] = True
            tree[:] = 0
            for s2 in range(1, n_slots + 1):
                if s2 <= r:
                    tree[s2] += 1
                parent = s2 + (s2 & (-s2))
                if parent <= n_slots:
                    tree[parent] += tree[s2]
            vals[:] = -1
            for s2 in range(r):
                _map_insert(keys, vals, slot_block[s2], s2)
            nxt = r
            low = 0
            deleted = 0
        slot_block[nxt] = key
        slot_used[nxt] = True
        j = nxt + 1
        while j <= n_slots:
            tree[j] += 1
            j += j & (-j)
        _map_insert(keys, vals, key, nxt)
        nxt += 1
        resident += 1
    state[0] = nxt
    state[1] = resident
    state[2] = low
    state[3] = deleted


class _ExactHead:
    """Streaming state of the truncated LRU pass (see :func:`_exact_head_chunk`)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        n_slots = 2 * depth
        table = 1 << max(4, math.ceil(math.log2(4 * depth)))
        self._slot_block = np.zeros(n_slots, dtype=np.uint64)
        self._slot_used = np.zeros(n_slots, dtype=np.bool_)
        self._tree = np.zeros(n_slots + 1, dtype=np.int32)
        self._keys = np.zeros(table, dtype=np.uint64)
        self._vals = np.full(table, -1, dtype=np.int64)
        self._state = np.zeros(4, dtype=np.int64)
        self.head_count = np.zeros(depth, dtype=np.int64)

    def feed(self, ids: np.ndarray) -> None:
        _exact_head_chunk(
            ids,
            self.depth,
            self._slot_block,
            self._slot_used,
            self._tree,
            self._keys,
            self._vals,
            self._state,
            self.head_count,
        )


def exact_head(ids: BlockIds, depth: int) -> np.ndarray:
    """``head_count[d]`` = re-accesses at LRU stack distance ``d`` (exact), for ``d < depth``.

    Memory ``O(depth)`` whatever the stream's length; equal to the first ``depth`` entries of
    :attr:`analyzers.reuse.stack.ReusePass.stack_count`.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise FcctlInputError(f"exact_below_blocks: must be an integer >= 1; got {depth!r}")
    head = _ExactHead(depth)
    for chunk in _chunks(ids):
        head.feed(chunk)
    return head.head_count


# ---------------------------------------------------------------------------------------------
# The sampled result.


@dataclass(frozen=True, eq=False)
class SampledStack:
    """Stack-distance counts from a SHARDS sample, plus exact counts below ``exact_below_blocks``.

    ``stack_count[d']`` = sampled re-accesses at *sampled* stack distance ``d'`` (blocks of the
    sample; a real distance of about ``d' / rate``). ``head_count[d]`` = exact re-accesses at
    stack distance ``d < exact_below_blocks`` (empty when that is 0). ``accesses`` = all block
    accesses of the stream, ``sampled_accesses``/``sampled_blocks`` those kept and their
    distinct blocks. ``rate`` = ``threshold / 2**64``, the effective rate.
    """

    method: Method
    rate: float
    threshold: int
    accesses: int
    sampled_accesses: int
    sampled_blocks: int
    stack_count: np.ndarray
    exact_below_blocks: int
    head_count: np.ndarray
    #: The stream's distinct blocks when known exactly (the bounded analysis counts them);
    #: None: estimated as ``sampled_blocks / rate``.
    distinct_blocks: int | None = None

    def with_distinct_blocks(self, distinct_blocks: int) -> SampledStack:
        """This result with the stream's exact distinct-block count (a better estimator)."""
        return dataclasses.replace(self, distinct_blocks=int(distinct_blocks))

    @property
    def sampled_reaccesses(self) -> int:
        return self.sampled_accesses - self.sampled_blocks

    def _sampled_hits_below(self, sampled_distance: float) -> int:
        """Sampled re-accesses with ``d' < sampled_distance``."""
        top = min(max(math.ceil(sampled_distance), 0), self.stack_count.shape[0])
        return int(self.stack_count[:top].sum())

    @property
    def estimated_blocks(self) -> float:
        """Distinct blocks of the whole stream: exact when known, else ``sampled_blocks / rate``."""
        if self.distinct_blocks is not None:
            return float(self.distinct_blocks)
        return self.sampled_blocks / self.rate

    @property
    def estimated_reaccesses(self) -> float:
        """Re-accesses of the whole stream: ``accesses - estimated_blocks`` (exact for rate 1)."""
        return max(self.accesses - self.estimated_blocks, 0.0)

    def _tail(self) -> tuple[int, float]:
        """Sampled re-accesses at real distance >= K, and how many real ones each stands for.

        Every re-access at distance >= K is in the tail, so the tail holds the estimated
        re-accesses minus the exact head: the weight spreads that over the sampled tail.
        """
        k = self.exact_below_blocks
        tail_sampled = self.sampled_reaccesses - self._sampled_hits_below(k * self.rate)
        tail_real = self.estimated_reaccesses - float(self.head_count.sum())
        if tail_sampled <= 0 or tail_real <= 0:
            return max(tail_sampled, 0), 0.0
        return tail_sampled, tail_real / tail_sampled

    def lru_hits(self, capacity_blocks: int) -> float:
        """Estimated accesses (of all ``accesses``) an LRU cache of ``capacity_blocks`` hits."""
        if capacity_blocks <= 0 or self.accesses == 0:
            return 0.0
        if self.method == "exact":
            return float(self.stack_count[:capacity_blocks].sum())
        k = self.exact_below_blocks
        head = float(self.head_count[: min(capacity_blocks, k)].sum())
        if capacity_blocks <= k:
            return head
        _, weight = self._tail()
        extra = self._sampled_hits_below(capacity_blocks * self.rate) - self._sampled_hits_below(
            k * self.rate
        )
        return head + max(extra, 0) * weight

    def lru_hit_share(self, capacity_blocks: int) -> float:
        """Estimated LRU hit share (0..1 of all block accesses) at ``capacity_blocks``."""
        return self.lru_hits(capacity_blocks) / self.accesses if self.accesses else 0.0

    def hit_curve(self, capacities_blocks: Sequence[int] | np.ndarray) -> np.ndarray:
        """:meth:`lru_hit_share` at every capacity (float64 array, shares 0..1)."""
        return np.array([self.lru_hit_share(int(c)) for c in capacities_blocks], dtype=np.float64)

    def distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """The estimated stack-distance distribution: (distance in blocks, weight) arrays.

        Exact distances below K weigh their counts; a sampled distance ``d' / rate`` at or above
        K weighs its sampled count times the tail weight (float64 weights, in re-accesses).
        """
        if self.method == "exact":
            return np.arange(self.stack_count.shape[0], dtype=np.float64), self.stack_count * 1.0
        k = self.exact_below_blocks
        d = np.arange(self.stack_count.shape[0], dtype=np.float64) / self.rate
        tail = d >= k
        _, weight = self._tail()
        values = np.concatenate([np.arange(k, dtype=np.float64), d[tail]])
        weights = np.concatenate([self.head_count[:k] * 1.0, self.stack_count[tail] * weight])
        keep = weights > 0
        return values[keep], weights[keep]

    def percentiles(self, qs: Sequence[float] = (50, 90, 99)) -> list[float | None]:
        """Estimated stack-distance percentiles (blocks) over all re-accesses; None if none."""
        if self.method == "exact":
            return percentiles_from_counts(self.stack_count, qs)
        k = self.exact_below_blocks
        d = np.arange(self.stack_count.shape[0], dtype=np.float64) / self.rate
        tail = d >= k
        # Integer weights in common units: an exact re-access weighs W, a sampled one its
        # tail weight times W, so the counting-sort percentiles apply unchanged.
        _, weight = self._tail()
        scale = 1 << 20
        values = np.concatenate([np.arange(k, dtype=np.float64), d[tail]])
        counts = np.concatenate(
            [
                self.head_count[:k] * scale,
                np.round(self.stack_count[tail] * weight * scale).astype(np.int64),
            ]
        ).astype(np.int64)
        return percentiles_from_weighted(values, counts, qs)


def _sampled_stream(
    ids: BlockIds, threshold: int, head: _ExactHead | None
) -> tuple[list[np.ndarray], int]:
    """Kept ids in order (rows of at most ``ROW_ACCESSES``) and the stream's length."""
    rows: list[np.ndarray] = []
    total = 0
    for chunk in _chunks(ids):
        total += chunk.shape[0]
        if head is not None:
            head.feed(chunk)
        kept = chunk[sample_mask(chunk, threshold)] if threshold < HASH_SPACE else chunk.copy()
        for start in range(0, kept.shape[0], ROW_ACCESSES):
            rows.append(kept[start : start + ROW_ACCESSES])
    return rows, total


def stack_count_of_rows(rows: list[np.ndarray]) -> tuple[np.ndarray, int, int]:
    """Stack-distance counts of the concatenated rows via the exact kernel; (counts, n, blocks)."""
    lens = np.array([r.shape[0] for r in rows], dtype=np.int64)
    offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = np.concatenate(rows) if rows else np.zeros(0, dtype=np.uint64)
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.uint64()))
    frame = pl.DataFrame({"hash_ids": pl.from_arrow(column)})
    del column, values
    acc = flatten_accesses(frame)
    del frame
    # Each row is one pseudo-request: only stack distances are used, not times or requests.
    rp = reuse_pass(acc, np.zeros(acc.num_requests))
    return rp.stack_count, acc.num_accesses, acc.num_blocks


def sampled_stack(
    ids: BlockIds,
    *,
    rate: float | None = None,
    sample_blocks: int | None = None,
    exact_below_blocks: int | None = None,
    min_sampled_blocks: int = DEFAULT_MIN_SAMPLED_BLOCKS,
    max_exact_blocks: int = DEFAULT_MAX_EXACT_BLOCKS,
) -> SampledStack:
    """Sampled LRU stack distances of the block-id stream ``ids``.

    ``ids`` is the stream in analysis order: one uint64 array, or a function returning a fresh
    iterable of uint64 chunks each time it is called (fixed-size sampling reads the stream
    twice; a chunked stream is never held whole). Give exactly one of ``rate`` (fixed-rate
    SHARDS, 0 < rate <= 1) and ``sample_blocks`` (fixed-size SHARDS: the sample keeps that
    many distinct blocks). ``exact_below_blocks`` = K: capacities up to K blocks are counted
    exactly (0: none); by default ``ceil(min_sampled_blocks / rate)``, at most
    ``max_exact_blocks``. Rate 1 (or a fixed size at least the stream's distinct blocks) is
    the exact result (``method == "exact"``).
    """
    if (rate is None) == (sample_blocks is None):
        raise FcctlInputError(
            f"sampled_stack: give exactly one of rate and sample_blocks; got rate={rate!r}, "
            f"sample_blocks={sample_blocks!r}"
        )
    if rate is not None:
        threshold = rate_threshold(rate)
        method: Method = "fixed-rate"
    else:
        assert sample_blocks is not None
        threshold = fixed_size_threshold(ids, sample_blocks)
        method = "fixed-size"
    effective = threshold / HASH_SPACE
    if threshold >= HASH_SPACE:
        rows, _ = _sampled_stream(ids, threshold, None)
        counts, n, blocks = stack_count_of_rows(rows)
        return SampledStack("exact", 1.0, threshold, n, n, blocks, counts, 0, np.zeros(0, np.int64))
    if exact_below_blocks is None:
        exact_below_blocks = min(math.ceil(min_sampled_blocks / effective), max_exact_blocks)
    if isinstance(exact_below_blocks, bool) or not isinstance(exact_below_blocks, int):
        raise FcctlInputError(
            f"exact_below_blocks: must be an integer >= 0; got {exact_below_blocks!r}"
        )
    if exact_below_blocks < 0:
        raise FcctlInputError(
            f"exact_below_blocks: must be an integer >= 0; got {exact_below_blocks!r}"
        )
    head = _ExactHead(exact_below_blocks) if exact_below_blocks > 0 else None
    rows, total = _sampled_stream(ids, threshold, head)
    counts, n_s, blocks_s = stack_count_of_rows(rows)
    del rows
    return SampledStack(
        method=method,
        rate=effective,
        threshold=threshold,
        accesses=total,
        sampled_accesses=n_s,
        sampled_blocks=blocks_s,
        stack_count=counts,
        exact_below_blocks=exact_below_blocks,
        head_count=head.head_count if head is not None else np.zeros(0, dtype=np.int64),
    )


# ---------------------------------------------------------------------------------------------
# Error against the exact result.


@dataclass(frozen=True)
class ShardsError:
    """How far a sampled result is from the exact one.

    ``mean_abs_error_pp`` / ``max_abs_error_pp``: mean and max over the capacities of
    |sampled - exact| LRU hit share, in percentage points (0..100 scale).
    ``percentile_rel_error`` maps each percentile q to |sampled - exact| / exact of the
    stack-distance percentile (0 when both are 0; None when either is missing).
    """

    capacities_blocks: tuple[int, ...]
    exact_hit_share: tuple[float, ...]
    sampled_hit_share: tuple[float, ...]
    mean_abs_error_pp: float
    max_abs_error_pp: float
    exact_percentiles: dict[float, float | None]
    sampled_percentiles: dict[float, float | None]
    percentile_rel_error: dict[float, float | None]


def shards_error(
    exact_stack_count: np.ndarray,
    accesses: int,
    sampled: SampledStack,
    capacities_blocks: Sequence[int],
    qs: Sequence[float] = (50, 90, 99),
) -> ShardsError:
    """Compare ``sampled`` with the exact counts (``ReusePass.stack_count``) of the same stream.

    ``accesses`` is the stream's length (the denominator of the exact hit share).
    """
    if accesses != sampled.accesses:
        raise FcctlInputError(
            f"shards_error: the exact result counts {accesses} accesses, the sampled one "
            f"{sampled.accesses}; they are not the same stream"
        )
    caps = tuple(int(c) for c in capacities_blocks)
    cum = np.concatenate([[0], np.cumsum(exact_stack_count)])
    exact = tuple(float(cum[min(max(c, 0), cum.shape[0] - 1)]) / max(accesses, 1) for c in caps)
    approx = tuple(float(x) for x in sampled.hit_curve(caps))
    diffs = np.abs(np.array(exact) - np.array(approx)) * 100.0
    ex_p = dict(zip(qs, percentiles_from_counts(exact_stack_count, qs), strict=True))
    sa_p = dict(zip(qs, sampled.percentiles(qs), strict=True))
    rel: dict[float, float | None] = {}
    for q in qs:
        e, s = ex_p[q], sa_p[q]
        if e is None or s is None:
            rel[q] = None
        elif e == 0:
            rel[q] = 0.0 if s == 0 else math.inf
        else:
            rel[q] = abs(s - e) / e
    return ShardsError(
        capacities_blocks=caps,
        exact_hit_share=exact,
        sampled_hit_share=approx,
        mean_abs_error_pp=float(diffs.mean()) if caps else 0.0,
        max_abs_error_pp=float(diffs.max()) if caps else 0.0,
        exact_percentiles=ex_p,
        sampled_percentiles=sa_p,
        percentile_rel_error=rel,
    )


def block_ids(requests: pl.DataFrame) -> np.ndarray:
    """The access stream of a canonical table (``hash_ids`` flattened in row order), uint64."""
    flat = requests.get_column("hash_ids").explode(empty_as_null=False, keep_nulls=False)
    return flat.cast(pl.UInt64).to_numpy()
