"""One decision per load point: which layout wins here, by how much, or that none does.

The rule is stated on the figures the replay prints, so another tool can recompute it from the
``--json`` document alone (docs/simulator.md, "The decision"):

* The candidates are the layouts a team can deploy: ``memory-only``, ``tiered`` and ``flat``.
  ``flat-fcfs`` is flat without its scheduler (an ablation of one mechanism, not a layout of its
  own) and never a candidate; policies that did not run are not candidates.
* Policy A *leads* policy B when A is not worse on either figure beyond the margins and better on
  at least one by more than its margin::

      not worse:  h_A >= h_B - m          and  t_A <= t_B * (1 + e)
      better:     h_A >  h_B + m          or   t_A * (1 + e) < t_B

  with ``h`` the GPU hit share in percentage points, ``t`` the mean TTFT in seconds, ``m`` =
  ``margin_pp`` and ``e`` = ``ttft_margin``. "Leads" is antisymmetric, so at most one candidate
  leads every other: that one is ``best``; when none does, ``best`` is ``none`` (a tie within the
  margins, or a trade-off: one layout has the hit share, another the TTFT).
* ``margin_pp`` is ``h`` of the first candidate minus ``h`` of the runner-up; ``ttft_ratio`` is the
  runner-up's mean TTFT over the first's (above 1: the first is faster); ``ssd_read_ratio`` is the
  first's SSD bytes read over the runner-up's (null when the runner-up read nothing). The first
  candidate is ``best`` when there is one, else the one with the highest hit share; the runner-up
  is, among the others, the one with the highest hit share (ties: the lower mean TTFT, then the
  candidates' order above).

The margins are tolerances of the decision, not parameters of the model: 1 pp of hit share and
10 % of mean TTFT by default (``--decision-margin-pp``, ``--decision-ttft-margin``). A run that
cannot reach its offered load (``saturated``) is still compared on its figures, and the ``why``
says which policies saturated, since their TTFT then measures a queue that grows with the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fcctl.common.errors import InputError

CANDIDATES: tuple[str, ...] = ("memory-only", "tiered", "flat")
"""Layouts the decision can pick, in tie-break order."""

NONE = "none"
DEFAULT_MARGIN_PP = 1.0
"""Hit-share points a layout must lead by (or TTFT margin) to be called better."""
DEFAULT_TTFT_MARGIN = 0.10
"""Relative mean-TTFT margin: 10 % faster counts as better, 10 % slower as worse."""


@dataclass(frozen=True)
class PolicyFigures:
    """What the decision reads of one policy at one load point."""

    gpu_hit_share: float  # fraction of the ideal's hits delivered to the GPU, in [0, 1]
    ttft_mean_s: float
    ssd_read_bytes: int
    saturated: bool = False


@dataclass(frozen=True)
class Decision:
    """The ``decision`` object of one load point (field names are the ``--json`` keys)."""

    best: str  # one of CANDIDATES, or "none"
    margin_pp: float | None
    ttft_ratio: float | None
    ssd_read_ratio: float | None
    why: str


def check_margins(margin_pp: float, ttft_margin: float) -> None:
    """Refuse margins that make the rule meaningless (negative, non-finite, or e >= 10)."""
    if not (math.isfinite(margin_pp) and 0.0 <= margin_pp <= 100.0):
        raise InputError(
            f"decision_margin_pp: must be finite, in 0..100 percentage points; got {margin_pp!r}",
            parameter="decision_margin_pp",
        )
    if not (math.isfinite(ttft_margin) and 0.0 <= ttft_margin < 10.0):
        raise InputError(
            f"decision_ttft_margin: must be finite, in [0, 10) (a fraction); got {ttft_margin!r}",
            parameter="decision_ttft_margin",
        )


def leads(a: PolicyFigures, b: PolicyFigures, margin_pp: float, ttft_margin: float) -> bool:
    """Whether ``a`` leads ``b`` under the module's rule."""
    ha, hb = 100.0 * a.gpu_hit_share, 100.0 * b.gpu_hit_share
    not_worse = ha >= hb - margin_pp and a.ttft_mean_s <= b.ttft_mean_s * (1.0 + ttft_margin)
    better = ha > hb + margin_pp or a.ttft_mean_s * (1.0 + ttft_margin) < b.ttft_mean_s
    return not_worse and better


