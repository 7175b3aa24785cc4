"""fcctl's public Python API: one call per command, returning the command's frozen result.

Every decision a command makes lives here, not in the CLI: whether a source is one trace file
or a dataset of canonical Parquet files, whether the analysis runs in this process or on Dask,
how the simulated node is put together from a preset and overrides. ``fcctl <command>`` parses
its flags, makes one of these calls and renders the result, so a notebook gets exactly the
figures the CLI prints (``fcctl.common.jsonio.dumps(result)`` is the ``--json`` document).

The calls take Python values: sizes are bytes (an ``int``), lists are lists (``rates=[1.0,
3.0]``), a think time is a :class:`~fcctl.ThinkTime`; ``"auto"`` (rates) and ``"all"``
(concurrency) are the only strings, modes rather than text to parse. The command-line strings
(``"1,3"``, ``"64GiB"``, ``"capped:60"``) are parsed at the command edge (fcctl/commands/parse.py);
the strings the API took before are still accepted for one release, with a
``DeprecationWarning`` (one shim: :func:`_python_values`). Bad input raises
:class:`~fcctl.common.errors.InputError` (a ``ValueError``) whose ``parameter`` names the
argument at fault and whose message starts with ``"{parameter}: "``; a run that failed on this
machine raises :class:`~fcctl.common.errors.RunFailed`.

This module imports nothing heavy at import time (numpy, polars load on the first call), so
``import fcctl`` stays light. See docs/python-api.md for a worked example.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from fcctl.analyzers.recommend import RecommendResult
    from fcctl.analyzers.replay import Execution, Hardware, LoadPlan, ReplayResult, RunSpec
    from fcctl.analyzers.replay.load import ThinkTime
    from fcctl.analyzers.reuse.analyze import AnalysisResult
    from fcctl.analyzers.traces.sampling import SessionSample
    from fcctl.analyzers.traces.schema import Trace
    from fcctl.common.progress import Progress
    from fcctl.iobench.result import IobenchResult
    from fcctl.iobench.run import RunHooks
    from fcctl.layout.geometry import KvGeometry
    from fcctl.planning import PlanDirectory, PlanResult

__all__ = [
    "analyze",
    "geometry",
    "hardware",
    "iobench",
    "plan",
    "read_trace",
    "recommend_thresholds",
    "replay",
]

#: Bytes. (A size string such as ``"64GiB"`` is deprecated: see :func:`_python_values`.)
Size = int
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., Any])

#: Defaults shared by several calls (the CLI's defaults are these).
DEFAULT_MODEL = "llama-3.1-8b"
#: Replay runs in a plan: three is the fewest whose spread says anything beyond "two runs
#: differ" (issue #33 item 2 asks that three seeds give one decision), and the replay step costs
#: R single replays, so more would multiply the plan's longest step for little (docs/simulator.md
#: §6.2, "Replicas in plan").
PLAN_REPLICAS = 3
DEFAULT_MAX_LINE_BYTES = 64 << 20

#: The strings the API took before it took Python values, by kind: the parser at the command
#: edge (a name in fcctl/commands/parse.py) and the Python value to pass instead. A string is
#: accepted for one more release with a DeprecationWarning (docs/python-api.md "Deprecated").
_STRING_KINDS: dict[str, tuple[str, str]] = {
    "size": ("size", "bytes as an int, e.g. 256 << 30"),
    "sizes": ("size_list", "a list of byte counts (ints), e.g. [64 << 30, 256 << 30]"),
    "rates": ("rates", "a list of floats (requests/s), e.g. [1.0, 3.0], or 'auto'"),
    "names": ("names", "a tuple of names, e.g. ('memory-only', 'flat')"),
    "grid": ("grid", "a list of ints (tokens), e.g. [256, 512]"),
    "concurrency": ("concurrency", "an int or a list of ints, e.g. [4, 16, 'all']"),
    "int_list": ("int_list", "a list of ints, e.g. [1, 4, 16]"),
    "think_time": ("think_time", "a fcctl.ThinkTime, e.g. fcctl.ThinkTime('capped', 60.0)"),
}
#: Strings that are modes, not text to parse: never deprecated.
_MODES = {"rates": ("auto",), "concurrency": ("all", "auto")}


def _from_string(value: Any, parameter: str, kind: str) -> Any:
    """``value``, or the Python value a deprecated string (or a list holding size strings)
    stands for, with a DeprecationWarning naming ``parameter`` and what to pass instead."""
    import warnings

    from fcctl.commands import parse

    is_text = isinstance(value, str) and value.strip() not in _MODES.get(kind, ())
    has_text = kind == "sizes" and isinstance(value, list | tuple)
    has_text = has_text and any(isinstance(v, str) for v in value)
    if not (is_text or has_text):
        return value
    parser, instead = _STRING_KINDS[kind]
    warnings.warn(
        f"{parameter}: a string is deprecated and stops being accepted in the next release; "
        f"pass {instead}; got {value!r}",
        DeprecationWarning,
        stacklevel=3,
    )
    if has_text:
        return [parse.size(v, parameter) if isinstance(v, str) else v for v in value]
    return getattr(parse, parser)(value, parameter)


def _python_values(**kinds: str) -> Callable[[_F], _F]:
    """The one deprecation shim: a call's ``kinds`` parameters (name -> a kind of
    :data:`_STRING_KINDS`) given as the strings of old become Python values before the call."""

    def wrap(function: _F) -> _F:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            for parameter, kind in kinds.items():
                if parameter in kwargs:
                    kwargs[parameter] = _from_string(kwargs[parameter], parameter, kind)
            return function(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def _size(value: int, parameter: str) -> int:
    """``value`` in bytes (an int >= 0); an error names ``parameter``."""
    from fcctl.common.errors import UnitError

    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnitError(
            f"{parameter}: expected bytes, an int >= 0; got {value!r}", parameter=parameter
        )
    return value


def _optional_size(value: int | None, parameter: str) -> int | None:
    return None if value is None else _size(value, parameter)


def _sizes(value: Sequence[int], parameter: str) -> list[int]:
    """A sequence of sizes in bytes, each > 0."""
    from fcctl.common.errors import UnitError

    out = []
    for item in value:
        if _size(item, parameter) <= 0:
            raise UnitError(
                f"{parameter}: each size must be > 0; got {item!r}", parameter=parameter
            )
        out.append(item)
    return out


def _numbers(value: Sequence[float], parameter: str) -> tuple[float, ...]:
    """A sequence of numbers as floats; an error names ``parameter``."""
    from fcctl.common.errors import FcctlInputError

    try:
        if isinstance(value, str | bytes):
            raise TypeError(value)
        return tuple(float(x) for x in value)
    except (TypeError, ValueError):
        raise FcctlInputError(
            f"{parameter}: expected a list of numbers like [0.1, 0.5]; got {value!r}",
            parameter=parameter,
        ) from None


@contextlib.contextmanager
def _blame(parameter: str) -> Iterator[None]:
    """Bad input met below this call (a file the parameter names, a check that knows only its
    field) is ``parameter``'s: the error says so in ``parameter``, so a caller (and the CLI, which
    shows the flag) knows which argument to change."""
    from fcctl.common.errors import InputError

    try:
        yield
    except InputError as e:
        if e.parameter is None:
            e.parameter = parameter
        raise


def _check_format(format: str | None, parameter: str = "format") -> None:
    """A trace format is a reader's name (or None: detected), checked before any file is read."""
    if format is None:
        return
    from fcctl.analyzers.traces.readers import FORMATS
    from fcctl.common.errors import FcctlInputError

    if not isinstance(format, str) or format not in FORMATS:
        raise FcctlInputError(
            f"{parameter}: unknown trace format (known: {', '.join(FORMATS)}); got {format!r}",
            parameter=parameter,
        )


def _check_seed(seed: int) -> None:
    from fcctl.common.errors import FcctlInputError

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FcctlInputError(f"seed: must be an integer >= 0; got {seed!r}", parameter="seed")


def _names(value: Sequence[str], parameter: str) -> tuple[str, ...]:
    from fcctl.common.errors import FcctlInputError

    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise FcctlInputError(
            f"{parameter}: expected a tuple of names; got {value!r}", parameter=parameter
        )
    return tuple(value)


