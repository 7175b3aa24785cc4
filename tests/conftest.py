from __future__ import annotations

import os
import shutil
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
