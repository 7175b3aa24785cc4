"""I/O engines by name: execute a :class:`~..planner.ReadPlan` into a buffer.

Every engine follows :class:`ReadEngine` and is registered in :data:`ENGINES` with its factory
and its probe (a real read that says whether the engine works here):

``posix``
    ``os.preadv`` with O_DIRECT over a thread pool (:mod:`.posix`).
``kvikio``
    KvikIO ``CuFile.pread`` into GPU or host memory, GDS where the driver really does it
    (:mod:`.kvikio`).

Both also follow :class:`DeferredVerifyEngine`: ``read(plan, out, verify=False)`` then
``verify_read(plan, out)`` on another thread, so a layer's checksum check can overlap the next
layer's read.

A short read (the file ends inside a command) is an error when the missing bytes belong to a
requested extent; bytes past the end of the file that only alignment padding asked for read as
zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..buffers import aligned_buffer
from ..planner import ReadPlan
from .base import (
    DeferredVerifyEngine,
    EngineProbe,
    EngineUnavailable,
    ReadEngine,
    ReadResult,
    Verification,
)
from .kvikio import KvikioEngine, kvikio_gds_state, probe_kvikio
from .posix import DEFAULT_THREADS, PosixEngine, drop_file_cache, probe_posix

__all__ = [
    "DEFAULT_THREADS",
    "ENGINES",
    "DeferredVerifyEngine",
    "EngineEntry",
    "EngineFactory",
    "EngineProbe",
    "EngineUnavailable",
    "KvikioEngine",
    "PosixEngine",
    "ReadEngine",
    "ReadResult",
    "Verification",
    "drop_file_cache",
    "kvikio_gds_state",
    "open_engine",
    "probe_engine",
    "read_plan",
]


# Builds an engine from its keyword options (``threads=``, ...); raises EngineUnavailable when
# it cannot run here and TypeError for options it does not take. (An engine class is one.)
EngineFactory = Callable[..., ReadEngine]


@dataclass(frozen=True)
class EngineEntry:
    """One registered engine: how to open it and how to ask whether it reads here."""

    open: EngineFactory
    probe: EngineProbe


ENGINES: dict[str, EngineEntry] = {
    "posix": EngineEntry(open=PosixEngine, probe=probe_posix),
    "kvikio": EngineEntry(open=KvikioEngine, probe=probe_kvikio),
}


def _known() -> str:
    return ", ".join(sorted(ENGINES))


def open_engine(name: str, **options: Any) -> ReadEngine:
    """Instantiate the engine registered as ``name`` with ``options``.

    Raises :class:`EngineUnavailable` for an unknown name (``parameter="engine"``) or an engine
    that cannot run here.
    """
    try:
        entry = ENGINES[name]
    except KeyError:
        raise EngineUnavailable(
            f"engine: unknown I/O engine (known: {_known()}); got {name!r}", parameter="engine"
        ) from None
    try:
        return entry.open(**options)
    except TypeError as e:
        raise EngineUnavailable(f"engine {name!r}: bad options {sorted(options)}: {e}") from None


def probe_engine(name: str, *, directory: str | None = None) -> tuple[bool, str]:
    """``(True, description)`` when engine ``name`` really reads here, else ``(False, reason)``.

    Never raises. ``posix`` always works (it reports whether O_DIRECT works in ``directory``,
    default the temp dir). ``kvikio`` writes a small file and reads it back through
    ``CuFile.pread`` into GPU memory (host memory when neither torch CUDA nor CuPy is usable),
    checking the bytes. Results are cached per process (per engine and directory).
    """
    entry = ENGINES.get(name)
    if entry is None:
        return False, f"unknown I/O engine (known: {_known()}); got {name!r}"
    return entry.probe(directory)


def read_plan(plan: ReadPlan, engine: ReadEngine | None = None) -> tuple[np.ndarray, ReadResult]:
    """Read ``plan`` into a fresh 4096-aligned host buffer (a posix engine when none is given)."""
    buf = aligned_buffer(plan.buffer_bytes)
    if engine is not None:
        return buf, engine.read(plan, buf)
    with PosixEngine() as eng:
        return buf, eng.read(plan, buf)
