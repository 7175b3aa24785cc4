from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
SHARED = Path(os.environ.get("FCCTL_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces"


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
