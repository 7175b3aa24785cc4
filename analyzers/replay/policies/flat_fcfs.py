"""``flat-fcfs``: ``flat`` with one first-come first-served queue (the paper's ablation)."""

from __future__ import annotations

from fcctl.analyzers.replay.engine import Simulation
from fcctl.analyzers.replay.policies.flat import Flat
from fcctl.layout.scheduler import FcfsScheduler

NAME = "flat-fcfs"


def make(sim: Simulation) -> Flat:
    policy = Flat(sim, FcfsScheduler)
    policy.name = NAME
    return policy
