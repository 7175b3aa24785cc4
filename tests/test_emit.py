"""``--emit``: the package's modules are the core's bytes, MANIFEST is right, the smoke test
passes with only numpy importable, and the simulator's flat policy decides every placement as
the emitted ``place()`` does on whole sample traces."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fcctl.analyzers.recommend.emit import (
    CORE_DIR,
    GENERATED,
    MANIFEST,
    PROJECT_FILES,
    core_data,
    core_modules,
    emit_package,
)
from fcctl.analyzers.replay import PRESETS, ReplayConfig, build_workload, simulate, with_values
from fcctl.analyzers.traces.readers import read_trace
from fcctl.layout.geometry import model_geometry, preset_names
from fcctl.layout.placement import Placement, PlacementRule, PlacementSignals
from tests.conftest import SAMPLES

SHORT, AGENT = 300, 20_000
SOURCE = {"trace": "hand-made", "rate_per_s": 1.0, "fcctl_version": "test"}
TOML = f"[thresholds]\nshort_reply_tokens = {SHORT}\nagent_context_tokens = {AGENT}\n"


@pytest.fixture(scope="module")
def emitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emit") / "pkg"
    emit_package(
        out,
        name="flatcake_store",
        short_reply_tokens=SHORT,
        agent_context_tokens=AGENT,
        source=SOURCE,
        toml_text=TOML,
    )
    return out


def test_modules_are_the_cores_bytes_and_manifest_is_right(emitted: Path) -> None:
    pkg = emitted / "flatcake_store"
    files = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file())
    copied = (*core_modules(), *core_data())
    assert core_data() and all(rel.startswith("presets/") for rel in core_data())
    assert files == sorted([*copied, *GENERATED, MANIFEST])
    # Everything the facade and the smoke test need, and the modules the issue names.
    for name in (
        "store.py",
        "smoke.py",
        "placement.py",
        "address.py",
        "geometry.py",
        "session_format.py",
        "session_file.py",
        "planner.py",
        "engines/posix.py",
        "engines/kvikio.py",
        "staging.py",
        "reclaim.py",
        "scheduler.py",
        "errors.py",
    ):
        assert name in copied
    for rel in copied:
        assert (pkg / rel).read_bytes() == (CORE_DIR / rel).read_bytes(), rel
    lines = (pkg / MANIFEST).read_text().splitlines()
    listed = {}
    for line in lines:
        digest, rel = line.split("  ", 1)
        listed[rel] = digest
    assert sorted(listed) == sorted([*copied, *GENERATED, *(f"../{f}" for f in PROJECT_FILES)])
    assert sorted(p.name for p in emitted.iterdir() if p.is_file()) == sorted(PROJECT_FILES)
    # The adapters ship in the package, and the core's __init__ never imports them.
    for rel in (
        "adapters/__init__.py",
        "adapters/lmcache.py",
        "adapters/sglang.py",
        "adapters/vllm.py",
        "adapters/common.py",
        "adapters/trace.py",
    ):
        assert rel in copied, rel
    assert "adapters" not in (pkg / "__init__.py").read_text()
    for rel, digest in listed.items():
        assert hashlib.sha256((pkg / rel).read_bytes()).hexdigest() == digest, rel


def _import_emitted(emitted: Path, module: str) -> Any:
    sys.path.insert(0, str(emitted))
    try:
        for name in [m for m in sys.modules if m.startswith("flatcake_store")]:
            del sys.modules[name]  # each test reads the package as it is now
        return importlib.import_module(f"flatcake_store.{module}")
    finally:
        sys.path.remove(str(emitted))


def test_the_emitted_package_resolves_every_model_preset(emitted: Path) -> None:
    geometry = _import_emitted(emitted, "geometry")
    assert geometry.preset_names() == preset_names()
    for name in preset_names():
        assert geometry.model_geometry(name).to_dict() == model_geometry(name).to_dict(), name


def test_generated_thresholds(
    emitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLATCAKE_THRESHOLDS", raising=False)
    thresholds = _import_emitted(emitted, "thresholds")
    assert thresholds.SHORT_REPLY_TOKENS == SHORT and thresholds.AGENT_CONTEXT_TOKENS == AGENT
    assert thresholds.SOURCE == SOURCE
    assert thresholds.RULE == thresholds.RECOMMENDED
    assert dataclasses.astuple(thresholds.RULE) == (SHORT, AGENT)
    # The thresholds are data: another file named by the environment wins at import.
    other = tmp_path / "other.toml"
    other.write_text("[thresholds]\nshort_reply_tokens = 7\nagent_context_tokens = 70\n")
    monkeypatch.setenv("FLATCAKE_THRESHOLDS", str(other))
    thresholds = _import_emitted(emitted, "thresholds")
    assert dataclasses.astuple(thresholds.RULE) == (7, 70)
    assert thresholds.RECOMMENDED.short_reply_tokens == SHORT
    readme = (emitted / "flatcake_store" / "README.md").read_text()
    for hook in (
        "OffloadingConnector",
        "spec_module_path",
        "kv_transfer_params",
        "HiCacheStorage",
        "extra_info",
        "StoragePluginInterface",
        "host-memory tier",
        "python -m flatcake_store.smoke",
    ):
        assert hook in readme, hook
    assert tomllib.loads((emitted / "flatcake_store" / "thresholds.toml").read_text())


_ISOLATED = """
import sys
for name in ("polars", "fcctl", "typer"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        sys.exit(f"{name} is importable; the isolation is broken")
import runpy
runpy.run_module("flatcake_store.smoke", run_name="__main__")
"""


def test_smoke_passes_with_only_numpy(emitted: Path, tmp_path: Path) -> None:
    deps = tmp_path / "deps"
    deps.mkdir()
    numpy_dir = Path(np.__file__).resolve().parent
    for name in ("numpy", "numpy.libs"):
        if (numpy_dir.parent / name).exists():
            (deps / name).symlink_to(numpy_dir.parent / name)
    script = (
        f"import sys; sys.path[:] = [{str(emitted)!r}, {str(deps)!r}] + "
        "[p for p in sys.path if 'site-packages' not in p and 'dist-packages' not in p]; "
        f"exec(compile({_ISOLATED!r}, 'isolated', 'exec'))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("smoke: ok (thresholds from thresholds.py: short reply 300")
    assert not list(tmp_path.glob("flatstore-smoke-*"))  # cleaned up


def test_core_smoke_runs_in_process() -> None:
    from fcctl.layout import smoke

    assert smoke.main() == 0


@dataclasses.dataclass(frozen=True)
class RecordingRule(PlacementRule):
    """The core's rule, recording every decision the simulator asks of it."""

    log: list[tuple[PlacementSignals, Placement]] = dataclasses.field(
        default_factory=list, compare=False
    )

    def place(self, s: PlacementSignals) -> Placement:
        decision = super().place(s)
        self.log.append((s, decision))
        return decision


@pytest.mark.parametrize(
    "sample", ["claude_code_sample.jsonl.gz", "mooncake_conversation_2k.jsonl"]
)
def test_simulator_decides_as_the_emitted_place(
    emitted: Path, sample: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLATCAKE_THRESHOLDS", raising=False)
    thresholds = _import_emitted(emitted, "thresholds")
    placement = sys.modules["flatcake_store.placement"]
    assert placement.__file__.startswith(str(emitted))
    geometry = model_geometry("llama-3.1-8b")
    # A node small enough that memory fills and every rule decides on these samples (the GPU
    # KV is a 1 GiB prefix cache; running requests get a pool of their own, so none is
    # rejected for size).
    hw = with_values(
        PRESETS["h200-8x"],
        {
            "gpus": 2,
            "gpu_kv_bytes": 2**30,
            "host_memory_bytes": 4 * 2**30,
            "gpu_running_kv_bytes": 2**50,
        },
        "test",
    )
    rule = RecordingRule(SHORT, AGENT)
    workload = build_workload(read_trace(SAMPLES / sample, None), geometry, 2)
    config = ReplayConfig(geometry=geometry, hardware=hw, placement=rule)
    simulate(workload, config, "flat", 1.0)
    assert len(rule.log) >= workload.sessions
    reasons = set()
    for signals, decided in rule.log:
        theirs = thresholds.RULE.place(placement.PlacementSignals(**dataclasses.asdict(signals)))
        assert (int(theirs.medium), str(theirs.reason)) == (
            int(decided.medium),
            str(decided.reason),
        )
        reasons.add(str(decided.reason))
    assert {"first_turn", "memory_full"} <= reasons or {"first_turn", "short_reply_chat"} <= reasons
    assert len(reasons) >= 3, reasons
