"""``fcctl replay``: a trace-replay simulator of memory-only, tiered and flat KV storage.

Public API: :func:`replay_trace` (a :class:`RunSpec`, one simulation's settings, and a
:class:`LoadPlan`, the sweep; or a :class:`ReplayConfig` holding the keywords of both ->
:class:`ReplayResult`), :func:`simulate` (one policy at one load point on a :class:`Workload`,
on a :class:`Store` made by a :class:`StoreFactory`), :data:`POLICIES`,
:class:`Hardware` with :data:`PRESETS` and :data:`HOST_SCOPES`, :func:`load_hardware`,
:func:`apply_io_profile`.
The model is documented in docs/simulator.md.

What a caller running many simulations on one trace needs (the recommender,
:mod:`fcctl.analyzers.recommend`, imports these from this package, never from its modules):
:func:`simulation_workload` (the workload built once: arrays, none of the trace's table),
:func:`simulate` with ``release=True`` (a run that frees its own cycles), :func:`workers_of`,
:func:`decision_of` with :func:`check_margins` and its defaults, :func:`hardware_document`
and :data:`DEFAULT_SEED`; a :class:`RunSpec` per cell (:class:`SimTask`); and where many
simulations run (:mod:`.parallel`): :class:`Execution`, :func:`open_runner` with
:func:`run_task` and :class:`SimTask`, :class:`SimulationDisplay`, :func:`default_jobs`.
"""

from .amplify import amplify_within_budget, amplify_workload, check_amplify_value
from .decision import DEFAULT_MARGIN_PP, DEFAULT_TTFT_MARGIN, check_margins
from .hardware import (
    HOST_SCOPES,
    PRESETS,
    Hardware,
    HardwareError,
    apply_io_profile,
    hardware_document,
    load_hardware,
    with_values,
)
from .loadplan import DEFAULT_RATES, LoadPlan, check_policies
from .parallel import (
    ENGINES,
    Execution,
    Runner,
    SimTask,
    SimulationDisplay,
    check_execution,
    default_jobs,
    open_runner,
    worker_bytes,
)
from .policies import DEFAULT_POLICIES, POLICIES
from .result import PolicyResult, RateResult, ReplayResult
from .run import (
    ReplayConfig,
    decision_of,
    replay_trace,
    run_task,
    simulate,
    simulation_workload,
    workers_of,
)
from .sampling import SessionSampling, sampled_label, session_sampling
from .spec import CANCEL_MODES, DEFAULT_SEED, ROUTERS, RunSpec, Store, StoreFactory
from .verdict import Verdict, verdict_sentences
from .workload import Workload, build_workload

__all__ = [
    "CANCEL_MODES",
    "DEFAULT_MARGIN_PP",
    "DEFAULT_POLICIES",
    "DEFAULT_RATES",
    "DEFAULT_SEED",
    "DEFAULT_TTFT_MARGIN",
    "ENGINES",
    "HOST_SCOPES",
    "POLICIES",
    "PRESETS",
    "ROUTERS",
    "Execution",
    "Hardware",
    "HardwareError",
    "LoadPlan",
    "PolicyResult",
    "RateResult",
    "ReplayConfig",
    "ReplayResult",
    "RunSpec",
    "Runner",
    "SessionSampling",
    "SimTask",
    "SimulationDisplay",
    "Store",
    "StoreFactory",
    "Verdict",
    "Workload",
    "amplify_within_budget",
    "amplify_workload",
    "apply_io_profile",
    "build_workload",
    "check_amplify_value",
    "check_execution",
    "check_margins",
    "check_policies",
    "decision_of",
    "default_jobs",
    "hardware_document",
    "load_hardware",
    "open_runner",
    "replay_trace",
    "run_task",
    "sampled_label",
    "session_sampling",
    "simulate",
    "simulation_workload",
    "verdict_sentences",
    "with_values",
    "worker_bytes",
    "workers_of",
]
