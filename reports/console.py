"""The terminal summaries' one way onto stdout (analyze, replay, recommend-thresholds).

rich is imported when a summary is printed, not when a report module is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def print_rendered(render: Callable[[Console], None], *, width: int | None = None) -> None:
    """``render`` onto stdout: a terminal gets rich's output as it is; a pipe gets it rendered
    ``width`` columns wide (None: rich's own width), with whole lines and no padding at the ends.
    """
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        render(console)
        return
    if width is not None:
        console = Console(width=width)
    with console.capture() as captured:
        render(console)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
