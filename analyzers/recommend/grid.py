"""The threshold grid: the default one derived from the trace, and user-given grids checked.

**Default grid rule** (docs/recommend.md): each threshold's candidates come from the trace's own
distribution of the quantity that threshold is compared with, over the requests the two
thresholds decide (later turns of a session: a first turn goes to SSD whatever they are):

* short-reply threshold: the previous reply's output tokens;
* agent-context threshold: the request's context (prompt) tokens.

Candidates are powers of two taken at the 10th, 25th, 50th, 75th and 90th percentiles: the
10th rounded *down*, the 90th rounded *up*, the three middle ones to the nearest power of two
in log scale; repeats are dropped and the rest sorted. So the grid spans at least the middle
80% of the trace's values (the lowest candidate is at or below the 10th percentile, the highest
at or above the 90th) with at most five values per threshold, each within a factor of two
(in log scale, the square root of two for the middle three) of the percentile it stands for.
A value below one token rounds to 0. A trace with no later turn (every session is one
request) gets the placement's defaults: no threshold can change anything there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fcctl.common.errors import FcctlInputError
from fcctl.layout.placement import DEFAULT_AGENT_CONTEXT_TOKENS, DEFAULT_SHORT_REPLY_TOKENS

GRID_PERCENTILES: tuple[float, ...] = (10.0, 25.0, 50.0, 75.0, 90.0)


def _pow2(x: float, how: str) -> int:
    if x < 1:
        return 1 if how == "up" and x > 0 else 0
    e = math.log2(x)
    k = math.floor(e) if how == "down" else math.ceil(e) if how == "up" else round(e)
    return 2 ** int(k)


def grid_from_values(values: np.ndarray, default: int) -> tuple[int, ...]:
    """The default candidates (module docstring) from ``values`` (tokens); ``(default,)``
    when there are none."""
    if values.shape[0] == 0:
        return (default,)
    q = np.percentile(values.astype(np.float64), GRID_PERCENTILES)
    hows = ("down", "nearest", "nearest", "nearest", "up")
    return tuple(sorted({_pow2(float(v), h) for v, h in zip(q, hows, strict=True)}))


def decided_values(
    input_tokens: np.ndarray, output_tokens: np.ndarray, prev_request: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(previous reply tokens, context tokens) of every later turn (``prev_request >= 0``)."""
    later = prev_request >= 0
    return output_tokens[prev_request[later]], input_tokens[later]


def default_grid(
    input_tokens: np.ndarray, output_tokens: np.ndarray, prev_request: np.ndarray
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(short-reply candidates, agent-context candidates) by the module docstring's rule."""
    replies, contexts = decided_values(input_tokens, output_tokens, prev_request)
    return (
        grid_from_values(replies, DEFAULT_SHORT_REPLY_TOKENS),
        grid_from_values(contexts, DEFAULT_AGENT_CONTEXT_TOKENS),
    )


def check_grid(values: Sequence[int], parameter: str) -> tuple[int, ...]:
    """A user's grid: integers >= 0 tokens, at least one; repeats dropped, sorted."""
    out = set()
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise FcctlInputError(
                f"{parameter}: each threshold must be an integer >= 0 tokens; got {v!r}",
                parameter=parameter,
            )
        out.add(v)
    if not out:
        raise FcctlInputError(f"{parameter}: give at least one threshold", parameter=parameter)
    return tuple(sorted(out))


def parse_grid(text: str, parameter: str) -> tuple[int, ...]:
    """``"256,512,1024"`` as a grid (``parameter`` names the argument in errors)."""
    items = [s.strip() for s in str(text).split(",")]
    values = []
    for item in items:
        try:
            values.append(int(item))
        except ValueError:
            raise FcctlInputError(
                f"{parameter}: expected comma-separated whole token counts like 256,512,1024; "
                f"got {text!r}",
                parameter=parameter,
            ) from None
    return check_grid(values, parameter)
