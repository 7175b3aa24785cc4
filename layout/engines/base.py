"""What every I/O engine is: the :class:`ReadEngine` protocol, its :class:`ReadResult`, and the
short-read rule they all apply.

:class:`DeferredVerifyEngine` is the optional capability of engines whose layer-checksum check
can run apart from the read: ``read(plan, out, verify=False)`` now, ``verify_read(plan, out)``
later (on another thread, while the next read is in flight), ``result.with_verification(v)``
to put the two together. ``posix`` and ``kvikio`` have it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..buffers import Destination
from ..checksum import crc32_many
from ..errors import InputError, LayoutError, VerificationError
from ..planner import Extent, ReadCommand, ReadPlan

# How a note saying why a read's layer checksums were not checked begins (callers match it).
UNVERIFIED_NOTE = "layer checksums not verified"


class EngineUnavailable(InputError):
    """An I/O engine cannot run here (missing package, no CUDA driver); the message says why."""


@dataclass(frozen=True)
class ReadResult:
    """What one ``read`` did. ``o_direct``/``gds`` say what really ran, not what was asked.

    ``gds`` is ``None`` for engines that cannot do GDS (posix). ``seconds`` is wall time of the
    reads (cache dropping before them and verification after them excluded).

    ``verified`` is true only when every requested extent carried a checksum and its bytes
    matched it; ``verified_bytes`` counts the bytes checked, ``verify_seconds`` the time it
    took. A read with verification off, into GPU memory the engine cannot check, or of extents
    without checksums (single blocks) says ``verified=False``; the note says why.
    """

    engine: str
    o_direct: bool
    gds: bool | None
    commands: int
    bytes_read: int
    seconds: float
    note: str = ""
    verified: bool = False
    verified_bytes: int = 0
    verify_seconds: float = 0.0

    @property
    def read_bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    def with_verification(self, verification: Verification) -> ReadResult:
        """This read's result with the check :meth:`DeferredVerifyEngine.verify_read` made of its
        bytes afterwards: ``verified*`` fields from ``verification``, and the note's
        "not verified" part replaced by the verification's own (empty when verified)."""
        parts = [p for p in self.note.split("; ") if p and not p.startswith(UNVERIFIED_NOTE)]
        if verification.note:
            parts.append(verification.note)
        return dataclasses.replace(
            self,
            note="; ".join(parts),
            verified=verification.verified,
            verified_bytes=verification.verified_bytes,
            verify_seconds=verification.seconds,
        )


@dataclass(frozen=True)
class Verification:
    """What a layer-checksum check of one read plan's bytes found (a mismatch raises instead).

    ``verified`` as in :class:`ReadResult`; ``seconds`` is the check's wall time; ``note`` says
    why it is not ``verified`` where that needs saying (empty otherwise).
    """

    verified: bool
    verified_bytes: int
    seconds: float
    note: str = ""


@runtime_checkable
class ReadEngine(Protocol):
    """Reads a plan into ``out`` (at least ``plan.buffer_bytes`` bytes; numpy array, memoryview,
    bytearray or torch tensor; GPU arrays where the engine supports them). Thread-safe."""

    name: str

    def read(self, plan: ReadPlan, out: Destination) -> ReadResult: ...

    def close(self) -> None: ...


@runtime_checkable
class DeferredVerifyEngine(ReadEngine, Protocol):
    """An engine whose checksum check can run after, and apart from, the read.

    ``verify`` is the engine's default for ``read``; ``read(..., verify=False)`` skips the check
    for that call, ``verify=True`` forces it. ``verify_read(plan, out)`` checks the bytes an
    earlier ``read(plan, out, verify=False)`` left in ``out`` (host memory; nothing may write
    ``out`` in between) and raises :class:`VerificationError` exactly as ``read`` would.
    Both are thread-safe, and may run at the same time as other reads of the same engine:
    a caller overlaps the check of layer ``l`` with the read of layer ``l + 1``.
    """

    verify: bool

    def read(
        self, plan: ReadPlan, out: Destination, *, verify: bool | None = None
    ) -> ReadResult: ...

    def verify_read(self, plan: ReadPlan, out: Destination) -> Verification: ...


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


# A ``map``-like callable (``ThreadPoolExecutor.map``) that verification spreads CRC pieces over.
MapFn = Callable[[Callable[[Any], int], Iterable[Any]], Iterable[int]]


def describe_extent(extent: Extent) -> str:
    """``"turn 3 layer 7"`` for a session file's layer extent, else the offset and tag."""
    tag = extent.tag
    if isinstance(tag, tuple) and len(tag) == 2 and all(isinstance(t, int) for t in tag):
        return f"turn {tag[0]} layer {tag[1]}"
    return f"extent tag={tag!r}"


def verify_placements(
    plan: ReadPlan, host: np.ndarray, map_fn: MapFn | None = None
) -> tuple[bool, int, float]:
    """Check every placement that carries a checksum against the bytes in ``host``.

    Returns ``(all extents verified, verified bytes, seconds)``. Raises
    :class:`VerificationError` naming the file, the turn and layer (from the tag), the offset
    and both checksums at the first mismatch (in placement order): damaged bytes are never
    handed back as data. With ``map_fn``, the pieces of all extents go through it in one batch,
    so a layer of several small ranges (a session's turns) is checked on several cores too.
    """
    t0 = time.perf_counter()
    checked = 0
    sums = [e for e, _ in plan.placements if e.checksum is not None]
    every = bool(plan.placements) and len(sums) == len(plan.placements)
    views = [host[at : at + e.length] for e, at in plan.placements if e.checksum is not None]
    for extent, got in zip(sums, crc32_many(views, map_fn=map_fn), strict=True):
        if got != extent.checksum:
            raise VerificationError(
                f"{extent.file}: {describe_extent(extent)}: layer checksum mismatch at offset "
                f"{extent.offset} ({extent.length} bytes): stored {extent.checksum:#010x}, read "
                f"{got:#010x} (the file is damaged; its bytes were not returned as data)"
            )
        checked += extent.length
    return every, checked, time.perf_counter() - t0


def verification_note(verify: bool, verified: bool, where: str = "") -> str:
    """Why a read is not ``verified`` (empty when it is)."""
    if verified:
        return ""
    if not verify:
        return f"{UNVERIFIED_NOTE} (verify=False)"
    if where:
        return f"{UNVERIFIED_NOTE} ({where})"
    # Extents without a checksum (single blocks, other files) are the caller's choice: the
    # result says verified=False without a note.
    return ""