@contextlib.contextmanager
def _progress(progress: Progress | bool) -> Iterator[Progress]:
    """The caller's display, or one of our own (``True``: a bar on stderr when a terminal)."""
    from fcctl.common.progress import Progress

    if isinstance(progress, Progress):
        yield progress
        return
    with Progress(enabled=bool(progress)) as own:
        yield own


def geometry(
    model: str | KvGeometry = DEFAULT_MODEL,
    *,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
) -> KvGeometry:
    """The KV geometry of ``model`` (a preset name) or of a Hugging Face ``model_config``
    (config.json, overrides ``model``), over ``tp`` tensor-parallel ranks (default 1) with the
    KV stored as ``kv_dtype`` (bf16, fp16, fp8, fp32; default: the model's). ``model`` may be a
    geometry already made (a :class:`~fcctl.RunSpec`'s), returned as it is."""
    from fcctl.layout.geometry import KvGeometry, model_geometry

    if isinstance(model, KvGeometry):
        _given_geometry(model_config=model_config, tp=tp, kv_dtype=kv_dtype)
        return model
    config = None if model_config is None else Path(model_config)
    with _blame("model_config"):
        return model_geometry(model, config_path=config, tp=tp, kv_dtype=kv_dtype)


def _given_geometry(**keywords: object) -> None:
    """A geometry given as an object holds what these keywords would set."""
    from fcctl.common.errors import FcctlInputError

    for keyword, value in keywords.items():
        if value is not None:
            raise FcctlInputError(
                f"{keyword}: `model` is a KvGeometry, which holds this setting; got {value!r}",
                parameter=keyword,
            )


@_python_values(max_line_bytes="size")
def read_trace(
    source: str | Path,
    *,
    format: str | None = None,
    columns: str | Mapping[str, str] | None = None,
    max_line_bytes: Size = DEFAULT_MAX_LINE_BYTES,
    progress: Progress | bool = False,
) -> Trace:
    """Read one trace file (or Claude Code directory) into the canonical trace.

    ``format``: a reader name (``fcctl convert --help`` lists them); ``None`` detects it.
    ``columns``: the ``generic`` format's column mapping (``"timestamp=ts,input=in,output=out"``).
    ``max_line_bytes``: the longest line read (bytes); a longer one is an error.
    ``progress``: ``True`` draws a bar on stderr when it is a terminal.
    The trace's ``requests`` table is a polars DataFrame.
    """
    from fcctl.analyzers.traces.readers import read_trace as read

    limit = _size(max_line_bytes, "max_line_bytes")
    _check_format(format)
    with _progress(progress) as bar, _blame("source"):
        return read(source, format, progress=bar, max_line_bytes=limit, columns=columns)


@_python_values(
    max_line_bytes="size",
    memory_capacities_bytes="sizes",
    flat_session_kv_bytes="size",
    reference_capacity_bytes="size",
    memory_budget_bytes="size",
)
def analyze(
    source: str | Path,
    *,
    format: str | None = None,
    columns: str | Mapping[str, str] | None = None,
    max_line_bytes: Size = DEFAULT_MAX_LINE_BYTES,
    model: str = DEFAULT_MODEL,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    memory_capacities_bytes: Sequence[int] | None = None,
    rate_requests_per_s: float | None = None,
    concurrent_sessions: int | None = None,
    seed: int = 0,
    flat_session_kv_bytes: Size = 1 << 30,
    reference_capacity_bytes: Size = 256 << 30,
    memory_budget_bytes: Size | None = None,
    sample_rate: float | None = None,
    engine: str = "local",
    scheduler: str | None = None,
    progress: Progress | bool = False,
) -> AnalysisResult:
    """Measure block reuse, reuse distances, session KV sizes and memory-tier hit shares.

    ``source``: a trace file, a Claude Code directory, or a dataset (a directory or glob of
    canonical Parquet files, as ``fcctl convert --partition-by`` and ``fcctl synth`` write).
    ``format``/``columns``/``max_line_bytes``: as :func:`read_trace` (one trace file only).
    ``model``/``model_config``/``tp``/``kv_dtype``: as :func:`geometry`; the KV bytes are the
    node total over the ``tp`` ranks.
    ``memory_capacities_bytes``: memory-tier capacities (bytes; default 16, 64, 256 GiB, 1 TiB).
    ``rate_requests_per_s``: interleave a per-session-clock trace's sessions by Poisson session
    starts at this rate (requests/s); or ``concurrent_sessions`` at once; ``seed`` seeds it.
    ``flat_session_kv_bytes``/``reference_capacity_bytes``: the verdict's thresholds.
    ``memory_budget_bytes``: memory the analysis may use (default 30% of this machine's);
    ``sample_rate``: a SHARDS rate (0 < R <= 1) instead of the one the budget picks.
    ``engine``: ``"local"`` (this process) or ``"dask"`` (the cluster at ``scheduler``, an
    address such as ``tcp://10.0.0.5:8786``, or a local one).
    Tables (``result.tables``) are polars DataFrames.
    """
    from fcctl.analyzers.reuse.analyze import VerdictThresholds, check_schedule_args
    from fcctl.analyzers.reuse.bounded import analyze_dataset, check_engine, check_sample_rate
    from fcctl.analyzers.traces.dataset import Dataset, is_dataset_input, open_dataset

    # Every parameter first: a typo should fail before minutes of parsing.
    kv = geometry(model, model_config=model_config, tp=tp, kv_dtype=kv_dtype)
    capacities = (
        None
        if memory_capacities_bytes is None
        else _sizes(memory_capacities_bytes, "memory_capacities_bytes")
    )
    check_schedule_args(rate_requests_per_s, concurrent_sessions)
    _check_seed(seed)
    _check_format(format)
    thresholds = VerdictThresholds(
        flat_session_kv_bytes=_size(flat_session_kv_bytes, "flat_session_kv_bytes"),
        reference_capacity_bytes=_size(reference_capacity_bytes, "reference_capacity_bytes"),
    )
    line_limit = _size(max_line_bytes, "max_line_bytes")
    budget = _optional_size(memory_budget_bytes, "memory_budget_bytes")
    if sample_rate is not None:
        check_sample_rate(sample_rate)
    check_engine(engine, scheduler)
    dataset_input = is_dataset_input(source, format, columns)
    # The same settings for either engine.
    settings: dict[str, Any] = {
        "geometry": kv,
        "memory_budget_bytes": budget,
        "sample_rate": sample_rate,
        "memory_capacities_bytes": capacities,
        "thresholds": thresholds,
        "rate_requests_per_s": rate_requests_per_s,
        "concurrent_sessions": concurrent_sessions,
        "seed": seed,
    }
    with _progress(progress) as bar:
        if engine == "dask":
            from fcctl.analyzers.reuse.dask_engine import analyze_dask

            return analyze_dask(source, scheduler=scheduler, progress=bar, **settings)
        if dataset_input:
            data = open_dataset(source, bar)
        else:
            data = Dataset.from_trace(
                read_trace(
                    source, format=format, columns=columns, max_line_bytes=line_limit, progress=bar
                )
            )
        return analyze_dataset(data, progress=bar, **settings)


