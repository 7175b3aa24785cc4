"""Readers: execute a :class:`~layout.planner.ReadPlan` into a buffer, chosen by name.

Skeleton: final names and signatures; implementations land in the next commits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from layout.errors import FcctlInputError
from layout.planner import ReadPlan

PAGE_BYTES = 4096


class EngineUnavailable(FcctlInputError):
    """An I/O engine cannot run here (missing package, no CUDA driver); the message says why."""


@dataclass(frozen=True)
class ReadResult:
    """What one ``read`` did. ``o_direct``/``gds`` say what really ran, not what was asked."""

    engine: str
    o_direct: bool
    gds: bool | None
    commands: int
    bytes_read: int
    seconds: float
    note: str = ""

    @property
    def read_bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0


class ReadEngine(Protocol):
    name: str

    def read(self, plan: ReadPlan, out: Any) -> ReadResult: ...

    def close(self) -> None: ...


def aligned_buffer(nbytes: int, align: int = PAGE_BYTES):  # -> np.ndarray
    """A zeroed ``np.uint8`` array of ``nbytes`` whose data pointer is ``align``-aligned."""
    raise NotImplementedError


def drop_file_cache(path: str) -> None:
    """fsync ``path`` and evict its pages from the page cache (posix_fadvise DONTNEED)."""
    raise NotImplementedError


class PosixEngine:
    name = "posix"

    def __init__(self, *, threads: int = 8, o_direct: bool = True, drop_cache: bool = True) -> None:
        raise NotImplementedError

    def read(self, plan: ReadPlan, out: Any) -> ReadResult:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class KvikioEngine:
    name = "kvikio"

    def __init__(self, *, threads: int | None = None) -> None:
        raise NotImplementedError

    def read(self, plan: ReadPlan, out: Any) -> ReadResult:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


ENGINES: dict[str, Callable[..., ReadEngine]] = {"posix": PosixEngine, "kvikio": KvikioEngine}


def open_engine(name: str, **options: Any) -> ReadEngine:
    """Instantiate the engine registered as ``name``; raises EngineUnavailable if it cannot run."""
    raise NotImplementedError


def probe_engine(name: str) -> tuple[bool, str]:
    """``(True, description)`` when ``name`` can really read here, else ``(False, reason)``."""
    raise NotImplementedError
