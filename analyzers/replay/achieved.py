"""A load point named by the load it really put on the node (issue #33, item 3).

An offered rate is a request, not a load: on a trace whose sessions pace themselves (Claude
Code: per-session clocks, each turn waiting for its think time) "1.6 req/s" offered was 0.078
req/s served. So every load point shown to a reader is named by what was **achieved**:

* **served** (:func:`served_rate`): the *leading* policy's central achieved rate, requests/s
  served in the steady-state window (arrivals 10-90 %, :mod:`.operating`); the whole run's rate
  when the window is empty. The leading policy is the point's decision's ``best``, else the
  candidate with the highest GPU hit share (:func:`.sweep.leading`): the layout whose figures
  the point's sentence is about.
* **reached** (:func:`reached`): an offered rate is reached when the leading policy was not
  ``saturated`` there (:mod:`.operating`: served at least ``1 - SATURATION_TOLERANCE`` of the
  part of the offered rate that ran, so requests rejected as too long for the model do not
  make a light load "not reached"); from numbers alone (:func:`is_reached`, a document without
  the flag) ``served >= (1 - SATURATION_TOLERANCE) x offered``. An offered rate not reached is
  shown as detail, marked ``not reached``, never as the load.
* a concurrency point is named by its sessions active and what they were served.
"""

from __future__ import annotations

from .operating import SATURATION_TOLERANCE
from .result import RateResult
from .sweep import leading


def served_rate(point: RateResult) -> float | None:
    """Requests/s the leading policy served at ``point`` (module docstring); None when it served
    none."""
    return point.policies[leading(point)].achieved_rate.served


def is_reached(offered: float | None, served: float | None) -> bool | None:
    """Whether ``offered`` requests/s were ``served`` within the saturation tolerance; None when
    nothing was offered (a concurrency point) or nothing served."""
    if offered is None or served is None:
        return None
    return served >= (1.0 - SATURATION_TOLERANCE) * offered


def reached(point: RateResult) -> bool | None:
    """Whether ``point``'s offered rate was reached (module docstring): its leading policy not
    ``saturated``; None at a concurrency point or where nothing was served."""
    if point.rate is None or served_rate(point) is None:
        return None
    return not point.policies[leading(point)].saturated


def load_words(
    offered: float | None,
    concurrency: int | None,
    served: float | None,
    was_reached: bool | None = None,
) -> str:
    """A load point in words, by its achieved load (module docstring): ``12.4 req/s served
    (offered 16)``, ``0.078 req/s served (offered 1.6 req/s: not reached)``, or ``44 sessions
    active, 0.078 req/s served``. The one wording of the terminal and the report.
    ``was_reached``: :func:`reached` where the point's flags are known; None: judged from the
    numbers (:func:`is_reached`)."""
    got = "no request served" if served is None else f"{served:.3g} req/s served"
    if offered is None:
        n = concurrency or 0
        return f"{n:,} session{'' if n == 1 else 's'} active, {got}"
    if was_reached is None:
        was_reached = is_reached(offered, served)
    if was_reached:
        return f"{got} (offered {offered:.3g})"
    return f"{got} (offered {offered:.3g} req/s: not reached)"


def load_label(point: RateResult) -> str:
    """:func:`load_words` of ``point``."""
    return load_words(point.rate, point.concurrency, served_rate(point), reached(point))


__all__ = ["is_reached", "load_label", "load_words", "reached", "served_rate"]