@_python_values(
    gpu_kv_bytes="size", host_memory_bytes="size", ssd_bytes="size", staging_bytes="size"
)
def hardware(
    preset: str | Path | None = None,
    *,
    io_profile: str | Path | None = None,
    gpus: int | None = None,
    gpu_kv_bytes: Size | None = None,
    host_memory_bytes: Size | None = None,
    ssd_bytes: Size | None = None,
    staging_bytes: Size | None = None,
    prefill_tokens_per_s: float | None = None,
    max_batched_tokens: int | None = None,
    prefill_chunk_tokens: int | None = None,
    host_scope: str | None = None,
    source_of: Callable[[str], str] | None = None,
) -> Hardware:
    """The simulated node: a preset name (h100-8x, h200-8x, b200-8x; default h200-8x) or a
    hw.toml file, then the overrides, then the SSD figures of an ``io_profile`` (an
    ``fcctl iobench --json`` document).

    ``gpus``: GPUs on the node; ``gpu_kv_bytes``: KV-cache bytes per GPU; ``host_memory_bytes``,
    ``ssd_bytes``: KV capacity per node; ``staging_bytes``: the tiered policy's host staging
    buffer; ``prefill_tokens_per_s``: a prefill rate (tokens/s) instead of the fitted model;
    ``max_batched_tokens``: tokens one iteration computes (decodes and prefill chunks);
    ``prefill_chunk_tokens``: the most prompt tokens of one request per iteration;
    ``host_scope``: ``"node"`` (one host memory pool shared by the node's workers, as Mooncake
    store's) or ``"worker"`` (one pool per serving instance, ``host_memory_bytes / workers``
    each, as SGLang HiCache's).
    ``None`` keeps the preset's value. ``hardware.sources`` records each override as its
    parameter name, or as ``source_of(parameter)`` (the CLI records its flag).
    """
    from fcctl.analyzers.replay import apply_io_profile, load_hardware, with_values

    label = source_of or (lambda parameter: parameter)
    with _blame("preset"):
        hw = load_hardware(None if preset is None else str(preset), parameter="preset")
    overrides = {
        "gpus": gpus,
        "gpu_kv_bytes": gpu_kv_bytes,
        "host_memory_bytes": host_memory_bytes,
        "ssd_bytes": ssd_bytes,
        "staging_bytes": staging_bytes,
        "prefill_tokens_per_s": prefill_tokens_per_s,
        "max_batched_tokens": max_batched_tokens,
        "prefill_chunk_tokens": prefill_chunk_tokens,
        "host_scope": host_scope,
    }
    for key, value in overrides.items():
        if value is None:
            continue
        if key.endswith("_bytes"):
            value = _size(value, key)  # type: ignore[arg-type]
        with _blame(key):
            hw = with_values(hw, {key: value}, label(key))
    if io_profile is not None:
        with _blame("io_profile"):
            hw = apply_io_profile(hw, io_profile)
    return hw


def _node(hw: Hardware | None) -> Hardware:
    """``hw``, or the default preset (a parameter named ``hardware`` hides :func:`hardware`)."""
    from fcctl.analyzers.replay import Hardware, load_hardware
    from fcctl.common.errors import FcctlInputError

    if hw is None:
        return load_hardware(None)
    if not isinstance(hw, Hardware):
        raise FcctlInputError(
            "hardware: expected a node from fcctl.hardware(...) (for a preset: "
            f"hardware=fcctl.hardware('h100-8x')); got {hw!r}",
            parameter="hardware",
        )
    return hw


#: :func:`replay`'s keywords that make its ``spec`` (a RunSpec) and its ``load`` (a LoadPlan).
_REPLAY_SPEC = (
    "model",
    "model_config",
    "tp",
    "kv_dtype",
    "hardware",
    "short_reply_tokens",
    "agent_context_tokens",
    "seed",
    "cancel",
    "router",
    "think_time",
    "keep_tables",
)
_REPLAY_LOAD = (
    "policies",
    "rates",
    "rate",
    "concurrency",
    "slo_ttft_p99_s",
    "gpu_kv_sweep",
    "host_memory_sweep",
    "staging_sweep",
    "host_memory_auto",
    "decision_margin_pp",
    "decision_ttft_margin",
    "amplify",
    "replicas",
)
_GEOMETRY = ("model", "model_config", "tp", "kv_dtype")
#: (call, object) -> the call's keywords whose settings the object holds: given beside it at
#: other than their defaults, each is an error naming the keyword (:func:`_given`). A keyword
#: new to a call is one more name here.
_HELD_BY: dict[tuple[str, str], tuple[str, ...]] = {
    ("replay", "spec"): _REPLAY_SPEC,
    ("replay", "load"): _REPLAY_LOAD,
    ("recommend_thresholds", "spec"): (*_GEOMETRY, "hardware", "seed"),
    ("plan", "spec"): (*_GEOMETRY, "hardware", "think_time"),
    ("plan", "load"): (
        "rate",
        "concurrency",
        "slo_ttft_p99_s",
        "host_memory_sweep",
        "host_memory_auto",
        "amplify",
        "replicas",
    ),
}


@_python_values(
    policies="names",
    rates="rates",
    concurrency="concurrency",
    think_time="think_time",
    gpu_kv_sweep="sizes",
    host_memory_sweep="sizes",
    staging_sweep="sizes",
    memory_budget_bytes="size",
)
def replay(
    source: str | Path | Trace,
    *,
    spec: RunSpec | None = None,
    load: LoadPlan | None = None,
    format: str | None = None,
    policies: Sequence[str] = ("memory-only", "tiered", "flat", "flat-fcfs"),
    rates: Sequence[float] | Literal["auto"] | None = "auto",
    rate: float | None = None,
    concurrency: int | Sequence[int | Literal["all"]] | Literal["all"] | None = None,
    think_time: ThinkTime | None = None,
    cancel: str = "discard",
    router: str = "kv-aware",
    slo_ttft_p99_s: float | None = None,
    gpu_kv_sweep: Sequence[Size] = (),
    host_memory_sweep: Sequence[Size] = (),
    staging_sweep: Sequence[Size] = (),
    host_memory_auto: bool = False,
    amplify: int = 1,
    memory_budget_bytes: Size | None = None,
    model: str = DEFAULT_MODEL,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    hardware: Hardware | None = None,
    short_reply_tokens: int | None = None,
    agent_context_tokens: int | None = None,
    seed: int = 0,
    decision_margin_pp: float = 1.0,
    decision_ttft_margin: float = 0.1,
    replicas: int = 1,
    keep_tables: bool = False,
    jobs: int | None = None,
    engine: str = "local",
    scheduler: str | None = None,
    sample_sessions: float | None = None,
    progress: Progress | bool = False,
) -> ReplayResult:
    """Replay a trace through each policy at each request rate: reused KV delivered to the GPU,
    TTFT, SSD traffic.

    ``source``: a trace file (anything :func:`read_trace` reads, with ``format``) or a trace
    already read. ``spec``: one simulation's settings as a :class:`~fcctl.RunSpec` (geometry,
    node, placement, seed, cancel, router, think time, tables kept), instead of the keywords
    that make one; ``load``: the sweep as a :class:`~fcctl.LoadPlan` (policies, rates or
    concurrency, operating point, SLO, size lists, margins), instead of its keywords. A keyword
    given beside the object that holds its setting is an error naming the keyword.
    ``policies``: registry names (``fcctl.analyzers.replay.POLICIES``), a list. ``rates``:
    requests/s offered, or ``"auto"`` (the default: from light load to saturation,
    analyzers/replay/sweep.py); ``rate``: the user's own operating point, run too and reported first
    (``operating_point``); or ``concurrency``: sessions kept active, a closed loop (``[4, 16,
    "all"]``; instead of rates; ``"auto"``: swept from a few sessions to all of the trace's,
    analyzers/replay/session_sweep.py, and with ``rates="auto"`` only for a trace whose sessions
    pace themselves, rates otherwise); ``slo_ttft_p99_s``: the auto sweep stops past it.
    ``gpu_kv_sweep``/``host_memory_sweep``/``staging_sweep``: more sizes to run besides the node's
    (every combination); ``host_memory_auto``: add the trace's working-set sizes to host memory.
    ``amplify``: K copies of each session (docs/simulator.md 1.3). ``source`` may be a dataset
    (a directory or glob of canonical Parquet parts) that fits ``memory_budget_bytes`` (default
    30 % of the machine's memory). ``think_time``: a :class:`~fcctl.ThinkTime` (default the
    recorded gaps). ``cancel``, ``router``, ``decision_margin_pp``/``decision_ttft_margin``: as
    the flags (docs/cli.md). ``model``...``kv_dtype``: as :func:`geometry`. ``hardware``: the
    node (:func:`hardware`; default the h200-8x preset).
    ``short_reply_tokens``/``agent_context_tokens``: the placement thresholds (tokens; default
    the placement rule's). ``seed``: the session schedule's; ``replicas``: runs at seeds
    ``seed``..``seed + R - 1`` (docs/simulator.md 6.2). ``keep_tables``: keep the per-request
    DataFrames. ``sample_sessions``: replay the whole sessions whose id hash falls in this
    share, at the same per-node load (docs/simulator.md). ``jobs``: worker processes (default:
    the CPUs the memory budget holds; 1: this process); ``engine="dask"``: on the Dask cluster
    at ``scheduler``. The figures are the same wherever they run.
    """
    from fcctl.analyzers.replay import Execution, check_execution
    from fcctl.analyzers.replay.parallel import start_worker_server
    from fcctl.analyzers.replay.replicas import replay_decided

    given = dict(locals())
    if load is None:
        _check_load_axis(rates, rate, concurrency)
    spec = _given("spec", spec, replay, given) or _run_spec(
        **{k: given[k] for k in _HELD_BY["replay", "spec"]}
    )
    _check_sample(sample_sessions)
    _check_format(format)
    load = _given("load", load, replay, given) or _load_plan(
        **{k: given[k] for k in _HELD_BY["replay", "load"]}
    )
    budget = _optional_size(memory_budget_bytes, "memory_budget_bytes")
    execution = Execution(engine, jobs, scheduler, budget)
    check_execution(execution)
    start_worker_server(execution)  # before the trace is read (parallel.worker_context)
    with _progress(progress) as bar:
        samples = _replica_samples(source, format, bar, sample_sessions, spec.seed, load.replicas)
        if samples:  # each replica its own sessions: the spread across them is the error
            return replay_decided(
                samples[0][0], spec, load, progress=bar, execution=execution, samples=samples
            )
        trace, sample = _sampled_trace(source, format, bar, memory_budget_bytes, sample_sessions)
        return _with_sampling(
            replay_decided(trace, spec, load, progress=bar, execution=execution), sample
        )


