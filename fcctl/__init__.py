"""fcctl: decide where LLM KV cache lives (host memory, SSD, or both).

The public Python API, one call per command, each returning the command's frozen result
(docs/python-api.md)::

    import fcctl
    result = fcctl.analyze("trace.jsonl")
    print(result.verdict.layout)

The calls load lazily (as polars does), so ``import fcctl`` stays light: numpy, polars and the
simulator load on the first call.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from fcctl.common.version import __version__

if TYPE_CHECKING:
    from fcctl.analyzers.replay import LoadPlan, RunSpec
    from fcctl.analyzers.replay.load import ThinkTime
    from fcctl.api import (
        analyze,
        geometry,
        hardware,
        iobench,
        plan,
        read_trace,
        recommend_thresholds,
        replay,
    )

__all__ = [
    "LoadPlan",
    "RunSpec",
    "ThinkTime",
    "__version__",
    "analyze",
    "geometry",
    "hardware",
    "iobench",
    "plan",
    "read_trace",
    "recommend_thresholds",
    "replay",
]
#: The settings objects the calls take, with the module each lives in.
_TYPES = {
    "LoadPlan": "fcctl.analyzers.replay",
    "RunSpec": "fcctl.analyzers.replay",
    "ThinkTime": "fcctl.analyzers.replay.load",
}
_API = frozenset(__all__) - {"__version__", *_TYPES}


class _Package(types.ModuleType):
    """``fcctl`` itself: importing the subpackage ``fcctl.iobench`` must not replace the public
    call ``fcctl.iobench(...)``. The import system binds every imported subpackage to its
    parent's attribute of that name; without this, the first ``fcctl.iobench(...)`` (which
    imports the package) made the second one a module, not callable."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return  # the subpackage stays reachable as sys.modules["fcctl.iobench"]
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _API:
        from fcctl import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    if name in _TYPES:
        import importlib

        value = getattr(importlib.import_module(_TYPES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fcctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
