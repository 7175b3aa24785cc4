"""What the engine tests share: the adapter (which imports its engine) imported or the test
skipped naming the import that failed (CI installs the engines, tests/engines-cpu.sh, so there
none skips); a recorded trace checked through the CLI."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from fcctl.cli import app


def import_or_skip(module: str, why: str) -> ModuleType:
    """``module`` imported, or the test skipped with the exact import error."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{why}: import {module} failed: {e}", allow_module_level=True)
    except Exception as e:  # an engine that fails to initialise on this machine
        pytest.skip(
            f"{why}: import {module} failed ({type(e).__name__}: {e})", allow_module_level=True
        )


def check_trace(
    path: Path, *, requests: int, block_accesses: int, distinct_blocks: int | None = None
) -> None:
    """A trace recorded through an engine, read by ``fcctl analyze`` and ``fcctl replay`` (the
    CLI, as a user runs them) with the request and block counts the test drove."""
    runner = CliRunner()
    out = runner.invoke(app, ["analyze", str(path), "--json"])
    assert out.exit_code == 0, out.output
    trace = json.loads(out.stdout)["trace"]
    assert (trace["format"], trace["requests"], trace["block_accesses"]) == (
        "flatcake",
        requests,
        block_accesses,
    )
    if distinct_blocks is not None:
        assert trace["distinct_blocks"] == distinct_blocks
    out = runner.invoke(
        app, ["replay", str(path), "--policies", "flat", "--rate", "1", "--jobs", "1", "--json"]
    )
    assert out.exit_code == 0, out.output
    flat = json.loads(out.stdout)["operating_point"]["policies"]["flat"]
    assert (flat["requests"], flat["block_accesses"]) == (requests, block_accesses)
