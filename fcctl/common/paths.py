"""How a path is shown in a message: as typed, unless it holds characters a terminal mangles.

A file name with a newline, a tab, an escape or another control character would break the
one-line error rule or rewrite the terminal; such names are quoted the way Python's ``repr``
quotes them (``'bad\\nname.jsonl'``), so the user sees exactly which bytes the name holds.
"""

from __future__ import annotations

import os


def _needs_quoting(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F or 0x80 <= ord(c) < 0xA0 for c in text) or any(
        0xDC80 <= ord(c) <= 0xDCFF
        for c in text  # undecodable bytes (surrogateescape)
    )


def display_path(path: str | os.PathLike[str]) -> str:
    """``path`` for a one-line message: plain, or ``repr``-quoted when it has control chars."""
    text = os.fspath(path)
    if isinstance(text, bytes):  # pragma: no cover - fcctl passes str paths
        text = os.fsdecode(text)
    return repr(text) if _needs_quoting(text) else text
