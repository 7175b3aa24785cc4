"""Session amplification: K copies of every session of a :class:`~.workload.Workload`, so a
trace whose sessions pace themselves (agent think times) can be replayed at K times its users.

The rule (docs/simulator.md, "Session amplification"):

* **A session's own block** is a distinct block that exactly one session of the workload
  accesses (every access of it is by that session). Every other block is **shared across
  sessions** (a system prompt, a common tool preamble).
* **Copies.** Copy 0 of each session is the original, unchanged. Copy ``j >= 1`` accesses a
  fresh block id in place of each of its session's own blocks (a bijection per copy, so reuse
  within the session is kept exactly) and the very same id for every shared block, so all
  copies of all sessions still share what the trace shares. Turns, input and output tokens,
  per-session timestamps, think gaps and recorded client think times (``think_time_s``) are
  the original's.
* **Order.** Request ``r``'s copy ``j`` is request ``r * K + j``, session ``s``'s copy ``j`` is
  session ``s * K + j``: sessions interleave (original, copy 1, ..., copy K-1, next session),
  so a concurrency of ``c`` starts a mix of originals and copies, and a rate schedule starts
  copies like any other session. A request's home worker is its (new) session ordinal modulo
  the worker count, the workload's own rule.
* **Staggering.** Per-session clocks (closed loop): copies keep their session's clock; the
  schedule (rate or concurrency) decides when each starts. One clock (open loop): copy ``j >= 1``
  of session ``s`` is shifted by an offset drawn uniformly from ``[0, duration_s)``, one draw per
  (copy, session) from ``numpy.random.default_rng(seed)`` in (session, copy) order, so copies do
  not arrive in lock-step with their original.
* The result says it is amplified: its ``fingerprint`` ends in ``+amplified:Kx:seed=S``.

Memory: :func:`amplified_bytes` estimates the amplified workload and one simulation of it;
:func:`check_amplify` refuses a K whose estimate exceeds the memory budget before anything is
built. The arrays are built with numpy, one pass per copy, without Python loops over requests.
"""

from __future__ import annotations

import math
import operator
from dataclasses import replace

import numpy as np

from fcctl.common.errors import FcctlInputError

from .parallel import (
    WORKER_BASE_BYTES,
    WORKER_BYTES_PER_ACCESS,
    WORKER_BYTES_PER_REQUEST,
    budget_bytes,
)
from .workload import Workload

#: Bytes of the amplified workload's arrays per request: offsets and the seven per-request
#: int64/float64 arrays (input, output, session, turn, previous request, worker, timestamp).
WORKLOAD_BYTES_PER_REQUEST = 8 * 8
#: Bytes per block access of the amplified workload: its int32 dense block id.
WORKLOAD_BYTES_PER_ACCESS = 4
#: Temporaries per access of the original while one copy is built: two int64 position arrays
#: (within the request, and in the amplified array) and the int32 mapped ids; before that, the
#: int64 session of each access (own_blocks) is freed.
BUILD_BYTES_PER_ORIGINAL_ACCESS = 2 * 8 + 4
#: Dense block ids are int32 (flatten_accesses); an amplified workload must still fit.
MAX_BLOCK_ID = np.iinfo(np.int32).max


