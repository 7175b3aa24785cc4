"""What the engine tests share: the adapter (which imports its engine) imported or the test
skipped naming the import that failed (CI installs the engines, tests/engines-cpu.sh, so there
none skips); a recorded trace checked through the CLI; torchvision made importable on a CPU
machine (below), before any engine test imports its engine."""

from __future__ import annotations

import importlib
import json
import sys
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


def torchvision_without_its_kernels() -> None:
    """Make ``import torchvision`` work where its C++ kernels cannot load, so SGLang's configs
    (which import ``torchvision.transforms`` for multimodal models) import on a CPU machine.

    PyPI's torchvision for torch 2.13 (0.28.0, the only build reachable here: the CPU builds live
    on download.pytorch.org) links ``libtorch_cuda.so``, absent from torch's CPU build, so its
    ``_C.so`` does not load, and its ``_meta_registrations`` then fails registering fake kernels
    for the undefined ops ``torchvision::nms`` and ``qnms``. Declaring those two schemas (no
    kernel) lets it import; calling them raises, and nothing the KV-cache paths run calls them.
    Where torchvision imports as it is, nothing is changed."""
    try:
        import torchvision
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        import torch

        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        for op in ("nms", "qnms"):
            try:
                torch.library.define(f"torchvision::{op}", schema)
            except RuntimeError:  # declared by an earlier call in this process
                pass
        import torchvision  # noqa: F401
    except ImportError:
        pass  # not installed: the import that needs it skips, naming it


# vLLM's config and SGLang's configs import torchvision: every engine test imports this module
# first, so this runs before them.
torchvision_without_its_kernels()


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
