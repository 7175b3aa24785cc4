"""The engine adapters' tests import the adapter (which imports its engine) or skip, naming
the import that failed; the engines are the test extra ``.[engines]``, absent from default CI."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


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
