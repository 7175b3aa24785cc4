"""Trace readers: every supported format becomes the canonical table (:mod:`analyzers.schema`).

``read_trace(path)`` detects the format from the content (gzip by its magic bytes, then the
first record or header), not from the file name; ``format=`` overrides detection. Formats are
a :class:`TraceReader` protocol plus the :data:`FORMATS` registry: a new format is one module
and one registry entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from fcctl.analyzers.readers._common import (
    JSONDecodeError,
    TraceFormatError,
    loads,
    read_head,
    show,
)
from fcctl.analyzers.readers.azure import AzureReader
from fcctl.analyzers.readers.bailian import BailianReader
from fcctl.analyzers.readers.claude_code import ClaudeCodeReader
from fcctl.analyzers.readers.mooncake import MooncakeReader
from fcctl.analyzers.readers.parquet import ParquetReader
from fcctl.analyzers.schema import Trace

from fcctl.common.progress import Progress

__all__ = ["FORMATS", "TraceFormatError", "TraceReader", "detect_format", "read_trace"]


@runtime_checkable
class TraceReader(Protocol):
    """One trace format."""

    name: str
    description: str

    def sniff(self, head: bytes) -> bool:
        """Whether ``head`` (the first 64 KiB of decompressed content) looks like this format."""
        ...

    def read(self, path: Path, progress: Progress) -> Trace:
        """Parse the whole file into a :class:`Trace`; bad input raises TraceFormatError.

        Long reads report the bytes done on a line of ``progress`` (a no-op when disabled).
        """
        ...


# Sniffed in this order: the most specific signatures first (Bailian rows also carry
# Mooncake's fields, so Bailian goes before Mooncake).
FORMATS: dict[str, TraceReader] = {
    reader.name: reader
    for reader in (
        ParquetReader(),
        AzureReader(),
        ClaudeCodeReader(),
        BailianReader(),
        MooncakeReader(),
    )
}


def detect_format(path: str | Path) -> str:
    """The registry name of the format of ``path``, judged from its content."""
    path = Path(path)
    if path.is_dir():
        if any(path.glob("trace_*.json")):
            return "claude-code"
        raise TraceFormatError(
            f"{path}: directory holds no trace_*.json files (the Claude Code directory layout)"
        )
    head, gzip_error = read_head(path)
    if not head.strip() and gzip_error is None:
        raise TraceFormatError(f"{path}: file is empty")
    for name, reader in FORMATS.items():
        if reader.sniff(head):
            return name
    if gzip_error is not None:
        raise TraceFormatError(f"{path}: gzip stream is broken or truncated ({gzip_error})")
    first, newline, _ = head.partition(b"\n")
    if first.lstrip().startswith(b"{") and newline:
        # Looks like JSON Lines, but line 1 does not parse: say that, not "unknown format".
        try:
            loads(first)
        except JSONDecodeError as e:
            raise TraceFormatError(
                f"{path}: line 1: invalid JSON ({e}); got {show(first[:60])}"
            ) from None
    raise TraceFormatError(
        f"{path}: unknown trace format (expected one of {', '.join(FORMATS)}; "
        f"pass --format to choose); got first bytes {show(first[:60])}"
    )


def read_trace(
    path: str | Path, format: str | None = None, *, progress: Progress | bool = False
) -> Trace:
    """Read a trace file (or Claude Code directory) into the canonical :class:`Trace`.

    ``format`` is a :data:`FORMATS` name; ``None`` detects it from the content. ``progress``
    is the caller's :class:`~fcctl.common.progress.Progress` display, or ``True`` for one of
    its own (a bar on stderr when that is a terminal and the read runs past ~2 s).
    """
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or directory")
    if format is None:
        format = detect_format(path)
    reader = FORMATS.get(format)
    if reader is None:
        raise TraceFormatError(
            f"{path}: unknown format {format!r}; expected one of {', '.join(FORMATS)}"
        )
    if path.is_dir() and format != "claude-code":
        raise TraceFormatError(
            f"{path}: is a directory; only the claude-code format reads directories "
            f"(got --format {format})"
        )
    if isinstance(progress, Progress):
        return reader.read(path, progress)
    with Progress(enabled=progress) as own:
        return reader.read(path, own)