def _replica_samples(
    source: str | Path | Trace,
    format: str | None,
    progress: Progress,
    sample_sessions: float | None,
    seed: int,
    replicas: int,
) -> list[tuple[Trace, SessionSample]]:
    """Replica ``i``'s sample of a trace file (or a trace) with salt ``seed + i``
    (analyzers/traces/sampling.py), so each replica replays other sessions (and one replica at
    seed s the sample replica s of another run replays); none without sampling or for a
    dataset (filtered while read, with salt 0: its replicas share one sample and the error is
    not measured)."""
    from fcctl.analyzers.traces.dataset import is_dataset_input
    from fcctl.analyzers.traces.sampling import sample_trace
    from fcctl.analyzers.traces.schema import Trace

    if sample_sessions is None:
        return []
    if not isinstance(source, Trace):
        if is_dataset_input(source, format):
            return []
        source = read_trace(source, format=format, progress=progress)
    return [sample_trace(source, sample_sessions, salt=seed + i) for i in range(replicas)]


#: The load axes as the API takes them: rates (or the auto sweep), concurrency (``"all"``:
#: every session at once).
Rates = Sequence[float] | Literal["auto"] | None
Sessions = int | Sequence[int | Literal["all"]] | Literal["all"]
Concurrency = Sessions | None


def _auto(rates: Rates) -> bool:
    return isinstance(rates, str) and rates.strip() == "auto"


def _think_time(value: ThinkTime | None, parameter: str = "think_time") -> ThinkTime:
    """``value`` (None: the recorded gaps), checked to be a :class:`~fcctl.ThinkTime`."""
    from fcctl.analyzers.replay.load import ThinkTime
    from fcctl.common.errors import FcctlInputError

    if value is None:
        return ThinkTime()
    if not isinstance(value, ThinkTime):
        raise FcctlInputError(
            f"{parameter}: expected a fcctl.ThinkTime, e.g. fcctl.ThinkTime('capped', 60.0); "
            f"got {value!r}",
            parameter=parameter,
        )
    return value


def _concurrency(value: Sessions, parameter: str = "concurrency") -> tuple[int | None, ...]:
    """Session counts, sorted and unique; ``"all"`` is None (every session at t = 0)."""
    from fcctl.analyzers.replay.load import parse_concurrency

    # parse_concurrency checks a sequence (a string reaching here is the "all" mode).
    return parse_concurrency([value] if isinstance(value, int | str) else list(value), parameter)


def _check_load_axis(rates: Rates, rate: float | None, concurrency: Concurrency) -> None:
    from fcctl.common.errors import FcctlInputError

    if concurrency is not None and (rate is not None or (rates is not None and not _auto(rates))):
        raise FcctlInputError(
            "concurrency: the load axis is rates or concurrency, not both", parameter="concurrency"
        )


_Settings = TypeVar("_Settings")


def _given(
    name: str, settings: _Settings | None, function: Callable[..., Any], given: Mapping[str, Any]
) -> _Settings | None:
    """``settings`` (a :class:`~fcctl.RunSpec` or :class:`~fcctl.LoadPlan` passed as ``name``
    to ``function``), checked to be one and to meet none of ``function``'s keywords (in
    ``given``, its arguments) that would set what it holds; None when not given."""
    import inspect

    from fcctl.analyzers.replay import LoadPlan, RunSpec
    from fcctl.common.errors import FcctlInputError

    if settings is None:
        return None
    kind = {"spec": RunSpec, "load": LoadPlan}[name]
    if not isinstance(settings, kind):
        raise FcctlInputError(
            f"{name}: expected a fcctl.{kind.__name__}; got {settings!r}", parameter=name
        )
    defaults = inspect.signature(function).parameters
    for keyword in _HELD_BY[function.__name__, name]:
        value, default = given[keyword], defaults[keyword].default
        same = (
            tuple(value) == tuple(default)
            if isinstance(value, list | tuple) and isinstance(default, list | tuple)
            else value == default
        )
        if not same:
            raise FcctlInputError(
                f"{keyword}: `{name}` holds this setting; give one or the other; got {value!r}",
                parameter=keyword,
            )
    return settings


def _run_spec(
    *,
    model: str,
    model_config: str | Path | None,
    tp: int | None,
    kv_dtype: str | None,
    hardware: Hardware | None,
    short_reply_tokens: int | None,
    agent_context_tokens: int | None,
    seed: int,
    cancel: str,
    router: str,
    think_time: ThinkTime | None,
    keep_tables: bool,
) -> RunSpec:
    """:func:`replay`'s keywords for one simulation as a :class:`~fcctl.RunSpec`."""
    from fcctl.analyzers.replay import RunSpec
    from fcctl.layout.placement import PlacementRule

    kv = geometry(model, model_config=model_config, tp=tp, kv_dtype=kv_dtype)
    _check_seed(seed)
    rule_args = {}
    if short_reply_tokens is not None:
        rule_args["short_reply_tokens"] = short_reply_tokens
    if agent_context_tokens is not None:
        rule_args["agent_context_tokens"] = agent_context_tokens
    return RunSpec(
        geometry=kv,
        hardware=_node(hardware),
        placement=PlacementRule(**rule_args),
        seed=seed,
        cancel=cancel,
        router=router,
        think_time=_think_time(think_time),
        keep_tables=keep_tables,
    )


