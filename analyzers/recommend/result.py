"""The recommendation: frozen dataclasses whose field names are the ``--json`` keys (issue #9 §1).

Top-level keys, exactly: ``schema_version``, ``recommendation``, ``ideal_hit_share``, ``rates``,
``grid``, ``misplacement``, ``hardware``, ``trace``, ``provenance``, ``sampling`` (issue #19:
null unless the sweep ran on sampled sessions). Fields marked ``NOT_JSON`` are for the
summary, ``--out`` and ``--emit`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fcctl.common.jsonio import from_document
from fcctl.common.provenance import Provenance

from ..replay import RateResult, SessionSampling

#: 2: recommendation.matters/spread/why, trace (path, fingerprint); 3: the replay's
#: ``gpu_hit_share_served``/``ideal_hit_share_served`` per policy in ``rates`` (older refused).
SCHEMA_VERSION = 3
NOT_JSON = {"json": False}

#: The misplacement changes, in the order they are evaluated and shown.
CHANGES: tuple[str, ...] = (
    "short_reply_tokens halved",
    "short_reply_tokens doubled",
    "agent_context_tokens halved",
    "agent_context_tokens doubled",
    "every short chat on SSD",
    "every session in memory",
)


@dataclass(frozen=True)
class Ttft:
    """Time to first token, seconds: mean and 99th percentile over the run's requests."""

    mean: float | None
    p99: float | None


@dataclass(frozen=True)
class GridCell:
    """The ``flat`` policy at one threshold pair (tokens) and one rate (requests/s)."""

    short_reply_tokens: int
    agent_context_tokens: int
    rate: float
    gpu_hit_share: float | None
    ttft_s: Ttft
    ssd_read_bytes: int


@dataclass(frozen=True)
class Spread:
    """How far apart the grid's pairs are at the target rate (docs/recommend.md, "Do the
    thresholds matter?"): ``hit_share_pp`` is the highest GPU hit share minus the lowest, in
    percentage points; ``ttft_mean_ratio`` the highest mean TTFT over the lowest (None when a
    pair has no TTFT); ``pairs`` how many pairs were compared; the margins are the decision's."""

    pairs: int
    hit_share_pp: float | None
    ttft_mean_ratio: float | None
    margin_pp: float
    ttft_margin: float


@dataclass(frozen=True)
class Recommendation:
    """The recommended pair and its figures at the target ``rate``.

    ``matters`` is False when no pair of the grid is apart from another by more than the
    margins (``spread``); the pair is then the placement's default one, measured like the rest.
    ``why`` says in one sentence how the pair was chosen.
    """

    short_reply_tokens: int
    agent_context_tokens: int
    rate: float
    gpu_hit_share: float | None
    ttft_s: Ttft
    matters: bool
    spread: Spread
    why: str


@dataclass(frozen=True)
class Misplacement:
    """The recommended pair changed by ``change`` (one of :data:`CHANGES`), at the target rate:
    absolute figures (the summary states the difference to the recommendation)."""

    change: str
    gpu_hit_share: float | None
    ttft_s: Ttft
    ssd_read_bytes: int
    short_reply_tokens: int = field(default=0, metadata=NOT_JSON)
    agent_context_tokens: int = field(default=0, metadata=NOT_JSON)


@dataclass(frozen=True)
class RunFacts:
    """What the summary, ``--out`` and ``--emit`` say beside the JSON keys."""

    trace_path: str
    trace_format: str
    requests: int
    sessions: int
    sessions_inferred: bool
    later_turns: int
    model: str
    hardware_name: str
    objective: str
    target_rate: float
    seed: int
    grid_rule: str  # "default (trace percentiles)" or "given"
    simulations_run: int
    simulations_reused: int
    jobs: int
    notes: tuple[str, ...] = ()
    #: Copies of every session swept on (1: the trace as it is).
    amplify: int = 1


@dataclass(frozen=True)
class TraceIdentity:
    """Which trace the sweep ran on (``fingerprint``: analyzers/traces/fingerprint.py)."""

    path: str
    format: str
    requests: int
    fingerprint: str | None


@dataclass(frozen=True)
class RecommendResult:
    """The whole ``recommend-thresholds`` run; ``jsonio.dumps`` of it is the ``--json`` document."""

    schema_version: int
    recommendation: Recommendation
    ideal_hit_share: float | None
    rates: tuple[RateResult, ...]
    grid: tuple[GridCell, ...]
    misplacement: tuple[Misplacement, ...]
    hardware: Mapping[str, Any]
    trace: TraceIdentity
    provenance: Provenance
    #: What the run knew beside the document (:attr:`facts`); None for a result read back from
    #: its document (:meth:`from_json`).
    run_facts: RunFacts | None = field(default=None, metadata=NOT_JSON, compare=False)
    #: Which sessions the sweep ran on (``--sample-sessions``); None: the whole trace.
    sampling: SessionSampling | None = None

    @property
    def facts(self) -> RunFacts:
        """What the summary, ``--out`` and ``--emit`` say beside the JSON keys (a run's own)."""
        if self.run_facts is None:
            raise ValueError(
                "facts: a recommendation read back from its document has no run facts; the "
                "summary, --out and --emit need the run that made it"
            )
        return self.run_facts

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RecommendResult:
        """The result whose ``--json`` document is ``doc`` (``run_facts`` None)."""
        return from_document(cls, doc, schema_version=SCHEMA_VERSION, what="recommendation")
