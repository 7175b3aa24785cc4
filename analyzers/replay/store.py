"""Where every KV block is: per-worker GPU LRU caches, host-memory pools, an SSD tier.

Two implementations of one interface: :class:`FastStore` (arrays indexed by dense block id,
numba kernels, O(1) per block and no Python per block) and
:class:`analyzers.replay.reference.ReferenceStore` (dicts and ``OrderedDict`` LRUs, one Python
step per block). The replay tests run both on random traces and require identical results.

Rules both follow:

* LRU lists keep the most recently used block first. A request touches or inserts its blocks
  as if **from its tail to its head** (each block at its last occurrence), so the head ends
  most recent and an LRU tier evicts a request's tail blocks before its head: prefixes
  survive (the issue's rule). A tier over capacity evicts after the whole request is in.
* Each worker's GPU cache holds its own copies: a block may be cached on several workers.
* Host memory is ``host_pools`` pools (``Hardware.host_scope``): one per node (pool 0 for
  every worker), or one per worker (pool ``w``, a copy of its own like the GPU caches). A
  lookup finds host blocks only in its worker's pool; a write goes there; each pool evicts
  on its own. The SSD (tiered's bucket ring, flat's session files) is one per node.
* Tiered SSD: :class:`fcctl.analyzers.kvmodel.tiered.BucketRing`, the bucket model iobench's layout
  is built with: a block evicted from the host LRU is appended to the current bucket (a write
  sequence number; ``_host_insert`` calls :func:`~fcctl.analyzers.kvmodel.tiered.ring_append`);
  buckets hold ``blocks_per_bucket`` consecutive writes and are recycled first-in first-out
  when the SSD holds more than the high watermark, down to the low one (a recycle drops
  whatever sessions' blocks the bucket holds). A block on SSD is not admitted to the host
  again (no re-admission).
* Flat: each block has one home, memory or an SSD session-file segment, set once at write time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..kvmodel.tiered import BucketRing, ring_append
from .flatcost import SegmentTable, read_cost

CODE_GPU = 0
CODE_HOST = 1
CODE_SSD = 2
#: No SSD runs (most lookups): one shared, read-only empty (0, 3) array.
_NO_RUNS = np.zeros((0, 3), dtype=np.int64)
_NO_RUNS.flags.writeable = False


# The LRU lists' helpers take and return a list's head and tail as values, and their callers
# keep head, tail, length and the pinned count in locals for a whole request, writing them
# back to the (lists, 4) array once: numba gives LLVM no aliasing information, so a counter
# kept in that array was loaded and stored around every block's pointer update (measured:
# pinning 2,000 blocks took 52 us that way, 4.5 us with the counters in locals). The list
# operations, and so every state and result, are the same.


@njit(cache=True)
def _unlink(  # pragma: no cover - numba
    b: int, prev: np.ndarray, nxt: np.ndarray, head: int, tail: int
) -> tuple[int, int]:
    """Take ``b`` out of its list; the list's new (head, tail)."""
    p = prev[b]
    n = nxt[b]
    if p >= 0:
        nxt[p] = n
    else:
        head = n
    if n >= 0:
        prev[n] = p
    else:
        tail = p
    return head, tail


@njit(cache=True)
def _push_front(  # pragma: no cover - numba
    b: int, prev: np.ndarray, nxt: np.ndarray, head: int, tail: int
) -> tuple[int, int]:
    prev[b] = -1
    nxt[b] = head
    if head >= 0:
        prev[head] = b
    else:
        tail = b
    return b, tail


@njit(cache=True)
def _insert_after(  # pragma: no cover - numba
    b: int, a: int, prev: np.ndarray, nxt: np.ndarray, head: int, tail: int
) -> tuple[int, int]:
    """Put ``b`` right after ``a`` (-1: at the front); the list's new (head, tail)."""
    if a < 0:
        return _push_front(b, prev, nxt, head, tail)
    n = nxt[a]
    prev[b] = a
    nxt[b] = n
    nxt[a] = b
    if n >= 0:
        prev[n] = b
    else:
        tail = b
    return head, tail


