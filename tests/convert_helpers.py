"""A fixture the convert tests share: a 1 MiB tmpfs, for runs that fill the disk."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def tiny_fs(tmp_path: Path):
    """A 1 MiB tmpfs mounted for the test (needs root); skipped where mounting fails."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
