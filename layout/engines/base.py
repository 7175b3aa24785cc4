"""What every I/O engine is: the :class:`ReadEngine` protocol, its :class:`ReadResult`, and the
short-read rule they all apply."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..buffers import Destination
from ..errors import InputError, LayoutError
from ..planner import ReadCommand, ReadPlan


class EngineUnavailable(InputError):
    """An I/O engine cannot run here (missing package, no CUDA driver); the message says why."""


@dataclass(frozen=True)
class ReadResult:
    """What one ``read`` did. ``o_direct``/``gds`` say what really ran, not what was asked.

    ``gds`` is ``None`` for engines that cannot do GDS (posix). ``seconds`` is wall time of the
    reads (cache dropping before them excluded).
    """

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


@runtime_checkable
class ReadEngine(Protocol):
    """Reads a plan into ``out`` (at least ``plan.buffer_bytes`` bytes; numpy array, memoryview,
    bytearray or torch tensor; GPU arrays where the engine supports them). Thread-safe."""

    name: str

    def read(self, plan: ReadPlan, out: Destination) -> ReadResult: ...

    def close(self) -> None: ...


def check_short_read(plan: ReadPlan, cmd: ReadCommand, got_to: int) -> None:
    """After the file ended at ``got_to`` inside ``cmd``: fail if a requested extent needed more.

    Bytes past the end of the file that only alignment padding asked for read as zeros.
    """
    for extent, _ in plan.placements:
        if extent.file == cmd.file and extent.offset < cmd.end and extent.end > got_to:
            # The read stopped at ``got_to``; the file may end earlier than that (a command that
            # starts past the end reads nothing), so say how long it really is.
            try:
                size = f"is {os.stat(cmd.file).st_size} bytes long"
            except OSError:
                size = f"ends at or before byte {got_to}"
            raise LayoutError(
                f"{cmd.file}: short read: the file {size}, but requested extent "
                f"[{extent.offset}, {extent.end}) needs bytes up to {extent.end}"
            )


class EngineProbe(Protocol):
    """``(True, description)`` when the engine really reads files in ``directory`` (``None``:
    the temp dir), else ``(False, reason)``. Never raises."""

    def __call__(self, directory: str | None) -> tuple[bool, str]: ...


def probe_once(name: str) -> Callable[[Callable[[str | None], tuple[bool, str]]], EngineProbe]:
    """Make a probe never raise (an exception becomes ``(False, reason)``) and run it once per
    directory per process: a real read is the only honest answer, but it costs a file write."""

    def wrap(probe: Callable[[str | None], tuple[bool, str]]) -> EngineProbe:
        @functools.cache
        def cached(directory: str | None) -> tuple[bool, str]:
            try:
                return probe(directory)
            except Exception as e:  # a probe reports, it never raises
                return False, f"{name} probe failed: {type(e).__name__}: {e}"

        functools.update_wrapper(cached, probe)
        return cached

    return wrap


def probe_file(directory: str | None, payload: bytes) -> str:
    """A new file holding ``payload`` (fsynced) in ``directory``; the caller unlinks it."""
    fd, path = tempfile.mkstemp(prefix=".fc-probe-", dir=directory)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
