"""A replay of sampled sessions (issue #19): the JSON ``sampling`` object and its stated error.

Sessions are chosen by :mod:`fcctl.analyzers.traces.sampling` (whole sessions, by the hash
``fcctl convert --partition-by session-hash`` uses). **Load**: the offered rate
(``--rate``/``--rates``, ``auto`` included) and ``--concurrency`` are per node and kept as
given, so the sampled run offers each worker the full run's load on the same node, over
``1 / request_fraction`` times fewer requests. Scaling the rate by the sampled fraction on the
same workers would offer each worker that fraction of the load; measured, it gives larger
errors (docs/benchmarks.md, "Issue #19: session sampling"). ``--concurrency all`` is the
exception: every *kept* session at once, so that fraction of the full run's sessions.

Figures are the sample's own: counts and bytes (``requests``, ``ssd_read_bytes``, ...) are
those of the kept requests; ``scale_to_full`` (``1 / request_fraction``) estimates the full
trace's. Shares and times (``gpu_hit_share``, TTFT) estimate the full run's directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..traces.sampling import METHOD, SessionSample

#: What ``measured_error`` holds when the replicas did not measure it: one replica, or a
#: dataset's sample (one set of sessions for every replica). The table of errors measured on
#: other traces (benchmarks/sample_error.py, docs/benchmarks.md "Issue #19: session sampling")
#: is no longer quoted: it did not describe the trace being sampled (issue #36 item 17).
NOT_MEASURED: Literal["not measured"] = "not measured"


@dataclass(frozen=True)
class KeptTotal:
    kept: int
    total: int


@dataclass(frozen=True)
class SampleError:
    """The sampling error measured across the replicas of this trace's sample (each replica
    samples other sessions; ``measured_on`` says how many): the range of GPU hit share
    (served, percentage points) and the relative range of mean and p99 TTFT and of SSD read
    bytes (scaled by ``scale_to_full``); the largest over policies and load points
    (:func:`fcctl.analyzers.replay.replicas.replica_error`)."""

    gpu_hit_share_abs_pp: float
    ttft_mean_rel: float
    ttft_p99_rel: float
    ssd_read_bytes_rel: float
    measured_on: str


@dataclass(frozen=True)
class LoadScaling:
    """How the sampled run's load relates to the full run's (module docstring)."""

    method: str
    rate_factor: float
    concurrency_factor: float
    note: str


@dataclass(frozen=True)
class SessionSampling:
    """The JSON ``sampling`` object of a replay, a recommendation or a plan run on a sample."""

    method: str
    sample_sessions: float
    sessions: KeptTotal
    requests: KeptTotal
    block_accesses: KeptTotal
    request_fraction: float
    scale_to_full: float | None
    load_scaling: LoadScaling
    measured_error: SampleError | Literal["not measured"]
    sampled_figures: str
    #: The trace the sessions were drawn from (``fcctl report`` reconciles with it); the
    #: document's ``trace`` describes the kept requests. None for a dataset (not computed).
    source_fingerprint: str | None


LOAD_SCALING = LoadScaling(
    method="same-node-load",
    rate_factor=1.0,
    concurrency_factor=1.0,
    note="rates and concurrency are per node and kept as given: each worker sees the full "
    "run's load over fewer requests ('all' is every kept session at once)",
)


def session_sampling(
    sample: SessionSample, error: SampleError | Literal["not measured"] = NOT_MEASURED
) -> SessionSampling:
    """The ``sampling`` object for what :mod:`fcctl.analyzers.traces.sampling` kept, with the
    ``error`` the replicas measured (not measured unless given)."""
    fraction = sample.request_fraction
    return SessionSampling(
        method=METHOD,
        sample_sessions=sample.rate,
        sessions=KeptTotal(sample.sessions_kept, sample.sessions_total),
        requests=KeptTotal(sample.requests_kept, sample.requests_total),
        block_accesses=KeptTotal(sample.block_accesses_kept, sample.block_accesses_total),
        request_fraction=fraction,
        scale_to_full=1 / fraction if fraction else None,
        load_scaling=LOAD_SCALING,
        measured_error=error,
        sampled_figures="every simulated figure: shares and times estimate the full trace's, "
        "counts and bytes are the sample's (x scale_to_full for the full trace's)",
        source_fingerprint=sample.source_fingerprint,
    )


def sampled_label(sampling: SessionSampling | None) -> str | None:
    """``"sampled: 10 % of sessions (76 of 710)"`` for terminal output; None when unsampled."""
    if sampling is None:
        return None
    pct = f"{100 * sampling.sample_sessions:.3g}"
    s = sampling.sessions
    err = sampling.measured_error
    stated = (
        "sampling error not measured (one sample: run --replicas 3 or more to measure it)"
        if isinstance(err, str)
        else f"sampling error across replicas up to {err.gpu_hit_share_abs_pp:.2g} pp hit share, "
        f"{100 * err.ttft_mean_rel:.2g} % mean TTFT, {100 * err.ttft_p99_rel:.2g} % p99 TTFT"
    )
    return f"sampled: {pct} % of sessions ({s.kept:,} of {s.total:,}); {stated}"