def _load_plan(
    *,
    policies: Sequence[str],
    rates: Rates,
    rate: float | None,
    concurrency: Concurrency,
    slo_ttft_p99_s: float | None,
    gpu_kv_sweep: Sequence[Size],
    host_memory_sweep: Sequence[Size],
    staging_sweep: Sequence[Size],
    host_memory_auto: bool,
    decision_margin_pp: float,
    decision_ttft_margin: float,
    amplify: int,
    replicas: int,
) -> LoadPlan:
    """:func:`replay`'s sweep keywords as a :class:`~fcctl.LoadPlan`."""
    from fcctl.analyzers.replay import LoadPlan
    from fcctl.analyzers.traces.schedule import check_rate, check_rates

    auto = _auto(rates)
    # After _python_values, the only string left is the "auto" mode.
    offered = () if rates is None or isinstance(rates, str) else _numbers(rates, "rates")
    if offered:
        check_rates(offered, "rates")  # the simulator checks them too, after the trace is read
    if rate is not None:
        check_rate(rate, "rate")
    size_lists = {
        name: tuple(_size(v, parameter) for v in values)
        for name, parameter, values in (
            ("gpu_kv_bytes", "gpu_kv_sweep", gpu_kv_sweep),
            ("host_memory_bytes", "host_memory_sweep", host_memory_sweep),
            ("staging_bytes", "staging_sweep", staging_sweep),
        )
        if values
    }
    # "auto": sessions swept (analyzers/replay/session_sweep); beside rates "auto", only when
    # the trace's sessions pace themselves (LoadPlan.for_workload).
    auto_sessions = isinstance(concurrency, str) and concurrency.strip() == "auto"
    return LoadPlan(
        policies=_names(policies, "policies"),
        rates=offered,
        concurrency=(None if concurrency is None or auto_sessions else _concurrency(concurrency)),
        auto_rates=auto and (concurrency is None or auto_sessions),
        auto_concurrency=auto_sessions,
        # Past the trace's own sessions the sweep grows by session amplification (a
        # concurrency above them runs on the workload amplified K times, within the budget).
        amplify_growth=True,
        operating_rate=rate,
        slo_ttft_p99_s=slo_ttft_p99_s,
        size_lists=size_lists,
        host_memory_auto=host_memory_auto,
        decision_margin_pp=decision_margin_pp,
        decision_ttft_margin=decision_ttft_margin,
        amplify=amplify,
        replicas=replicas,
    )


def _check_sample(sample_sessions: float | None) -> None:
    if sample_sessions is not None:
        from fcctl.analyzers.traces.sampling import check_sample_sessions

        check_sample_sessions(sample_sessions)


def _with_sampling(result: _R, sample: SessionSample | None) -> _R:
    """``result`` (a replay or recommendation) with its ``sampling`` object."""
    if sample is None:
        return result
    import dataclasses

    from fcctl.analyzers.replay import session_sampling

    return dataclasses.replace(result, sampling=session_sampling(sample))  # type: ignore[type-var]


#: What replaying a trace keeps in memory, for the check of a dataset against the memory
#: budget before it is read (measured: the whole Claude Code trace, 94 M accesses and 49 K
#: requests, peaks at 2.26 GiB in fcctl replay; docs/benchmarks.md): its block ids (the hash
#: lists, then dense ids), the store's per-block arrays, per-request logs and tables.
REPLAY_BYTES_PER_ACCESS = 40
REPLAY_BYTES_PER_REQUEST = 1024
REPLAY_BASE_BYTES = 768 << 20


def _sampled_trace(
    source: str | Path | Trace,
    format: str | None,
    progress: Progress,
    memory_budget_bytes: Size | None,
    sample_sessions: float | None,
) -> tuple[Trace, SessionSample | None]:
    """:func:`_trace`, keeping only the sessions ``sample_sessions`` chooses (None: all) and
    saying what it kept. A dataset is filtered while it is read (only the kept requests'
    block ids are held) and only the kept part counts against the memory budget."""
    from fcctl.analyzers.reuse.bounded import default_memory_budget
    from fcctl.analyzers.traces.dataset import is_dataset_input, open_dataset
    from fcctl.analyzers.traces.sampling import (
        load_dataset_sample,
        plan_dataset_sample,
        sample_trace,
    )
    from fcctl.analyzers.traces.schema import Trace
    from fcctl.common.errors import FcctlInputError

    if isinstance(source, Trace):
        return (source, None) if sample_sessions is None else sample_trace(source, sample_sessions)
    if is_dataset_input(source, format):
        dataset = open_dataset(source, progress)
        mask, sample = None, None
        accesses, requests = dataset.block_accesses, dataset.num_requests
        if sample_sessions is not None:
            mask, sample = plan_dataset_sample(dataset, sample_sessions)
            accesses, requests = sample.block_accesses_kept, sample.requests_kept
        need = (
            REPLAY_BASE_BYTES
            + accesses * REPLAY_BYTES_PER_ACCESS
            + requests * REPLAY_BYTES_PER_REQUEST
        )
        budget = (
            default_memory_budget()
            if memory_budget_bytes is None
            else _size(memory_budget_bytes, "memory_budget_bytes")
        )
        if need > budget:
            kept = "" if sample is None else f" (the {sample.rate:g} session sample kept)"
            raise FcctlInputError(
                f"{source}: the dataset{kept} holds {accesses:,} block accesses in "
                f"{requests:,} requests; simulating it keeps about {need / 2**30:.1f} "
                f"GiB in memory, over the memory budget of {budget / 2**30:.1f} GiB: replay some "
                "of its parts (a glob), sample its sessions (`sample_sessions`), or analyze it "
                "with fcctl analyze, which bounds its memory",
                parameter="memory_budget_bytes",
            )
        if mask is None or sample is None:
            return dataset.load_trace(progress), None
        return load_dataset_sample(dataset, mask, sample, progress), sample
    trace = read_trace(source, format=format, progress=progress)
    return (trace, None) if sample_sessions is None else sample_trace(trace, sample_sessions)


def _grid(value: Sequence[int] | None, parameter: str) -> tuple[int, ...] | None:
    from fcctl.analyzers.recommend.grid import check_grid

    return None if value is None else check_grid(value, parameter)


@_python_values(rates="rates", short_reply_grid="grid", agent_context_grid="grid")
def recommend_thresholds(
    source: str | Path | Trace,
    *,
    spec: RunSpec | None = None,
    format: str | None = None,
    rates: Sequence[float] = (0.1, 0.25, 0.5, 1.0),
    short_reply_grid: Sequence[int] | None = None,
    agent_context_grid: Sequence[int] | None = None,
    objective: str = "hit",
    target_rate: float | None = None,
    model: str = DEFAULT_MODEL,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    hardware: Hardware | None = None,
    seed: int = 0,
    jobs: int | None = None,
    engine: str = "local",
    scheduler: str | None = None,
    decision_margin_pp: float = 1.0,
    decision_ttft_margin: float = 0.1,
    sample_sessions: float | None = None,
    amplify: int = 1,
    replicas: int = 1,
    progress: Progress | bool = False,
) -> RecommendResult:
    """Sweep FlatCake's placement thresholds on a trace and recommend a pair.

    ``short_reply_grid``/``agent_context_grid``: thresholds to sweep (tokens; a list such
    as ``[256, 512, 1024]``; default from the trace's percentiles). ``objective``: ``"hit"``
    (highest GPU hit share, ties by p99 TTFT) or ``"ttft-p99"``. ``target_rate``: the rate
    (requests/s) the pick is made at (default the highest of ``rates``). ``jobs``/``engine``:
    as :func:`replay`. ``decision_margin_pp`` (percentage points
    of GPU hit share) and ``decision_ttft_margin`` (a fraction of mean TTFT): pairs closer than
    both are equal, and when all are, the thresholds do not matter (the default pair is
    recommended). ``sample_sessions``: sweep on sampled sessions (as :func:`replay`).
    ``spec``: a :class:`~fcctl.RunSpec` instead of ``model``...``kv_dtype``, ``hardware`` and
    ``seed`` (its geometry, node and seed; each cell sets its own placement, and the sweep runs
    the default cancel mode, router and think time, so a spec with others is refused).
    ``replicas``: sweeps run at seeds ``seed + i``; the result's ``replicas`` says whether each
    picks the same pair, and each cell's range (figures: the first replica's). Others (``amplify``
    too) as :func:`replay`.
    """
    import dataclasses

    from fcctl.analyzers.recommend import RecommendConfig
    from fcctl.analyzers.recommend import recommend_thresholds as sweep
    from fcctl.analyzers.recommend.replicas import sweep_replicas
    from fcctl.analyzers.replay import Execution, RunSpec, check_execution
    from fcctl.analyzers.replay.parallel import start_worker_server
    from fcctl.analyzers.replay.verdict import check_replicas

    given = dict(locals())
    execution = Execution(engine, jobs, scheduler)
    check_execution(execution)
    check_replicas(replicas)
    _check_sample(sample_sessions)
    _check_format(format)
    run = _given("spec", spec, recommend_thresholds, given)
    if run is None:
        _check_seed(seed)
        kv = geometry(model, model_config=model_config, tp=tp, kv_dtype=kv_dtype)
        run = RunSpec(geometry=kv, hardware=_node(hardware), seed=seed)
    _check_sweep_spec(run, "recommend_thresholds")
    start_worker_server(execution)  # before the trace is read (parallel.worker_context)

    config = RecommendConfig(
        geometry=run.geometry,
        hardware=run.hardware,
        rates=_numbers(rates, "rates"),
        short_reply_grid=_grid(short_reply_grid, "short_reply_grid"),
        agent_context_grid=_grid(agent_context_grid, "agent_context_grid"),
        objective=objective,
        target_rate=target_rate,
        seed=run.seed,
        jobs=jobs,
        decision_margin_pp=decision_margin_pp,
        decision_ttft_margin=decision_ttft_margin,
        engine=engine,
        scheduler=scheduler,
        amplify=amplify,
    )
    with _progress(progress) as bar:
        # No name here holds a trace read from a file: with worker processes the sweep can let
        # go of it once they have their copies.
        kept: list[SessionSample | None] = []

        def load() -> Trace:
            return _note_sample(_sampled_trace(source, format, bar, None, sample_sessions), kept)

        if replicas == 1:
            result = sweep(load(), config, progress=bar)
        else:  # the replicas share the trace, so it is held until the last has run
            trace = load()
            result = sweep_replicas(
                lambda s: sweep(trace, dataclasses.replace(config, seed=s), progress=bar),
                run.seed,
                replicas,
            )
        return _with_sampling(result, kept[0])


