"""The adapters' two monitors, live: counters and histograms of what each load and store did.

The design's step 2 for a team running an engine is to watch, as load rises, the hit rate
actually delivered to the GPU and how often loads fail or are cancelled. Every adapter keeps an
:class:`AdapterMetrics` (the store's :class:`.common.SessionKV` owns one; the vLLM adapter its
own) and counts, per rank:

* ``blocks_looked_up`` / ``blocks_hit``: blocks (chunks, pages) the engine asked about, and how
  many of them a lookup found (the promised hit share);
* ``blocks_delivered``: blocks a load handed to the engine, complete and checked, before the
  engine needed them (a synchronous load delivers in time or fails; an asynchronous one that
  the engine cancelled counts in ``loads_cancelled`` instead);
* ``loads``, ``loads_failed``, ``loads_cancelled``, ``blocks_failed``;
* ``bytes_read`` / ``bytes_written``: KV bytes restored from the disk tier / written to it;
* ``stores``, ``stores_failed`` (background writes that did not make it: reported to the engine
  on its next call as well);
* ``sessions_reclaimed``: sessions dropped whole (watermark, engine eviction, damage);
* the histograms ``load_seconds`` (one load, lookup to delivered) and ``segments_per_session``
  (a session's stored segments at the time of each store: turns kept whole give one per turn).

:meth:`AdapterMetrics.stats` returns them as a plain dict (no dependency); with
``prometheus_client`` installed, :meth:`AdapterMetrics.register` adds a collector to a registry
(default the process's) that reads the same numbers at each scrape, named in the engine's own
style: ``lmcache:flatcake_...`` (LMCache's ``lmcache:num_hit_tokens``), ``vllm:flatcake_...``,
``sglang:flatcake_...``. ``prometheus_client`` is imported only there, so the core still needs
only numpy.
"""

from __future__ import annotations

import bisect
import importlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

#: Metric name prefixes: each engine's own style (its metric modules name theirs so).
PREFIXES = {"lmcache": "lmcache:flatcake_", "vllm": "vllm:flatcake_", "sglang": "sglang:flatcake_"}

COUNTERS = {
    "blocks_looked_up": "KV blocks the engine looked up in the FlatCake store",
    "blocks_hit": "KV blocks a lookup found stored",
    "blocks_delivered": "KV blocks a load delivered to the engine, complete and verified",
    "blocks_failed": "KV blocks of loads that failed",
    "loads": "loads (restores) the engine started",
    "loads_failed": "loads that failed (damaged, missing or unreadable KV)",
    "loads_cancelled": "loads the engine cancelled before they were delivered",
    "bytes_read": "KV bytes restored from the disk tier",
    "bytes_written": "KV bytes written to the disk tier",
    "stores": "stores (turns) the engine submitted",
    "stores_failed": "submitted stores that were not written",
    "sessions_reclaimed": "sessions dropped whole (watermark, engine eviction, damage)",
}

#: Histogram buckets (upper bounds); the last bucket is +Inf.
LOAD_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SEGMENTS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HISTOGRAMS = {
    "load_seconds": ("seconds one load took, lookup to delivered", LOAD_SECONDS_BUCKETS),
    "segments_per_session": ("a session's stored segments, at each store", SEGMENTS_BUCKETS),
}


