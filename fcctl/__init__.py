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

from typing import TYPE_CHECKING, Any

from fcctl.common.version import __version__

if TYPE_CHECKING:
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
_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from fcctl import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fcctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
