"""``flat-fcfs``: ``flat`` with one first-come first-served queue (the paper's ablation)."""

from __future__ import annotations

from fcctl.layout.scheduler import FcfsScheduler

from ..engine import Simulation
from .flat import Flat

NAME = "flat-fcfs"


def make(sim: Simulation) -> Flat:
    policy = Flat(sim, FcfsScheduler)
    policy.name = NAME
    return policy
