"""``fcctl replay``: a trace-replay simulator of memory-only, tiered and flat KV storage.

Public API: :func:`replay_trace` (:class:`ReplayConfig` -> :class:`ReplayResult`),
:func:`simulate` (one policy at one rate on a :class:`Workload`), :data:`POLICIES`,
:class:`Hardware` with :data:`PRESETS`, :func:`load_hardware`, :func:`apply_io_profile`.
The model is documented in docs/simulator.md.
"""

from fcctl.analyzers.replay.hardware import (
    PRESETS,
    Hardware,
    HardwareError,
    apply_io_profile,
    load_hardware,
    with_values,
)
from fcctl.analyzers.replay.policies import DEFAULT_POLICIES, POLICIES
from fcctl.analyzers.replay.result import PolicyResult, RateResult, ReplayResult
from fcctl.analyzers.replay.run import (
    DEFAULT_RATES,
    ReplayConfig,
    decision_of,
    replay_trace,
    simulate,
)
from fcctl.analyzers.replay.workload import Workload, build_workload

__all__ = [
    "DEFAULT_POLICIES",
    "DEFAULT_RATES",
    "POLICIES",
    "PRESETS",
    "Hardware",
    "HardwareError",
    "PolicyResult",
    "RateResult",
    "ReplayConfig",
    "ReplayResult",
    "Workload",
    "apply_io_profile",
    "build_workload",
    "decision_of",
    "load_hardware",
    "replay_trace",
    "simulate",
    "with_values",
]
