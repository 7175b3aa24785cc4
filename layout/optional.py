"""Lazy imports of the optional heavy packages (torch, KvikIO, CuPy), each with its install hint.

The core needs only numpy at import time; a code path that needs one of these imports it here
when it runs, and a missing package becomes an error that says what to install.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import InputError, LayoutError

INSTALL_HINTS: dict[str, str] = {
    "torch": "pip install 'fcctl[torch]' (torch's CPU build is enough off the GPU)",
    "kvikio": "pip install 'fcctl[gpu]' (kvikio-cu12; kvikio-cu13 for CUDA 13)",
    "cupy": "pip install cupy-cuda12x (or pass a torch tensor instead of a CuPy array)",
}


def import_optional(module: str, purpose: str, *, error: type[InputError] = LayoutError) -> Any:
    """Import ``module`` (``"torch"``, ``"kvikio"``, ``"cupy"``) or raise ``error`` naming
    ``purpose`` and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        hint = INSTALL_HINTS.get(module, f"pip install {module}")
        raise error(f"{purpose} needs {module}, which is not installed ({e}); {hint}") from None