class Histogram:
    """Counts per bucket (cumulative when read), their sum and count; not thread-safe alone."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations <= it)`` pairs, Prometheus style (``+Inf`` last)."""
        out, total = [], 0
        for bound, n in zip([*map(repr, self.bounds), "+Inf"], self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class AdapterMetrics:
    """One adapter's counters and histograms (module docstring); thread-safe."""

    def __init__(self, engine: str) -> None:
        if not engine.isidentifier():
            raise ValueError(f"engine: a name like 'lmcache' (letters, digits, _); got {engine!r}")
        self.engine = engine
        self.prefix = PREFIXES.get(engine, f"{engine}:flatcake_")
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._histograms = {name: Histogram(b) for name, (_, b) in HISTOGRAMS.items()}

    def add(self, counter: str, value: int = 1) -> None:
        with self._lock:
            self._counters[counter] += int(value)

    def observe(self, histogram: str, value: float) -> None:
        with self._lock:
            self._histograms[histogram].observe(value)

    def stats(self) -> dict[str, Any]:
        """Every counter, and each histogram as ``{"count", "sum", "buckets"}`` (cumulative
        counts by upper bound); ``delivered_hit_share`` is delivered over looked-up blocks."""
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
            for name, h in self._histograms.items():
                out[name] = {"count": h.count, "sum": h.sum, "buckets": dict(h.cumulative())}
        looked = out["blocks_looked_up"]
        out["delivered_hit_share"] = out["blocks_delivered"] / looked if looked else 0.0
        return out

    def collect(self) -> Iterator[Any]:
        """Prometheus metric families of the current numbers (``prometheus_client``'s
        collector protocol)."""
        return _families(self.prefix, [self.stats()])

    def register(self, registry: Any = None) -> Any:
        """Export these metrics alone through ``prometheus_client`` (a collector on
        ``registry``, default the process's ``REGISTRY``); returns the registry. Needs
        ``prometheus_client``."""
        target = _registry(registry)
        target.register(self)
        return target


def _registry(registry: Any) -> Any:
    try:
        prometheus_client = importlib.import_module("prometheus_client")
    except ImportError as e:
        raise ImportError(
            f"registry: exporting the FlatCake metrics needs prometheus_client ({e}); "
            "pip install prometheus_client, or read stats() instead"
        ) from e
    return prometheus_client.REGISTRY if registry is None else registry


def _families(prefix: str, stats: list[dict[str, Any]]) -> Iterator[Any]:
    """Counter and histogram families of the sum of ``stats`` (one per adapter)."""
    core = importlib.import_module("prometheus_client.core")
    for name, doc in COUNTERS.items():
        family = core.CounterMetricFamily(prefix + name, doc)
        family.add_metric([], sum(s[name] for s in stats))
        yield family
    for name, (doc, bounds) in HISTOGRAMS.items():
        buckets = {b: 0 for b in [*map(repr, map(float, bounds)), "+Inf"]}
        for s in stats:
            for b, n in s[name]["buckets"].items():
                buckets[b] += n
        yield core.HistogramMetricFamily(
            prefix + name,
            doc,
            buckets=list(buckets.items()),
            sum_value=sum(s[name]["sum"] for s in stats),
        )


class _Combined:
    """Every live adapter of one engine in this process, summed at each scrape (an engine may
    run several, e.g. tensor-parallel ranks in one process, or vLLM's scheduler and worker
    halves)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.members: weakref.WeakSet[AdapterMetrics] = weakref.WeakSet()

    def collect(self) -> Iterator[Any]:
        return _families(self.prefix, [m.stats() for m in list(self.members)])


_COMBINED: dict[tuple[int, str], _Combined] = {}
_COMBINED_LOCK = threading.Lock()


def register_if_available(metrics: AdapterMetrics, registry: Any = None) -> bool:
    """Export ``metrics`` when ``prometheus_client`` is installed (the engines run it), summed
    with the other adapters of its engine in this process under one set of names; ``False``
    when it is not installed (the numbers stay in ``stats()``)."""
    try:
        target = _registry(registry)
    except ImportError:
        return False
    with _COMBINED_LOCK:
        combined = _COMBINED.get((id(target), metrics.prefix))
        if combined is None:
            combined = _COMBINED[(id(target), metrics.prefix)] = _Combined(metrics.prefix)
            target.register(combined)
        combined.members.add(metrics)
    return True


__all__ = [
    "COUNTERS",
    "HISTOGRAMS",
    "PREFIXES",
    "AdapterMetrics",
    "Histogram",
    "register_if_available",
]