def _check_sweep_spec(spec: RunSpec, call: str, kept: Sequence[str] = ()) -> None:
    """The threshold sweep runs each cell at its own placement rule and otherwise at a
    RunSpec's defaults (RecommendConfig.spec): a ``spec`` holding another setting (except the
    ``kept`` fields, which ``call`` uses elsewhere) is refused, not silently dropped."""
    from fcctl.analyzers.replay import RunSpec
    from fcctl.common.errors import FcctlInputError

    default = RunSpec(geometry=spec.geometry, hardware=spec.hardware, seed=spec.seed)
    for name in ("placement", "cancel", "router", "think_time"):
        value = getattr(spec, name)
        if name not in kept and value != getattr(default, name):
            raise FcctlInputError(
                f"spec: {call} sweeps the placement thresholds with the default {name} "
                f"({getattr(default, name)}); got {name}={value!r}",
                parameter="spec",
            )


def _note_sample(loaded: tuple[Trace, SessionSample | None], into: list[Any]) -> Trace:
    """The trace of ``loaded``; its sample goes into ``into`` (so no caller's name holds it)."""
    into.append(loaded[1])
    return loaded[0]


@_python_values(
    size_limit_bytes="size",
    bucket_bytes="size",
    memory_tier_bytes="size",
    concurrency="int_list",
    max_command_bytes="size",
    free_margin_bytes="size",
)
def iobench(
    directory: str | Path | None = None,
    *,
    force: bool = False,
    keep: bool = False,
    layout: str = "both",
    trace: str | Path | None = None,
    trace_format: str | None = None,
    scale: float = 1.0,
    size_limit_bytes: Size = 2 << 30,
    sessions: int = 16,
    tokens: int = 1024,
    turns: int = 4,
    model: str = DEFAULT_MODEL,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    block_tokens: int = 16,
    bucket_bytes: Size = 256 << 20,
    memory_tier_bytes: Size | None = None,
    concurrency: Sequence[int] = (1, 4, 16),
    repeat: int = 1,
    engine: str | None = None,
    engine_threads: int | None = None,
    max_command_bytes: Size | None = None,
    buffers: str = "auto",
    fio: bool = True,
    fio_runtime_s: float = 1.5,
    verify_checksums: bool = True,
    free_margin_bytes: Size | None = None,
    progress: bool = False,
    hooks: RunHooks | None = None,
) -> IobenchResult:
    """Write sessions as flat per-session files and as eviction-ordered buckets, restore both
    cold, and measure fio's sequential read as the reference.

    ``directory``: where to write (a new subdirectory; default a new temp dir); ``force``: use
    a non-empty one; ``keep``: keep the files. ``layout``: flat, eviction or both.
    ``trace``/``trace_format``: take sessions and turns from a trace, token counts times
    ``scale``, fitted under ``size_limit_bytes`` (per layout); else ``sessions`` synthetic
    sessions of ``tokens`` tokens in ``turns`` turns. ``model``...``kv_dtype``: as
    :func:`geometry`, one rank's KV. ``block_tokens``: tokens per KV page; ``bucket_bytes``:
    eviction bucket file size; ``memory_tier_bytes``: the baseline's LRU memory tier (default
    1/8 of the workload). ``concurrency``: sessions restored at once (a list such as
    ``[1, 4, 16]``); ``repeat``: runs (medians reported). ``engine``: posix or kvikio (default
    kvikio where it can read); ``engine_threads``: commands in flight; ``max_command_bytes``: split
    flat reads. ``buffers``: host, gpu or auto. ``fio``: run the reference for ``fio_runtime_s``
    seconds per job. ``verify_checksums``: check layer checksums inside the timed restore.
    ``free_margin_bytes``: free space to leave (default max(1GiB, 5%)). ``hooks``: plug points
    for tests and embedders (:class:`~fcctl.iobench.run.RunHooks`).
    Call ``result.check_verified()`` to raise if a piece read back wrong.
    """
    from fcctl.iobench.config import IobenchConfig
    from fcctl.iobench.run import run_iobench

    # The model and the trace format fail here, named by parameter, before any disk is touched.
    kv = geometry(model, model_config=model_config, tp=tp, kv_dtype=kv_dtype)
    _check_format(trace_format, "trace_format")
    restore_at_once = tuple(concurrency)
    config = IobenchConfig(
        directory=None if directory is None else Path(directory),
        force=force,
        keep=keep,
        layout=layout,
        trace=None if trace is None else Path(trace),
        trace_format=trace_format,
        scale=scale,
        size_limit_bytes=_size(size_limit_bytes, "size_limit_bytes"),
        sessions=sessions,
        tokens=tokens,
        turns=turns,
        geometry=kv,
        block_tokens=block_tokens,
        bucket_bytes=_size(bucket_bytes, "bucket_bytes"),
        memory_tier_bytes=_optional_size(memory_tier_bytes, "memory_tier_bytes"),
        concurrency=restore_at_once,
        repeat=repeat,
        engine=engine,
        engine_threads=engine_threads,
        max_command_bytes=_optional_size(max_command_bytes, "max_command_bytes"),
        buffers=buffers,
        fio=fio,
        fio_runtime_s=fio_runtime_s,
        verify_checksums=verify_checksums,
        free_margin_bytes=_optional_size(free_margin_bytes, "free_margin_bytes"),
    )
    return run_iobench(config, progress=progress, hooks=hooks)


