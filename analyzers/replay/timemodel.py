"""Time model: prefill, decode, and processor-sharing links.

**Prefill** of ``n`` new tokens after ``c`` tokens delivered from cache (milliseconds):

    t_ms = 16.5 + 1.518e-2 * n + 4.21e-7 * (n**2 + 2*n*c)

The constant and the coefficients are Dynamo mocker's fitted prefill polynomial
(``lib/mocker/src/perf_model.rs``: ``4.21e-7 n^2 + 1.518e-2 n + 16.5``, model and GPU not
stated; about 48 K tokens/s at 8 K tokens). The quadratic term is attention: ``n`` new tokens
attend to ``c + n`` earlier ones, ``n*c + n**2/2`` pairs, so the fit's ``n**2`` (``n**2/2``
pairs with no cache) becomes ``n**2 + 2*n*c`` (derived here). The fit does not depend on the
model, which is a limitation: ``--prefill-tokens-per-s R`` replaces it by ``n / R`` seconds.

**Iterations** (:mod:`analyzers.replay.engine`): a worker computes in iterations that batch
prefill chunks and decodes. One iteration with prefill chunks ``k_i`` (after ``c_i`` tokens
each) and ``D`` decodes whose contexts sum to ``C`` tokens takes, in milliseconds,

    16.5 + 1.518e-2 * (sum k_i + D) + 4.21e-7 * sum (k_i**2 + 2*k_i*c_i)
         + 1000 * C * kv_bytes_per_token_per_rank / hbm_bytes_per_s

plus the host->GPU copies of the requests whose first chunk it carries. The constant is paid
once per iteration (the forward pass), the linear term per token, the attention term per
chunk (summed over a request's chunks it is the unchunked ``n**2 + 2*n*c``: chunking costs only
the extra constants), and a decode's attention is the read of its KV from HBM (memory bound:
the polynomial's attention term, fitted on prefill, would charge a 100 K-token context 84 us
against the 2.7 ms its 13 GB take at 4.8 TB/s for llama-3.1-8b). With
``--prefill-tokens-per-s R`` every computed token costs ``1/R`` and there is no constant.

**Links** share their bandwidth among active transfers (processor sharing, as Dynamo's mocker
models its tiers, ``bandwidth_sharing_model.rs``): a transfer's work is its time alone on the
link (bytes at the bandwidth plus per-command costs); with N transfers active each advances
at 1/N.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

PREFILL_BASE_MS = 16.5
PREFILL_LINEAR_MS = 1.518e-2
PREFILL_QUADRATIC_MS = 4.21e-7


def prefill_s(new_tokens: int, cached_tokens: int, tokens_per_s: float | None = None) -> float:
    """Seconds to prefill ``new_tokens`` with ``cached_tokens`` already in GPU memory."""
    if tokens_per_s is not None:
        return new_tokens / tokens_per_s
    n = float(new_tokens)
    return (
        PREFILL_BASE_MS
        + PREFILL_LINEAR_MS * n
        + PREFILL_QUADRATIC_MS * (n * n + 2.0 * n * float(cached_tokens))
    ) / 1000.0


class EventQueue:
    """A heap of ``(time_s, seq, callback, arg)``; ties run in the order they were pushed."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[float, object], None], object]] = []
        self._seq = 0
        self.now = 0.0

    def push(self, time_s: float, callback: Callable[[float, object], None], arg: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_s, self._seq, callback, arg))

    def run(self) -> None:
        heap = self._heap
        while heap:
            t, _, cb, arg = heapq.heappop(heap)
            self.now = t
            cb(t, arg)


# Transfers within this much work (seconds at the full rate) of the one due finish together.
_EPS_S = 1e-9


class PsLink:
    """A processor-sharing link with a per-transfer cap.

    ``add`` a transfer of ``work_s`` seconds (alone on the link, uncapped). With N transfers
    active each advances at ``min(cap, 1/N)`` of the link: ``cap`` (0 < cap <= 1) is the most
    one transfer may take, e.g. one drive of eight (a session file on one drive reads at that
    drive's bandwidth however idle the others are). ``used_s[kind]`` integrates the share of the
    link's capacity each kind of transfer used (``"read"``, ``"write"``), so ``used_s / span``
    is the link's utilisation by that kind; ``busy_s`` the time anything was active.
    """

    def __init__(self, events: EventQueue, cap: float = 1.0) -> None:
        if not 0 < cap <= 1:
            raise ValueError(f"PsLink: cap must be in (0, 1]; got {cap!r}")
        self._events = events
        self._cap = cap
        self._active: dict[Hashable, float] = {}
        self._done: dict[Hashable, Callable[[float], None] | None] = {}
        self._kind: dict[Hashable, str] = {}
        self._last = 0.0
        self._version = 0
        self.busy_s = 0.0
        self.used_s: dict[str, float] = {"read": 0.0, "write": 0.0}

    @property
    def active(self) -> int:
        return len(self._active)

    def _rate(self) -> float:
        return min(self._cap, 1.0 / len(self._active))

    def _advance(self, now: float) -> None:
        n = len(self._active)
        if n and now > self._last:
            rate = self._rate()
            step = (now - self._last) * rate
            for k in self._active:
                self._active[k] -= step
                self.used_s[self._kind[k]] += step
            self.busy_s += now - self._last
        self._last = now

    def _reschedule(self, now: float) -> None:
        self._version += 1
        if self._active:
            least = min(self._active.values())
            self._events.push(now + max(least, 0.0) / self._rate(), self._on_event, self._version)

    def add(
        self,
        key: Hashable,
        work_s: float,
        now: float,
        done: Callable[[float], None] | None,
        kind: str = "read",
    ) -> None:
        """Start a transfer; ``done(t)`` (if any) runs when it completes."""
        self._advance(now)
        self._active[key] = work_s
        self._done[key] = done
        self._kind[key] = kind
        self._reschedule(now)

    def cancel(self, key: Hashable, now: float) -> float:
        """Stop a transfer; the work it had left (seconds alone on the link)."""
        self._advance(now)
        left = self._active.pop(key)
        del self._done[key]
        del self._kind[key]
        self._reschedule(now)
        return max(left, 0.0)

    def _on_event(self, now: float, version: object) -> None:
        if version != self._version:
            return
        self._advance(now)
        # This event was scheduled for the transfer with the least work left: it is due now
        # (whatever float rounding left of it), and so is any other within a nanosecond of it.
        least = min(self._active.values())
        finished = [k for k, v in self._active.items() if v <= least + _EPS_S]
        callbacks = []
        for k in finished:
            del self._active[k]
            del self._kind[k]
            callbacks.append(self._done.pop(k))
        self._reschedule(now)
        for cb in callbacks:
            if cb is not None:
                cb(now)


class LevelMeter:
    """A level over time (bytes held, say): its peak and its time integral.

    ``set(now, level)`` records that the level is ``level`` from ``now`` on; the mean over a
    span is :meth:`integral` / span (the level before the first ``set`` is 0).
    """

    def __init__(self) -> None:
        self.level = 0
        self.peak = 0
        self._since = 0.0
        self._integral = 0.0

    def set(self, now: float, level: int) -> None:
        if self.level:
            self._integral += self.level * (now - self._since)
        self.level = level
        self._since = now
        if level > self.peak:
            self.peak = level

    def integral(self, until: float) -> float:
        """Level x seconds from time 0 to ``until`` (>= the last ``set``)."""
        return self._integral + (self.level * (until - self._since) if self.level else 0.0)
