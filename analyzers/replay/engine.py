"""The replay loop: one Python event loop per (policy, rate); blocks move in the store.

Per request ``r`` on its worker ``w``:

1. **arrival**: the router picks ``w``; the policy looks up ``r``'s blocks (the longest prefix
   stored in ``w``'s GPU cache, ``w``'s host pool (the node's, or ``w``'s own with
   ``host_scope`` "worker") or on the node's SSD; the first missing block ends it) and starts
   whatever loads it needs.
2. **ready**: once its loads are done (or cancelled) it waits in the policy's order for
   admission: at an iteration boundary (at once if the worker is idle), if its new prompt
   blocks and its output fit in the GPU pool beside the running requests.
3. **prefill**: in chunks, one per iteration. An iteration has a token budget
   (``max_batched_tokens``) shared by the running decodes (one token each, served first) and
   the admitted prefills in admission order, each taking at most ``prefill_chunk_tokens``;
   so a long cold prefill takes one chunk an iteration and a short request admitted beside it
   runs in the next iteration. The iteration that carries ``r``'s first chunk also copies its
   blocks delivered through host memory to the GPU (blocking, as LMCache's non-layerwise
   load). The first token is out when ``r``'s last chunk's iteration ends: TTFT = that end -
   arrival. All of ``r``'s blocks then enter the worker's GPU cache, referenced by ``r``
   (found by later lookups, not evictable), and the policy writes the new ones (host, SSD).
4. **decode**: one token an iteration for ``output_tokens - 1`` iterations; then ``r`` ends,
   releases its references to its blocks (they become evictable, tail first) and its GPU
   pool share. For per-session clocks the
   session's next turn arrives as its client sends it: ``max(its scheduled time, this end +
   its recorded think time)``, or ``max(this arrival + the trace's gap, this end)`` where the
   trace records no think time (:meth:`analyzers.replay.load.ThinkTime.next_arrival`).

An iteration takes the fitted prefill polynomial's constant, its linear term for every token
in the batch, its attention term for each prefill chunk (``k**2 + 2 k c`` after ``c`` tokens),
and the decodes' KV bytes read from HBM (each rank its own bytes) at the GPU's HBM bandwidth
(:mod:`analyzers.replay.timemodel`). A run of decode-only iterations is one event (it ends at
the first decode to finish, or at the iteration in flight when a request becomes ready).

A request whose prefix another request is still prefilling finds those blocks missing and
recomputes them, as engines' radix trees do (blocks are stored when a prefill completes).
Blocks found at lookup are delivered even if evicted meanwhile: engines pin what they load.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl

from .load import ThinkTime
from .spec import DEFAULT_ROUTER as DEFAULT_ROUTER  # the router names live with the settings
from .spec import ROUTERS as ROUTERS
from .spec import RunSpec, Store, StoreFactory
from .timemodel import (
    PREFILL_BASE_MS,
    PREFILL_LINEAR_MS,
    PREFILL_QUADRATIC_MS,
    EventQueue,
    LevelMeter,
    PsLink,
)
from .workload import Workload

#: Progress callback: requests finished so far.
ProgressFn = Callable[[int], None]

#: Why a request is rejected (never run): its KV (prompt + output) exceeds one worker's GPU
#: pool, or its context exceeds the model's maximum.
REJECT_GPU_POOL = 1
REJECT_CONTEXT = 2
REJECT_REASONS = {REJECT_GPU_POOL: "kv_exceeds_gpu_pool", REJECT_CONTEXT: "exceeds_max_context"}


def _run_s(k: int, a: float, b: float) -> float:
    """Seconds of ``k`` iterations whose j-th (from 0) takes ``a + b j``."""
    return k * a + b * k * (k - 1) / 2.0


def admission_order(starts: np.ndarray, seed: int) -> np.ndarray:
    """The order a concurrency run admits sessions (their first requests, ``starts``): the
    trace's own order for seed 0, so a run without replicas replays what the trace records;
    for any other seed a permutation drawn from ``numpy.random.default_rng(seed)``, so
    replicas at seeds ``s, s + 1, ...`` vary which sessions are active together
    (docs/simulator.md, "Replicas")."""
    if seed == 0:
        return starts
    return starts[np.random.default_rng(seed).permutation(starts.shape[0])]


class Policy(Protocol):
    """One storage policy (one module under ``policies/``; registered in ``POLICIES``)."""

    name: str

    def on_arrival(self, r: int, now: float) -> None: ...
    def pop_ready(self, w: int, now: float) -> int | None: ...
    def on_prefill_start(self, r: int, now: float) -> None: ...
    def on_prefill_done(self, r: int, now: float) -> None: ...
    def on_decode_done(self, r: int, now: float) -> None: ...
    def peaks(self) -> dict[str, int]: ...
    def extra(self) -> dict[str, Any]: ...


PolicyFactory = Callable[["Simulation"], Policy]


class ArrivalQueue:
    """A per-worker ready queue releasing the earliest arrival first."""

    def __init__(self, workers: int) -> None:
        self._heaps: list[list[tuple[float, int]]] = [[] for _ in range(workers)]

    def push(self, w: int, arrival_s: float, r: int) -> None:
        heapq.heappush(self._heaps[w], (arrival_s, r))

    def pop(self, w: int) -> int | None:
        h = self._heaps[w]
        return heapq.heappop(h)[1] if h else None


@dataclass
class RequestLog:
    """Per-request outcomes (lists, indexed by request)."""

    n: int
    arrival_s: list[float] = field(init=False)
    first_token_s: list[float] = field(init=False)
    delivered_blocks: list[int] = field(init=False)
    gpu_blocks: list[int] = field(init=False)
    host_blocks: list[int] = field(init=False)
    ssd_blocks: list[int] = field(init=False)
    copy_blocks: list[int] = field(init=False)
    ssd_read_bytes: list[int] = field(init=False)
    ssd_read_commands: list[int] = field(init=False)
    prefetch_s: list[float] = field(init=False)
    cancelled: list[bool] = field(init=False)
    # Phase times (seconds on the run's clock): loads done (queued for the worker), SSD read
    # started (after waiting for staging, window or queue), prefill started, decode done.
    ready_s: list[float] = field(init=False)
    read_start_s: list[float] = field(init=False)
    rejected: list[int] = field(init=False)  # 0, or a REJECT_* code
    start_s: list[float] = field(init=False)
    end_s: list[float] = field(init=False)

    def __post_init__(self) -> None:
        n = self.n
        self.arrival_s = [math.nan] * n
        self.first_token_s = [math.nan] * n
        self.delivered_blocks = [0] * n
        self.gpu_blocks = [0] * n
        self.host_blocks = [0] * n
        self.ssd_blocks = [0] * n
        self.copy_blocks = [0] * n
        self.ssd_read_bytes = [0] * n
        self.ssd_read_commands = [0] * n
        self.prefetch_s = [math.nan] * n
        self.cancelled = [False] * n
        self.ready_s = [math.nan] * n
        self.read_start_s = [math.nan] * n
        self.rejected = [0] * n
        self.start_s = [math.nan] * n
        self.end_s = [math.nan] * n


class Simulation:
    """One run of one policy at one load point: ``rate`` requests/s offered, or
    ``concurrency`` sessions kept active (a closed loop); the settings are ``spec``'s and the
    store is made by ``store_factory`` (a FastStore or a ReferenceStore)."""

    def __init__(
        self,
        workload: Workload,
        spec: RunSpec,
        policy_factory: PolicyFactory,
        *,
        rate: float = 0.0,
        concurrency: int | None = None,
        store_factory: StoreFactory,
        progress: ProgressFn | None = None,
    ) -> None:
        self.w = workload
        self.spec = spec
        hardware = spec.hardware
        self.hw = hardware
        self.rate = rate
        self.events = EventQueue()
        self.ssd_link = PsLink(self.events, cap=hardware.ssd_stream_share)
        self.ssd_write_bytes = 0
        self._writes = 0
        #: Staging bytes held (tiered: host staging; flat: the GPU read windows in use).
        self.staging = LevelMeter()
        self.log = RequestLog(workload.requests)
        self.progress = progress
        self.workers = workload.workers
        self.tp = workload.geometry.tp
        self.store: Store = self._make_store(store_factory)
        self.done = 0
        self._init_iterations()
        #: Sessions kept active at once (None: the load is the offered ``rate``).
        self.concurrency = concurrency
        self.think: ThinkTime = spec.think_time
        self.closed_loop = workload.closed_loop or self.concurrency is not None
        self.pending_sessions: deque[int] = deque()
        #: The next turn of each request's session (-1: the last); None on one clock.
        self.next_in_session: list[int] | None = None
        #: Each turn's time on its session's recorded schedule (NaN until known; a first
        #: turn's is its arrival), and its client's think time (NaN: not recorded).
        self.scheduled_s: list[float] = [math.nan] * workload.requests
        self.client_think_s: list[float] = (
            [math.nan] * workload.requests
            if workload.think_time_s is None
            else workload.think_time_s.tolist()
        )
        self.base = (
            workload.timestamps_s
            if self.concurrency is not None
            else workload.base_arrivals(rate, spec.seed)
        )
        # H2D: each of the instance's tp GPUs receives its rank's bytes over its own link.
        self.copy_bytes_per_s = hardware.host_to_gpu_effective_bytes_per_s * self.tp
        self._init_requests()
        # Routing (docs/simulator.md, "Routers"): the worker of each request, chosen at arrival.
        self.router = spec.router
        self.worker_of: list[int] = workload.worker.tolist()
        self.pending_prefill = [0] * self.workers  # new prompt blocks routed, not prefilled
        self.routed_new = [0] * workload.requests
        self._next_rr = 0
        self.policy = policy_factory(self)

    def _make_store(self, store_factory: StoreFactory) -> Store:
        """The node's capacities in blocks, and the store holding them."""
        workload, hardware = self.w, self.hw
        bb = workload.block_bytes
        self.block_bytes = bb
        # One rank's bytes of a block, and how many ranks' worth a layout stores: tp for
        # sharded KV (each rank its heads), 1 for MLA (every rank holds the same latent: one
        # copy is stored and read, and each rank's GPU receives it over its own link).
        self.rank_block_bytes = workload.block_tokens * workload.geometry.bytes_per_token_per_rank
        self.stored_ranks = max(1, bb // self.rank_block_bytes)
        self.gpu_blocks = hardware.gpu_kv_bytes // self.rank_block_bytes
        # Host memory: one pool for the node, or one per worker holding its share
        # (docs/simulator.md, "Topology"); capacities are one pool's.
        self.host_pools = self.workers if hardware.host_scope == "worker" else 1
        self.host_pool_bytes = hardware.host_memory_bytes // self.host_pools
        self.host_blocks = self.host_pool_bytes // bb
        self.ssd_blocks = hardware.ssd_bytes // bb
        return store_factory(
            num_blocks=workload.num_blocks,
            max_request_blocks=workload.max_request_blocks,
            workers=self.workers,
            gpu_blocks=self.gpu_blocks,
            host_blocks=self.host_blocks,
            host_pools=self.host_pools,
            ssd_blocks=self.ssd_blocks,
            blocks_per_bucket=max(1, hardware.bucket_bytes // bb),
            high_watermark=hardware.high_watermark,
            low_watermark=hardware.low_watermark,
            total_accesses=workload.block_accesses,
        )

    def _init_iterations(self) -> None:
        """The workers' iteration state (docs/simulator.md, "Batched prefill and decode")."""
        hardware = self.hw
        self.prefill_rate = hardware.prefill_tokens_per_s
        self.max_batched_tokens = hardware.max_batched_tokens
        self.chunk_tokens = hardware.prefill_chunk_tokens
        self.kv_s_per_token = self.w.geometry.bytes_per_token_per_rank / hardware.hbm_bytes_per_s
        # An iteration's constant and each token's seconds (the fitted model's, or 1 / rate).
        rate = self.prefill_rate
        self.iteration_base_s = 0.0 if rate is not None else PREFILL_BASE_MS / 1000.0
        self.token_s = 1.0 / rate if rate is not None else PREFILL_LINEAR_MS / 1000
        nw = self.workers
        n = self.w.requests
        self.prefilling: list[list[int]] = [[] for _ in range(nw)]
        self.pf_left = [0] * n  # prompt tokens still to compute
        self.pf_ctx = [0] * n  # tokens before its next chunk (cached + computed)
        self.pf_first = [False] * n  # its first chunk is yet to run (copies go with it)
        self.dec_heap: list[list[tuple[int, int]]] = [[] for _ in range(nw)]
        self.dec_join = [0] * n  # context at joining minus the worker's iteration count then
        self.ctx_base = [0] * nw  # sum of dec_join over the worker's decodes
        self.iters = [0] * nw  # iterations the worker has run
        self.run_end: list[float | None] = [None] * nw
        self.run_start = [0.0] * nw
        self.run_k = [0] * nw
        self.run_a = [0.0] * nw
        self.run_b = [0.0] * nw
        self.run_chunks: list[list[tuple[int, int]]] = [[] for _ in range(nw)]
        self.run_version = [0] * nw
        self.in_boundary = [False] * nw
        #: Seconds each worker ran iterations, and iterations that carried prefill tokens.
        self.busy_s = [0.0] * nw
        self.prefill_busy_s = [0.0] * nw

    def _init_requests(self) -> None:
        """The GPU pool running requests hold, and per-request constants."""
        hardware, workload = self.hw, self.w
        # GPU memory for running requests (docs/simulator.md, "GPU memory"): a request holds
        # its new prompt blocks until its prefill ends (then they are cached prefix blocks) and
        # its output blocks until its decode ends. One pool with the prefix cache (the cache
        # shrinks for them), or a separate one (gpu_running_kv_bytes).
        self.shared_pool = hardware.gpu_running_kv_bytes is None
        self.pool_blocks = (
            self.gpu_blocks
            if self.shared_pool
            else (hardware.gpu_running_kv_bytes or 0) // self.rank_block_bytes
        )
        self.running = [0] * self.workers
        self.blocked: list[int | None] = [None] * self.workers
        prompt = np.diff(workload.offsets)
        total = -(-(workload.input_tokens + workload.output_tokens) // workload.block_tokens)
        self.out_blocks = np.maximum(total - prompt, 0).tolist()
        self.kv_blocks = np.maximum(total, prompt).tolist()
        # Per-request constants as Python ints: the hot paths read them once or more a request.
        self.prompt_blocks: list[int] = prompt.tolist()
        self.input_tokens: list[int] = workload.input_tokens.tolist()
        # Each request's blocks as one view, made once: the store reads them three to five
        # times a request (lookup, routing, pin, unpin, writes).
        bounds = workload.offsets.tolist()
        block = workload.block
        self.blocks: list[np.ndarray] = [block[a:b] for a, b in itertools.pairwise(bounds)]
        self.output_tokens: list[int] = workload.output_tokens.tolist()
        info = workload.geometry.info
        self.max_context = info.max_context_tokens if info is not None else 0
        self.new_prompt = [0] * workload.requests

    # time of a host->GPU copy and of an SSD read, alone on their link ----------------------
    def copy_s(self, blocks: int) -> float:
        """Host->GPU copy of ``blocks``: each rank's bytes over its own link, in parallel."""
        return blocks * self.rank_block_bytes / self.hw.host_to_gpu_effective_bytes_per_s + (
            blocks * self.hw.host_to_gpu_segment_s
        )

    def ssd_work_s(self, nbytes: int, commands: int) -> float:
        return nbytes / self.hw.ssd_read_bytes_per_s + commands * self.hw.ssd_command_s

    def ssd_write(self, nbytes: int, now: float) -> None:
        """Write ``nbytes`` to SSD now: a transfer on the drives the reads use, so it slows
        them (large sequential writes: no per-command cost)."""
        if nbytes <= 0:
            return
        self.ssd_write_bytes += nbytes
        self._writes += 1
        work = nbytes / self.hw.ssd_write_rate
        self.ssd_link.add(("w", self._writes), work, now, None, kind="write")

    # the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        w = self.w
        if self.closed_loop:
            # The next turn of each request's session (a chain in analysis order).
            order = np.lexsort((np.arange(w.requests), w.session))
            nxt = np.full(w.requests, -1, dtype=np.int64)
            same = w.session[order[1:]] == w.session[order[:-1]]
            nxt[order[:-1][same]] = order[1:][same]
            self.next_in_session = nxt.tolist()
            firsts = np.ones(w.requests, dtype=np.bool_)
            firsts[nxt[nxt >= 0]] = False
            starts = np.flatnonzero(firsts)
        else:
            self.next_in_session = None
            starts = np.arange(w.requests)
        if self.concurrency is not None:
            # Closed loop over sessions: the first N start at t = 0, the rest as slots free,
            # in the trace's order (seed 0) or a seeded shuffle of it (which sessions overlap
            # is what a self-paced trace does not record: the replicas' randomness).
            starts = admission_order(starts, self.spec.seed)
            head = starts[: self.concurrency].tolist()
            self.pending_sessions = deque(starts[self.concurrency :].tolist())
            for r in head:
                self.events.push(0.0, self._arrive, r)
        else:
            base = self.base
            for r in starts.tolist():
                self.events.push(float(base[r]), self._arrive, r)
        self.events.run()

    def unloaded_arrivals(self) -> np.ndarray | None:
        """Every request's arrival on a node that served instantly (the offered rate's own
        schedule: a session's turn arrives its think time after the previous one); None in
        concurrency mode, where the node sets the pace by definition."""
        if self.concurrency is not None:
            return None
        base = np.asarray(self.base, dtype=np.float64)
        if self.next_in_session is None:
            return base.copy()
        ts = self.w.timestamps_s
        out = base.copy()
        nxt = self.next_in_session
        firsts = np.ones(len(nxt), dtype=np.bool_)
        chained = np.asarray(nxt, dtype=np.int64)
        firsts[chained[chained >= 0]] = False
        think = self.client_think_s
        for r in np.flatnonzero(firsts).tolist():
            q = nxt[r]
            scheduled = float(out[r])
            while q >= 0:
                # Served instantly: the response is out at the arrival.
                out[q], scheduled = self.think.next_arrival(
                    scheduled, float(out[r]), float(ts[q] - ts[r]), think[q], float(out[r])
                )
                r, q = q, nxt[q]
        return out

    def _arrive(self, now: float, r: Any) -> None:
        self.log.arrival_s[r] = now
        if math.isnan(self.scheduled_s[r]):  # a session's first turn: its schedule starts here
            self.scheduled_s[r] = now
        reason = self._reject_reason(r)
        if reason:
            self._reject(r, reason, now)
            return
        self._route(r)
        self.policy.on_arrival(r, now)

    def _route(self, r: int) -> None:
        """Choose ``r``'s worker (``sticky`` keeps the workload's: the session's worker)."""
        blocks = self.prompt_blocks[r]
        blk = self.blocks[r]
        cached: list[int] | None = None
        if self.router == "round-robin":
            w = self._next_rr
            self._next_rr = (w + 1) % self.workers
        elif self.router == "sticky":
            w = self.worker_of[r]
        else:
            home = int(self.w.worker[r])
            cached = self.store.gpu_prefixes(blk) if self.router == "kv-aware" else None
            best: tuple[int, int, int] | None = None
            for cand in range(self.workers):
                new = blocks - cached[cand] if cached is not None else 0
                # Dynamo's KV router: prefill blocks to compute plus blocks held by decoding
                # requests; least-loaded drops the overlap term. Ties: the session's worker.
                cost = new + self.pending_prefill[cand] + self.running[cand]
                key = (cost, 0 if cand == home else 1, cand)
                if best is None or key < best:
                    best = key
            assert best is not None
            w = best[2]
        self.worker_of[r] = w
        new_blocks = blocks - (cached[w] if cached is not None else self.store.gpu_prefix(blk, w))
        self.routed_new[r] = new_blocks
        self.pending_prefill[w] += new_blocks

    def _reject_reason(self, r: int) -> int:
        if self.kv_blocks[r] > self.pool_blocks:
            return REJECT_GPU_POOL
        tokens = self.input_tokens[r] + self.output_tokens[r]
        if self.max_context and tokens > self.max_context:
            return REJECT_CONTEXT
        return 0

    def _reject(self, r: int, reason: int, now: float) -> None:
        """``r`` never runs; its session goes on (the next turn after its think time)."""
        self.log.rejected[r] = reason
        self.done += 1
        if self.next_in_session is None:
            return
        q = self.next_in_session[r]
        if q >= 0:
            self.events.push(self._next_turn_arrival(r, q, now), self._arrive, q)
        elif self.concurrency is not None and self.pending_sessions:
            self._arrive(now, self.pending_sessions.popleft())

    def _next_turn_arrival(self, r: int, q: int, response_s: float) -> float:
        """When ``q``, the turn after ``r`` in its session, arrives; ``r``'s response (its
        decode end, or its rejection) was out at ``response_s``."""
        ts = self.w.timestamps_s
        arrival, self.scheduled_s[q] = self.think.next_arrival(
            self.scheduled_s[r],
            self.log.arrival_s[r],
            float(ts[q] - ts[r]),
            self.client_think_s[q],
            response_s,
        )
        return arrival

    def make_ready(self, r: int, now: float) -> None:
        """The policy says ``r``'s loads are over; start its worker if idle."""
        self.log.ready_s[r] = now
        self.try_start(self.worker_of[r], now)

    def read_started(self, r: int, now: float) -> None:
        """The policy started ``r``'s SSD read (its wait for staging or a window is over)."""
        self.log.read_start_s[r] = now

    # the worker: iterations of batched, chunked prefill and decode ----------------------------
    def try_start(self, w: int, now: float) -> None:
        """A request became ready on ``w``: admit it now if the worker is idle; if it is in a
        run of decode-only iterations, end that run at the iteration in flight (admission
        happens at iteration boundaries); a worker in a mixed iteration admits at its end."""
        if self.in_boundary[w]:
            return
        if self.run_end[w] is None:
            self._admit(w, now)
            self._next_run(w, now)
        elif self.run_k[w] > 1:
            self._cut_run(w, now)

    def _admit(self, w: int, now: float) -> None:
        """Admit ready requests while the GPU pool holds them (policy order; the first that
        does not fit blocks the worker's queue until running requests end)."""
        log = self.log
        while True:
            r = self.blocked[w]
            if r is None:
                r = self.policy.pop_ready(w, now)
                if r is None:
                    return
            # Its new prompt blocks and its output must fit beside the running ones.
            new = self.prompt_blocks[r] - log.gpu_blocks[r]
            need = new + self.out_blocks[r]
            if not self._fits(w, r, need):
                self.blocked[w] = r
                return
            self.blocked[w] = None
            self.new_prompt[r] = new
            self._hold(w, need)
            self.policy.on_prefill_start(r, now)
            log.start_s[r] = now
            inp = self.input_tokens[r]
            cached = min(log.delivered_blocks[r] * self.w.block_tokens, inp)
            self.pf_left[r] = inp - cached
            self.pf_ctx[r] = cached
            self.pf_first[r] = True
            self.prefilling[w].append(r)

    def _next_run(self, w: int, now: float) -> None:
        """Start ``w``'s next run: one iteration carrying prefill chunks (the running decodes
        ride along), or decode-only iterations up to the first decode to finish."""
        decoders = len(self.dec_heap[w])
        base = self.iteration_base_s
        per_token = self.token_s
        # KV bytes read by the decodes of the next iteration (each rank its rank's bytes).
        context = self.ctx_base[w] + decoders * self.iters[w]
        kv_s = context * self.kv_s_per_token
        chunks: list[tuple[int, int]] = []
        if self.prefilling[w]:
            budget = max(0, self.max_batched_tokens - decoders)
            compute = 0.0
            copies = 0
            for r in self.prefilling[w]:
                left = self.pf_left[r]
                k = min(left, self.chunk_tokens, budget)
                if k == 0 and left > 0:
                    continue
                budget -= k
                chunks.append((r, k))
                ctx = self.pf_ctx[r]
                if self.prefill_rate is None:
                    compute += (
                        PREFILL_LINEAR_MS * k + PREFILL_QUADRATIC_MS * (k * k + 2.0 * k * ctx)
                    ) / 1000.0
                else:
                    compute += k / self.prefill_rate
                if self.pf_first[r]:
                    self.pf_first[r] = False
                    copies += self.log.copy_blocks[r]
            if chunks:
                t = base + compute + decoders * per_token + kv_s
                if copies:
                    t += self.copy_s(copies)
                self._start_run(w, now, 1, t, 0.0, chunks)
                return
        if decoders == 0:
            self.run_end[w] = None
            return
        # Decode only: iteration j (from 0) takes a + b j (every decode's context grows by one
        # token an iteration); run until the first decode finishes.
        k = self.dec_heap[w][0][0] - self.iters[w]
        a = base + decoders * per_token + kv_s
        b = decoders * self.kv_s_per_token
        self._start_run(w, now, k, a, b, chunks)

    def _start_run(
        self, w: int, now: float, k: int, a: float, b: float, chunks: list[tuple[int, int]]
    ) -> None:
        self.run_start[w] = now
        self.run_k[w] = k
        self.run_a[w] = a
        self.run_b[w] = b
        self.run_chunks[w] = chunks
        end = now + _run_s(k, a, b)
        self.run_end[w] = end
        self.run_version[w] += 1
        self.events.push(end, self._run_done, (w, self.run_version[w]))

    def _cut_run(self, w: int, now: float) -> None:
        """End ``w``'s decode-only run at the boundary of the iteration in flight at ``now``."""
        a, b, k, s = self.run_a[w], self.run_b[w], self.run_k[w], self.run_start[w]
        elapsed = now - s
        # Iterations complete by now: the largest j with a j + b j (j - 1) / 2 <= elapsed.
        if b > 0:
            j = int((-(a - b / 2) + math.sqrt((a - b / 2) ** 2 + 2 * b * elapsed)) / b)
        else:
            j = int(elapsed / a) if a > 0 else k
        j = max(0, min(j, k))
        while j > 0 and _run_s(j, a, b) > elapsed:
            j -= 1
        while j < k and _run_s(j + 1, a, b) <= elapsed:
            j += 1
        cut = min(j + 1, k)
        if cut >= k:
            return
        self.run_k[w] = cut
        end = s + _run_s(cut, a, b)
        self.run_end[w] = end
        self.run_version[w] += 1
        self.events.push(end, self._run_done, (w, self.run_version[w]))

    def _run_done(self, now: float, arg: Any) -> None:
        w, version = arg
        if version != self.run_version[w]:
            return
        k = self.run_k[w]
        span = now - self.run_start[w]
        self.busy_s[w] += span
        chunks = self.run_chunks[w]
        if chunks:
            self.prefill_busy_s[w] += span
        self.in_boundary[w] = True
        self.iters[w] += k
        heap = self.dec_heap[w]
        while heap and heap[0][0] <= self.iters[w]:
            _, r = heapq.heappop(heap)
            self.ctx_base[w] -= self.dec_join[r]
            self._decode_done(now, r)
        for r, tokens in chunks:
            self.pf_left[r] -= tokens
            self.pf_ctx[r] += tokens
            if self.pf_left[r] == 0:
                self.prefilling[w].remove(r)
                self._prefill_done(now, r)
        self.in_boundary[w] = False
        self.run_end[w] = None
        self._admit(w, now)
        self._next_run(w, now)

    def _hold(self, w: int, blocks: int) -> None:
        """Running requests on ``w`` take (> 0) or give back (< 0) ``blocks`` of the pool; in a
        shared pool the prefix cache shrinks to what is left."""
        self.running[w] += blocks
        if self.shared_pool and blocks > 0:
            self.store.gpu_trim(w, self.pool_blocks - self.running[w])

    def _fits(self, w: int, r: int, need: int) -> bool:
        """Whether ``r``, taking ``need`` blocks of the pool, fits beside what ``w``'s running
        requests hold: their own blocks and, in the shared pool, the cached blocks they
        reference."""
        held = self.running[w] + (self.store.gpu_pinned(w) if self.shared_pool else 0)
        return held + need <= self.pool_blocks

    def _cache_cap(self, w: int) -> int:
        return self.gpu_blocks - self.running[w] if self.shared_pool else self.gpu_blocks

    def _prefill_done(self, now: float, r: int) -> None:
        """``r``'s last prompt chunk is done: its first token is out; it decodes from the
        next iteration on (``output_tokens - 1`` more iterations)."""
        log = self.log
        log.first_token_s[r] = now
        w = self.worker_of[r]
        # The prompt's blocks are now cached prefix blocks that later requests can find,
        # referenced by r until its last token (each decode step reads them), so not evictable
        # until then: vLLM's KV cache manager, SGLang's radix cache and Dynamo's mocker hold a
        # running request's blocks until it finishes. They move from r's share of the pool to
        # the cache's referenced blocks, one count of the same memory.
        self.pending_prefill[w] -= self.routed_new[r]
        if self.shared_pool:
            self._hold(w, -self.new_prompt[r])
            self.store.gpu_pin(self.blocks[r], w, self._cache_cap(w))
        else:
            # A pool of its own: r's KV stays charged there until its last token, and the
            # prefix cache keeps a copy of its own (evictable).
            self.store.gpu_insert(self.blocks[r], w, self._cache_cap(w))
        self.policy.on_prefill_done(r, now)
        self.done += 1
        if self.progress is not None and self.done % 1024 == 0:
            self.progress(self.done)
        more = self.output_tokens[r] - 1
        if more <= 0:
            self._decode_done(now, r)
            return
        # Its context when it joins: the prompt and its first token; it grows one an iteration.
        join = self.input_tokens[r] + 1 - self.iters[w]
        self.dec_join[r] = join
        self.ctx_base[w] += join
        heapq.heappush(self.dec_heap[w], (self.iters[w] + more, r))

    def _decode_done(self, now: float, r: int) -> None:
        log = self.log
        log.end_s[r] = now
        self.policy.on_decode_done(r, now)
        w = self.worker_of[r]
        if self.shared_pool:
            self._hold(w, -self.out_blocks[r])
            self.store.gpu_unpin(self.blocks[r], w, self._cache_cap(w))
        else:
            self._hold(w, -(self.out_blocks[r] + self.new_prompt[r]))
        if self.next_in_session is not None:
            q = self.next_in_session[r]
            if q >= 0:
                # The next turn needs this turn's output: not before it ends.
                self.events.push(self._next_turn_arrival(r, q, now), self._arrive, q)
            elif self.concurrency is not None and self.pending_sessions:
                # The session's last turn is done: its slot goes to the next session waiting.
                self.events.push(now, self._arrive, self.pending_sessions.popleft())
        if self.blocked[w] is not None:
            self.try_start(w, now)

    # results -------------------------------------------------------------------------------
    def request_table(self) -> pl.DataFrame:
        log = self.log
        w = self.w
        arrival = np.array(log.arrival_s)
        first = np.array(log.first_token_s)
        delivered = np.array(log.delivered_blocks, dtype=np.int64)
        cached = np.minimum(delivered * w.block_tokens, w.input_tokens)
        return pl.DataFrame(
            {
                "request_index": np.arange(w.requests, dtype=np.int64),
                "session_index": w.session,
                "turn": w.turn,
                "worker": np.array(self.worker_of, dtype=np.int64),
                "arrival_s": arrival,
                "first_token_s": first,
                "ttft_s": first - arrival,
                "blocks": np.diff(w.offsets),
                "delivered_blocks": delivered,
                "gpu_blocks": np.array(log.gpu_blocks, dtype=np.int64),
                "host_blocks": np.array(log.host_blocks, dtype=np.int64),
                "ssd_blocks": np.array(log.ssd_blocks, dtype=np.int64),
                "recomputed_tokens": w.input_tokens - cached,
                "ssd_read_bytes": np.array(log.ssd_read_bytes, dtype=np.int64),
                "ssd_read_commands": np.array(log.ssd_read_commands, dtype=np.int64),
                "prefetch_s": np.array(log.prefetch_s),
                "cancelled": np.array(log.cancelled, dtype=np.bool_),
                "copy_blocks": np.array(log.copy_blocks, dtype=np.int64),
                "rejected": pl.Series(
                    [REJECT_REASONS.get(x) for x in log.rejected], dtype=pl.String
                ),
                "ready_s": np.array(log.ready_s),
                "read_start_s": np.array(log.read_start_s),
                "start_s": np.array(log.start_s),
                "end_s": np.array(log.end_s),
            }
        ).with_columns(pl.col("prefetch_s", "read_start_s").fill_nan(None))
