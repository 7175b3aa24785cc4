"""Provenance: what produced a result (versions, host, command line, start and finish time).

Every fcctl JSON document carries one. Versions come from package metadata, so recording them
never imports torch or kvikio; CUDA is reported only from what is already loaded or from the
driver's own file, for the same reason.
"""

from __future__ import annotations

import datetime as dt
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fcctl.common.version import fcctl_version, package_version


def utc_now() -> str:
    """The current time as ``2026-12-01T08:58:23Z``."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first_version(*distributions: str) -> str | None:
    for d in distributions:
        v = package_version(d)
        if v is not None:
            return v
    return None


def _cuda_runtime() -> str | None:
    torch = sys.modules.get("torch")  # only if this process already loaded it
    version = getattr(getattr(torch, "version", None), "cuda", None)
    return str(version) if version else None


def _cuda_driver() -> str | None:
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    words = first.split()
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), None)


@dataclass(frozen=True)
class Provenance:
    """Versions, host facts and timing of one run; field names are the JSON keys."""

    fcctl_version: str
    python: str
    numpy: str | None
    polars: str | None
    numba: str | None
    torch: str | None
    kvikio: str | None
    cuda_runtime: str | None
    cuda_driver: str | None
    host: str
    platform: str
    argv: tuple[str, ...]
    started_utc: str
    finished_utc: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """The fields, with ``extra`` (a command's own facts, e.g. its fio runs) merged in."""
        doc: dict[str, Any] = {
            "fcctl_version": self.fcctl_version,
            "python": self.python,
            "numpy": self.numpy,
            "polars": self.polars,
            "numba": self.numba,
            "torch": self.torch,
            "kvikio": self.kvikio,
            "cuda_runtime": self.cuda_runtime,
            "cuda_driver": self.cuda_driver,
            "host": self.host,
            "platform": self.platform,
            "argv": list(self.argv),
            "started_utc": self.started_utc,
            "finished_utc": self.finished_utc,
        }
        for k, v in self.extra.items():
            if k in doc:
                raise ValueError(f"provenance extra {k!r} would overwrite a standard field")
            doc[k] = v
        return doc


def collect_provenance(
    started_utc: str,
    *,
    finished_utc: str | None = None,
    argv: list[str] | tuple[str, ...] | None = None,
    extra: dict[str, Any] | None = None,
) -> Provenance:
    """Provenance of a run that started at ``started_utc`` and finishes now (or as given)."""
    return Provenance(
        fcctl_version=fcctl_version(),
        python=platform.python_version(),
        numpy=package_version("numpy"),
        polars=package_version("polars"),
        numba=package_version("numba"),
        torch=package_version("torch"),
        kvikio=_first_version("kvikio", "kvikio-cu12", "kvikio-cu13"),
        cuda_runtime=_cuda_runtime(),
        cuda_driver=_cuda_driver(),
        host=platform.node(),
        platform=platform.platform(),
        argv=tuple(sys.argv if argv is None else argv),
        started_utc=started_utc,
        finished_utc=finished_utc or utc_now(),
        extra=dict(extra or {}),
    )
