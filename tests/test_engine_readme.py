"""The emitted package's README (issue #35 item 9): its usage example runs as written, on the
package just emitted; it names exactly the adapter classes the package ships, one session-id
mechanism per engine, and a table per engine of what the design delivers there. Needs no
engine (the classes are read from the adapters' source)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fcctl.analyzers.recommend.emit import emit_package

NAME = "flatcake_store"
ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "lmcache": "LMCache"}
DESIGN = (
    "write-time placement",
    "layer-ordered session files",
    "coalesced reads",
    "direct reads into the GPU",
    "two queues",
)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emit") / "pkg"
    emit_package(
        out,
        name=NAME,
        short_reply_tokens=300,
        agent_context_tokens=20000,
        source={"trace": "test"},
        toml_text="[thresholds]\nshort_reply_tokens = 300\nagent_context_tokens = 20000\n",
    )
    return out


def test_the_usage_example_runs_as_written(package: Path, tmp_path: Path) -> None:
    readme = (package / NAME / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(example)
    # A fresh interpreter that finds the emitted package and not fcctl's checkout.
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(package), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"from {NAME}.store import FlatStore" in example


def _classes(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name[0] == "_"}


def test_the_readme_names_exactly_the_shipped_classes(package: Path) -> None:
    readme = (package / NAME / "README.md").read_text()
    adapters = package / NAME / "adapters"
    named = set(re.findall(r"\b(FlatCake\w+|PluginStartupFailure)\b", readme))
    shipped = {c for e in ENGINES for c in _classes(adapters / f"{e}.py")}
    assert named == shipped
    assert "KVConnectorBase_V1" not in readme and "get_num_new_matched_tokens" not in readme
    assert "cache_salt" not in readme  # LMCache's session id is the request tag, one way


@pytest.mark.parametrize("engine", ENGINES)
def test_one_session_id_and_a_design_table_per_engine(package: Path, engine: str) -> None:
    readme = (package / NAME / "README.md").read_text()
    title = ENGINES[engine]
    section = readme.split(f"### {title} ")[1].split("\n### ")[0].split("\n## ")[0]
    assert f"{NAME}.adapters.{engine}" in section  # the configuration names the module
    assert len(re.findall(r"^Session id: ", section, flags=re.M)) == 1
    rows = re.findall(r"^\| ([^|]+?) \| (yes|partly|no)\b", section, flags=re.M)
    assert [r[0].split(" (")[0] for r in rows] == list(DESIGN)
    assert f"| part of the design | {title} |" in section