def check_amplify_value(k: object, parameter: str = "amplify") -> int:
    """``k`` as a whole number of copies >= 1 (a bool, float or text is refused)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise FcctlInputError(
            f"{parameter}: a whole number of copies of every session >= 1; got {k!r}",
            parameter=parameter,
        )
    if k < 1:
        raise FcctlInputError(
            f"{parameter}: a whole number of copies of every session >= 1; got {k!r}",
            parameter=parameter,
        )
    return operator.index(k)


def amplified_bytes(w: Workload, k: int) -> int:
    """Estimated peak bytes of amplifying ``w`` K-fold and simulating it once: the amplified
    arrays, the one-copy build temporaries, and a simulation worker's footprint on K x the
    requests and accesses (:func:`.parallel.worker_bytes`' measured model). Exact integers."""
    requests = k * w.requests
    accesses = k * w.block_accesses
    arrays = requests * WORKLOAD_BYTES_PER_REQUEST + accesses * WORKLOAD_BYTES_PER_ACCESS
    build = w.block_accesses * BUILD_BYTES_PER_ORIGINAL_ACCESS
    simulation = (
        WORKER_BASE_BYTES + accesses * WORKER_BYTES_PER_ACCESS + requests * WORKER_BYTES_PER_REQUEST
    )
    return arrays + build + simulation


def check_amplify(w: Workload, k: int, budget_bytes: int, parameter: str = "amplify") -> None:
    """Refuse ``k`` before any work when its :func:`amplified_bytes` estimate exceeds
    ``budget_bytes`` or its block ids would not fit int32."""
    k = check_amplify_value(k, parameter)
    if k == 1:
        return
    need = amplified_bytes(w, k)
    if need > budget_bytes:
        raise FcctlInputError(
            f"{parameter}: {k:,} copies of {w.sessions:,} sessions ({k * w.block_accesses:,} "
            f"block accesses) need an estimated {need:,} bytes, over the memory budget of "
            f"{budget_bytes:,} bytes; use a smaller amplification, replay a share of the "
            f"sessions (`sample_sessions`) or raise the budget (`memory_budget_bytes`); "
            f"got {k!r}",
            parameter=parameter,
        )
    if k * w.num_blocks > MAX_BLOCK_ID:  # only then count the own blocks (an O(accesses) pass)
        check_block_ids(w, k, int(own_blocks(w).sum()), parameter)


def check_block_ids(w: Workload, k: int, n_own: int, parameter: str = "amplify") -> None:
    """Refuse ``k`` when its distinct blocks would not fit the simulator's int32 block ids."""
    blocks = w.num_blocks + (k - 1) * n_own
    if blocks > MAX_BLOCK_ID:
        raise FcctlInputError(
            f"{parameter}: {k:,} copies make {blocks:,} distinct blocks, more than the "
            f"simulator's {MAX_BLOCK_ID:,} block ids; got {k!r}",
            parameter=parameter,
        )


def amplify_within_budget(
    w: Workload, k: int, seed: int, memory_budget_bytes: int | None, parameter: str = "amplify"
) -> Workload:
    """:func:`amplify_workload` after :func:`check_amplify` against ``memory_budget_bytes``
    (None: :func:`fcctl.analyzers.reuse.bounded.default_memory_budget`, 30 % of the machine's
    memory, the budget every other command uses)."""
    check_amplify(w, k, budget_bytes(memory_budget_bytes), parameter)
    return amplify_workload(w, k, seed=seed)


def own_blocks(w: Workload) -> np.ndarray:
    """Per distinct block, whether exactly one session accesses it (module docstring)."""
    session_of_access = np.repeat(w.session, np.diff(w.offsets))
    # The lowest and highest session ordinal touching each block: equal iff one session.
    low = np.full(w.num_blocks, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(w.num_blocks, -1, dtype=np.int64)
    np.minimum.at(low, w.block, session_of_access)
    np.maximum.at(high, w.block, session_of_access)
    return low == high


def amplify_workload(w: Workload, k: int, *, seed: int = 0) -> Workload:
    """``w`` with K copies of every session (rules in the module docstring); ``k == 1`` returns
    ``w`` itself."""
    k = check_amplify_value(k, "amplify")
    if k == 1:
        return w
    n = w.requests
    own = own_blocks(w)
    n_own = int(own.sum())
    check_block_ids(w, k, n_own)
    lengths = np.diff(w.offsets)
    offsets = np.zeros(k * n + 1, dtype=np.int64)
    np.cumsum(np.repeat(lengths, k), out=offsets[1:])
    block = np.empty(int(offsets[-1]), dtype=np.int32)
    # Each access's position within its request, so copy j's positions are its start plus it.
    within = np.arange(w.block_accesses, dtype=np.int64) - np.repeat(w.offsets[:-1], lengths)
    # Per distinct block, its id in the copy being built: itself, or a fresh id if it is own.
    ids = np.arange(w.num_blocks, dtype=np.int32)
    for j in range(k):
        if j:
            ids[own] = w.num_blocks + (j - 1) * n_own + np.arange(n_own, dtype=np.int32)
        where = np.repeat(offsets[j : k * n : k], lengths)
        where += within
        block[where] = ids[w.block]
        del where
    copy = np.tile(np.arange(k, dtype=np.int64), n)
    session = np.repeat(w.session, k) * k + copy
    prev = np.repeat(w.prev_request, k)
    prev = np.where(prev >= 0, prev * k + copy, -1)
    timestamps = np.repeat(w.timestamps_s, k)
    duration = w.duration_s
    if not w.closed_loop and duration:
        # One uniform offset per (session, copy), copy 0 unshifted.
        shifts = np.random.default_rng(seed).uniform(0.0, duration, size=(w.sessions, k))
        shifts[:, 0] = 0.0
        timestamps = timestamps + shifts[np.repeat(w.session, k), copy]
        duration = float(timestamps.max() - timestamps.min())
    return replace(
        w,
        duration_s=duration,
        fingerprint=None if w.fingerprint is None else f"{w.fingerprint}{amplified_tag(k, seed)}",
        block=block,
        offsets=offsets,
        num_blocks=w.num_blocks + (k - 1) * n_own,
        input_tokens=np.repeat(w.input_tokens, k),
        output_tokens=np.repeat(w.output_tokens, k),
        session=session,
        sessions=w.sessions * k,
        turn=np.repeat(w.turn, k),
        prev_request=prev,
        worker=session % w.workers,
        timestamps_s=timestamps,
        think_time_s=None if w.think_time_s is None else np.repeat(w.think_time_s, k),
    )


def amplified_tag(k: int, seed: int) -> str:
    """What an amplified workload's fingerprint ends in."""
    return f"+amplified:{k}x:seed={seed}"


def copies_for(concurrency: int | None, sessions: int) -> int:
    """The amplification that lets ``concurrency`` sessions be active at once on a workload of
    ``sessions``: ``ceil(concurrency / sessions)``, 1 when it has enough (or for ``all``)."""
    if concurrency is None or concurrency <= sessions:
        return 1
    return math.ceil(concurrency / sessions)
