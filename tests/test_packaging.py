"""The built wheel installs exactly one top-level name, ``fcctl``, and every source module.

The repository keeps the folders the user asked for (analyzers/, iobench/, layout/, reports/)
at the top, but they install as fcctl.analyzers, fcctl.iobench, fcctl.layout, fcctl.reports.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "fcctl": "fcctl",
    "analyzers": "fcctl/analyzers",
    "iobench": "fcctl/iobench",
    "layout": "fcctl/layout",
    "reports": "fcctl/reports",
}


def test_wheel_holds_only_fcctl_and_every_module(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("fcctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"fcctl"}
    expected = {
        f"{dest}/{p.relative_to(REPO / folder).as_posix()}"
        for folder, dest in FOLDERS.items()
        for p in (REPO / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(expected - names)
    assert not missing, f"modules left out of the wheel (add their package to pyproject): {missing}"
    data = {
        f"{FOLDERS[folder]}/{p.relative_to(REPO / folder).as_posix()}"
        for folder, pattern in (
            ("layout", "presets/*.json"),
            ("analyzers", "replay/presets/*.toml"),
        )
        for p in (REPO / folder).glob(pattern)
    }
    assert len(data) >= 10, data  # the model and hardware presets
    missing = sorted(data - names)
    assert not missing, f"preset files left out of the wheel (pyproject package-data): {missing}"