def _ratio(num: float, den: float) -> float | None:
    return None if den <= 0.0 else num / den


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f} %"


def decide(
    policies: Mapping[str, PolicyFigures],
    *,
    margin_pp: float = DEFAULT_MARGIN_PP,
    ttft_margin: float = DEFAULT_TTFT_MARGIN,
) -> Decision:
    """The decision at one load point from the figures of the policies that ran."""
    check_margins(margin_pp, ttft_margin)
    names = [n for n in CANDIDATES if n in policies]
    if len(names) < 2:
        return Decision(
            NONE,
            None,
            None,
            None,
            "fewer than two of memory-only, tiered and flat ran at this load point: "
            "nothing to compare",
        )
    fig = {n: policies[n] for n in names}
    for n, f in fig.items():
        if not (math.isfinite(f.gpu_hit_share) and math.isfinite(f.ttft_mean_s)):
            raise ValueError(f"decision: {n}'s figures must be finite; got {f!r}")
    order = {n: i for i, n in enumerate(names)}

    def strength(n: str) -> tuple[float, float, int]:
        return (-fig[n].gpu_hit_share, fig[n].ttft_mean_s, order[n])

    best = next(
        (
            a
            for a in names
            if all(leads(fig[a], fig[b], margin_pp, ttft_margin) for b in names if b != a)
        ),
        None,
    )
    first = best if best is not None else min(names, key=strength)
    second = min((n for n in names if n != first), key=strength)
    f1, f2 = fig[first], fig[second]
    margin = 100.0 * (f1.gpu_hit_share - f2.gpu_hit_share)
    ttft_ratio = _ratio(f2.ttft_mean_s, f1.ttft_mean_s)
    ssd_ratio = _ratio(float(f1.ssd_read_bytes), float(f2.ssd_read_bytes))

    shares = ", ".join(f"{n} {_pct(fig[n].gpu_hit_share)}" for n in names)
    if best is not None:
        parts = []
        others = [n for n in names if n != best]
        if margin > margin_pp:
            parts.append(f"{margin:.1f} pp more of the ideal's hits in GPU memory than {second}")
        if ttft_ratio is not None and ttft_ratio > 1.0 + ttft_margin:
            parts.append(f"{ttft_ratio:.2f}x lower mean TTFT than {second}")
        if not parts:  # leads the others but not the runner-up by hit share: name the TTFT lead
            slowest = max(others, key=lambda n: fig[n].ttft_mean_s)
            parts.append(f"lower mean TTFT than {slowest}")
        why = f"{best} leads {', '.join(others)}: {' and '.join(parts)} ({shares})"
    else:
        h_lead = min(names, key=strength)
        t_lead = min(names, key=lambda n: (fig[n].ttft_mean_s, order[n]))
        trade_off = h_lead != t_lead and (
            100.0 * (fig[h_lead].gpu_hit_share - fig[t_lead].gpu_hit_share) > margin_pp
            and fig[t_lead].ttft_mean_s * (1.0 + ttft_margin) < fig[h_lead].ttft_mean_s
        )
        if trade_off:
            why = (
                f"a trade-off: {h_lead} has the higher GPU hit share, {t_lead} the lower mean "
                f"TTFT ({shares})"
            )
        else:
            # Name the layouts that tie at the top: those no other candidate leads.
            top = [
                a
                for a in names
                if not any(leads(fig[b], fig[a], margin_pp, ttft_margin) for b in names if b != a)
            ]
            trail = [n for n in names if n not in top]
            within = f"{margin_pp:g} pp of GPU hit share or {100.0 * ttft_margin:g} % of mean TTFT"
            if trail:
                why = (
                    f"{' and '.join(top)} tie (none leads another by more than {within}); "
                    f"{', '.join(trail)} trail{'s' if len(trail) == 1 else ''}"
                )
            else:
                why = f"no layout leads the others by more than {within}"
            why += f" ({shares})"
    sat = [n for n in names if fig[n].saturated]
    if sat:
        why += f"; saturated (cannot reach the offered load): {', '.join(sat)}"
    return Decision(best or NONE, margin, ttft_ratio, ssd_ratio, why)


def divergence_rate(points: Sequence[tuple[float, Decision]]) -> float | None:
    """The lowest load (req/s) whose decision names a layout, or None when none does."""
    named = [rate for rate, d in points if d.best != NONE]
    return min(named) if named else None
