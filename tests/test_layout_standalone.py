"""The storage core ships as it is: a copy of ``layout/`` under another name imports and works
with nothing but numpy, and nothing in it imports fcctl."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

LAYOUT = Path(__file__).resolve().parents[1] / "layout"

_ROUND_TRIP = textwrap.dedent(
    """
    import sys
    for name in ("polars", "fcctl"):
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            sys.exit(f"{name} is importable; the isolation is broken")

    import numpy as np
    import flatcake_copy
    from flatcake_copy import KvGeometry, SessionFile

    path = sys.argv[1]
    geometry = KvGeometry("copy-test", layers=3, kv_heads=2, head_dim=16)
    turns = []
    with SessionFile.create(path, geometry, block_tokens=4, session_id="s0") as s:
        for i, tokens in enumerate((10, 7)):
            rng = np.random.default_rng(i)
            data = rng.integers(0, 256, (3, s.layer_bytes_for(tokens)), dtype=np.uint8)
            s.append_turn(tokens, data)
            turns.append(data)
    with SessionFile.open(path) as s:
        assert len(s.turns) == 2, s.turns
        for t in range(2):
            for layer in range(3):
                assert s.read_layer(t, layer) == turns[t][layer].tobytes(), (t, layer)
    heavy = sorted(m for m in ("torch", "kvikio", "cupy", "polars") if m in sys.modules)
    assert not heavy, heavy
    print("ok", flatcake_copy.__name__)
    """
)


def test_a_renamed_copy_round_trips_a_session_with_only_numpy(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    skip_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(LAYOUT, packages / "flatcake_copy", ignore=skip_caches)
    # Only numpy is importable: a directory holding links to the installed numpy (and the
    # shared libraries its wheel keeps beside it).
    deps = tmp_path / "deps"
    deps.mkdir()
    numpy_dir = Path(np.__file__).resolve().parent
    for name in ("numpy", "numpy.libs"):
        source = numpy_dir.parent / name
        if source.exists():
            (deps / name).symlink_to(source)
    script = (
        f"import sys; sys.path[:] = [{str(packages)!r}, {str(deps)!r}] + "
        "[p for p in sys.path if 'site-packages' not in p and 'dist-packages' not in p]; "
        f"exec(compile({_ROUND_TRIP!r}, 'round_trip', 'exec'))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(tmp_path / "s.fc")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok flatcake_copy"


def test_no_module_in_layout_imports_fcctl_absolutely() -> None:
    offenders = []
    for path in sorted(LAYOUT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(LAYOUT)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] in ("fcctl", "layout")
            ]
    assert not offenders, offenders
