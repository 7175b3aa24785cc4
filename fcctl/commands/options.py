"""Options declared alike by several commands: one ``Annotated`` alias each, and the helpers
that turn them into library values.

A flag whose help says something different per command on purpose (``--tp``: analyze reports
the node total, iobench sizes one rank; ``--out`` and ``--force``: each names its own files)
stays declared in its command. Only typer and light fcctl modules are imported here, so that
`fcctl --help` stays quick (tests/test_cli_imports.py); the helpers import the rest when called.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from fcctl.commands import FORMAT_NAMES
from fcctl.layout.geometry import preset_names

if TYPE_CHECKING:
    from fcctl.analyzers.replay import Hardware

_F = TypeVar("_F", bound=Callable[..., Any])

#: Every preset, for --help (the geometry module is light: no numpy, no torch).
_PRESETS = ", ".join(preset_names())

# --- the trace and the model (analyze, convert, replay, recommend-thresholds, iobench) ----------

FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format", help=f"Input format ({', '.join(FORMAT_NAMES)}); detected if omitted."
    ),
]
ModelOpt = Annotated[str, typer.Option("--model", help=f"KV geometry preset: {_PRESETS}.")]
ModelConfigOpt = Annotated[
    Path | None,
    typer.Option("--model-config", help="Hugging Face config.json (overrides --model)."),
]
KvDtypeOpt = Annotated[
    str | None, typer.Option("--kv-dtype", help="KV dtype: bf16, fp16, fp8, fp32.")
]
MaxLineBytesOpt = Annotated[
    str,
    typer.Option(
        "--max-line-bytes",
        help="Longest line (or trace_NNNN.json file) read; a longer one is an error.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Read a JSONL/CSV/Parquet log through this column mapping (implies --format "
        "generic): timestamp=COL,input=COL,output=COL required; session, hashes (with "
        "block_size=N), turn, id, parent, type, timestamp_unit=s|ms|us|ns|iso optional.",
    ),
]

# --- the simulated node (replay, recommend-thresholds) -------------------------------------------

RatesOpt = Annotated[
    str, typer.Option("--rates", help="Comma-separated request rates (requests/s).")
]
#: analyze and iobench declare their own --tp: their KV bytes are per node and per rank.
TpOpt = Annotated[
    int | None, typer.Option("--tp", help="Tensor-parallel GPUs per serving instance.")
]
HardwareOpt = Annotated[
    str | None,
    typer.Option("--hardware", help="Preset (h100-8x, h200-8x, b200-8x) or hw.toml [h200-8x]."),
]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs on the node.")]
GpuKvOpt = Annotated[
    str | None, typer.Option("--gpu-kv", help="GPU KV-cache bytes per GPU, e.g. 40GiB.")
]
HostMemoryOpt = Annotated[
    str | None, typer.Option("--host-memory", help="Host memory for KV per node.")
]
SsdOpt = Annotated[str | None, typer.Option("--ssd", help="SSD for KV per node.")]
StagingOpt = Annotated[
    str | None, typer.Option("--staging", help="Host staging buffer per node (tiered).")
]
HostScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--host-scope",
        help="Host memory pools: 'node' (one, shared: Mooncake store) or 'worker' (one per "
        "serving instance, host memory / workers each: SGLang HiCache) [node].",
    ),
]
PrefillTokensPerSOpt = Annotated[
    float | None,
    typer.Option("--prefill-tokens-per-s", help="Prefill rate instead of the fitted model."),
]
MaxBatchedTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-batched-tokens",
        help="Tokens one iteration computes, decodes and prefill chunks together [16384].",
    ),
]
PrefillChunkTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--prefill-chunk-tokens", help="The most prompt tokens of one request per iteration [8192]."
    ),
]
IoProfileOpt = Annotated[
    Path | None,
    typer.Option("--io-profile", help="`fcctl iobench --json` document: SSD figures."),
]
ScheduleSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the session schedule.")]
AmplifyOpt = Annotated[
    int,
    typer.Option(
        "--amplify",
        help="Replay K copies of every session (own blocks fresh, shared ones shared; "
        "docs/simulator.md, Session amplification).",
    ),
]
# The decision's margins (analyzers/replay/decision.py; defaults there, repeated in the help).
DecisionMarginOpt = Annotated[
    float,
    typer.Option(
        "--decision-margin-pp",
        help="GPU hit share (percentage points) one choice must lead by to count as better.",
    ),
]
DecisionTtftMarginOpt = Annotated[
    float,
    typer.Option(
        "--decision-ttft-margin",
        help="Mean TTFT (a fraction: 0.1 = 10 %) one choice must lead by to count as better.",
    ),
]


def split_sizes(value: str | None, parameter: str) -> tuple[int | None, list[int], bool]:
    """A size flag's list ``"256GiB,1TiB,auto"`` in bytes: the node's value (the first size, or
    None), the other sizes to sweep, and whether ``auto`` was among them."""
    from fcctl.commands import parse

    if value is None:
        return None, [], False
    items = [v.strip() for v in value.split(",") if v.strip()]
    auto = "auto" in items
    sizes = [parse.size(v, parameter) for v in items if v != "auto"]
    if not sizes and not auto:
        from fcctl.common.errors import FcctlInputError

        raise FcctlInputError(
            f"{parameter}: give a size or a list of sizes; got {value!r}", parameter=parameter
        )
    return (sizes[0] if sizes else None), sizes[1:], auto


#: The simulated node's flags (replay, recommend-thresholds, plan), in the order --help shows
#: them: a command declares ``node: NodeFlags = NodeFlags()`` and :func:`node_options` puts
#: these in its place.
NODE_OPTIONS: dict[str, Any] = {
    "hardware": HardwareOpt,
    "gpus": GpusOpt,
    "gpu_kv": GpuKvOpt,
    "host_memory": HostMemoryOpt,
    "ssd": SsdOpt,
    "staging": StagingOpt,
    "host_scope": HostScopeOpt,
    "prefill_tokens_per_s": PrefillTokensPerSOpt,
    "max_batched_tokens": MaxBatchedTokensOpt,
    "prefill_chunk_tokens": PrefillChunkTokensOpt,
    "io_profile": IoProfileOpt,
}
#: The node's size flags: the API parameter each makes.
_NODE_SIZES = {
    "gpu_kv": "gpu_kv_bytes",
    "host_memory": "host_memory_bytes",
    "ssd": "ssd_bytes",
    "staging": "staging_bytes",
}


@dataclass(frozen=True)
class NodeSweeps:
    """What a command's node flags make: the node, and the sizes to sweep besides its own
    (bytes; given as a flag's list ``"256GiB,1TiB"``), ``host_memory_auto`` for ``auto``."""

    hardware: Hardware
    gpu_kv_sweep: list[int] = field(default_factory=list)
    host_memory_sweep: list[int] = field(default_factory=list)
    staging_sweep: list[int] = field(default_factory=list)
    host_memory_auto: bool = False


@dataclass(frozen=True)
class NodeFlags:
    """The simulated node's flags as typed (:data:`NODE_OPTIONS`), parsed once into the API's
    values by :meth:`build`."""

    hardware: str | None = None
    gpus: int | None = None
    gpu_kv: str | None = None
    host_memory: str | None = None
    ssd: str | None = None
    staging: str | None = None
    host_scope: str | None = None
    prefill_tokens_per_s: float | None = None
    max_batched_tokens: int | None = None
    prefill_chunk_tokens: int | None = None
    io_profile: Path | None = None

    def build(self, sweeps: Collection[str] = ()) -> NodeSweeps:
        """The node (``fcctl.hardware``, each override recorded as its flag), and the sizes to
        sweep of the size flags named in ``sweeps`` (a list in any other is an error)."""
        from fcctl import api
        from fcctl.commands import parse
        from fcctl.errors import flag_for

        sizes: dict[str, int | None] = {}
        more: dict[str, list[int]] = {}
        auto = False
        for flag, parameter in _NODE_SIZES.items():
            text = getattr(self, flag)
            if flag in sweeps:
                sizes[parameter], more[flag], found = split_sizes(text, parameter)
                auto = auto or found
            else:
                sizes[parameter] = parse.optional_size(text, parameter)
        node = api.hardware(
            self.hardware,
            io_profile=self.io_profile,
            gpus=self.gpus,
            **sizes,
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            max_batched_tokens=self.max_batched_tokens,
            prefill_chunk_tokens=self.prefill_chunk_tokens,
            host_scope=self.host_scope,
            source_of=flag_for,
        )
        return NodeSweeps(
            node,
            gpu_kv_sweep=more.get("gpu_kv", []),
            host_memory_sweep=more.get("host_memory", []),
            staging_sweep=more.get("staging", []),
            host_memory_auto=auto,
        )


def node_options(command: _F) -> _F:
    """``command`` with the node's flags (:data:`NODE_OPTIONS`) declared where its ``node``
    parameter stands, handed to it as one :class:`NodeFlags`: three commands share the flags
    without restating them (typer reads the signature and annotations set here)."""
    signature = inspect.signature(command, eval_str=True)
    parameters: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name != "node":
            parameters.append(p)
            continue
        for name, annotation in NODE_OPTIONS.items():
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            parameters.append(inspect.Parameter(name, kind, default=None, annotation=annotation))

    @functools.wraps(command)
    def call(*args: Any, **kwargs: Any) -> Any:
        flags = NodeFlags(**{name: kwargs.pop(name, None) for name in NODE_OPTIONS})
        return command(*args, node=flags, **kwargs)

    call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in parameters}
    return call  # type: ignore[return-value]


