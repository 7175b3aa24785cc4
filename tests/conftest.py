from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
SHARED = Path(os.environ.get("FCCTL_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces"

# The suite's commands run with stderr piped, where fcctl writes a progress line about any step
# that runs past a few seconds (fcctl.common.progress): how long a step takes on a busy machine
# must not change what a test reads on stderr, so the lines are off unless a test (those of
# tests/test_progress_piped.py) turns them on.
os.environ.setdefault("FCCTL_PROGRESS_INTERVAL_S", "0")


@pytest.fixture
def shared_traces() -> Path:
    """The public traces beside the repository; tests using them skip on a fresh clone."""
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    return TRACES


@pytest.fixture
def fio_bin() -> str:
    path = shutil.which("fio")
    if path is None:
        pytest.skip("fio is not installed")
    return path


#: The signals a user stops a run with: a test must leave their dispositions (handler or
#: ignored) and this thread's mask as it found them, or every later test, and pytest itself,
#: may no longer answer Ctrl-C (issue #36, item 13).
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _kernel_ignored() -> frozenset[str] | None:
    """Which of :data:`INTERRUPT_SIGNALS` the kernel has ignored (``SigIgn``), None off Linux;
    Python's own table (``signal.getsignal``) misses a disposition set from C."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    line = next((x for x in status.splitlines() if x.startswith("SigIgn:")), None)
    if line is None:
        return None
    mask = int(line.split()[1], 16)
    return frozenset(s.name for s in INTERRUPT_SIGNALS if mask >> (s - 1) & 1)


def _name(handler: object) -> str:
    if isinstance(handler, signal.Handlers):
        return handler.name  # SIG_DFL, SIG_IGN
    # A function by name and identity: two closures of one function are different handlers.
    return f"{getattr(handler, '__qualname__', handler)}@{id(handler):x}"


@dataclass(frozen=True)
class SignalState:
    """How this process answers :data:`INTERRUPT_SIGNALS`: each one's handler, which the kernel
    ignores, and which are blocked in this (the main) thread."""

    handlers: tuple[str, ...]
    ignored: frozenset[str] | None
    blocked: frozenset[str]

    @classmethod
    def now(cls) -> SignalState:
        handlers = tuple(f"{s.name}={_name(signal.getsignal(s))}" for s in INTERRUPT_SIGNALS)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        blocked = frozenset(signal.Signals(s).name for s in mask if s in INTERRUPT_SIGNALS)
        return cls(handlers, _kernel_ignored(), blocked)


@pytest.fixture(autouse=True)
def signals_left_as_found() -> Iterator[None]:
    """Fail the test that changed how this process answers SIGINT, SIGTERM or SIGHUP (a
    handler, an ignored disposition, a blocked signal), after putting them back, so that only
    this test is blamed and pytest still stops on Ctrl-C."""
    handlers = {s: signal.getsignal(s) for s in INTERRUPT_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    before = SignalState.now()
    yield
    after = SignalState.now()
    if after == before:
        return
    for s, handler in handlers.items():
        if handler is not None:  # None: set from C, not restorable from Python
            signal.signal(s, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    pytest.fail(f"the test changed the interrupt signals: before {before}; after {after}")
