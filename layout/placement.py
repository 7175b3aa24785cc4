"""FC-GVA write-time placement: where a turn's new KV blocks live, decided once, when written.

A KV block never changes after it is written, so its home (host memory or SSD) can be chosen
at write time from signals the engine already has before prefill, and it never moves. The
rule, in the order it is evaluated (the first that applies wins):

1. ``memory_full``: the write does not fit in free memory (``memory_free_bytes <
   bytes_to_write``) -> SSD.
2. ``shared_prefix``: the blocks are a prefix shared by other requests (the engine's prefix
   tree holds them with a reference count > 1) -> memory.
3. ``first_turn``: the first turn of a session (nothing says it will be reused soon) -> SSD.
4. ``agent_context``: the context exceeds ``agent_context_tokens`` (a multi-GB agent session
   that memory cannot hold for long) -> SSD.
5. ``long_reply``: the previous reply was longer than ``short_reply_tokens`` -> SSD.
6. ``short_reply_chat``: a later turn of a chat whose previous reply was short (small, reused
   soon) -> memory.

The thresholds are the two tunables of the design. Defaults are assumptions, not published
figures (the FlatCake summary names the thresholds but not their values): 256 tokens for a
short reply, 32768 tokens (4 GiB of Llama-3.1-8B bf16 KV) for an agent context. ``fcctl
replay --short-reply/--agent-context`` override them, and the recommender sweeps them.

Only rules 4-6 read the thresholds. :meth:`PlacementRule.threshold_reason` is rules 3-6, what
decides a write when rules 1-2 do not, and :meth:`PlacementRule.threshold_classes` the same for
many requests at once (numpy arrays): the recommender groups threshold pairs by it, and a test
holds it equal to :meth:`PlacementRule.place`.

Pure: no clock, no state; an engine and fcctl's simulator call the same function.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_SHORT_REPLY_TOKENS = 256
DEFAULT_AGENT_CONTEXT_TOKENS = 32768


class Medium(enum.IntEnum):
    """Where a block lives; the values are the block address's medium field."""

    MEMORY = 0
    SSD = 1


class Reason(enum.StrEnum):
    """Which rule of :func:`place` decided (see the module docstring)."""

    MEMORY_FULL = "memory_full"
    SHARED_PREFIX = "shared_prefix"
    FIRST_TURN = "first_turn"
    AGENT_CONTEXT = "agent_context"
    LONG_REPLY = "long_reply"
    SHORT_REPLY_CHAT = "short_reply_chat"


#: Where each rule puts a write.
MEDIUM_OF: dict[Reason, Medium] = {
    Reason.MEMORY_FULL: Medium.SSD,
    Reason.SHARED_PREFIX: Medium.MEMORY,
    Reason.FIRST_TURN: Medium.SSD,
    Reason.AGENT_CONTEXT: Medium.SSD,
    Reason.LONG_REPLY: Medium.SSD,
    Reason.SHORT_REPLY_CHAT: Medium.MEMORY,
}

#: Rules 3-6, in their order: what decides a write when memory is not full and its blocks are
#: not a shared prefix. A reason's index here is its *threshold class*
#: (:meth:`PlacementRule.threshold_classes`).
THRESHOLD_REASONS: tuple[Reason, ...] = (
    Reason.FIRST_TURN,
    Reason.AGENT_CONTEXT,
    Reason.LONG_REPLY,
    Reason.SHORT_REPLY_CHAT,
)


@dataclass(frozen=True)
class PlacementSignals:
    """What the engine knows about a write before the turn's prefill.

    ``turn``: 0-based turn number in the session. ``context_tokens``: the prompt's tokens
    (history plus the new input). ``previous_reply_tokens``: output tokens of the session's
    previous turn (``None`` on a first turn). ``prefix_ref_count``: the prefix tree's
    reference count of the blocks written (1: only this request uses them).
    ``memory_free_bytes``: host memory free for KV now. ``bytes_to_write``: the write's bytes.
    """

    turn: int
    context_tokens: int
    previous_reply_tokens: int | None
    prefix_ref_count: int
    memory_free_bytes: int
    bytes_to_write: int


@dataclass(frozen=True)
class Placement:
    """The decision: ``medium`` and the ``reason`` (rule) that chose it."""

    medium: Medium
    reason: Reason


@dataclass(frozen=True)
class PlacementRule:
    """The rule's parameters (tokens); ``place(signals)`` applies it."""

    short_reply_tokens: int = DEFAULT_SHORT_REPLY_TOKENS
    agent_context_tokens: int = DEFAULT_AGENT_CONTEXT_TOKENS

    def __post_init__(self) -> None:
        for name in ("short_reply_tokens", "agent_context_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(
                    f"{name}: must be an integer >= 0 tokens; got {value!r}", parameter=name
                )

    def place(self, s: PlacementSignals) -> Placement:
        """The medium for the write described by ``s`` (rules in the module docstring)."""
        if s.memory_free_bytes < s.bytes_to_write:
            return Placement(Medium.SSD, Reason.MEMORY_FULL)
        if s.prefix_ref_count > 1:
            return Placement(Medium.MEMORY, Reason.SHARED_PREFIX)
        reason = self.threshold_reason(s.turn, s.context_tokens, s.previous_reply_tokens)
        return Placement(MEDIUM_OF[reason], reason)

    def threshold_reason(
        self, turn: int, context_tokens: int, previous_reply_tokens: int | None
    ) -> Reason:
        """Rules 3-6: the reason for a write that rules 1-2 (memory full, shared prefix) leave
        open (tokens; ``previous_reply_tokens`` None on a first turn)."""
        if turn == 0 or previous_reply_tokens is None:
            return Reason.FIRST_TURN
        if context_tokens > self.agent_context_tokens:
            return Reason.AGENT_CONTEXT
        if previous_reply_tokens > self.short_reply_tokens:
            return Reason.LONG_REPLY
        return Reason.SHORT_REPLY_CHAT

    def threshold_classes(
        self, later: np.ndarray, context_tokens: np.ndarray, previous_reply_tokens: np.ndarray
    ) -> np.ndarray:
        """:meth:`threshold_reason` of many requests at once: per request (int8), the index of
        its reason in :data:`THRESHOLD_REASONS`.

        ``later``: bool, not a first turn (a turn > 0 with a previous reply);
        ``context_tokens``, ``previous_reply_tokens``: integers (tokens; the latter is read
        only where ``later``).
        """
        import numpy as np  # the rule itself needs no numpy; only the arrays do

        agent = later & (context_tokens > self.agent_context_tokens)
        long_reply = later & ~agent & (previous_reply_tokens > self.short_reply_tokens)
        out = np.full(later.shape[0], THRESHOLD_REASONS.index(Reason.FIRST_TURN), dtype=np.int8)
        out[agent] = THRESHOLD_REASONS.index(Reason.AGENT_CONTEXT)
        out[long_reply] = THRESHOLD_REASONS.index(Reason.LONG_REPLY)
        out[later & ~agent & ~long_reply] = THRESHOLD_REASONS.index(Reason.SHORT_REPLY_CHAT)
        return out


def place(signals: PlacementSignals, rule: PlacementRule | None = None) -> Placement:
    """:meth:`PlacementRule.place` with the default thresholds unless ``rule`` is given."""
    return (rule or PlacementRule()).place(signals)
