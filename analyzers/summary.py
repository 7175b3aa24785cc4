"""The result vocabulary every document that names a trace shares: its ``trace`` and ``kv`` objects.

One definition each, imported by ``fcctl analyze`` (:mod:`fcctl.analyzers.reuse.analyze`) and
``fcctl replay`` (:mod:`fcctl.analyzers.replay`); this module imports nothing else of
``fcctl.analyzers``, so neither depends on the other for it. Field names are the JSON keys, in
their order (``fcctl.common.jsonio``).

* :class:`TraceSummary` is replay's ``trace`` object, the keys every trace summary has;
  ``fcctl analyze`` states more about the trace (its schedule, sampling, dataset) and extends
  it (:class:`fcctl.analyzers.reuse.analyze.AnalysisTraceSummary`), keeping its own key order.
* :class:`KvSummary` is replay's ``kv`` object; ``fcctl analyze`` adds one rank's bytes per
  token and the geometry in words
  (:class:`fcctl.analyzers.reuse.analyze.AnalysisKvSummary`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TraceSummary:
    """The JSON ``trace`` object: which trace was read (``path``: the file) and its size.

    ``block_accesses`` and ``distinct_blocks`` are None for a trace without block hashes (only
    ``fcctl analyze`` reads one); ``duration_s`` is the longest session's span for a trace on
    per-session clocks, None for fewer than two requests. ``fingerprint``: which trace
    (:mod:`fcctl.analyzers.traces.fingerprint`); None where the requests were never all in
    memory at once (the bounded and Dask analyses).
    """

    path: str
    format: str
    requests: int
    sessions: int | None
    sessions_inferred: bool
    block_size_tokens: int
    block_accesses: int | None
    distinct_blocks: int | None
    duration_s: float | None
    fingerprint: str | None = None


@dataclass(frozen=True)
class KvSummary:
    """The JSON ``kv`` object: the KV geometry the byte figures are in.

    ``bytes_per_token`` and ``block_bytes`` are node totals over the ``tp`` ranks (an MLA latent
    once), what a shared tier holds; ``block_bytes`` is None for a trace without block hashes.
    ``dtype_bytes``: bytes per KV element (2: bf16/fp16, 1: fp8).
    """

    model: str
    bytes_per_token: int
    block_bytes: int | None
    tp: int
    dtype_bytes: int
