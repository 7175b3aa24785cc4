"""Progress on stderr, for work that runs past ~2 s: a bar on a terminal, plain lines elsewhere.

On a terminal a transient rich display is drawn after ``delay_s``, if the work is still
running (short work never flashes a bar). A piped or logged stderr cannot redraw a bar, but
it must not stay silent for the length of a long run either (a whole-trace ``fcctl plan`` with
stderr to a file once wrote nothing for 24 minutes): it gets plain lines
(:class:`PlainDisplay`). A step that runs past ``delay_s`` (at least :data:`PLAIN_DELAY_S` off a
terminal) is named on a line of its own, then a line every ``interval_s`` (default
:data:`DEFAULT_INTERVAL_S`, or ``$FCCTL_PROGRESS_INTERVAL_S``) says how far it is, with the time
left where the step has a total, and a last line says when it is done. Short work writes
nothing, so a quick ``--json`` run leaves stderr empty; ``FCCTL_PROGRESS_INTERVAL_S=0`` turns
the lines off.

    with Progress(enabled=True) as progress:
        with progress.task("reading trace", total=n_bytes, unit="MiB", per_unit=2**20) as t:
            ...
            t.advance(len(chunk))    # or t.update(done)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from fcctl.common.errors import FcctlInputError

DEFAULT_DELAY_S = 2.0
#: Off a terminal, a step is named once it has run this long (or ``interval_s``, if shorter):
#: longer than the bar's delay, so that a quick run's stderr stays empty in a log.
PLAIN_DELAY_S = 5.0
#: Off a terminal, the most seconds between two lines about a step still running.
DEFAULT_INTERVAL_S = 30.0
#: The environment variable that sets ``interval_s`` for every command (seconds; 0: no lines).
INTERVAL_ENV = "FCCTL_PROGRESS_INTERVAL_S"


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


def interval_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``$FCCTL_PROGRESS_INTERVAL_S``: the most seconds between two plain progress lines;
    :data:`DEFAULT_INTERVAL_S` when it is unset or empty, 0 for no plain lines at all (a
    script that keeps stderr for errors). Anything but a number >= 0 is refused by name."""
    raw = (os.environ if environ is None else environ).get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise FcctlInputError(
            f"{INTERVAL_ENV}: must be a number of seconds >= 0 (the most time between two "
            f"progress lines when stderr is not a terminal; 0: none); got {raw!r}",
            parameter=INTERVAL_ENV,
        )
    return value


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a span for a log line."""
    s = round(max(seconds, 0.0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class _PlainTask:
    id: int
    description: str
    total: float | None
    unit: str
    started: float
    completed: float = 0.0
    # When the step was named on a line (None: not yet) and when its last line was written.
    announced: float | None = None
    last_line: float = 0.0


class PlainDisplay:
    """Progress as plain lines on a stream that is not a terminal (a pipe, a log file).

    It answers the calls :class:`Task` makes of rich's display (``add_task``, ``update``,
    ``advance``, ``remove_task``, ``tasks``) and writes, from a thread of its own that wakes a
    few times per ``interval_s``: a step's name once it has run ``delay_s``, a line on how far
    it is every ``interval_s`` after that (and at once when a step is renamed, e.g. plan's
    next stage), and ``done`` when it ends. Lines start with ``fcctl:`` and are flushed at once.
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        delay_s: float = PLAIN_DELAY_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._delay_s = max(0.0, delay_s)
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[int, _PlainTask] = {}
        self._next_id = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def tasks(self) -> list[_PlainTask]:
        with self._lock:
            return list(self._tasks.values())

    def _write(self, line: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # stderr closed (a pipe's reader gone): nothing to tell
            pass

    def _state(self, task: _PlainTask, now: float) -> str:
        elapsed = now - task.started
        parts = []
        if task.total is not None:
            share = min(task.completed / task.total, 1.0) if task.total > 0 else 1.0
            amount = f"{task.completed:,.0f}/{task.total:,.0f} {task.unit}".rstrip()
            parts.append(
                f"{amount} ({share:.0%})" if task.unit not in ("", "%") else f"{share:.0%}"
            )
            parts.append(f"{duration(elapsed)} elapsed")
            if 0 < share < 1:
                parts.append(f"about {duration(elapsed * (1 - share) / share)} left")
            elif share == 0:
                parts.append("time left not known yet")
        else:
            if task.completed:
                parts.append(f"{task.completed:,.0f} {task.unit}".rstrip())
            parts.append(f"{duration(elapsed)} elapsed")
        return ", ".join(parts)

    def _line(self, task: _PlainTask, now: float) -> str:
        task.last_line = now
        return f"fcctl: {task.description.strip()}: {self._state(task, now)}"

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        with self._lock:
            self._next_id += 1
            task = _PlainTask(
                self._next_id,
                description,
                total,
                str(fields.pop("unit", "")),
                self._clock(),
            )
            self._tasks[task.id] = task
            return task.id

    def update(
        self,
        task_id: int,
        *,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
    ) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return
            if completed is not None:
                task.completed = completed
            if total is not None:
                task.total = total
            if description is None or description == task.description:
                return
            task.description = description
            if task.announced is None:
                return
            line = self._line(task, self._clock())  # a new stage of a step already shown
        # Written outside the lock: a slow reader of stderr stalls this line, not the work.
        self._write(line)

    def advance(self, task_id: int, amount: float) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None:
                task.completed += amount

    def remove_task(self, task_id: int, *, finished: bool = True) -> None:
        """The step ended: ``done in ...``, or (``finished=False``: an error or an interrupt
        ended it) ``stopped after ...``; nothing for a step never named."""
        with self._lock:
            task = self._tasks.pop(task_id, None)
            if task is None or task.announced is None:
                return
            took = duration(self._clock() - task.started)
        ended = f"done in {took}" if finished else f"stopped after {took}"
        self._write(f"fcctl: {task.description.strip()}: {ended}")

    def tick(self) -> None:
        """Write what is due now (called by the display's thread; a test may call it)."""
        lines = []
        with self._lock:
            now = self._clock()
            for task in self._tasks.values():
                if task.announced is None:
                    if now - task.started >= self._delay_s:
                        task.announced = now
                        lines.append(self._line(task, now))
                elif now - task.last_line >= self._interval_s:
                    lines.append(self._line(task, now))
        for line in lines:
            self._write(line)

    def _run(self) -> None:
        wake_s = max(0.05, min(1.0, self._interval_s / 4, self._delay_s / 2 or 1.0))
        while not self._stop.wait(wake_s):
            self.tick()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="fcctl-progress-lines", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()


class Progress:
    """A context manager around progress on stderr: a transient rich display on a terminal,
    plain lines elsewhere (:class:`PlainDisplay`), or nothing when not ``enabled``.

    ``interval_s`` (plain lines only): the most seconds between two lines about a step (0:
    no lines); None reads ``$FCCTL_PROGRESS_INTERVAL_S`` (default :data:`DEFAULT_INTERVAL_S`).
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        delay_s: float = DEFAULT_DELAY_S,
        console: Any = None,
        interval_s: float | None = None,
    ) -> None:
        self._rich: Any | None = None
        self._plain: PlainDisplay | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._started = False
        self._delay_s = delay_s
        if not enabled:
            return
        # Read (and a bad value refused) whichever display runs, so a setting that a terminal
        # does not use is not found wrong only when the same command is later logged.
        interval = interval_from_env() if interval_s is None else interval_s
        from rich.console import Console

        console = console or Console(stderr=True)
        if not console.is_terminal:
            if interval <= 0:
                return
            self._plain = PlainDisplay(
                None if console.file is sys.stderr else console.file,
                delay_s=min(max(delay_s, PLAIN_DELAY_S), interval),
                interval_s=interval,
            )
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
        """True when a bar will be drawn (stderr is a terminal and progress was asked for);
        plain lines off a terminal are not a display that draws a line per simulation."""
        return self._rich is not None

    def _display(self) -> Any | None:
        return self._rich if self._rich is not None else self._plain

    def _start(self) -> None:
        with self._lock:
            if self._rich is not None and not self._started:
                self._rich.start()
                self._started = True

    def __enter__(self) -> Progress:
        if self._plain is not None:
            self._plain.start()  # it keeps the delay itself, step by step
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
        if self._plain is not None:
            self._plain.stop()
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
        display = self._display()
        if display is None:
            yield Task(None, None, per_unit)
            return
        shown = None if total is None else max(total / per_unit, 1e-9)
        tid = display.add_task(description, total=shown, unit=unit)
        try:
            yield Task(display, tid, per_unit)
        except BaseException:
            if display is self._plain:
                self._plain.remove_task(tid, finished=False)
            else:
                display.remove_task(tid)
            raise
        display.remove_task(tid)
