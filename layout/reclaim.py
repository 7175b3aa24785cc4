"""Per-session reclamation: free SSD (or memory) space a whole session at a time.

KV blocks are never modified, so reclaiming needs no write-back. When usage crosses the high
watermark, whole sessions are dropped, the one least recently written or read first, skipping
sessions that are being read, until usage is at or below the low watermark. A session's
blocks are one file (FC-CIO), so reclaiming one never cuts a piece out of another session's
prefix, unlike recycling a fixed-size bucket that mixes sessions.

"Oldest" is taken as least recently active (written or read): a session a request just read
is the most likely to be read again. Defaults: high 0.9, low 0.8, as LMCache's L2 eviction
(``trigger_watermark 0.9``, ``eviction_ratio 0.1``, docs/source/mp/l2_storage.rst).

Stateful but clock-driven: every call takes the caller's time (seconds, non-decreasing); no
threads, no wall clock, so an engine and fcctl's simulator drive the same code.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from .errors import InputError

DEFAULT_HIGH_WATERMARK = 0.9
DEFAULT_LOW_WATERMARK = 0.8


@dataclass(frozen=True)
class Reclaimed:
    """One session dropped by :meth:`SessionReclaimer.reclaim`: its key and bytes freed."""

    session: Hashable
    bytes: int
    last_active_s: float


class SessionReclaimer:
    """Bytes per session on one medium of ``capacity_bytes``, reclaimed whole at a watermark."""

    def __init__(
        self,
        capacity_bytes: int,
        *,
        high_watermark: float = DEFAULT_HIGH_WATERMARK,
        low_watermark: float = DEFAULT_LOW_WATERMARK,
    ) -> None:
        if (
            not isinstance(capacity_bytes, int)
            or isinstance(capacity_bytes, bool)
            or (capacity_bytes < 0)
        ):
            raise InputError(
                f"capacity_bytes: must be an integer >= 0; got {capacity_bytes!r}",
                parameter="capacity_bytes",
            )
        if not 0 < high_watermark <= 1:
            raise InputError(
                f"high_watermark: must satisfy 0 < high_watermark <= 1; got {high_watermark!r}",
                parameter="high_watermark",
            )
        if not 0 <= low_watermark <= high_watermark:
            raise InputError(
                "low_watermark: must satisfy 0 <= low_watermark <= high_watermark "
                f"({high_watermark}); got {low_watermark!r}",
                parameter="low_watermark",
            )
        self.capacity_bytes = capacity_bytes
        self.high_watermark = high_watermark
        self.low_watermark = low_watermark
        # session -> [bytes, last active s], least recently active first.
        self._sessions: OrderedDict[Hashable, list[float]] = OrderedDict()
        self._readers: dict[Hashable, int] = {}
        self._now = float("-inf")
        self.used_bytes = 0
        self.peak_used_bytes = 0

    @property
    def free_bytes(self) -> int:
        return max(0, self.capacity_bytes - self.used_bytes)

    def _clock(self, now_s: float) -> None:
        if now_s < self._now:
            raise InputError(
                f"now_s: the clock must not go back (last {self._now}); got {now_s!r}",
                parameter="now_s",
            )
        self._now = now_s

    def add(self, session: Hashable, nbytes: int, now_s: float) -> None:
        """``session`` wrote ``nbytes`` more at ``now_s``."""
        self._clock(now_s)
        if nbytes < 0:
            raise InputError(f"nbytes: must be >= 0; got {nbytes!r}", parameter="nbytes")
        entry = self._sessions.pop(session, None) or [0, now_s]
        entry[0] += nbytes
        entry[1] = now_s
        self._sessions[session] = entry
        self.used_bytes += nbytes
        self.peak_used_bytes = max(self.peak_used_bytes, self.used_bytes)

    def touch(self, session: Hashable, now_s: float) -> None:
        """``session`` was read at ``now_s``: it becomes the most recently active."""
        self._clock(now_s)
        entry = self._sessions.pop(session, None)
        if entry is not None:
            entry[1] = now_s
            self._sessions[session] = entry

    def begin_read(self, session: Hashable, now_s: float) -> None:
        """A read of ``session`` starts: it cannot be reclaimed until :meth:`end_read`."""
        self.touch(session, now_s)
        self._readers[session] = self._readers.get(session, 0) + 1

    def end_read(self, session: Hashable, now_s: float) -> None:
        """One read of ``session`` (begun with :meth:`begin_read`) finished."""
        self._clock(now_s)
        left = self._readers.get(session, 0) - 1
        if left < 0:
            raise InputError(
                f"session: end_read without begin_read; got {session!r}", parameter="session"
            )
        if left:
            self._readers[session] = left
        else:
            del self._readers[session]

    def being_read(self, session: Hashable) -> bool:
        return session in self._readers

    def session_bytes(self, session: Hashable) -> int:
        entry = self._sessions.get(session)
        return 0 if entry is None else int(entry[0])

    def over_high_watermark(self) -> bool:
        return self.used_bytes > self.high_watermark * self.capacity_bytes

    def remove(self, session: Hashable) -> int:
        """Drop ``session`` (whatever the watermark); the bytes freed."""
        entry = self._sessions.pop(session, None)
        if entry is None:
            return 0
        self.used_bytes -= int(entry[0])
        return int(entry[0])

    def reclaim(self, now_s: float) -> tuple[Reclaimed, ...]:
        """Above the high watermark: drop the least recently active sessions not being read
        until usage is at or below the low watermark (or no candidate is left)."""
        self._clock(now_s)
        if not self.over_high_watermark():
            return ()
        target = self.low_watermark * self.capacity_bytes
        dropped: list[Reclaimed] = []
        for session in list(self._sessions):
            if self.used_bytes <= target:
                break
            if session in self._readers:
                continue
            last = self._sessions[session][1]
            dropped.append(Reclaimed(session, self.remove(session), last))
        return tuple(dropped)