@njit(cache=True)
def _place_seq(  # pragma: no cover - numba
    seq: np.ndarray, a: int, prev: np.ndarray, nxt: np.ndarray, head: int, tail: int
) -> tuple[int, int, int]:
    """Put ``seq`` (blocks all in the list) right after ``a`` (-1: at the front), in order;
    return the new anchor (the last block of ``seq``) and the list's new (head, tail).

    Placed one after the other, a request's blocks end up first in the list in request order
    (each at its last occurrence): what touching them tail to head gives. Blocks that are
    already consecutive in the list move as one spliced run, so re-touching a prefix that was
    inserted together costs a sequential scan, not a pointer update per block.
    """
    n = seq.shape[0]
    i = 0
    while i < n:
        x = seq[i]
        if x == a:
            i += 1
            continue
        j = i
        while j + 1 < n and nxt[seq[j]] == seq[j + 1] and seq[j + 1] != a:
            j += 1
        y = seq[j]
        cur = head if a < 0 else nxt[a]
        if cur != x:
            p = prev[x]
            q = nxt[y]
            if p >= 0:
                nxt[p] = q
            else:
                head = q
            if q >= 0:
                prev[q] = p
            else:
                tail = p
            if a < 0:
                h = head
                prev[x] = -1
                nxt[y] = h
                if h >= 0:
                    prev[h] = y
                else:
                    tail = y
                head = x
            else:
                m = nxt[a]
                nxt[a] = x
                prev[x] = a
                nxt[y] = m
                if m >= 0:
                    prev[m] = y
                else:
                    tail = y
        a = y
        i = j + 1
    return a, head, tail


@njit(cache=True)
def _touch(  # pragma: no cover - numba
    seq: np.ndarray, prev: np.ndarray, nxt: np.ndarray, lst: np.ndarray, w: int
) -> None:
    """:func:`_place_seq` at the front of list ``w`` of ``lst``."""
    _, lst[w, 0], lst[w, 1] = _place_seq(seq, -1, prev, nxt, lst[w, 0], lst[w, 1])


@njit(cache=True)
def _lookup_lru(  # pragma: no cover - numba
    blk: np.ndarray,
    w: int,
    g_in: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    g_ref: np.ndarray,
    h_in: np.ndarray,
    h_prev: np.ndarray,
    h_next: np.ndarray,
    h_lst: np.ndarray,
    hp: int,
    use_ssd: bool,
    s_seq: np.ndarray,
    codes: np.ndarray,
    buf: np.ndarray,
) -> tuple[int, int, int, int]:
    n = blk.shape[0]
    n_g = 0
    n_h = 0
    n_s = 0
    p = 0
    for i in range(n):
        b = blk[i]
        if g_in[b]:
            codes[i] = CODE_GPU
            n_g += 1
        elif h_in[b]:
            codes[i] = CODE_HOST
            n_h += 1
        elif use_ssd and s_seq[b] >= 0:
            codes[i] = CODE_SSD
            n_s += 1
        else:
            break
        p += 1
    for tier in range(2):
        k = 0
        for i in range(p):
            # A referenced GPU block is outside the LRU list (nothing to touch).
            if codes[i] == tier and not (tier == CODE_GPU and g_ref[blk[i]] > 0):
                buf[k] = blk[i]
                k += 1
        if k:
            if tier == CODE_GPU:
                _touch(buf[:k], g_prev, g_next, g_lst, w)
            else:
                _touch(buf[:k], h_prev, h_next, h_lst, hp)
    return p, n_g, n_h, n_s


@njit(cache=True)
def _evict_to(  # pragma: no cover - numba
    limit: int,
    is_in: np.ndarray,
    prev: np.ndarray,
    nxt: np.ndarray,
    head: int,
    tail: int,
    length: int,
) -> tuple[int, int, int]:
    """Evict from the tail while the list is longer than ``limit``; (head, tail, length)."""
    while length > limit:
        t = tail
        head, tail = _unlink(t, prev, nxt, head, tail)
        length -= 1
        is_in[t] = 0
    return head, tail, length


