"""`fcctl --help` and `fcctl analyze` must never import the GPU stack (torch, kvikio, cupy).

`fcctl --help` imports no heavy library at all, numpy included (the storage core's package loads
its names lazily, so the light modules the commands declare their flags with stay light).

Checked in a fresh interpreter, since this test process may have imported them already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "claude_code_sample.jsonl.gz"

_PROBE = """
import json, sys
from typer.testing import CliRunner
from fcctl.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
mods = ("torch", "kvikio", "cupy", "matplotlib", "numba", "polars", "numpy")
print(json.dumps({"exit": result.exit_code, "loaded": [m for m in mods if m in sys.modules]}))
"""


def _loaded_after(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["exit"] == 0
    return doc["loaded"]


def test_help_imports_nothing_heavy() -> None:
    loaded = _loaded_after("--help")
    assert loaded == [], loaded


def test_analyze_never_imports_the_gpu_stack() -> None:
    loaded = _loaded_after("analyze", str(SAMPLE), "--json")
    assert not {"torch", "kvikio", "cupy"} & set(loaded), loaded
    assert "numba" in loaded  # the analysis really ran in that process


def test_help_lists_every_trace_format() -> None:
    from fcctl.analyzers.traces.readers import FORMATS
    from fcctl.commands import FORMAT_NAMES

    assert set(FORMAT_NAMES) == set(FORMATS)
