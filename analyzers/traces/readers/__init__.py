"""Trace readers: every supported format becomes the canonical table
(:mod:`analyzers.traces.schema`).

``read_trace(path)`` detects the format from the content (gzip by its magic bytes, then the
first record or header), not from the file name; ``format=`` overrides detection. Formats are
a :class:`TraceReader` protocol plus the :data:`FORMATS` registry: a new format is one module
and one registry entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    JSONDecodeError,
    TraceFormatError,
    blame_gzip,
    check_file,
    check_max_line_bytes,
    fail,
    loads,
    missing,
    read_head,
    show,
)
from .azure import AzureReader
from .bailian import BailianReader
from .claude_code import ClaudeCodeReader
from .dynamo import DynamoReader
from .flatcake import FlatCakeReader
from .generic import GenericReader, columns_error
from .mooncake import MooncakeReader
from .parquet import ParquetReader
from .tracelab import TraceLabReader

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "FORMATS",
    "TraceFormatError",
    "TraceReader",
    "check_file",
    "detect_format",
    "fail",
    "missing",
    "read_trace",
]


@runtime_checkable
class TraceReader(Protocol):
    """One trace format."""

    name: str
    description: str

    def sniff(self, head: bytes) -> bool:
        """Whether ``head`` looks like this format.

        ``head`` is the start of the decompressed content: at least 64 KiB, and the whole first
        line when the content starts with a JSON object (see ``_common.read_head``).
        """
        ...

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        """Parse the whole file into a :class:`Trace`; bad input raises TraceFormatError.

        Long reads report the bytes done on a line of ``progress`` (a no-op when disabled). A
        line (or a one-record file, such as a Claude Code ``trace_NNNN.json``) longer than
        ``max_line_bytes`` is an error as soon as that is known.
        """
        ...


# Sniffed in this order: the most specific signatures first (Bailian and Dynamo rows also
# carry Mooncake's fields, so both go before Mooncake; FlatCake captures carry Dynamo's
# session_id and hash_ids, so they go before Dynamo).
FORMATS: dict[str, TraceReader] = {
    reader.name: reader
    for reader in (
        ParquetReader(),
        AzureReader(),
        ClaudeCodeReader(),
        TraceLabReader(),
        BailianReader(),
        FlatCakeReader(),
        DynamoReader(),
        MooncakeReader(),
        GenericReader(),  # never sniffed: chosen by a column mapping
    )
}


def detect_format(path: str | Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> str:
    """The registry name of the format of ``path``, judged from its content.

    Reads as much as the first record needs (its whole line, up to ``max_line_bytes``).
    """
    path = Path(path)
    if path.is_dir():
        if any(path.glob("trace_*.json")):
            return "claude-code"
        raise fail(
            path, None, "directory holds no trace_*.json files (the Claude Code directory layout)"
        )
    head, gzip_error = read_head(path, max_line_bytes=check_max_line_bytes(max_line_bytes))
    if not head.strip() and gzip_error is None:
        raise fail(path, None, "file is empty")
    for name, reader in FORMATS.items():
        if reader.sniff(head):
            return name
    if gzip_error is not None:
        raise fail(path, None, f"gzip stream is broken or truncated ({gzip_error})")
    first, newline, _ = head.partition(b"\n")
    if first.lstrip().startswith(b"{") and newline:
        # Looks like JSON Lines, but line 1 does not parse: say that, not "unknown format".
        try:
            loads(first)
        except JSONDecodeError as e:
            raise fail(path, "line 1", f"invalid JSON ({e}); got {show(first[:60])}") from None
    raise fail(
        path,
        None,
        f"unknown trace format (expected one of {', '.join(FORMATS)}; "
        f"pass `format` to choose, or `columns` to map a log's columns); got first bytes "
        f"{show(first[:60])}",
    )


def read_trace(
    path: str | Path,
    format: str | None = None,
    *,
    progress: Progress | bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    columns: str | Mapping[str, str] | None = None,
) -> Trace:
    """Read a trace file (or Claude Code directory) into the canonical :class:`Trace`.

    ``format`` is a :data:`FORMATS` name; ``None`` detects it from the content. ``progress``
    is the caller's :class:`~fcctl.common.progress.Progress` display, or ``True`` for one of
    its own (a bar on stderr when that is a terminal and the read runs past ~2 s).
    ``max_line_bytes`` bounds one line of a text trace (and one ``trace_NNNN.json`` of a
    directory): a longer one is an error as soon as that many bytes are read, so memory stays
    bounded on hostile input. Only regular files (and, for claude-code, directories) are read.
    ``columns`` is the column mapping of the ``generic`` format (``"session=sid,timestamp=ts,
    input=in,output=out"``, see :mod:`~fcctl.analyzers.traces.readers.generic`); it implies that
    format, and no other format takes one.
    """
    path = Path(path)
    check_max_line_bytes(max_line_bytes)
    if not path.exists():
        raise missing(path)
    if format is None:
        format = (
            "generic" if columns is not None else detect_format(path, max_line_bytes=max_line_bytes)
        )
    reader = FORMATS.get(format)
    if reader is None:
        raise fail(path, None, f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    options = {} if columns is None else {"columns": columns}
    if options and not getattr(reader, "takes_columns", False):
        raise columns_error(
            path, f"a column mapping is read only by the generic format; got format {format!r}"
        )
    if path.is_dir() and format != "claude-code":
        raise fail(
            path,
            None,
            "is a directory; only the claude-code format reads directories "
            f"(got format {format!r})",
        )
    try:
        if isinstance(progress, Progress):
            return reader.read(path, progress, max_line_bytes=max_line_bytes, **options)
        with Progress(enabled=progress) as own:
            return reader.read(path, own, max_line_bytes=max_line_bytes, **options)
    except TraceFormatError as e:
        # A bad line of a gzip file may be damaged data: then the damage is the error.
        raise (blame_gzip(path, e) if path.is_file() else e) from None