@njit(cache=True)
def _gpu_insert(  # pragma: no cover - numba
    blk: np.ndarray,
    w: int,
    g_in: np.ndarray,
    g_ref: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    cap: int,
) -> None:
    if cap <= 0:
        return
    head, tail, length, pinned = g_lst[w, 0], g_lst[w, 1], g_lst[w, 2], g_lst[w, 3]
    a = -1
    n = blk.shape[0]
    i = 0
    while i < n:
        if g_ref[blk[i]] > 0:  # referenced: cached already, outside the list
            i += 1
            continue
        j = i
        while j < n and g_in[blk[j]] and g_ref[blk[j]] == 0:
            j += 1
        if j > i:
            a, head, tail = _place_seq(blk[i:j], a, g_prev, g_next, head, tail)
            i = j
            continue
        b = blk[i]
        head, tail = _insert_after(b, a, g_prev, g_next, head, tail)
        length += 1
        g_in[b] = 1
        a = b
        i += 1
    head, tail, length = _evict_to(cap - pinned, g_in, g_prev, g_next, head, tail, length)
    g_lst[w, 0], g_lst[w, 1], g_lst[w, 2] = head, tail, length


@njit(cache=True)
def _gpu_prefix(blk: np.ndarray, g_in: np.ndarray) -> int:  # pragma: no cover - numba
    p = 0
    while p < blk.shape[0] and g_in[blk[p]]:
        p += 1
    return p


