"""The page: the unit O_DIRECT reads, session-file segments and staging buffers are aligned to.

One constant and one rounding helper for the whole core, so the file format, the readers and the
staging window cannot disagree on what "aligned" means.
"""

from __future__ import annotations

PAGE_BYTES = 4096


def align_up(n: int, align: int = PAGE_BYTES) -> int:
    """``n`` rounded up to a multiple of ``align`` (bytes); ``align_up(0) == 0``."""
    return -(-n // align) * align
