"""fcctl's version, from one source: the installed package's metadata (pyproject.toml)."""

from __future__ import annotations

from importlib import metadata


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None; never imports the package."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def fcctl_version() -> str:
    """fcctl's version; ``0+unknown`` when run from a tree that was never installed."""
    return package_version("fcctl") or "0+unknown"


__version__ = fcctl_version()
