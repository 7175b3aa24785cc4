"""``thresholds.toml``: the recommended thresholds and where they came from.

Written by ``--out`` and inside every ``--emit`` package. Read back with :mod:`tomllib`:
``[thresholds]`` holds ``short_reply_tokens`` and ``agent_context_tokens`` (tokens, the
arguments of ``PlacementRule``); ``[source]`` the trace, target rate, objective, hardware,
model, the figures at that rate and the fcctl version.
"""

from __future__ import annotations

import json
from typing import Any

from fcctl.common.version import fcctl_version

from .result import RecommendResult


def thresholds_source(result: RecommendResult) -> dict[str, Any]:
    """Where the thresholds came from: plain strings and numbers (TOML and Python literals)."""
    rec = result.recommendation
    f = result.facts
    out: dict[str, Any] = {
        "trace": f.trace_path,
        "trace_format": f.trace_format,
        "rate_per_s": rec.rate,
        "objective": f.objective,
        "gpu_hit_share": rec.gpu_hit_share,
        "ttft_mean_s": rec.ttft_s.mean,
        "ttft_p99_s": rec.ttft_s.p99,
        "hardware": f.hardware_name,
        "model": f.model,
        "seed": f.seed,
        "grid": f.grid_rule,
        "fcctl_version": fcctl_version(),
        "created_utc": result.provenance.finished_utc or result.provenance.started_utc,
    }
    return {k: v for k, v in out.items() if v is not None}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
    return json.dumps(str(v))


def thresholds_toml(result: RecommendResult) -> str:
    """The ``thresholds.toml`` text of ``result``."""
    rec = result.recommendation
    lines = [
        "# FlatCake write-time placement thresholds, from fcctl recommend-thresholds.",
        "# A later turn goes to memory when its context is at most agent_context_tokens and",
        "# the previous reply was at most short_reply_tokens (layout/placement.py).",
        "[thresholds]",
        f"short_reply_tokens = {rec.short_reply_tokens}",
        f"agent_context_tokens = {rec.agent_context_tokens}",
        "",
        "[source]",
    ]
    lines += [f"{k} = {_toml_value(v)}" for k, v in thresholds_source(result).items()]
    return "\n".join(lines) + "\n"