@_python_values(concurrency="concurrency", think_time="think_time", host_memory_sweep="sizes")
def plan(
    source: str | Path,
    out: str | Path,
    *,
    spec: RunSpec | None = None,
    load: LoadPlan | None = None,
    format: str | None = None,
    rate: float | None = None,
    concurrency: int | Sequence[int | Literal["all"]] | Literal["all"] | None = None,
    think_time: ThinkTime | None = None,
    hardware: Hardware | None = None,
    host_memory_sweep: Sequence[int] = (),
    host_memory_auto: bool = False,
    model: str = DEFAULT_MODEL,
    model_config: str | Path | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    slo_ttft_p99_s: float | None = None,
    emit: bool = False,
    emit_name: str = "flatcake_store",
    jobs: int | None = None,
    engine: str = "local",
    scheduler: str | None = None,
    resume: bool = False,
    force: bool = False,
    sample_sessions: float | None = None,
    amplify: int = 1,
    replicas: int = PLAN_REPLICAS,
    progress: Progress | bool = False,
) -> PlanResult:
    """Analyze, replay at the automatic loads and the user's point, recommend thresholds,
    optionally emit, and write one report into ``out`` (module docstring). ``sample_sessions``,
    ``amplify``: replay and recommend on sampled or copied sessions (analyze reads the trace as
    it is). ``spec``/``load``: a :class:`~fcctl.RunSpec` and the replay step's
    :class:`~fcctl.LoadPlan` instead of their keywords (the recommendation runs the spec's
    geometry, node and seed). ``replicas``: the replay step's runs (default
    :data:`PLAN_REPLICAS`, docs/simulator.md 6.2). Other parameters as :func:`fcctl.replay`."""
    given = dict(locals())
    from fcctl.analyzers.recommend.emit import check_name
    from fcctl.analyzers.replay import Execution, check_amplify_value, check_execution
    from fcctl.analyzers.replay.parallel import start_worker_server
    from fcctl.common.progress import Progress
    from fcctl.common.version import __version__
    from fcctl.planning import STEP_WEIGHTS, file_identity, plan_directory

    out = Path(out)
    _check_sample(sample_sessions)
    if emit:
        check_name(emit_name)
    execution = Execution(engine, jobs, scheduler)
    check_execution(execution)
    spec, load, kv_args = _plan_settings(given)
    amplify = check_amplify_value(amplify if load is None else load.amplify)  # recommend's too
    start_worker_server(execution)  # before the trace is read (parallel.worker_context)
    node = _node(hardware) if spec is None else spec.hardware
    with _blame("source"):
        identity = file_identity(source, format)
    common = {"format": format, **kv_args, "version": __version__}
    bar = progress if isinstance(progress, Progress) else Progress(enabled=bool(progress))
    with bar, plan_directory(out, resume=resume, force=force) as held:
        steps = _PlanSteps(
            out, held, resume, bar, source, format, identity, common, kv_args, node, execution,
            sample_sessions, amplify,
        )  # fmt: skip
        steps.spec, steps.load = spec, load
        with bar.task("plan", total=100, unit="%") as overall:
            done = 0.0

            def advance(name: str) -> None:
                nonlocal done
                done += 100 * STEP_WEIGHTS[name]
                overall.update(done)

            overall.describe("plan: analyze")
            steps.analyze()
            advance("analyze")

            overall.describe("plan: replay")
            replayed = steps.replay(
                rate, concurrency, think_time, host_memory_sweep, host_memory_auto, slo_ttft_p99_s,
                replicas,
            )  # fmt: skip
            advance("replay")

            overall.describe("plan: recommend-thresholds")
            operating_rate = rate if load is None else load.operating_rate
            recommended, target, target_why, fp = steps.recommend(replayed, operating_rate)
            advance("recommend")

            if emit:
                steps.emit(fp, emit_name)
            advance("emit")

            overall.describe("plan: report")
            steps.report()
            advance("report")
        return steps.finish(replayed, recommended, target, target_why)


