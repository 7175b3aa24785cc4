"""``fcctl recommend-thresholds``: tune FlatCake's write-time placement thresholds on a trace.

Public API: :func:`recommend_thresholds` (:class:`RecommendConfig` -> :class:`RecommendResult`),
:func:`pick`, :func:`default_grid`, :func:`threshold_classes`, :func:`thresholds_toml`. The
rules (default grid, reuse across the grid, pick and ties, misplacement) are in
:mod:`.grid` and :mod:`.sweep`; docs/recommend.md explains them with results.
"""

from .grid import default_grid, grid_from_values, parse_grid
from .result import (
    CHANGES,
    GridCell,
    Misplacement,
    Recommendation,
    RecommendResult,
    Ttft,
)
from .sweep import (
    ALL_MEMORY_TOKENS,
    OBJECTIVES,
    RecommendConfig,
    pick,
    recommend_thresholds,
    threshold_classes,
)
from .thresholds import thresholds_source, thresholds_toml

__all__ = [
    "ALL_MEMORY_TOKENS",
    "CHANGES",
    "OBJECTIVES",
    "GridCell",
    "Misplacement",
    "RecommendConfig",
    "RecommendResult",
    "Recommendation",
    "Ttft",
    "default_grid",
    "grid_from_values",
    "parse_grid",
    "pick",
    "recommend_thresholds",
    "threshold_classes",
    "thresholds_source",
    "thresholds_toml",
]
