"""The read planner: turn the pieces a restore needs into a few large read commands.

Rules, in order (the one source of truth that iobench and the restore path both use):

1. Sort the requested extents by ``(file, offset)``.
2. Merge extents that overlap or touch (``next.offset <= run_end``).
3. Read across a hole between two runs when the hole is **strictly smaller** than
   ``gap_bytes`` (``0 < gap < gap_bytes``). A hole of exactly ``gap_bytes`` starts a new command,
   so ``gap_bytes=0`` merges only touching/overlapping extents. The hole's bytes are read and
   counted in ``bytes_read`` (that is the read amplification bought for fewer commands).
4. With ``align > 1`` (O_DIRECT needs 512 or 4096) widen each run to ``align``-aligned start and
   end, then merge runs the widening made overlap or touch. The widening counts in ``bytes_read``.
5. With ``max_command_bytes`` split each run into consecutive commands of at most that many
   bytes (with ``align > 1`` it must be a multiple of ``align`` so every piece stays aligned).

The destination buffer holds the runs back to back in sorted order: run ``r`` starts at the sum
of the lengths of the runs before it, so with ``align > 1`` every command's ``buffer_offset`` is
aligned too. ``placements`` says where each requested extent's bytes landed, in the order the
extents were given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import LayoutError

DEFAULT_GAP_BYTES = 64 * 1024


@dataclass(frozen=True)
class Extent:
    """``length`` bytes of ``file`` from byte ``offset``. ``tag`` is the caller's label.

    ``checksum`` is the CRC-32 the extent's bytes must have (``None``: not known). Session
    files set it on whole layer ranges (:meth:`SessionFile.layer_extents`), and engines that
    verify check every extent that carries one, so a planned restore cannot return damaged KV
    bytes silently.
    """

    file: str
    offset: int
    length: int
    tag: object = None
    checksum: int | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class ReadCommand:
    """One read: ``length`` bytes of ``file`` at ``offset`` into the buffer at ``buffer_offset``."""

    file: str
    offset: int
    length: int
    buffer_offset: int

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class ReadPlan:
    """The commands to issue and where each requested extent sits in the destination buffer.

    ``bytes_requested`` counts distinct requested bytes (overlapping extents count once), so
    ``read_amplification = bytes_read / bytes_requested >= 1``; an empty plan has amplification 1.
    """

    commands: tuple[ReadCommand, ...]
    placements: tuple[tuple[Extent, int], ...]
    bytes_requested: int
    bytes_read: int
    buffer_bytes: int

    @property
    def read_commands(self) -> int:
        return len(self.commands)

    @property
    def read_amplification(self) -> float:
        if self.bytes_requested == 0:
            return 1.0
        return self.bytes_read / self.bytes_requested

    @property
    def files(self) -> tuple[str, ...]:
        """Distinct files the plan reads, in command order."""
        return tuple(dict.fromkeys(c.file for c in self.commands))

    def extent_view(self, buffer: object, index: int) -> memoryview:
        """The bytes of the ``index``-th requested extent inside a filled destination buffer."""
        extent, at = self.placements[index]
        return memoryview(buffer).cast("B")[at : at + extent.length]  # type: ignore[arg-type]


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise LayoutError(f"plan_reads: {name} must be an integer >= {minimum}; got {value!r}")
    return value


def plan_reads(
    extents: Iterable[Extent],
    *,
    gap_bytes: int = DEFAULT_GAP_BYTES,
    max_command_bytes: int | None = None,
    align: int = 1,
) -> ReadPlan:
    """Sort, merge and (optionally) align and split ``extents`` into read commands.

    See the module docstring for the exact rules. Raises :class:`LayoutError` for a negative
    offset, a non-positive length, or inconsistent ``align``/``max_command_bytes``.
    """
    _check_int("gap_bytes", gap_bytes, 0)
    _check_int("align", align, 1)
    if max_command_bytes is not None:
        _check_int("max_command_bytes", max_command_bytes, 1)
        if max_command_bytes % align:
            raise LayoutError(
                f"plan_reads: max_command_bytes must be a multiple of align={align}; "
                f"got {max_command_bytes!r}"
            )
    given = list(extents)
    for i, e in enumerate(given):
        if not isinstance(e, Extent):
            raise LayoutError(f"plan_reads: extent {i} must be an Extent; got {e!r}")
        if e.offset < 0:
            raise LayoutError(
                f"plan_reads: extent {i} ({e.file}): offset must be >= 0; got {e.offset!r}"
            )
        if e.length < 1:
            raise LayoutError(
                f"plan_reads: extent {i} ({e.file}): length must be >= 1; got {e.length!r}"
            )

    order = sorted(
        range(len(given)), key=lambda i: (given[i].file, given[i].offset, given[i].length)
    )

    # Pass 1: merge by the gap rule; track distinct requested bytes and each extent's run.
    runs: list[tuple[str, int, int]] = []  # (file, start, end)
    run_of = [0] * len(given)
    bytes_requested = 0
    covered_end = -1  # end of requested bytes counted so far in the current file
    for i in order:
        e = given[i]
        same_file = bool(runs) and runs[-1][0] == e.file
        if same_file and (e.offset <= runs[-1][2] or e.offset - runs[-1][2] < gap_bytes):
            run_file, run_start, run_end = runs[-1]
            runs[-1] = (run_file, run_start, max(run_end, e.end))
        else:
            if not runs or runs[-1][0] != e.file:
                covered_end = -1
            runs.append((e.file, e.offset, e.end))
        # Distinct bytes: extents are sorted by offset within a file.
        start = max(e.offset, covered_end)
        if e.end > start:
            bytes_requested += e.end - start
        covered_end = max(covered_end, e.end)
        run_of[i] = len(runs) - 1

    # Pass 2: widen to alignment and merge runs the widening made overlap or touch.
    remap = list(range(len(runs)))
    if align > 1:
        aligned: list[tuple[str, int, int]] = []
        for k, (file, start, end) in enumerate(runs):
            a_start = start - start % align
            a_end = end + (-end % align)
            if aligned and aligned[-1][0] == file and a_start <= aligned[-1][2]:
                aligned[-1] = (file, aligned[-1][1], max(aligned[-1][2], a_end))
            else:
                aligned.append((file, a_start, a_end))
            remap[k] = len(aligned) - 1
        runs = aligned

    run_buffer: list[int] = []
    at = 0
    commands: list[ReadCommand] = []
    step = max_command_bytes
    for file, start, end in runs:
        run_buffer.append(at)
        pos = start
        while pos < end:
            n = end - pos if step is None else min(step, end - pos)
            commands.append(ReadCommand(file, pos, n, at + pos - start))
            pos += n
        at += end - start

    placements = []
    for i, e in enumerate(given):
        r = remap[run_of[i]]
        placements.append((e, run_buffer[r] + e.offset - runs[r][1]))

    return ReadPlan(
        commands=tuple(commands),
        placements=tuple(placements),
        bytes_requested=bytes_requested,
        bytes_read=at,
        buffer_bytes=at,
    )