class _PlanSteps:
    """:func:`plan`'s steps over one plan directory: each runs (or is reused, ``resume``) and
    its document is read back, so a reused step reads as one that ran."""

    def __init__(
        self,
        out: Path,
        held: PlanDirectory,
        resume: bool,
        bar: Progress,
        source: str | Path,
        format: str | None,
        identity: dict[str, Any],
        common: dict[str, Any],
        kv_args: dict[str, Any],
        node: Hardware,
        execution: Execution,
        sample_sessions: float | None,
        amplify: int = 1,
    ) -> None:
        from fcctl.common.jsonio import dumps
        from fcctl.planning import PlanRunner

        self.out = out
        self.runner = PlanRunner(held, resume, bar)
        self.bar = bar
        self.source, self.format = source, format
        self.identity, self.common, self.kv_args = identity, common, kv_args
        self.node, self.node_json = node, dumps(node)
        self.execution = execution
        self.sample_sessions = sample_sessions
        self.amplify = amplify
        self.docs: dict[str, Any] = {}
        self.target = 0.0  # the recommendation's rate, once recommend has run
        self.trace_cache: list[Any] = []
        self.whole_cache: list[Any] = []  # the unsampled trace, when replicas resample it
        self.rec_result: list[Any] = []
        # The caller's objects (plan's ``spec`` and ``load``), used instead of the keywords.
        self.spec: RunSpec | None = None
        self.load: LoadPlan | None = None

    def finish(
        self, replayed: ReplayResult, recommended: RecommendResult, target: float, why: str
    ) -> PlanResult:
        """The plan's result, its ``plan.json`` written: the decision, the summary, the steps."""
        from fcctl.common.jsonio import dumps
        from fcctl.planning import (
            PlanResult,
            decision_of,
            growth_lines,
            model_lines,
            summary_lines,
        )

        docs = self.docs
        decision = decision_of(replayed)
        # The model to use and the growth answer, right under the decision and what it rejected.
        first = model_lines(replayed) + growth_lines(replayed)
        lines = summary_lines(replayed, recommended, docs.get("analyze"), decision, first)
        lines.insert(
            len(lines) - 1 if docs.get("analyze", {}).get("verdict") else len(lines),
            f"  (thresholds measured at {target:.3g} req/s: {why})",
        )
        if self.amplify != 1:  # replay and recommend ran on the copies; analyze on the trace
            lines.insert(0, f"amplified {self.amplify}x: {replayed.trace.sessions:,} sessions")
        result = PlanResult(
            1, str(self.out), decision, tuple(lines), tuple(self.runner.steps), docs
        )
        self.runner.finish(dumps(result) + "\n")
        return result

    def trace(self) -> Any:
        """The trace recommend reads (once, sampled as asked; from :meth:`whole` when that was
        read for the replay's replicas, so the file is read once)."""
        if not self.trace_cache:
            source = self.whole_cache[0] if self.whole_cache else self.source
            self.trace_cache.extend(
                _sampled_trace(source, self.format, self.bar, None, self.sample_sessions)
            )
        return self.trace_cache[0]

    def resamples(self) -> bool:
        """Whether the replay's replicas sample their own sessions (a sampled trace file; a
        dataset is filtered while read, with one salt: :func:`_replica_samples`)."""
        from fcctl.analyzers.traces.dataset import is_dataset_input

        if self.sample_sessions is None:
            return False
        return not is_dataset_input(self.source, self.format)

    def whole(self) -> Any:
        """The whole trace, read once, for the replicas to sample from."""
        if not self.whole_cache:
            self.whole_cache.append(read_trace(self.source, format=self.format, progress=self.bar))
        return self.whole_cache[0]

    def sampled(self, result: Any) -> Any:
        return _with_sampling(result, self.trace_cache[1] if self.trace_cache else None)

    def _read(self, name: str) -> Any:
        from fcctl.planning import FILES, read_document

        self.docs[name] = read_document(self.out / FILES[name])
        return self.docs[name]

    def analyze(self) -> None:
        from fcctl.common.jsonio import write_json_file
        from fcctl.planning import fingerprint, node_memory_tiers

        source, format, bar = self.source, self.format, self.bar
        model, model_config = self.kv_args["model"], self.kv_args["model_config"]
        tp, kv_dtype = self.kv_args["tp"], self.kv_args["kv_dtype"]
        # The load-free verdict is judged at this node's host memory, not analyze's
        # default tier, so it speaks of the node the replay simulates (issue 33 item 5).
        tiers = node_memory_tiers(self.node.host_memory_bytes)
        at_node: dict[str, Any] = (
            {}  # a node without host memory: analyze's own tiers
            if tiers is None
            else {
                "memory_capacities_bytes": tiers,
                "reference_capacity_bytes": self.node.host_memory_bytes,
            }
        )
        fp = fingerprint("analyze", self.identity, self.common, at_node)
        self.runner.step(
            "analyze",
            fp,
            lambda p: write_json_file(
                analyze(
                    source,
                    format=format,
                    model=model,
                    model_config=model_config,
                    tp=tp,
                    kv_dtype=kv_dtype,
                    **at_node,
                    progress=bar,
                ),
                p,
            ),
        )
        self._read("analyze")

    def replay(
        self,
        rate: float | None,
        concurrency: Concurrency,
        think_time: ThinkTime | None,
        host_memory_sweep: Sequence[int],
        host_memory_auto: bool,
        slo_ttft_p99_s: float | None,
        replicas: int,
    ) -> ReplayResult:
        from fcctl.analyzers.replay import ReplayResult
        from fcctl.common.jsonio import write_json_file
        from fcctl.planning import FILES, PLAN_POLICIES, fingerprint, read_result

        # The settings as the command line spells them ("4,16,all", "capped:60"), so that a plan
        # fingerprinted when the API took those strings resumes over the same fingerprint.
        counts = None if concurrency is None else _concurrency(concurrency)
        replay_params: dict[str, Any] = {
            "rate": rate,
            "concurrency": None if counts is None else _flag_text(counts),
            "think_time": str(_think_time(think_time)),
            "hardware": self.node_json,
            "host_memory_sweep": list(map(str, host_memory_sweep)),
            "host_memory_auto": host_memory_auto,
            "slo": slo_ttft_p99_s,
            "load_axis": "auto",  # the trace picks rates or sessions (since issue #33)
        }
        if self.sample_sessions is not None:
            replay_params["sample_sessions"] = self.sample_sessions
        if self.amplify != 1:  # absent at 1, so an earlier plan directory still resumes
            replay_params["amplify"] = self.amplify
        # Every plan directory written before plans took replicas ran one: only another count
        # changes the fingerprint, so those directories resume at --replicas 1.
        replicas = replicas if self.load is None else self.load.replicas
        if replicas != 1:
            replay_params["replicas"] = replicas
        # Keys only for objects given, so a plan made from keywords keeps its fingerprints.
        replay_params.update({k: v for k, v in (("spec", self.spec), ("load", self.load)) if v})
        settings: dict[str, Any] = (
            {**self.kv_args, "hardware": self.node, "think_time": think_time}
            if self.spec is None
            else {"spec": self.spec}
        )
        settings.update(
            {
                "policies": PLAN_POLICIES,
                "rates": None if concurrency is not None else "auto",
                "rate": rate,
                # Without a load of the user's the trace picks the axis: sessions when they
                # pace themselves, rates otherwise (issue #33, item 3).
                "concurrency": "auto" if rate is None and concurrency is None else concurrency,
                "host_memory_sweep": host_memory_sweep,
                "host_memory_auto": host_memory_auto,
                "slo_ttft_p99_s": slo_ttft_p99_s,
                "amplify": self.amplify,
                "replicas": replicas,
            }
            if self.load is None
            else {"load": self.load}
        )
        fp = fingerprint("replay", self.identity, self.common, replay_params)
        # Replicas of a sampled file sample their own sessions (the replay states the error
        # measured across them); otherwise the one sample recommend reads too.
        resample = self.resamples()
        if resample:
            settings["sample_sessions"] = self.sample_sessions

        def run(p: Path) -> None:
            result = replay(
                self.whole() if resample else self.trace(),
                **settings,
                jobs=self.execution.jobs,
                engine=self.execution.engine,
                scheduler=self.execution.scheduler,
                progress=self.bar,
            )
            write_json_file(result if resample else self.sampled(result), p)

        self.runner.step("replay", fp, run)
        # Decided from the document read back, so a reused step reads as one that ran.
        return read_result(self._read("replay"), self.out / FILES["replay"], ReplayResult.from_json)

    def recommend(
        self, replayed: ReplayResult, rate: float | None
    ) -> tuple[RecommendResult, float, str, str]:
        """The recommendation at the plan's target rate; that rate, why, and the step's
        fingerprint (the emit step's input)."""
        from fcctl.analyzers.recommend import RecommendResult
        from fcctl.planning import FILES, fingerprint, read_result, target_rate

        target, target_why = target_rate(replayed, rate)
        self.target = target
        fp = fingerprint(
            "recommend",
            self.identity,
            self.common,
            self.node_json,
            target,
            *([] if self.sample_sessions is None else [self.sample_sessions]),
            *([] if self.amplify == 1 else [f"amplify={self.amplify}"]),
        )
        self.runner.step("recommend", fp, lambda p: self._recommend(target, p))
        recommended = read_result(
            self._read("recommend"), self.out / FILES["recommend"], RecommendResult.from_json
        )
        return recommended, target, target_why, fp

    def _recommend(self, target: float, p: Path | None) -> None:
        import dataclasses

        from fcctl.analyzers.replay.load import ThinkTime
        from fcctl.common.jsonio import write_json_file

        self.rec_result[:] = [
            self.sampled(
                recommend_thresholds(
                    self.trace(),
                    rates=(target,),
                    # The recommendation runs the default think time, as the keywords' plan did.
                    **(
                        {**self.kv_args, "hardware": self.node}
                        if self.spec is None
                        else {"spec": dataclasses.replace(self.spec, think_time=ThinkTime())}
                    ),
                    jobs=self.execution.jobs,
                    engine=self.execution.engine,
                    scheduler=self.execution.scheduler,
                    amplify=self.amplify,
                    progress=self.bar,
                )
            )
        ]
        if p is not None:
            write_json_file(self.rec_result[0], p)

    def emit(self, recommend_fp: str, emit_name: str) -> None:
        from fcctl.analyzers.recommend.emit import emit_package
        from fcctl.common.version import __version__
        from fcctl.planning import fingerprint

        def do_emit(p: Path) -> None:
            if not self.rec_result:  # the recommendation was reused: its object is needed
                self._recommend(self.target, None)  # its document stays the one recorded
            emit_package(p, self.rec_result[0], name=emit_name, force=True)

        emit_fp = fingerprint("emit", recommend_fp, emit_name, __version__)
        self.runner.step("emit", emit_fp, do_emit)

    def report(self) -> None:
        from fcctl.common.version import __version__
        from fcctl.planning import FILES, fingerprint
        from fcctl.reports.html_report import make_report

        inputs = [self.out / FILES[s] for s in ("analyze", "replay", "recommend")]
        fp = fingerprint("report", [fingerprint(self.docs[s]) for s in self.docs], __version__)
        self.runner.step("report", fp, lambda p: make_report(inputs, p, force=True))


def _plan_settings(
    given: Mapping[str, Any],
) -> tuple[RunSpec | None, LoadPlan | None, dict[str, Any]]:
    """:func:`plan`'s ``spec`` and ``load`` (None: made from the keywords, checked here before
    the plan directory is touched), and the geometry keywords its steps pass on."""
    spec = _given("spec", given["spec"], plan, given)
    load = _given("load", given["load"], plan, given)
    if load is None:
        keys = ("rate", "concurrency", "slo_ttft_p99_s", "host_memory_sweep", "think_time")
        _check_plan_load(*(given[k] for k in keys))
        from fcctl.analyzers.replay.verdict import check_replicas

        check_replicas(given["replicas"])
    if spec is None:
        kv_args = {k: given[k] for k in _GEOMETRY}
        geometry(**kv_args)
        return None, load, kv_args
    # A spec's think time goes to the replay only, as the keyword's does.
    _check_sweep_spec(spec, "plan", kept=("think_time",))
    return spec, load, {**dict.fromkeys(_GEOMETRY), "model": spec.geometry}


def _flag_text(counts: Sequence[int | None]) -> str:
    """Session counts as ``--concurrency`` spells them (``"4,16,all"``)."""
    return ",".join("all" if c is None else str(c) for c in counts)


def _check_plan_load(
    rate: float | None,
    concurrency: Concurrency,
    slo_ttft_p99_s: float | None,
    host_memory_sweep: Sequence[int],
    think_time: ThinkTime | None,
) -> None:
    """The replay step's load parameters, checked before the plan directory is touched (the
    replay itself checks them only after the analysis has run)."""
    import math

    from fcctl.analyzers.traces.schedule import check_rate
    from fcctl.common.errors import FcctlInputError

    if rate is not None:
        check_rate(rate, "rate")
    if concurrency is not None:
        if rate is not None:
            raise FcctlInputError(
                "concurrency: the load axis is rates or concurrency, not both",
                parameter="concurrency",
            )
        _concurrency(concurrency)
    _think_time(think_time)
    slo = slo_ttft_p99_s
    if slo is not None and not (isinstance(slo, int | float) and math.isfinite(slo) and slo > 0):
        raise FcctlInputError(
            f"slo_ttft_p99_s: must be a finite number of seconds > 0; got {slo_ttft_p99_s!r}",
            parameter="slo_ttft_p99_s",
        )
    for size in host_memory_sweep:
        _size(size, "host_memory_sweep")
