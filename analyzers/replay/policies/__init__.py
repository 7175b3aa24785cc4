"""The policy registry: name -> factory ``(Simulation) -> Policy``. A new policy is one module
that defines ``NAME`` and ``make(sim)``, listed in ``_MODULES``."""

from __future__ import annotations

import importlib

from ..engine import PolicyFactory

_MODULES = ("memory_only", "tiered", "flat", "flat_fcfs")

POLICIES: dict[str, PolicyFactory] = {}
for _m in _MODULES:
    _mod = importlib.import_module(f"{__name__}.{_m}")
    POLICIES[_mod.NAME] = _mod.make

DEFAULT_POLICIES: tuple[str, ...] = tuple(POLICIES)
