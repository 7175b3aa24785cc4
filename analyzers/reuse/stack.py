"""Block accesses and the one-pass LRU stack-distance kernel.

Every reuse metric comes from one walk over the *access stream*: the trace's requests in
analysis order, each request's ``hash_ids`` in prompt order. For the access at position ``i``
of block ``b`` whose previous access was at position ``p``:

* **stack distance** = the number of distinct *other* blocks accessed at positions ``p+1 ..
  i-1``. An LRU cache of ``C`` blocks hits this access exactly when the distance is ``< C``
  (the block sits at depth ``distance`` of the LRU stack). First accesses have no distance
  (an infinite one: every finite cache misses them).
* **reuse distance in requests** = request index at ``i`` minus request index at ``p``.
* **reuse distance in seconds** = timestamp of ``i``'s request minus that of ``p``'s.

The stack distance is computed with a Fenwick (binary indexed) tree over access positions
holding a 1 at each block's *latest* access: the distance is the number of ones after ``p``,
i.e. ``distinct blocks so far - prefix_sum(p)``. That is O(log N) per access, one pass, and
the same pass yields every capacity's LRU hit count (see :mod:`analyzers.reuse.memory_tier`).
:func:`reference_stack_distances` is the plain LRU-list version the fast path is tested
against.

Histogram buckets are powers of two (documented in :data:`LOG2_BUCKETS_DOC`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit

# Seconds histogram: bucket 0 is [0, 2**SECONDS_MIN_EXP); bucket k >= 1 is
# [2**(SECONDS_MIN_EXP + k - 1), 2**(SECONDS_MIN_EXP + k)). 2**-10 s is about 1 ms, below any
# real inter-request gap, and 64 buckets reach far past any trace's length.
SECONDS_MIN_EXP = -10
SECONDS_BUCKETS = 64
# Integer histograms (stack distance in blocks, distance in requests): bucket 0 is [0, 1);
# bucket k >= 1 is [2**(k-1), 2**k). 64 buckets cover any int64.
INT_BUCKETS = 64
LOG2_BUCKETS_DOC = (
    "log2 buckets: integer distances (blocks, requests): [0,1), [1,2), [2,4), [4,8), ...; "
    f"seconds: [0, 2^{SECONDS_MIN_EXP}), [2^{SECONDS_MIN_EXP}, 2^{SECONDS_MIN_EXP + 1}), ... "
    "Each bucket is [bucket_lo, bucket_hi)."
)

#: Accesses processed per kernel call (``reuse_pass(chunk_accesses=)``): small enough for a live
#: progress bar, large enough that the call overhead is nil. Any value gives the same figures.
DEFAULT_CHUNK_ACCESSES = 4_000_000


@dataclass(frozen=True, eq=False)
class Accesses:
    """The access stream of a trace, with block ids remapped to dense ints.

    ``block[i]`` is the dense id (0..``num_blocks``-1, in order of first access) of access
    ``i``; the accesses of request ``r`` are ``block[request_offsets[r]:request_offsets[r+1]]``.
    """

    block: np.ndarray  # int32, one per access
    request_offsets: np.ndarray  # int64, num_requests + 1
    num_blocks: int

    @property
    def num_accesses(self) -> int:
        return int(self.block.shape[0])

    @property
    def num_requests(self) -> int:
        return int(self.request_offsets.shape[0]) - 1

    def request_of_access(self) -> np.ndarray:
        """Request index of every access (int32); allocates one int per access."""
        lens = np.diff(self.request_offsets)
        return np.repeat(np.arange(self.num_requests, dtype=np.int32), lens)


@njit(cache=True)
def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:  # pragma: no cover - numba
    """Map u64 ids to dense int32 ids in order of first appearance.

    An open-addressing hash table (load <= 1/2, doubling) does the mapping. Requests re-read
    earlier prefixes in the same order, so before hashing we try the id that followed the
    previous one last time (``succ``): a compare instead of a random probe for most accesses.
    """
    n = ids.shape[0]
    cap = 1 << 16
    bits = 16
    keys = np.empty(cap, dtype=np.uint64)
    vals = np.full(cap, -1, dtype=np.int32)
    key_of = np.empty(cap, dtype=np.uint64)
    succ = np.full(cap, -1, dtype=np.int32)
    out = np.empty(n, dtype=np.int32)
    mult = np.uint64(0x9E3779B97F4A7C15)
    shift = np.uint64(64 - bits)
    count = 0
    prev = -1
    for i in range(n):
        key = ids[i]
        if prev >= 0:
            g = succ[prev]
            if g >= 0 and key_of[g] == key:
                out[i] = g
                prev = g
                continue
        slot = np.int64((key * mult) >> shift)
        mask = cap - 1
        while True:
            v = vals[slot]
            if v < 0:
                keys[slot] = key
                vals[slot] = count
                key_of[count] = key
                v = count
                count += 1
                break
            if keys[slot] == key:
                break
            slot = (slot + 1) & mask
        out[i] = v
        if prev >= 0:
            succ[prev] = v
        prev = v
        if count * 2 > cap:
            bits += 1
            new_cap = cap << 1
            shift = np.uint64(64 - bits)
            new_keys = np.empty(new_cap, dtype=np.uint64)
            new_vals = np.full(new_cap, -1, dtype=np.int32)
            new_mask = new_cap - 1
            for s in range(cap):
                if vals[s] >= 0:
                    k = keys[s]
                    t = np.int64((k * mult) >> shift)
                    while new_vals[t] >= 0:
                        t = (t + 1) & new_mask
                    new_keys[t] = k
                    new_vals[t] = vals[s]
            keys = new_keys
            vals = new_vals
            # key_of and succ are indexed by dense id (< count <= cap / 2): grow alongside.
            new_key_of = np.empty(new_cap, dtype=np.uint64)
            new_key_of[:cap] = key_of
            key_of = new_key_of
            new_succ = np.full(new_cap, -1, dtype=np.int32)
            new_succ[:cap] = succ
            succ = new_succ
            cap = new_cap
    return out, count


def flatten_accesses(requests: pl.DataFrame) -> Accesses:
    """Flatten the ``hash_ids`` column (analysis order) into an :class:`Accesses` stream.

    Null ``hash_ids`` (traces without hashes) count as requests with no block accesses.
    """
    hashes = requests.get_column("hash_ids")
    lens = hashes.list.len().fill_null(0).to_numpy().astype(np.int64, copy=False)
    offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    flat = hashes.explode(empty_as_null=False, keep_nulls=False)
    del hashes
    if flat.null_count():
        raise ValueError("hash_ids: block ids must not be null")
    ids = flat.cast(pl.UInt64).to_numpy()
    del flat
    if ids.shape[0] != offsets[-1]:
        raise ValueError(f"hash_ids: flattened {ids.shape[0]} ids but lists hold {offsets[-1]}")
    if ids.shape[0] == 0:
        return Accesses(np.zeros(0, dtype=np.int32), offsets, 0)
    dense, n = dense_ids(np.ascontiguousarray(ids, dtype=np.uint64))
    return Accesses(dense, offsets, int(n))


# The Fenwick tree of the kernel below holds a 1 at each block's last access position. Numba
# links its helpers into the kernel, where LLVM inlines them: the kernel ran as fast as when it
# was one function (8 M accesses, medians of 5, 4 alternating runs: ratios 0.92-1.00), while
# numba's own inline="always" made it 15-25 % slower.


@njit(cache=True)
def _marks_between(tree: np.ndarray, p: int, i: int) -> int:  # pragma: no cover - numba
    """Ones at 1-based (p+1, i] = 0-based positions p+1..i-1: the two prefix-sum walks meet at
    the common high bits, so this costs O(log(i - p))."""
    d = 0
    x = i
    c = p + 1
    while x != c:
        if x > c:
            d += tree[x]
            x -= x & (-x)
        else:
            d -= tree[c]
            c -= c & (-c)
    return d


@njit(cache=True)
def _move_mark(tree: np.ndarray, p: int, i: int, n: int) -> None:  # pragma: no cover - numba
    """Move a block's mark from position p to i. Nodes covering both p+1 and i+1 would get -1
    and +1: skip them, so both walks stop where the paths merge."""
    j = p + 1
    while j <= i:
        tree[j] -= 1
        j += j & (-j)
    j = i + 1
    while j <= n and j - (j & (-j)) >= p + 1:
        tree[j] += 1
        j += j & (-j)


@njit(cache=True)
def _add_mark(tree: np.ndarray, i: int, n: int) -> None:  # pragma: no cover - numba
    """A first access: a mark at position i."""
    j = i + 1
    while j <= n:
        tree[j] += 1
        j += j & (-j)


@njit(cache=True)
def _seconds_bucket(dt: float, min_dt: float, min_exp: int, top: int) -> int:  # pragma: no cover
    """The log2 bucket of a reuse distance in seconds: 0 below ``min_dt``, at most ``top``."""
    if dt < min_dt:
        return 0
    k = int(np.floor(np.log2(dt))) - min_exp + 1
    return top if k > top else k


@njit(cache=True)
def _reuse_chunk(  # pragma: no cover - numba
    r_start: int,
    r_end: int,
    block: np.ndarray,
    offsets: np.ndarray,
    req_ts: np.ndarray,
    tree: np.ndarray,
    last: np.ndarray,
    last_req: np.ndarray,
    state: np.ndarray,
    access_count: np.ndarray,
    stack_count: np.ndarray,
    req_count: np.ndarray,
    run_dt: np.ndarray,
    run_n: np.ndarray,
    seconds_hist: np.ndarray,
    reused_per_request: np.ndarray,
    per_access: np.ndarray,
) -> int:
    """Process the accesses of requests [r_start, r_end); return the seconds runs written.

    ``state`` = [distinct blocks so far, re-accesses so far, previous access's previous
    position (-2: none), previous access's distance]. Outputs (accumulated):
    ``access_count[block]``; ``stack_count[d]`` = re-accesses at stack distance d;
    ``req_count[d]`` = re-accesses d requests apart; ``run_dt``/``run_n``: re-access distances
    in seconds, run-length encoded (consecutive equal values merged; ``run_dt`` needs one slot
    per access of the chunk); ``seconds_hist``; ``reused_per_request``; and, when
    ``per_access`` has one slot per access, each access's stack distance (-1 = first access).
    """
    n = tree.shape[0] - 1
    distinct = state[0]
    m = state[1]
    keep = per_access.shape[0] > 0
    min_exp = -10
    min_dt = 2.0**min_exp
    hist_r = -1
    hist_rp = -1
    k = 0
    runs = 0
    # Access i-1's previous position and distance, for the run shortcut below.
    run_p = state[2]
    run_d = state[3]
    for r in range(r_start, r_end):
        for i in range(offsets[r], offsets[r + 1]):
            b = block[i]
            access_count[b] += 1
            p = last[b]
            if p >= 0:
                if p == run_p + 1 and p < i - 1:
                    # A request re-reading a run of blocks in the same order as before: the
                    # mark at p (inside the window) left, the mark at i-1 entered; same distance.
                    d = run_d
                else:
                    d = _marks_between(tree, p, i)
                run_p = p
                run_d = d
                stack_count[d] += 1
                rp = last_req[b]
                req_count[r - rp] += 1
                m += 1
                # Runs of blocks re-read from the same earlier request share one distance in
                # seconds: store it once with a count, and bucket it once.
                if r != hist_r or rp != hist_rp:
                    hist_r = r
                    hist_rp = rp
                    dt = req_ts[r] - req_ts[rp]
                    if runs > 0 and run_dt[runs - 1] == dt:
                        run_n[runs - 1] += 1
                    else:
                        run_dt[runs] = dt
                        run_n[runs] = 1
                        runs += 1
                    k = _seconds_bucket(dt, min_dt, min_exp, seconds_hist.shape[0] - 1)
                else:
                    run_n[runs - 1] += 1
                seconds_hist[k] += 1
                reused_per_request[r] += 1
                if keep:
                    per_access[i] = d
                _move_mark(tree, p, i, n)
            else:
                distinct += 1
                run_p = -2
                if keep:
                    per_access[i] = -1
                _add_mark(tree, i, n)
            last[b] = i
            last_req[b] = r
    state[0] = distinct
    state[1] = m
    state[2] = run_p
    state[3] = run_d
    return runs


@dataclass(frozen=True, eq=False)
class ReusePass:
    """Everything one pass over the access stream yields.

    ``stack_count[d]`` counts re-accesses with LRU stack distance ``d`` (blocks);
    ``request_count[d]`` counts re-accesses ``d`` requests after the previous access;
    ``seconds_values[j]`` occurs ``seconds_counts[j]`` times among the re-accesses' distances
    in seconds (run-length encoded, analysis order);
    ``access_count[b]`` is the number of accesses to dense block ``b``;
    ``reused_per_request[r]`` counts request ``r``'s accesses to blocks seen earlier.
    """

    num_accesses: int
    num_blocks: int
    access_count: np.ndarray
    stack_count: np.ndarray
    request_count: np.ndarray
    seconds_values: np.ndarray
    seconds_counts: np.ndarray
    seconds_hist: np.ndarray
    reused_per_request: np.ndarray

    @property
    def num_reaccesses(self) -> int:
        return self.num_accesses - self.num_blocks


def reuse_pass(
    acc: Accesses,
    request_ts_s: np.ndarray,
    *,
    on_progress: Callable[[int], None] | None = None,
    per_access_out: np.ndarray | None = None,
    chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
) -> ReusePass:
    """Walk the access stream once (numba); see the module docstring for the definitions.

    ``on_progress(n)`` is called with the number of accesses done after each chunk.
    ``per_access_out`` (int64, one per access), when given, receives each access's stack
    distance, -1 for first accesses (tests and small traces only: one int per access).
    ``chunk_accesses``: about how many accesses one kernel call walks (whole requests, at
    least one); the state carried between calls makes every value give the same figures.
    """
    if chunk_accesses < 1:
        raise ValueError(f"chunk_accesses: must be >= 1; got {chunk_accesses!r}")
    n = acc.num_accesses
    n_req = acc.num_requests
    offsets = acc.request_offsets
    ts = np.ascontiguousarray(request_ts_s, dtype=np.float64)
    if ts.shape[0] != n_req:
        raise ValueError(f"request_ts_s: expected {n_req} timestamps; got {ts.shape[0]}")
    tree = np.zeros(n + 1, dtype=np.int32)
    last = np.full(acc.num_blocks, -1, dtype=np.int64)
    last_req = np.full(acc.num_blocks, -1, dtype=np.int64)
    state = np.array([0, 0, -2, 0], dtype=np.int64)
    access_count = np.zeros(acc.num_blocks, dtype=np.int64)
    stack_count = np.zeros(max(acc.num_blocks, 1), dtype=np.int64)
    request_count = np.zeros(max(n_req, 1), dtype=np.int64)
    seconds_hist = np.zeros(SECONDS_BUCKETS, dtype=np.int64)
    reused = np.zeros(n_req, dtype=np.int64)
    per_access = per_access_out if per_access_out is not None else np.zeros(0, dtype=np.int64)
    if per_access.shape[0] not in (0, n):
        raise ValueError(f"per_access_out: expected {n} slots; got {per_access.shape[0]}")
    dt_parts: list[np.ndarray] = []
    n_parts: list[np.ndarray] = []
    r = 0
    while r < n_req:
        # Whole requests per chunk, about chunk_accesses accesses (at least one request).
        r_end = int(np.searchsorted(offsets, offsets[r] + chunk_accesses, side="right")) - 1
        r_end = min(max(r_end, r + 1), n_req)
        chunk = int(offsets[r_end] - offsets[r])
        run_dt = np.empty(chunk, dtype=np.float64)
        run_n = np.empty(chunk, dtype=np.int64)
        runs = _reuse_chunk(
            r,
            r_end,
            acc.block,
            offsets,
            ts,
            tree,
            last,
            last_req,
            state,
            access_count,
            stack_count,
            request_count,
            run_dt,
            run_n,
            seconds_hist,
            reused,
            per_access,
        )
        dt_parts.append(run_dt[:runs].copy())
        n_parts.append(run_n[:runs].copy())
        del run_dt, run_n
        r = r_end
        if on_progress is not None:
            on_progress(int(offsets[r]))
    del tree, last, last_req
    if state[0] != acc.num_blocks or state[1] != n - acc.num_blocks:
        # Every block is first seen once and every other access is a re-access; anything else
        # means the dense ids or offsets were inconsistent, and every figure would be wrong.
        raise RuntimeError(
            f"reuse pass: counted {state[0]} distinct blocks and {state[1]} re-accesses; "
            f"expected {acc.num_blocks} and {n - acc.num_blocks}"
        )
    seconds_values = np.concatenate(dt_parts) if dt_parts else np.zeros(0)
    seconds_counts = np.concatenate(n_parts) if n_parts else np.zeros(0, dtype=np.int64)
    return ReusePass(
        n,
        acc.num_blocks,
        access_count,
        stack_count,
        request_count,
        seconds_values,
        seconds_counts,
        seconds_hist,
        reused,
    )


def stack_distances(blocks: Sequence[int] | np.ndarray) -> np.ndarray:
    """Per-access LRU stack distance of a stream of block ids (-1 for first accesses)."""
    ids = np.asarray(blocks, dtype=np.uint64)
    dense, n_blocks = dense_ids(ids) if ids.shape[0] else (np.zeros(0, np.int32), 0)
    acc = Accesses(dense, np.array([0, ids.shape[0]], dtype=np.int64), int(n_blocks))
    out = np.empty(ids.shape[0], dtype=np.int64)
    reuse_pass(acc, np.zeros(1), per_access_out=out)
    return out


def reference_stack_distances(blocks: Sequence[int]) -> list[int]:
    """Plain LRU-stack reference: the depth of each block in a most-recent-first list."""
    stack: OrderedDict[int, None] = OrderedDict()
    out = []
    for b in blocks:
        if b in stack:
            # Blocks after b in insertion order were used more recently than b.
            keys = list(stack)
            out.append(len(keys) - 1 - keys.index(b))
            stack.move_to_end(b)
        else:
            out.append(-1)
            stack[b] = None
    return out


# ---------------------------------------------------------------------------------------------
# Exact percentiles from counts (a counting sort), matching numpy's default linear method.


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's _lerp: the two forms keep the result monotone and exact at t = 0 and t = 1.
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


def percentiles_from_counts(counts: np.ndarray, qs: Sequence[float]) -> list[float | None]:
    """Percentiles ``qs`` (0..100) of the multiset where value ``v`` occurs ``counts[v]`` times.

    Equal to ``np.percentile(values, qs)`` (linear interpolation) without materialising the
    values; None when the multiset is empty.
    """
    return percentiles_from_weighted(np.arange(counts.shape[0]), counts, qs)


def percentiles_from_weighted(
    values: np.ndarray, counts: np.ndarray, qs: Sequence[float]
) -> list[float | None]:
    """Percentiles ``qs`` of the multiset where ``values[j]`` occurs ``counts[j]`` times.

    Equal to ``np.percentile(np.repeat(values, counts), qs)`` without the repeat.
    """
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(counts[order])
    total = int(cum[-1]) if cum.shape[0] else 0
    if total == 0:
        return [None for _ in qs]
    out: list[float | None] = []
    for q in qs:
        h = (total - 1) * (q / 100.0)
        lo = int(np.floor(h))
        hi = min(lo + 1, total - 1)
        a = float(v[np.searchsorted(cum, lo, side="right")])
        b = float(v[np.searchsorted(cum, hi, side="right")])
        out.append(_lerp(a, b, h - lo))
    return out


def log2_histogram_from_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket ``counts[v]`` (value v) into [0,1), [1,2), [2,4), ...: (lo, hi, count), trimmed."""
    n = counts.shape[0]
    edges = [0, 1]
    while edges[-1] < n:
        edges.append(edges[-1] * 2)
    lo = np.array(edges[:-1], dtype=np.int64)
    hi = np.array(edges[1:], dtype=np.int64)
    sums = np.array([int(counts[a:b].sum()) for a, b in zip(lo, hi, strict=True)], dtype=np.int64)
    nz = np.nonzero(sums)[0]
    end = int(nz[-1]) + 1 if nz.shape[0] else 0
    lo, hi, sums = lo[:end], hi[:end], sums[:end]
    return lo, hi, np.asarray(sums, dtype=np.int64)


def seconds_histogram_edges(hist: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, count) of the seconds histogram accumulated by :func:`reuse_pass`, trimmed."""
    k = np.arange(hist.shape[0])
    lo = np.where(k == 0, 0.0, 2.0 ** (SECONDS_MIN_EXP + k - 1))
    hi = 2.0 ** (SECONDS_MIN_EXP + k).astype(np.float64)
    hi[-1] = np.inf
    nz = np.nonzero(hist)[0]
    end = int(nz[-1]) + 1 if nz.shape[0] else 0
    return lo[:end], hi[:end], hist[:end].astype(np.int64)
