"""The progress bar: on stderr, only on a terminal, and only for work that runs past ~2 s.

A piped or logged stderr gets nothing (no bar, no blank line), so scripts see only data on
stdout and our own notes on stderr. Short work never flashes a bar: the display starts after
``delay_s`` and only if the work is still running.

    with Progress(enabled=True) as progress:
        with progress.task("reading trace", total=n_bytes, unit="MiB", per_unit=2**20) as t:
            ...
            t.advance(len(chunk))    # or t.update(done)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_DELAY_S = 2.0


class Task:
    """One line of the display; a no-op when the display is off."""

    def __init__(self, progress: Any | None, task_id: Any | None, per_unit: float) -> None:
        self._progress = progress
        self._task_id = task_id
        self._per_unit = per_unit

    def advance(self, amount: float = 1) -> None:
        """Add ``amount`` (in the caller's units; divided by ``per_unit`` for display)."""
        if self._progress is not None:
            self._progress.advance(self._task_id, amount / self._per_unit)

    def update(self, completed: float) -> None:
        """Set the amount done so far."""
        if self._progress is not None:
            self._progress.update(self._task_id, completed=completed / self._per_unit)

    def add_total(self, amount: float) -> None:
        """Grow the total by ``amount`` (work found on the way, e.g. an extended grid)."""
        if self._progress is not None and amount:
            for task in self._progress.tasks:
                if task.id == self._task_id and task.total is not None:
                    self._progress.update(self._task_id, total=task.total + amount / self._per_unit)

    def describe(self, description: str) -> None:
        """Rename the line (e.g. to name the phase now running)."""
        if self._progress is not None:
            self._progress.update(self._task_id, description=description)


def _amount_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class AmountColumn(ProgressColumn):
        """``12/40 MiB`` for a task with a unit, ``30%`` for one without."""

        def render(self, task: Any) -> Text:
            unit = task.fields.get("unit", "")
            if task.total is None:
                return Text(f"{task.completed:,.0f} {unit}".rstrip())
            if unit:
                return Text(f"{task.completed:,.0f}/{task.total:,.0f} {unit}")
            return Text(f"{task.percentage:>3.0f}%")

    return AmountColumn()


class Progress:
    """A context manager around a transient rich progress display on stderr, or nothing."""

    def __init__(
        self, enabled: bool = True, *, delay_s: float = DEFAULT_DELAY_S, console: Any = None
    ) -> None:
        self._rich: Any | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._started = False
        self._delay_s = delay_s
        if not enabled:
            return
        from rich.console import Console

        console = console or Console(stderr=True)
        if not console.is_terminal:
            return
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self._rich = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            _amount_column(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),  # the estimate of time left, from the rate so far
            console=console,
            transient=True,
        )

    @property
    def active(self) -> bool:
        """True when a display will be drawn (stderr is a terminal and progress was asked for)."""
        return self._rich is not None

    def _start(self) -> None:
        with self._lock:
            if self._rich is not None and not self._started:
                self._rich.start()
                self._started = True

    def __enter__(self) -> Progress:
        if self._rich is not None:
            if self._delay_s <= 0:
                self._start()
            else:
                # Started later, from a timer, and only if the work is still running then.
                self._timer = threading.Timer(self._delay_s, self._start)
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._rich is not None and self._started:
                self._rich.stop()
            self._started = False

    @contextmanager
    def task(
        self, description: str, total: float | None = None, *, unit: str = "", per_unit: float = 1
    ) -> Iterator[Task]:
        """A line of the display for one stage, removed when the stage ends.

        ``total`` and the amounts passed to the task are in the caller's units; the display
        divides them by ``per_unit`` (bytes shown as MiB: ``unit="MiB", per_unit=2**20``).
        """
        if self._rich is None:
            yield Task(None, None, per_unit)
            return
        shown = None if total is None else max(total / per_unit, 1e-9)
        tid = self._rich.add_task(description, total=shown, unit=unit)
        try:
            yield Task(self._rich, tid, per_unit)
        finally:
            self._rich.remove_task(tid)
