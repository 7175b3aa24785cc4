"""Session sampling: keep whole sessions chosen by a hash of their id (issue #19).

**The rule.** A session is kept at rate ``R`` (0 < R <= 1) when :func:`session_hash` of its
id, the one hash ``fcctl convert --partition-by session-hash`` buckets by (the first 8 bytes of
the BLAKE2b digest of the UTF-8 id, ``digest_size=8``, big-endian unsigned), is below
``floor(R x 2^64)`` (:func:`fcctl.analyzers.reuse.shards.rate_threshold`, SHARDS' threshold
rule). So:

* every request of a kept session is kept, and only those (whole sessions);
* the same sessions are kept on every machine and in every run with the same salt (default
  0: the unsalted hash), and a file and the dataset cut from it keep the same requests; a
  replica's seed as the salt keeps other sessions (:func:`session_hash`);
* sampling nests: a trace sampled at ``a`` carries ``session_sample_rate = a``, and sampling
  it again at ``b`` keeps the hashes below ``floor(a*b x 2^64)``, exactly the sessions a
  single sampling at ``a*b`` keeps (the kept hashes are those below the smaller threshold).
  This holds for requests with session ids; a request without one is keyed by its index in
  the trace given (below), which a first sampling renumbers.

**Requests without a session id** (Mooncake, or a null id among ids) are each a session of
their own, keyed ``"\\x00request-{request_index}"`` (the key
:func:`fcctl.analyzers.reuse.sessions.session_index_from_ids` gives them). The replay infers
sessions for such traces from prefix chains after sampling, so a kept request whose
predecessor was dropped starts a chain of its own: reuse across requests is cut and the hit
share is biased low. No error was measured for such traces.

A sampled trace's ``request_index`` is renumbered 0..n-1 in the original order and its
``parent_request`` follows (null where the parent was not kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from hashlib import blake2b
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .fingerprint import trace_fingerprint
from .schema import Trace

if TYPE_CHECKING:
    from fcctl.common.progress import Progress

    from .dataset import Dataset
from fcctl.common.errors import FcctlInputError

HASH_SPACE = 1 << 64
#: The key of a request without a session id: its own session (as session_index_from_ids).
NO_SESSION_PREFIX = "\x00request-"
METHOD = "session-hash"


def session_hash(session_id: str, salt: int = 0) -> int:
    """BLAKE2b-64 of the UTF-8 ``session_id``, big-endian unsigned: convert's and sampling's.

    ``salt`` (a seed, 0 <= salt < 2^128) is BLAKE2b's own 16-byte salt, big-endian: salt 0 is
    BLAKE2b's default all-zero salt, so it keeps the unsalted hash (convert's buckets, and the
    sample every run kept before seeds drew it); another seed keeps other sessions (#36 item 17).
    """
    digest = blake2b(
        session_id.encode("utf-8"), digest_size=8, salt=salt.to_bytes(16, "big")
    ).digest()
    return int.from_bytes(digest, "big")


def check_sample_sessions(rate: object, parameter: str = "sample_sessions") -> float:
    """``rate`` as a float in (0, 1]; else :class:`FcctlInputError` naming ``parameter``."""
    ok = isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate)
    if not ok or not 0 < float(rate) <= 1:  # type: ignore[arg-type]
        raise FcctlInputError(
            f"{parameter}: must satisfy 0 < rate <= 1 (the share of sessions kept); got {rate!r}",
            parameter=parameter,
        )
    return float(rate)  # type: ignore[arg-type]


def check_kept(sample: SessionSample, path: str) -> None:
    """:class:`FcctlInputError` when a sampling kept no request: nothing to simulate."""
    if sample.requests_kept == 0:
        raise FcctlInputError(
            f"sample_sessions: {path}: a rate of {sample.rate:g} keeps none of its "
            f"{sample.sessions_total:,} sessions; use a larger rate; got {sample.rate!r}",
            parameter="sample_sessions",
        )


def threshold(rate: float) -> int:
    """``floor(rate x 2^64)``, at least 1: a session is kept when its hash is below it."""
    # A float times a power of two is exact, and int() of an exact float is exact.
    return max(int(rate * HASH_SPACE), 1)


@dataclass(frozen=True)
class SessionSample:
    """What a sampling kept, of the trace it was given (``*_total``): sessions, requests, block
    accesses. ``rate`` is the requested share of sessions (of the original trace, when the
    trace given was itself sampled: ``base_rate`` x the rate asked for); ``request_fraction``
    the realised share of requests (kept / total)."""

    rate: float
    base_rate: float
    sessions_kept: int
    sessions_total: int
    requests_kept: int
    requests_total: int
    block_accesses_kept: int
    block_accesses_total: int
    #: The fingerprint of the trace sampled (analyzers/traces/fingerprint.py); None when it
    #: was not computed (a dataset, whose block ids are only read for the kept requests).
    source_fingerprint: str | None = None

    @property
    def request_fraction(self) -> float:
        return self.requests_kept / self.requests_total if self.requests_total else 0.0


def session_keys(requests: pl.DataFrame) -> pl.Series:
    """Each request's session key: its ``session_id``, or its own key where it has none."""
    own = pl.lit(NO_SESSION_PREFIX) + pl.col("request_index").cast(pl.String)
    return requests.select(pl.coalesce(pl.col("session_id"), own).alias("key"))["key"]


def keep_mask(requests: pl.DataFrame, rate: float, salt: int = 0) -> tuple[np.ndarray, int, int]:
    """(kept per request, sessions kept, sessions) at effective ``rate``; one hash a session,
    salted by ``salt`` (:func:`session_hash`)."""
    keys = session_keys(requests)
    unique = keys.unique()
    limit = threshold(rate)
    flags = pl.Series([session_hash(k, salt) < limit for k in unique.to_list()], dtype=pl.Boolean)
    mask = keys.replace_strict(unique, flags, return_dtype=pl.Boolean).to_numpy()
    return mask, int(flags.sum()), unique.len()


def renumber(frame: pl.DataFrame) -> pl.DataFrame:
    """``request_index`` 0..n-1 in the frame's order; ``parent_request`` mapped (null if gone)."""
    old = frame["request_index"]
    new = pl.int_range(frame.height, eager=True, dtype=pl.Int64)
    parents = frame["parent_request"].replace_strict(old, new, default=None, return_dtype=pl.Int64)
    return frame.with_columns(new.alias("request_index"), parents.alias("parent_request"))


def sample_trace(trace: Trace, rate: float, salt: int = 0) -> tuple[Trace, SessionSample]:
    """The whole sessions of ``trace`` kept at ``rate`` (module docstring) and what was kept;
    ``salt`` draws which sessions (:func:`session_hash`; 0: the unsalted choice).

    ``trace`` may be a sample already (``session_sample_rate`` < 1): the result is then the
    sample at ``trace.session_sample_rate x rate`` of its original.
    """
    rate = check_sample_sessions(rate)
    base = trace.session_sample_rate
    effective = base * rate
    req = trace.requests
    mask, kept_sessions, sessions = keep_mask(req, effective, salt)
    lens = req["hash_ids"].list.len().fill_null(0).to_numpy()
    frame = renumber(req.filter(pl.Series(mask)))
    sample = SessionSample(
        rate=effective,
        base_rate=base,
        sessions_kept=kept_sessions,
        sessions_total=sessions,
        requests_kept=frame.height,
        requests_total=req.height,
        block_accesses_kept=int(lens[mask].sum()),
        block_accesses_total=int(lens.sum()),
        source_fingerprint=trace_fingerprint(trace),
    )
    check_kept(sample, trace.path)
    return replace(trace, requests=frame, session_sample_rate=effective), sample


def plan_dataset_sample(dataset: Dataset, rate: float) -> tuple[np.ndarray, SessionSample]:
    """Which requests of ``dataset`` a sampling at ``rate`` keeps, from its request table alone
    (no block id read): the mask in analysis order and what it keeps."""
    rate = check_sample_sessions(rate)
    req = dataset.requests
    mask, kept_sessions, sessions = keep_mask(req, rate)
    lens = req["n_blocks"].to_numpy()
    sample = SessionSample(
        rate=rate,
        base_rate=1.0,
        sessions_kept=kept_sessions,
        sessions_total=sessions,
        requests_kept=int(mask.sum()),
        requests_total=req.height,
        block_accesses_kept=int(lens[mask].sum()),
        block_accesses_total=int(lens.sum()),
    )
    check_kept(sample, dataset.spec)
    return mask, sample


def load_dataset_sample(
    dataset: Dataset, mask: np.ndarray, sample: SessionSample, progress: Progress | None = None
) -> Trace:
    """The requests ``mask`` keeps (:func:`plan_dataset_sample`), their block ids read part by
    part, renumbered as :func:`sample_trace` renumbers."""
    trace = dataset.load_trace(progress, keep=mask)
    return replace(trace, requests=renumber(trace.requests), session_sample_rate=sample.rate)
