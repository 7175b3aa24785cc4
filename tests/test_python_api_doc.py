"""docs/python-api.md's worked example runs as written (every ```python block, in order, in one
namespace, from the repository root), and ``import fcctl`` stays light."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "python-api.md"


ARCHITECTURE = REPO / "docs" / "architecture.md"


def _blocks(doc: Path = DOC) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)


def test_the_page_has_the_example() -> None:
    blocks = _blocks()
    assert len(blocks) >= 5
    joined = "\n".join(blocks)
    for call in (
        "fcctl.read_trace",
        "fcctl.analyze",
        "fcctl.replay",
        "fcctl.recommend_thresholds",
        "fcctl.plan",
        "fcctl.RunSpec(",
        "fcctl.LoadPlan(",
        "spec=spec, load=load",
        "recommend_thresholds(trace, spec=spec",
        "spec=spec, load=at_2",
        "ReplayResult.from_json",
        "RecommendResult.from_json",
    ):
        assert call in joined


def test_the_worked_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """... passing Python values only: a deprecated string (a warning of fcctl's shim) fails."""
    monkeypatch.chdir(REPO)
    namespace: dict[str, object] = {"__name__": "python_api_doc"}
    with warnings.catch_warnings():
        warnings.filterwarnings("error", r"\w+: a string is deprecated", DeprecationWarning)
        for i, block in enumerate(_blocks()):
            try:
                exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), namespace)
            except Exception as e:  # pragma: no cover - the failure message is the point
                pytest.fail(f"docs/python-api.md block {i + 1} failed: {type(e).__name__}: {e}")


def test_the_deprecated_section_names_what_the_shim_warns_of() -> None:
    """The page's "Deprecated" section shows the warning the shim really gives."""
    import fcctl

    text = DOC.read_text()
    assert "## Deprecated" in text
    with pytest.warns(DeprecationWarning) as caught:
        fcctl.hardware(host_memory_bytes="256GiB")
    shown = " ".join(text.split("```text\n", 1)[1].split("```", 1)[0].split())
    assert shown == str(caught[0].message)


def test_the_architecture_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/architecture.md's RunSpec/LoadPlan block: a replay with the objects, read back."""
    monkeypatch.chdir(REPO)
    blocks = _blocks(ARCHITECTURE)
    assert any("spec=spec, load=load" in b for b in blocks)
    for i, block in enumerate(blocks):
        namespace: dict[str, object] = {"__name__": "architecture_doc"}
        exec(compile(block, f"{ARCHITECTURE.name} block {i + 1}", "exec"), namespace)


def test_import_fcctl_is_light_and_lazy() -> None:
    code = (
        "import sys, fcctl\n"
        "heavy = {'numpy', 'polars', 'numba', 'pyarrow'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert callable(fcctl.analyze) and callable(fcctl.plan)\n"
        "assert {'RunSpec', 'LoadPlan'} <= set(fcctl.__all__)\n"
        "assert not {'numpy', 'polars'} & set(sys.modules)  # the names load on first use\n"
        "assert fcctl.RunSpec.__name__ == 'RunSpec' and fcctl.LoadPlan.__name__ == 'LoadPlan'\n"
        "assert set(fcctl.__all__) >= {'analyze', 'replay', 'recommend_thresholds', 'iobench',"
        " 'read_trace', 'plan'}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
