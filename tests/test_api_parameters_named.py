"""Every public API call names the parameter at fault, never a command-line flag.

docs/python-api.md promises errors named by parameter: ``fcctl.replay(trace, rates=[-1])`` must
say ``rates: ...`` with ``parameter == "rates"``, not ``--rates: ...`` with ``parameter=None``.
Each public function (``fcctl.__all__``) is called here with a bad value of each of its
parameters; a second test checks that every parameter is covered (or exempt, with the reason),
so a new parameter cannot slip past. The CLI still shows flags: the last tests run commands.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import fcctl
from fcctl import api
from fcctl.cli import app
from fcctl.layout.errors import InputError
from tests.conftest import REPO

TRACE = str(REPO / "samples/dynamo_agentic.jsonl")
FLAG = re.compile(r"(?<![\w`-])--[a-z][a-z0-9-]+")


def _missing(name: str) -> str:
    return f"/nonexistent/{name}"


#: (function, parameter, bad value, other arguments the call needs). Run in a fresh temporary
#: directory (``{tmp}`` in a value is replaced by it).
CASES: list[tuple[str, str, Any, dict[str, Any]]] = [
    ("geometry", "model", "nonesuch-1b", {}),
    ("geometry", "model_config", _missing("config.json"), {}),
    ("geometry", "tp", 0, {}),
    ("geometry", "kv_dtype", "int3", {}),
    ("read_trace", "source", _missing("trace.jsonl"), {}),
    ("read_trace", "format", "nonesuch", {"source": TRACE}),
    ("read_trace", "columns", "nonesuch=x", {"source": TRACE}),
    ("read_trace", "max_line_bytes", -1, {"source": TRACE}),
    ("hardware", "preset", "nonesuch-9x", {}),
    ("hardware", "io_profile", _missing("iobench.json"), {}),
    ("hardware", "gpus", 0, {}),
    ("hardware", "gpu_kv_bytes", -1, {}),
    ("hardware", "host_memory_bytes", 1.5, {}),
    ("hardware", "ssd_bytes", -5, {}),
    ("hardware", "staging_bytes", -1, {}),
    ("hardware", "prefill_tokens_per_s", -1.0, {}),
    ("hardware", "max_batched_tokens", 0, {}),
    ("hardware", "prefill_chunk_tokens", 0, {}),
    ("hardware", "host_scope", "rack", {}),
]

_ANALYZE = {"source": TRACE}
CASES += [
    ("analyze", "source", _missing("trace.jsonl"), {}),
    ("analyze", "format", "nonesuch", _ANALYZE),
    ("analyze", "columns", "nonesuch", _ANALYZE),
    ("analyze", "max_line_bytes", 0, _ANALYZE),
    ("analyze", "model", "nonesuch-1b", _ANALYZE),
    ("analyze", "model_config", _missing("config.json"), _ANALYZE),
    ("analyze", "tp", 0, _ANALYZE),
    ("analyze", "kv_dtype", "int3", _ANALYZE),
    ("analyze", "memory_capacities_bytes", [0], _ANALYZE),
    ("analyze", "rate_requests_per_s", -1.0, _ANALYZE),
    ("analyze", "concurrent_sessions", 0, _ANALYZE),
    ("analyze", "seed", -1, _ANALYZE),
    ("analyze", "flat_session_kv_bytes", -1, _ANALYZE),
    ("analyze", "reference_capacity_bytes", -1, _ANALYZE),
    ("analyze", "memory_budget_bytes", -1, _ANALYZE),
    ("analyze", "sample_rate", 2.0, _ANALYZE),
    ("analyze", "engine", "spark", _ANALYZE),
    ("analyze", "scheduler", "tcp://127.0.0.1:1", _ANALYZE),
]

# jobs=1: no worker processes for calls that must fail before any simulation.
_REPLAY = {"source": TRACE, "jobs": 1}
CASES += [
    ("replay", "source", _missing("trace.jsonl"), {"jobs": 1}),
    ("replay", "format", "nonesuch", _REPLAY),
    ("replay", "policies", ("lru",), _REPLAY),
    ("replay", "rates", [-1], _REPLAY),
    ("replay", "rate", -1.0, _REPLAY),
    ("replay", "concurrency", 0, _REPLAY),
    ("replay", "amplify", 0, _REPLAY),
    ("replay", "think_time", 60, _REPLAY),
    ("replay", "cancel", "keep", _REPLAY),
    ("replay", "router", "random", _REPLAY),
    ("replay", "slo_ttft_p99_s", 0.0, _REPLAY),
    ("replay", "gpu_kv_sweep", [-1], _REPLAY),
    ("replay", "host_memory_sweep", [1.5], _REPLAY),
    ("replay", "staging_sweep", [-1], _REPLAY),
    ("replay", "memory_budget_bytes", -1, _REPLAY),
    ("replay", "model", "nonesuch-1b", _REPLAY),
    ("replay", "model_config", _missing("config.json"), _REPLAY),
    ("replay", "tp", 0, _REPLAY),
    ("replay", "kv_dtype", "int3", _REPLAY),
    ("replay", "hardware", "nonesuch-9x", _REPLAY),
    ("replay", "short_reply_tokens", -1, _REPLAY),
    ("replay", "agent_context_tokens", -1, _REPLAY),
    ("replay", "seed", "one", _REPLAY),
    ("replay", "decision_margin_pp", -1.0, _REPLAY),
    ("replay", "decision_ttft_margin", -1.0, _REPLAY),
    ("replay", "replicas", 0, _REPLAY),
    ("replay", "jobs", 0, {"source": TRACE}),
    ("replay", "engine", "spark", _REPLAY),
    ("replay", "scheduler", "tcp://127.0.0.1:1", _REPLAY),
    ("replay", "sample_sessions", 0.0, _REPLAY),
    ("replay", "spec", "h200-8x", _REPLAY),
    ("replay", "load", {"rates": [1.0]}, _REPLAY),
]

_RECOMMEND = {"source": TRACE, "jobs": 1, "rates": (1.0,)}
CASES += [
    ("recommend_thresholds", "source", _missing("trace.jsonl"), {"jobs": 1}),
    ("recommend_thresholds", "format", "nonesuch", _RECOMMEND),
    ("recommend_thresholds", "amplify", -1, _RECOMMEND),
    ("recommend_thresholds", "rates", [-1], {"source": TRACE, "jobs": 1}),
    ("recommend_thresholds", "short_reply_grid", [1.5], _RECOMMEND),
    ("recommend_thresholds", "agent_context_grid", [-1], _RECOMMEND),
    ("recommend_thresholds", "objective", "fastest", _RECOMMEND),
    ("recommend_thresholds", "target_rate", -1.0, _RECOMMEND),
    ("recommend_thresholds", "model", "nonesuch-1b", _RECOMMEND),
    ("recommend_thresholds", "model_config", _missing("config.json"), _RECOMMEND),
    ("recommend_thresholds", "tp", 0, _RECOMMEND),
    ("recommend_thresholds", "kv_dtype", "int3", _RECOMMEND),
    ("recommend_thresholds", "hardware", "nonesuch-9x", _RECOMMEND),
    ("recommend_thresholds", "seed", -1, _RECOMMEND),
    ("recommend_thresholds", "jobs", 0, {"source": TRACE, "rates": (1.0,)}),
    ("recommend_thresholds", "engine", "spark", _RECOMMEND),
    ("recommend_thresholds", "scheduler", "tcp://127.0.0.1:1", _RECOMMEND),
    ("recommend_thresholds", "decision_margin_pp", -1.0, _RECOMMEND),
    ("recommend_thresholds", "decision_ttft_margin", 11.0, _RECOMMEND),
    ("recommend_thresholds", "sample_sessions", 2.0, _RECOMMEND),
    ("recommend_thresholds", "spec", "h200-8x", _RECOMMEND),
]

_IOBENCH = {"directory": "{tmp}/io", "fio": False}
CASES += [
    ("iobench", "directory", "{tmp}/no/such/parent/io", {"fio": False}),
    ("iobench", "layout", "striped", _IOBENCH),
    ("iobench", "trace", _missing("trace.jsonl"), _IOBENCH),
    ("iobench", "trace_format", "nonesuch", {**_IOBENCH, "trace": TRACE}),
    ("iobench", "scale", 0.0, _IOBENCH),
    ("iobench", "size_limit_bytes", 0, _IOBENCH),
    ("iobench", "sessions", 0, _IOBENCH),
    ("iobench", "tokens", 0, _IOBENCH),
    ("iobench", "turns", 0, _IOBENCH),
    ("iobench", "model", "nonesuch-1b", _IOBENCH),
    ("iobench", "model_config", _missing("config.json"), _IOBENCH),
    ("iobench", "tp", 0, _IOBENCH),
    ("iobench", "kv_dtype", "int3", _IOBENCH),
    ("iobench", "block_tokens", 0, _IOBENCH),
    ("iobench", "bucket_bytes", 1, _IOBENCH),
    ("iobench", "memory_tier_bytes", -1, _IOBENCH),
    ("iobench", "concurrency", [0], _IOBENCH),
    ("iobench", "repeat", 0, _IOBENCH),
    ("iobench", "engine", "aio", _IOBENCH),
    ("iobench", "engine_threads", 0, _IOBENCH),
    ("iobench", "max_command_bytes", 3, _IOBENCH),
    ("iobench", "buffers", "disk", _IOBENCH),
    ("iobench", "fio_runtime_s", -1.0, _IOBENCH),
    ("iobench", "free_margin_bytes", -1, _IOBENCH),
]

_PLAN = {"source": TRACE, "out": "{tmp}/plan", "jobs": 1}
CASES += [
    ("plan", "source", _missing("trace.jsonl"), {"out": "{tmp}/plan", "jobs": 1}),
    ("plan", "format", "nonesuch", _PLAN),
    ("plan", "rate", -1.0, _PLAN),
    ("plan", "concurrency", 0, _PLAN),
    ("plan", "amplify", 1.5, _PLAN),
    ("plan", "think_time", 60, _PLAN),
    ("plan", "hardware", "nonesuch-9x", _PLAN),
    ("plan", "host_memory_sweep", [-1], _PLAN),
    ("plan", "model", "nonesuch-1b", _PLAN),
    ("plan", "model_config", _missing("config.json"), _PLAN),
    ("plan", "tp", 0, _PLAN),
    ("plan", "kv_dtype", "int3", _PLAN),
    ("plan", "slo_ttft_p99_s", 0.0, _PLAN),
    ("plan", "emit_name", "class", {**_PLAN, "emit": True}),
    ("plan", "jobs", 0, {"source": TRACE, "out": "{tmp}/plan"}),
    ("plan", "engine", "spark", _PLAN),
    ("plan", "scheduler", "tcp://127.0.0.1:1", _PLAN),
    ("plan", "sample_sessions", 0.0, _PLAN),
    ("plan", "spec", "h200-8x", _PLAN),
    ("plan", "load", {"rates": [1.0]}, _PLAN),
]

#: Parameters no value of which is bad input, with the reason.
EXEMPT: dict[tuple[str, str], str] = {
    **{(f, "progress"): "a display switch: any truthy value draws a bar" for f in api.__all__},
    ("hardware", "source_of"): "labels the sources of overrides; never validated input",
    ("replay", "host_memory_auto"): "a switch",
    ("replay", "keep_tables"): "a switch",
    ("plan", "host_memory_auto"): "a switch",
    ("plan", "emit"): "a switch",
    ("plan", "resume"): "a switch (a bad directory is out's)",
    ("plan", "force"): "a switch",
    ("plan", "out"): "any path is an output directory; plan's own checks are in test_plan*.py",
    ("iobench", "force"): "a switch",
    ("iobench", "keep"): "a switch",
    ("iobench", "fio"): "a switch",
    ("iobench", "verify_checksums"): "a switch",
    ("iobench", "hooks"): "test and embedder plug points, not input",
}


def _fill(value: Any, tmp: Path) -> Any:
    return value.replace("{tmp}", str(tmp)) if isinstance(value, str) else value


@pytest.mark.parametrize(
    ("function", "parameter", "bad", "others"),
    CASES,
    ids=[f"{f}-{p}" for f, p, _, _ in CASES],
)
def test_a_bad_value_is_named_by_its_parameter(function, parameter, bad, others, tmp_path):
    kwargs = {k: _fill(v, tmp_path) for k, v in others.items()}
    kwargs[parameter] = _fill(bad, tmp_path)
    with pytest.raises(InputError) as caught:
        getattr(fcctl, function)(**kwargs)
    e = caught.value
    message = str(e)
    assert e.parameter == parameter, (e.parameter, message)
    assert not FLAG.search(message), f"names a flag: {message}"
    if isinstance(bad, str) and bad.startswith("/nonexistent/"):
        assert bad in message  # a file's error names the file
    else:
        assert message.startswith(f"{parameter}: "), message


def _spec() -> Any:
    return fcctl.RunSpec(geometry=fcctl.geometry(), hardware=fcctl.hardware())


@pytest.mark.parametrize(
    ("function", "settings", "keyword", "value"),
    [
        ("replay", "spec", "seed", 3),
        ("replay", "spec", "model", "qwen3-32b"),
        ("replay", "spec", "think_time", fcctl.ThinkTime("none")),
        ("replay", "spec", "hardware", "a node"),
        ("replay", "load", "rates", [1.0]),
        ("replay", "load", "policies", ("tiered",)),
        ("replay", "load", "host_memory_sweep", [1 << 30]),
        ("replay", "load", "decision_margin_pp", 2.0),
        ("recommend_thresholds", "spec", "seed", 3),
        ("recommend_thresholds", "spec", "tp", 2),
        ("recommend_thresholds", "spec", "hardware", "a node"),
        ("plan", "spec", "model", "qwen3-32b"),
        ("plan", "spec", "think_time", fcctl.ThinkTime("none")),
        ("plan", "load", "rate", 2.0),
        ("plan", "load", "concurrency", [4]),
        ("plan", "load", "host_memory_auto", True),
    ],
)
def test_a_keyword_beside_the_object_that_holds_it_is_named(
    function, settings, keyword, value, tmp_path
):
    """``spec``/``load`` replace their keywords: a keyword given too (not at its default) is
    one error naming the keyword, before any trace is read (or plan directory made)."""
    objects = {"spec": _spec(), "load": fcctl.LoadPlan(rates=(1.0,))}
    where = {"out": tmp_path / "plan"} if function == "plan" else {}
    with pytest.raises(InputError) as caught:
        getattr(fcctl, function)(
            TRACE, jobs=1, **where, **{settings: objects[settings], keyword: value}
        )
    assert not (tmp_path / "plan").exists()
    assert caught.value.parameter == keyword
    assert str(caught.value).startswith(f"{keyword}: `{settings}` holds this setting"), str(
        caught.value
    )


def test_a_keyword_at_its_default_beside_an_object_is_no_conflict():
    """The same value as the default, spelled as a list, is not a second setting."""
    result = fcctl.replay(
        TRACE,
        jobs=1,
        spec=_spec(),
        load=fcctl.LoadPlan(policies=("tiered",), rates=(1.0,)),
        gpu_kv_sweep=[],
        seed=0,
    )
    assert [r.rate for r in result.rates] == [1.0]
    assert list(result.rates[0].policies) == ["tiered"]


def test_every_parameter_of_every_public_function_is_tried():
    tried = {(f, p) for f, p, _, _ in CASES}
    for name in api.__all__:
        for parameter in inspect.signature(getattr(api, name)).parameters:
            assert (name, parameter) in tried or (name, parameter) in EXEMPT, (name, parameter)
    assert set(api.__all__) <= set(fcctl.__all__)


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["replay", TRACE, "--jobs", "1", "--rates", "-1"], "--rates: each rate"),
        (["replay", TRACE, "--jobs", "1", "--rate", "-1"], "--rate: must be > 0"),
        (["replay", TRACE, "--jobs", "1", "--hardware", "nonesuch-9x"], "--hardware: unknown"),
        (["replay", TRACE, "--jobs", "1", "--gpus", "0"], "--gpus: field 'gpus'"),
        (["replay", TRACE, "--jobs", "1", "--seed", "-1"], "--seed: must be an integer"),
        (["recommend-thresholds", TRACE, "--objective", "x"], "--objective: must be one of"),
        (["iobench", "--sessions", "0", "--no-fio"], "--sessions: must be an integer >= 1"),
        (["iobench", "--threads", "0", "--no-fio"], "--threads: must be >= 1"),
        (["iobench", "--dir", "/nonexistent/a/b", "--no-fio"], "--dir: the parent directory"),
        (["analyze", TRACE, "--scheduler", "tcp://x:1"], "needs the dask --engine"),
    ],
)
def test_the_cli_still_names_the_flag(args, shown):
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    assert "fcctl: error: " in done.output and shown in done.output, done.output


def test_a_parameter_named_inside_a_message_becomes_the_commands_flag():
    from fcctl.errors import parameters_as_flags

    text = "x: too big; raise `memory_budget_bytes` or lower `sample_rate`, see `ulimit -n`"
    flags = {"--memory-budget", "--sample-rate"}
    assert parameters_as_flags(text, None, flags) == (
        "x: too big; raise --memory-budget or lower --sample-rate, see `ulimit -n`"
    )
    # a command without the flag keeps the parameter's name
    assert parameters_as_flags(text, None, {"--sample-rate"}).startswith(
        "x: too big; raise `memory_budget_bytes` or lower --sample-rate"
    )


def test_the_iobench_call_survives_its_package_being_imported():
    """``fcctl.iobench`` is the public call even after ``fcctl.iobench`` the package is imported
    (the import system binds a subpackage to its parent's attribute of the same name)."""
    import importlib

    importlib.import_module("fcctl.iobench.run")
    assert fcctl.iobench is api.iobench and callable(fcctl.iobench)
    assert importlib.import_module("fcctl.iobench").__name__ == "fcctl.iobench"


#: (function, parameter, the string the API took before, the Python value it stands for, other
#: arguments). Each string still works for one release, with a warning naming the parameter.
DEPRECATED: list[tuple[str, str, Any, Any, dict[str, Any]]] = [
    ("hardware", "host_memory_bytes", "256GiB", 256 << 30, {}),
    ("hardware", "gpu_kv_bytes", "40GiB", 40 << 30, {}),
]


@pytest.mark.parametrize(
    ("function", "parameter", "text", "value", "others"),
    DEPRECATED,
    ids=[f"{f}-{p}" for f, p, _, _, _ in DEPRECATED],
)
def test_a_string_of_old_warns_naming_the_parameter_and_means_the_same(
    function, parameter, text, value, others
):
    call = getattr(fcctl, function)
    with pytest.warns(DeprecationWarning, match=rf"^{parameter}: a string is deprecated") as w:
        old = call(**others, **{parameter: text})
    assert "pass bytes as an int" in str(w[0].message)
    assert w[0].filename == __file__  # the warning points at the caller's line
    assert old == call(**others, **{parameter: value})


def test_a_replay_given_the_strings_of_old_equals_one_given_python_values():
    """Every string kind replay took (names, rates, think time, sizes) parses
    to the value a caller now passes: the same figures, one warning per string."""
    from fcctl.common.jsonio import dumps

    with pytest.warns(DeprecationWarning) as caught:
        old = fcctl.replay(
            TRACE,
            jobs=1,
            policies="memory-only,flat",
            concurrency="2,all",
            think_time="capped:60",
            host_memory_sweep=["1GiB"],
        )
    warned = sorted(str(w.message).split(":")[0] for w in caught)
    assert warned == ["concurrency", "host_memory_sweep", "policies", "think_time"]
    new = fcctl.replay(
        TRACE,
        jobs=1,
        policies=("memory-only", "flat"),
        concurrency=[2, "all"],
        think_time=fcctl.ThinkTime("capped", 60.0),
        host_memory_sweep=[1 << 30],
    )
    assert {r.concurrency for r in new.rates} == {2, 5}  # "all": the trace's 5 sessions
    assert dumps(old.rates) == dumps(new.rates)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"rates": "auto", "rate": -1.0}, "rate"),
        ({"rates": None, "concurrency": "all", "rate": 1.0}, "concurrency"),
    ],
)
def test_a_mode_is_no_deprecated_string(kwargs, named):
    """``"auto"`` and ``"all"`` name modes: no warning (an error from a later check shows the
    call got that far)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(InputError) as caught:
            fcctl.replay(TRACE, jobs=1, **kwargs)
    assert caught.value.parameter == named


def test_a_bad_string_of_old_is_still_named_by_its_parameter():
    with pytest.warns(DeprecationWarning), pytest.raises(InputError) as caught:
        fcctl.hardware(host_memory_bytes="lots")
    assert caught.value.parameter == "host_memory_bytes"
    assert str(caught.value).startswith("host_memory_bytes: ")


def test_the_node_flags_make_the_node_and_its_sweeps_once():
    from fcctl.commands.options import NodeFlags

    flags = NodeFlags(hardware="h100-8x", host_memory="256GiB,512GiB,auto", gpu_kv="40GiB")
    built = flags.build(sweeps=("host_memory",))
    assert built.hardware.host_memory_bytes == 256 << 30
    assert built.hardware.gpu_kv_bytes == 40 << 30
    assert built.host_memory_sweep == [512 << 30] and built.host_memory_auto
    assert built.hardware.sources["host_memory_bytes"] == "--host-memory"
    # a list where the command sweeps nothing is one error, named by the parameter
    with pytest.raises(InputError) as caught:
        NodeFlags(gpu_kv="40GiB,80GiB").build(sweeps=("host_memory",))
    assert caught.value.parameter == "gpu_kv_bytes"


@pytest.mark.parametrize("command", ["replay", "recommend-thresholds", "plan"])
def test_the_three_simulating_commands_declare_every_node_flag(command):
    from fcctl.commands.options import NODE_OPTIONS

    done = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    for name in NODE_OPTIONS:
        assert f"--{name.replace('_', '-')} " in done.output, name


def test_a_node_flag_error_shows_the_flag():
    done = CliRunner().invoke(app, ["plan", TRACE, "-o", "/nonexistent/p", "--ssd", "lots"])
    assert done.exit_code == 2, done.output
    assert "fcctl: error: --ssd: expected a number" in done.output, done.output


def test_recommend_refuses_a_spec_setting_its_sweep_does_not_run():
    """The sweep runs each cell at its own placement and the default router, cancel mode and
    think time: a spec holding another is refused, naming ``spec``, not silently dropped."""
    import dataclasses

    for change in ({"router": "sticky"}, {"cancel": "credit"}):
        with pytest.raises(InputError) as caught:
            fcctl.recommend_thresholds(
                TRACE, jobs=1, rates=[1.0], spec=dataclasses.replace(_spec(), **change)
            )
        assert caught.value.parameter == "spec"
        assert f"got {next(iter(change))}=" in str(caught.value)


def test_recommend_given_a_spec_equals_one_given_its_keywords():
    from fcctl.common.jsonio import dumps

    grids = {"short_reply_grid": [256, 1024], "agent_context_grid": [8192]}
    node = fcctl.hardware("h100-8x")
    spec = fcctl.RunSpec(geometry=fcctl.geometry("qwen2.5-7b"), hardware=node, seed=2)
    typed = fcctl.recommend_thresholds(TRACE, spec=spec, rates=[1.0], jobs=1, **grids)
    keywords = fcctl.recommend_thresholds(
        TRACE, model="qwen2.5-7b", hardware=node, seed=2, rates=[1.0], jobs=1, **grids
    )
    assert dumps(typed.recommendation) == dumps(keywords.recommendation)
    assert dumps(typed.grid) == dumps(keywords.grid)


def test_plan_given_spec_and_load_writes_what_its_keywords_write(tmp_path):
    """The same node, geometry and sweep as objects: the same replay and recommendation."""
    import json

    from fcctl.planning import PLAN_POLICIES

    node = fcctl.hardware(host_memory_bytes=64 << 30)
    spec = fcctl.RunSpec(geometry=fcctl.geometry("llama-3.1-8b"), hardware=node)
    load = fcctl.LoadPlan(policies=PLAN_POLICIES, auto_rates=True, operating_rate=2.0)
    fcctl.plan(TRACE, tmp_path / "typed", spec=spec, load=load, jobs=1)
    fcctl.plan(TRACE, tmp_path / "keywords", hardware=node, rate=2.0, jobs=1)
    for name in ("replay.json", "recommend.json"):
        typed, keywords = (
            json.loads((tmp_path / d / name).read_text()) for d in ("typed", "keywords")
        )
        for doc in (typed, keywords):
            doc.pop("provenance", None)
        assert typed == keywords, name