@njit(cache=True)
def _gpu_prefixes(blk: np.ndarray, g_in: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    for w in range(g_in.shape[0]):
        p = 0
        while p < blk.shape[0] and g_in[w, blk[p]]:
            p += 1
        out[w] = p


@njit(cache=True)
def _gpu_trim(  # pragma: no cover - numba
    w: int,
    g_in: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    cap: int,
) -> None:
    # Referenced blocks take their place in the cache but cannot be evicted: the LRU list
    # holds what is left.
    head, tail, length = _evict_to(
        max(cap - g_lst[w, 3], 0), g_in, g_prev, g_next, g_lst[w, 0], g_lst[w, 1], g_lst[w, 2]
    )
    g_lst[w, 0], g_lst[w, 1], g_lst[w, 2] = head, tail, length


@njit(cache=True)
def _gpu_pin(  # pragma: no cover - numba
    blk: np.ndarray,
    w: int,
    g_in: np.ndarray,
    g_ref: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    cap: int,
) -> None:
    head, tail, length, pinned = g_lst[w, 0], g_lst[w, 1], g_lst[w, 2], g_lst[w, 3]
    for i in range(blk.shape[0]):
        b = blk[i]
        if g_ref[b] == 0:
            if g_in[b]:
                head, tail = _unlink(b, g_prev, g_next, head, tail)
                length -= 1
            g_in[b] = 1
            pinned += 1
        g_ref[b] += 1
    head, tail, length = _evict_to(max(cap - pinned, 0), g_in, g_prev, g_next, head, tail, length)
    g_lst[w, 0], g_lst[w, 1], g_lst[w, 2], g_lst[w, 3] = head, tail, length, pinned


@njit(cache=True)
def _gpu_unpin(  # pragma: no cover - numba
    blk: np.ndarray,
    w: int,
    g_in: np.ndarray,
    g_ref: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    cap: int,
) -> None:
    # A block's last reference goes at its last occurrence in blk, so the released blocks
    # are met in request order: placed one after the other at the front, the head ends most
    # recent and the tail is evicted first.
    # Inserting each after the one before would leave the chain below (each insertion's
    # pointers to the old head are overwritten by the next one's): link it directly.
    head, tail, length, pinned = g_lst[w, 0], g_lst[w, 1], g_lst[w, 2], g_lst[w, 3]
    old_head = head
    a = -1
    for i in range(blk.shape[0]):
        b = blk[i]
        g_ref[b] -= 1
        if g_ref[b] == 0:
            pinned -= 1
            g_prev[b] = a
            if a >= 0:
                g_next[a] = b
            else:
                head = b
            length += 1
            a = b
    if a >= 0:
        g_next[a] = old_head
        if old_head >= 0:
            g_prev[old_head] = a
        else:
            tail = a
    head, tail, length = _evict_to(max(cap - pinned, 0), g_in, g_prev, g_next, head, tail, length)
    g_lst[w, 0], g_lst[w, 1], g_lst[w, 2], g_lst[w, 3] = head, tail, length, pinned


@njit(cache=True)
def _host_insert(  # pragma: no cover - numba
    blk: np.ndarray,
    h_in: np.ndarray,
    h_prev: np.ndarray,
    h_next: np.ndarray,
    h_lst: np.ndarray,
    hp: int,
    cap: int,
    tiered: bool,
    s_seq: np.ndarray,
    ring: np.ndarray,
    smeta: np.ndarray,
) -> None:
    head, tail, length = h_lst[hp, 0], h_lst[hp, 1], h_lst[hp, 2]
    a = -1
    n = blk.shape[0]
    i = 0
    while i < n:
        j = i
        while j < n and h_in[blk[j]]:
            j += 1
        if j > i:
            a, head, tail = _place_seq(blk[i:j], a, h_prev, h_next, head, tail)
            i = j
            continue
        b = blk[i]
        i += 1
        if tiered and s_seq[b] >= 0:
            continue
        head, tail = _insert_after(b, a, h_prev, h_next, head, tail)
        length += 1
        h_in[b] = 1
        a = b
    while length > cap:
        t = tail
        head, tail = _unlink(t, h_prev, h_next, head, tail)
        length -= 1
        h_in[t] = 0
        if tiered and s_seq[t] < 0:
            ring_append(t, s_seq, ring, smeta)
    h_lst[hp, 0], h_lst[hp, 1], h_lst[hp, 2] = head, tail, length


@njit(cache=True)
def _lookup_flat(  # pragma: no cover - numba
    blk: np.ndarray,
    w: int,
    g_in: np.ndarray,
    g_prev: np.ndarray,
    g_next: np.ndarray,
    g_lst: np.ndarray,
    g_ref: np.ndarray,
    m_seg: np.ndarray,
    s_seg: np.ndarray,
    s_idx: np.ndarray,
    codes: np.ndarray,
    run_rows: np.ndarray,
    buf: np.ndarray,
) -> tuple[int, int, int, int, int]:
    n = blk.shape[0]
    n_g = 0
    n_m = 0
    n_s = 0
    p = 0
    runs = 0
    last_ssd = -2  # prefix position of the previous SSD block
    for i in range(n):
        b = blk[i]
        if g_in[b]:
            codes[i] = CODE_GPU
            n_g += 1
        elif m_seg[b] >= 0:
            codes[i] = CODE_HOST
            n_m += 1
        elif s_seg[b] >= 0:
            codes[i] = CODE_SSD
            n_s += 1
            sg = s_seg[b]
            ix = s_idx[b]
            if (
                runs > 0
                and last_ssd == i - 1
                and run_rows[runs - 1, 0] == sg
                and run_rows[runs - 1, 1] + run_rows[runs - 1, 2] == ix
            ):
                run_rows[runs - 1, 2] += 1
            else:
                run_rows[runs, 0] = sg
                run_rows[runs, 1] = ix
                run_rows[runs, 2] = 1
                runs += 1
            last_ssd = i
        else:
            break
        p += 1
    k = 0
    for i in range(p):
        if codes[i] == CODE_GPU and g_ref[blk[i]] == 0:  # referenced: outside the list
            buf[k] = blk[i]
            k += 1
    if k:
        _touch(buf[:k], g_prev, g_next, g_lst, w)
    return p, n_g, n_m, n_s, runs


@njit(cache=True)
def _unstored_flat(  # pragma: no cover - numba
    blk: np.ndarray,
    m_seg: np.ndarray,
    s_seg: np.ndarray,
    mark: np.ndarray,
    out: np.ndarray,
) -> int:
    k = 0
    for i in range(blk.shape[0]):
        b = blk[i]
        if m_seg[b] < 0 and s_seg[b] < 0 and not mark[b]:
            mark[b] = 1
            out[k] = b
            k += 1
    for i in range(k):
        mark[out[i]] = 0
    return k


@njit(cache=True)
def _assign(  # pragma: no cover - numba
    blocks: np.ndarray,
    seg: int,
    arr: np.ndarray,
    idx: np.ndarray,
) -> None:
    for i in range(blocks.shape[0]):
        arr[blocks[i]] = seg
        idx[blocks[i]] = i


@njit(cache=True)
def _clear(  # pragma: no cover - numba
    blocks: np.ndarray,
    seg: int,
    arr: np.ndarray,
) -> None:
    for i in range(blocks.shape[0]):
        if arr[blocks[i]] == seg:
            arr[blocks[i]] = -1


@njit(cache=True)
def _add_refs(  # pragma: no cover - numba
    blk: np.ndarray,
    refs: np.ndarray,
    delta: int,
) -> None:
    for i in range(blk.shape[0]):
        refs[blk[i]] += delta


class FastStore:
    """The arrays and kernels (module docstring). Capacities are in blocks; ``host_blocks``
    is one pool's, and there are ``host_pools`` of them (1, or one per worker)."""

    #: The fast implementation (:class:`~fcctl.analyzers.replay.spec.StoreFactory`).
    reference = False

    def __init__(
        self,
        *,
        num_blocks: int,
        max_request_blocks: int,
        workers: int,
        gpu_blocks: int,
        host_blocks: int,
        host_pools: int = 1,
        ssd_blocks: int = 0,
        blocks_per_bucket: int = 1,
        high_watermark: float = 0.9,
        low_watermark: float = 0.8,
        total_accesses: int = 0,
    ) -> None:
        if host_pools not in (1, workers):
            raise ValueError(f"host_pools: 1 or one per worker ({workers}); got {host_pools!r}")
        n = max(num_blocks, 1)
        self.gpu_blocks = gpu_blocks
        self.host_blocks = host_blocks
        # One LRU list per worker over its own copies: a block may be cached on several.
        self.g_in = np.zeros((workers, n), dtype=np.uint8)
        self.g_prev = np.full((workers, n), -1, dtype=np.int32)
        self.g_next = np.full((workers, n), -1, dtype=np.int32)
        self._prefixes = np.zeros(workers, dtype=np.int64)
        # Per worker: LRU head, tail, length, and blocks referenced by running requests
        # (outside the list, not evictable; g_ref counts each block's references).
        self.g_lst = np.zeros((workers, 4), dtype=np.int64)
        self.g_lst[:, :2] = -1
        self.g_ref = np.zeros((workers, n), dtype=np.int32)
        # One LRU list per host pool; worker w's pool is w, or 0 when the node shares one.
        self.host_pools = host_pools
        self.h_in = np.zeros((host_pools, n), dtype=np.uint8)
        self.h_prev = np.full((host_pools, n), -1, dtype=np.int32)
        self.h_next = np.full((host_pools, n), -1, dtype=np.int32)
        self.h_lst = np.zeros((host_pools, 3), dtype=np.int64)
        self.h_lst[:, :2] = -1
        #: Peak of the host blocks held, all pools together (the node's host memory in use).
        self.h_peak = 0
        # The tiered SSD: analyzers.kvmodel.tiered's bucket ring, appended to from _host_insert.
        self.ssd = BucketRing(
            num_keys=n,
            blocks_per_bucket=max(1, blocks_per_bucket),
            capacity_blocks=ssd_blocks,
            high_watermark=high_watermark,
            low_watermark=low_watermark,
            max_writes=total_accesses,
        )
        self.s_seq = self.ssd.seq_of
        self.m_seg = np.full((host_pools, n), -1, dtype=np.int32)
        self.s_seg = np.full(n, -1, dtype=np.int32)
        self.s_idx = np.zeros(n, dtype=np.int32)
        self.mark = np.zeros(n, dtype=np.uint8)
        self.refs = np.zeros(n, dtype=np.int32)
        m = max(max_request_blocks, 1)
        self.codes = np.zeros(m, dtype=np.int8)
        # The last flat lookup's SSD runs, rows (segment, first, len), written in place.
        self.run_rows = np.zeros((m, 3), dtype=np.int64)
        self.out = np.zeros(m, dtype=np.int32)

    def host_pool(self, worker: int) -> int:
        """The host pool ``worker`` reads and writes: its own, or the node's (0)."""
        return worker if self.host_pools > 1 else 0

    # LRU tiers (memory-only, tiered) -------------------------------------------------------
    def lookup_lru(self, blk: np.ndarray, worker: int, use_ssd: bool) -> tuple[int, int, int, int]:
        """(prefix blocks stored, of them in this GPU, in its host pool, on SSD); touches the
        hits."""
        hp = worker if self.host_pools > 1 else 0
        return _lookup_lru(
            blk,
            worker,
            self.g_in[worker],
            self.g_prev[worker],
            self.g_next[worker],
            self.g_lst,
            self.g_ref[worker],
            self.h_in[hp],
            self.h_prev[hp],
            self.h_next[hp],
            self.h_lst,
            hp,
            use_ssd,
            self.s_seq,
            self.codes,
            self.out,
        )

    def prefix_codes(self, p: int) -> np.ndarray:
        """Where each of the last lookup's first ``p`` blocks was (CODE_GPU/HOST/SSD)."""
        return self.codes[:p]

    def gpu_insert(self, blk: np.ndarray, worker: int, cap: int | None = None) -> None:
        """Cache ``blk`` in ``worker``'s GPU memory, at most ``cap`` blocks (default: the pool)."""
        cap = self.gpu_blocks if cap is None else cap
        _gpu_insert(
            blk,
            worker,
            self.g_in[worker],
            self.g_ref[worker],
            self.g_prev[worker],
            self.g_next[worker],
            self.g_lst,
            cap,
        )

    def gpu_prefix(self, blk: np.ndarray, worker: int) -> int:
        """Leading blocks of ``blk`` cached on ``worker``'s GPU (nothing is touched)."""
        return int(_gpu_prefix(blk, self.g_in[worker]))

    def gpu_prefixes(self, blk: np.ndarray) -> list[int]:
        """:meth:`gpu_prefix` on every worker, in one pass."""
        _gpu_prefixes(blk, self.g_in, self._prefixes)
        prefixes: list[int] = self._prefixes.tolist()
        return prefixes

    def gpu_trim(self, worker: int, cap: int) -> None:
        """Evict ``worker``'s least recently used cached blocks down to ``cap`` (referenced
        blocks included in the count, never evicted)."""
        _gpu_trim(
            worker, self.g_in[worker], self.g_prev[worker], self.g_next[worker], self.g_lst, cap
        )

    def gpu_pin(self, blk: np.ndarray, worker: int, cap: int) -> None:
        """A running request references ``blk`` in ``worker``'s GPU cache: cached (if not),
        not evictable until :meth:`gpu_unpin`; the cache then evicts down to ``cap``."""
        _gpu_pin(
            blk,
            worker,
            self.g_in[worker],
            self.g_ref[worker],
            self.g_prev[worker],
            self.g_next[worker],
            self.g_lst,
            cap,
        )

    def gpu_unpin(self, blk: np.ndarray, worker: int, cap: int) -> None:
        """The request that pinned ``blk`` ended: blocks no longer referenced become
        evictable, the most recently used, its head most recent (evicted tail first)."""
        _gpu_unpin(
            blk,
            worker,
            self.g_in[worker],
            self.g_ref[worker],
            self.g_prev[worker],
            self.g_next[worker],
            self.g_lst,
            cap,
        )

    def gpu_pinned(self, worker: int) -> int:
        """Distinct blocks that running requests reference in ``worker``'s GPU cache."""
        return int(self.g_lst[worker, 3])

    def host_insert(self, blk: np.ndarray, tiered: bool, worker: int = 0) -> None:
        """Write ``blk`` to ``worker``'s host pool (LRU; tiered: its evictions go to SSD)."""
        hp = worker if self.host_pools > 1 else 0
        _host_insert(
            blk,
            self.h_in[hp],
            self.h_prev[hp],
            self.h_next[hp],
            self.h_lst,
            hp,
            self.host_blocks,
            tiered,
            self.ssd.seq_of,
            self.ssd.ring,
            self.ssd.meta,
        )
        used = self.h_lst[0, 2] if self.host_pools == 1 else self.h_lst[:, 2].sum()
        self.h_peak = max(self.h_peak, int(used))

    @property
    def host_used_blocks(self) -> int:
        """Host blocks held, all pools together."""
        return int(self.h_lst[:, 2].sum())

    def host_used_blocks_of(self, pool: int) -> int:
        """Host blocks held in ``pool``."""
        return int(self.h_lst[pool, 2])

    @property
    def ssd_used_blocks(self) -> int:
        return self.ssd.used_blocks

    @property
    def ssd_peak_blocks(self) -> int:
        return self.ssd.peak_blocks

    @property
    def ssd_recycled_blocks(self) -> int:
        return self.ssd.recycled_blocks

    @property
    def ssd_written_blocks(self) -> int:
        """Blocks written to the tiered SSD so far (host evictions of blocks not on SSD)."""
        return self.ssd.written_blocks

    # flat ----------------------------------------------------------------------------------
    def lookup_flat(self, blk: np.ndarray, worker: int) -> tuple[int, int, int, int, np.ndarray]:
        """(prefix stored, in GPU, in its memory pool, on SSD, SSD runs as rows (segment,
        first, len))."""
        m_seg = self.m_seg[worker if self.host_pools > 1 else 0]
        p, n_g, n_m, n_s, runs = _lookup_flat(
            blk,
            worker,
            self.g_in[worker],
            self.g_prev[worker],
            self.g_next[worker],
            self.g_lst,
            self.g_ref[worker],
            m_seg,
            self.s_seg,
            self.s_idx,
            self.codes,
            self.run_rows,
            self.out,
        )
        if runs == 0:
            return p, n_g, n_m, n_s, _NO_RUNS
        return p, n_g, n_m, n_s, self.run_rows[:runs].copy()

    def unstored_flat(self, blk: np.ndarray, worker: int) -> np.ndarray:
        """The request's blocks neither in ``worker``'s memory pool nor on SSD, in order, each
        once (a copy)."""
        m_seg = self.m_seg[worker if self.host_pools > 1 else 0]
        k = _unstored_flat(blk, m_seg, self.s_seg, self.mark, self.out)
        return self.out[:k].copy()

    def assign(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None:
        """``blocks`` now live in ``segment``: on SSD, or in memory pool ``pool``."""
        _assign(blocks, segment, self.s_seg if on_ssd else self.m_seg[pool], self.s_idx)

    def clear(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None:
        """``segment`` (on SSD, or in memory pool ``pool``) is gone: its blocks with it."""
        _clear(blocks, segment, self.s_seg if on_ssd else self.m_seg[pool])

    def flat_read_cost(
        self,
        runs: np.ndarray,
        segs: SegmentTable,
        *,
        layers: int,
        record_bytes: int,
        piece_bytes: int,
    ) -> tuple[int, int]:
        """(commands, bytes read) of one rank restoring ``runs``: :func:`flatcost.read_cost`."""
        return read_cost(
            runs, segs, layers=layers, record_bytes=record_bytes, piece_bytes=piece_bytes
        )

    def add_refs(self, blk: np.ndarray, delta: int) -> None:
        _add_refs(blk, self.refs, delta)

    def refs_of(self, blocks: np.ndarray) -> np.ndarray:
        return self.refs[blocks]
