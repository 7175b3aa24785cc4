"""The emitted package installs for real (issue #17, item 1): ``pip install DIR`` and ``pip wheel
DIR`` in a fresh virtual environment without system site-packages and without an index (numpy
and setuptools come from a local wheel cache, filled once), the installed MANIFEST matches byte
for byte, ``python -m NAME.smoke`` passes after the install, and the thresholds are data that
``FLATCAKE_THRESHOLDS`` overrides at import.

The wheel cache is ``$FCCTL_WHEEL_CACHE`` (default ``~/.cache/fcctl/test-wheels``); when it is
empty the test fills it with ``pip download`` (PyPI, or whatever index pip is configured with)
and skips, saying so, when that is impossible (no network)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fcctl.analyzers.recommend.emit import MANIFEST, emit_package, package_version
from fcctl.common.version import __version__

SHORT, AGENT = 123, 4567
NAME = "fc_store_test"
SETUPTOOLS = "setuptools>=70.1"  # builds wheels itself (no separate 'wheel' package)


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel_cache() -> Path:
    cache = Path(os.environ.get("FCCTL_WHEEL_CACHE", Path.home() / ".cache/fcctl/test-wheels"))
    cache.mkdir(parents=True, exist_ok=True)
    need = {"numpy": f"numpy=={np.__version__}", "setuptools": SETUPTOOLS}
    for name, spec in need.items():
        if any(cache.glob(f"{name}-*.whl")):
            continue
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-d",
                str(cache),
                spec,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot fill the wheel cache {cache} with {spec}: {proc.stderr[-300:]}")
    return cache


@pytest.fixture(scope="module")
def emitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emit-install") / "dir"
    toml = f"[thresholds]\nshort_reply_tokens = {SHORT}\nagent_context_tokens = {AGENT}\n"
    emit_package(
        out,
        name=NAME,
        short_reply_tokens=SHORT,
        agent_context_tokens=AGENT,
        source={"trace": "test"},
        toml_text=toml,
    )
    return out


def test_pyproject(emitted: Path) -> None:
    project = tomllib.loads((emitted / "pyproject.toml").read_text())["project"]
    assert project["name"] == NAME
    version = project["version"]
    assert version == package_version(SHORT, AGENT)
    digest = hashlib.sha256(f"{SHORT},{AGENT}".encode()).hexdigest()[:8]
    assert version == f"{__version__}+t{digest}"
    assert package_version(SHORT + 1, AGENT) != version
    assert project["dependencies"] == ["numpy>=1.26"]
    extras = project["optional-dependencies"]
    assert extras["lmcache"] == ["lmcache==0.5.6"] and {"sglang", "vllm", "trace"} <= set(extras)


def test_pip_install_and_wheel_in_a_clean_venv(
    emitted: Path, wheel_cache: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)  # no system site-packages
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    offline = ["--no-index", "--find-links", str(wheel_cache)]
    _run(python, "-m", "pip", "install", "-q", *offline, emitted, cwd=tmp_path, env=env)
    # Nothing of fcctl is importable there: the package stands alone.
    probe = "import importlib.util as u; print(u.find_spec('fcctl'), u.find_spec('polars'))"
    assert _run(python, "-c", probe, cwd=tmp_path, env=env).split() == ["None", "None"]
    smoke = _run(python, "-m", f"{NAME}.smoke", cwd=tmp_path, env=env)
    assert smoke.startswith(f"smoke: ok (thresholds from thresholds.py: short reply {SHORT}")
    # The installed files are the emitted ones, byte for byte.
    where = _run(
        python,
        "-c",
        f"import {NAME}, os; print(os.path.dirname({NAME}.__file__))",
        cwd=tmp_path,
        env=env,
    ).strip()
    installed = Path(where)
    for line in (installed / MANIFEST).read_text().splitlines():
        digest, rel = line.split("  ", 1)
        source = installed / rel if not rel.startswith("../") else emitted / rel[3:]
        assert hashlib.sha256(source.read_bytes()).hexdigest() == digest, rel
    assert (installed / "thresholds.toml").is_file() and (installed / "adapters").is_dir()
    # Thresholds are data: the environment names another file, read at import.
    other = tmp_path / "t.toml"
    other.write_text("[thresholds]\nshort_reply_tokens = 5\nagent_context_tokens = 50\n")
    read = f"from {NAME}.thresholds import RULE; print(RULE.short_reply_tokens)"
    assert (
        _run(
            python, "-c", read, cwd=tmp_path, env={**env, "FLATCAKE_THRESHOLDS": str(other)}
        ).strip()
        == "5"
    )
    # pip wheel builds the same package.
    wheels = tmp_path / "wheels"
    _run(
        python,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        *offline,
        "-w",
        wheels,
        emitted,
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = wheels.glob(f"{NAME}-*.whl")
    assert wheel.name.startswith(f"{NAME}-{package_version(SHORT, AGENT)}-")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {f"{NAME}/store.py", f"{NAME}/adapters/vllm.py", f"{NAME}/MANIFEST"} <= names
