"""The design's two monitors from a trace the FlatCake adapters recorded (``FLATCAKE_TRACE``).

A recorded request carries, besides its prefix keys, what its loads delivered to the engine and
what they failed to (``delivered_blocks`` / ``failed_blocks``, written by
``layout/adapters/trace.py``). Cut into equal windows of the capture's clock, the trace shows
the two things a team watches on a running engine as load rises: the hit share actually
delivered (delivered blocks over the blocks the requests asked for) and the loads that failed,
each beside the load (requests per second) of its window.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from fcctl.common.errors import FcctlInputError
from fcctl.common.paths import display_path

DEFAULT_WINDOWS = 12


class MonitorInputError(FcctlInputError):
    """A recorded trace that cannot be read for the monitors."""


@dataclass(frozen=True)
class MonitorWindow:
    """One window of the capture: ``start_s`` .. ``end_s`` (seconds from its first request)."""

    start_s: float
    end_s: float
    requests: int
    requests_per_s: float
    blocks_requested: int
    blocks_delivered: int
    requests_failed: int  # requests with at least one failed block
    blocks_failed: int

    @property
    def delivered_hit_share(self) -> float:
        return self.blocks_delivered / self.blocks_requested if self.blocks_requested else 0.0


@dataclass(frozen=True)
class Monitors:
    """The monitors of one recorded trace; ``requests_known`` of its ``requests`` carry the
    delivered/failed fields (older recorders, and adapters that cannot tell, leave them out)."""

    path: str
    engines: tuple[str, ...]
    requests: int
    requests_known: int
    duration_s: float
    windows: tuple[MonitorWindow, ...]


def is_recorded_trace(path: Path) -> bool:
    """Whether ``path``'s first line is a FlatCake adapter record (JSON with ``flatcake_trace``)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
        if b'"flatcake_trace"' not in first:  # cheap: most inputs are fcctl documents
            return False
        record = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and "flatcake_trace" in record


def _count(record: dict[str, object], name: str, where: str) -> int | None:
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MonitorInputError(
            f"{where}: field {name!r} must be a whole number >= 0 or null; got {value!r}"
        )
    return value


def read_monitors(path: Path, windows: int = DEFAULT_WINDOWS) -> Monitors:
    """The recorded trace at ``path`` cut into ``windows`` equal windows of its clock."""
    shown = display_path(path)
    rows: list[tuple[float, int, int | None, int | None]] = []
    engines: set[str] = set()
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{shown}: line {lineno}"
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError) as e:
                    raise MonitorInputError(f"{where}: not a JSON record ({e})") from None
                if not isinstance(record, dict):
                    raise MonitorInputError(f"{where}: expected a JSON object")
                stamp = record.get("timestamp_s")
                if isinstance(stamp, bool) or not isinstance(stamp, int | float):
                    raise MonitorInputError(
                        f"{where}: field 'timestamp_s' must be a number; got {stamp!r}"
                    )
                if not math.isfinite(stamp):
                    raise MonitorInputError(f"{where}: field 'timestamp_s' must be finite")
                keys = record.get("hash_ids")
                if not isinstance(keys, list):
                    raise MonitorInputError(f"{where}: field 'hash_ids' must be a list")
                delivered = _count(record, "delivered_blocks", where)
                failed = _count(record, "failed_blocks", where)
                rows.append((float(stamp), len(keys), delivered, failed))
                engine = record.get("engine")
                if isinstance(engine, str):
                    engines.add(engine)
    except OSError as e:
        raise MonitorInputError(f"{shown}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise MonitorInputError(f"{shown}: not UTF-8 text") from None
    if not rows:
        raise MonitorInputError(f"{shown}: the trace holds no requests")
    first = min(r[0] for r in rows)
    duration = max(r[0] for r in rows) - first
    n = max(1, min(windows, len(rows)))
    width = duration / n if duration > 0 else 1.0
    acc = [[0, 0, 0, 0, 0] for _ in range(n)]  # requests, requested, delivered, failed rq, bl
    known = 0
    for stamp, blocks, delivered, failed in rows:
        w = min(n - 1, int((stamp - first) / width))
        acc[w][0] += 1
        if delivered is None and failed is None:
            continue
        known += 1
        acc[w][1] += blocks
        acc[w][2] += delivered or 0
        acc[w][3] += bool(failed)
        acc[w][4] += failed or 0
    out = tuple(
        MonitorWindow(
            start_s=i * width,
            end_s=(i + 1) * width,
            requests=a[0],
            requests_per_s=a[0] / width,
            blocks_requested=a[1],
            blocks_delivered=a[2],
            requests_failed=a[3],
            blocks_failed=a[4],
        )
        for i, a in enumerate(acc)
    )
    return Monitors(str(path), tuple(sorted(engines)), len(rows), known, duration, out)


__all__ = [
    "DEFAULT_WINDOWS",
    "MonitorInputError",
    "MonitorWindow",
    "Monitors",
    "is_recorded_trace",
    "read_monitors",
]
