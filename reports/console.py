"""The terminal summaries' one way onto stdout (analyze, replay, recommend-thresholds, iobench).

rich is imported when a summary is printed, not when a report module is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

#: Columns a piped summary is laid out in, unless ``$COLUMNS`` names a width: wide enough that
#: no table of ours is cut or wrapped (a table takes only the width it needs; the lines are
#: stripped of the padding at their ends). A pipe has no width of its own, and rich's fallback,
#: 80 columns, cut the widest tables' cells and sent their titles onto lines of their own
#: (issue #36, item 16).
PIPE_WIDTH = 1000


def pipe_width(environ: Mapping[str, str] | None = None) -> int:
    """The width of output that is not a terminal: ``$COLUMNS`` where it is a number (the
    user asked for that width), else :data:`PIPE_WIDTH`."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def pipe_console(**kwargs: Any) -> Console:
    """A console for output that is not a terminal: :func:`pipe_width` columns, and every
    table at least as wide as its title (within that width), so that a title is one line."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    class PipeConsole(Console):
        def print(self, *objects: Any, **print_kwargs: Any) -> None:
            for item in objects:
                if isinstance(item, Table) and isinstance(item.title, str | Text):
                    title = (
                        Text.from_markup(item.title) if isinstance(item.title, str) else item.title
                    )
                    wide = min(title.cell_len, self.width)
                    item.min_width = max(item.min_width or 0, wide)
            super().print(*objects, **print_kwargs)

    return PipeConsole(**{"width": pipe_width(), **kwargs})


def print_rendered(render: Callable[[Console], None]) -> None:
    """``render`` onto stdout: a terminal gets rich's output as it is; a pipe gets it whole, on
    lines as long as they need (:func:`pipe_console`), with no padding at their ends."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        render(console)
        return
    console = pipe_console()
    with console.capture() as captured:
        render(console)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