def print_result(result: Any, *, as_json: bool, print_summary: Callable[[Any], None]) -> None:
    """The result on stdout: the ``--json`` document, or the command's summary."""
    if as_json:
        from fcctl.common.jsonio import write_json

        write_json(result, sys.stdout)
    else:
        print_summary(result)


# The load axes and the operating point (replay and plan).
OperatingRateOpt = Annotated[
    float | None,
    typer.Option("--rate", help="Your own operating point (requests/s), reported first."),
]
ConcurrencyOpt = Annotated[
    str | None,
    typer.Option(
        "--concurrency",
        help="Sessions kept active, a closed loop, instead of --rates: N,... or all.",
    ),
]
ThinkTimeOpt = Annotated[
    str,
    typer.Option(
        "--think-time", help="Gap between a session's turns: original, none, capped:S or scale:K."
    ),
]
SloTtftP99Opt = Annotated[
    float | None,
    typer.Option(
        "--slo-ttft-p99",
        help="Seconds: the decision's p99 TTFT bound (default 2, MLPerf's server bound); "
        "the auto sweep stops past it.",
    ),
]
ReplicasOpt = Annotated[
    int,
    typer.Option(
        "--replicas",
        help="Runs of the whole sweep, seeds seed..seed+R-1; the decision's spread reads them.",
    ),
]
SampleSessionsOpt = Annotated[
    float | None,
    typer.Option(
        "--sample-sessions",
        help="Simulate only this share of sessions (0 < R <= 1), whole, chosen by the hash of "
        "their id; same load per node; the output states the measured error.",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        help="Simulations run at once in worker processes (1: in this process) [the CPUs "
        "available, at most one per worker's memory footprint (512 MiB + 10 bytes a block "
        "access) within the memory budget (30% of this machine's); 1 under 1 M accesses].",
    ),
]
# Where the simulations run (replay, recommend-thresholds, plan); analyze declares its own.
SimEngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="local (worker processes here, --jobs) or dask (tasks on a Dask cluster: a local "
        "one, or the one --scheduler names; pip install 'fcctl[dask]').",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="With --engine dask: the scheduler's address, e.g. tcp://10.0.0.5:8786 "
        "[default: start a local cluster].",
    ),
]
EmitNameOpt = Annotated[str, typer.Option("--emit-name", help="Package name for --emit.")]


#: The ``node`` parameter's default in a command's own signature: :func:`node_options` puts the
#: node's flags in its place, so typer never sees it.
NODE_FLAGS = NodeFlags()
