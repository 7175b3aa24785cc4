"""How fcctl writes a number for a person: one module for the terminal summaries and the HTML page.

The page (``fcctl report``) and the terminal agree digit for digit because both call these
functions on the same JSON values; nothing here rounds by another rule than the one its
docstring states. Every function takes ``None`` (a quantity that could not be measured, JSON
``null``) and returns the missing marker: ``"n/a"`` by default, as analyze's tables write it;
iobench's table writes ``"-"`` (pass ``missing="-"``).

| function | rule | example |
|---|---|---|
| :func:`number` | whole numbers with separators; fractions below 100 to 1 place | ``84.2`` |
| :func:`count` | an integer with thousands separators | ``268,683`` |
| :func:`share` | a share of 1 as a percentage, 2 places | ``92.64%`` |
| :func:`size` | bytes, binary units, 3 significant digits (8 characters at most) | ``39.9 GiB`` |
| :func:`size_2dp` | bytes, binary units, 2 places (iobench's title, verdicts) | ``64.00 MiB`` |
| :func:`rate` | bytes per second as decimal GB/s, 2 places | ``0.74 GB/s`` |
| :func:`ratio` | a ratio, 2 places, with ``x`` | ``8.00x`` |
| :func:`fixed3` | 3 places (iobench's seconds and read amplification) | ``0.045`` |
| :func:`seconds` | a duration, 3 significant digits, ms below 1 s | ``45.4 ms``, ``1.23 s`` |
| :func:`span_s` | a trace's duration, 1 place with separators | ``5,418.0 s`` |
| :func:`per_s` | requests per second, 3 places | ``3.412 requests/s`` |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fcctl.common.units import format_bytes

NA = "n/a"


def number(v: float | None, missing: str = NA) -> str:
    """Whole numbers with thousands separators; fractions (interpolated percentiles) to three
    significant digits, so ``0.85`` stays ``0.85`` (one place would print ``0.8``)."""
    if v is None:
        return missing
    if abs(v) >= 100 or float(v).is_integer():
        return f"{round(v):,}"
    return _sig(v, 3)


def _sig(v: float, digits: int) -> str:
    """``v`` to ``digits`` significant digits in fixed notation (never ``1e-05``)."""
    if v == 0:
        return "0"
    places = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def count(v: int | None, missing: str = NA) -> str:
    """An integer count with thousands separators."""
    return missing if v is None else f"{int(v):,}"


def share(v: float | None, missing: str = NA) -> str:
    """A share of 1 as a percentage with 2 places: ``0.926367`` -> ``92.64%``."""
    return missing if v is None else f"{100.0 * v:.2f}%"


def size(v: float | None, missing: str = NA) -> str:
    """Binary units with 3 significant digits (e.g. 71.8 MiB, 118 MiB): at most 8 characters,
    so a five-value row of sizes fits an 80-column table."""
    if v is None:
        return missing
    x = float(v)
    if abs(x) < 1024:
        return f"{x:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        x /= 1024.0
        if abs(x) < 1023.5 or unit == "PiB":
            break
    if abs(x) >= 99.95:
        return f"{x:.0f} {unit}"
    return f"{x:.1f} {unit}" if abs(x) >= 9.995 else f"{x:.2f} {unit}"


def size_2dp(v: float | None, missing: str = NA) -> str:
    """Binary units with 2 places, :func:`fcctl.common.units.format_bytes`: ``64.00 MiB``."""
    return missing if v is None else format_bytes(v)


def rate(v: float | None, missing: str = NA) -> str:
    """Bytes per second as decimal GB/s with 2 places (iobench's restore and fio columns)."""
    return missing if v is None else f"{v / 1e9:.2f} GB/s"


def ratio(v: float | None, missing: str = NA) -> str:
    """A ratio with 2 places and ``x``: ``8.00x`` (iobench's comparison sentences)."""
    return missing if v is None else f"{v:.2f}x"


def fixed3(v: float | None, missing: str = NA) -> str:
    """Three places: iobench's per-session seconds and read amplification (``1.000``)."""
    return missing if v is None else f"{v:.3f}"


def sig3(v: float | None, missing: str = NA) -> str:
    """Three significant digits, no unit (the replay table's seconds columns): ``0.0638``."""
    return missing if v is None else f"{v:.3g}"


def fixed2(v: float | None, missing: str = NA) -> str:
    """Two places (the replay table's read amplification): ``1.00``."""
    return missing if v is None else f"{v:.2f}"


def seconds(v: float | None, missing: str = NA) -> str:
    """A duration with 3 significant digits, in us below 1 ms and ms below 1 s: ``8.42 us``,
    ``45.4 ms``, ``1.23 s``, ``123 s`` (a microsecond figure never reads ``0.00 ms``)."""
    if v is None:
        return missing
    if abs(v) < 1e-3:
        x, unit = v * 1e6, "us"
    else:
        x, unit = (v * 1000.0, "ms") if abs(v) < 1.0 else (float(v), "s")
    if x == 0:
        return "0 ms"
    if abs(x) >= 99.95:
        return f"{x:,.0f} {unit}"
    return f"{x:.1f} {unit}" if abs(x) >= 9.995 else f"{x:.2f} {unit}"


def span_s(v: float | None, missing: str = NA) -> str:
    """A trace's duration (analyze's ``duration`` row): ``5,418.0 s``."""
    return missing if v is None else f"{v:,.1f} s"


def per_s(v: float | None, missing: str = NA) -> str:
    """An arrival or offered rate: ``3.412 requests/s``."""
    return missing if v is None else f"{v:,.3f} requests/s"


#: What marks a figure estimated from a sample, in the terminal and on the HTML page alike.
SAMPLED_MARK = "~ "


def sampling_legend(
    rate: float, exact_below_blocks: int, mean_abs_pp: float | None, max_abs_pp: float | None
) -> str:
    """The line that says which figures :data:`SAMPLED_MARK` marks, the rate and the bound."""
    stated = (
        f"measured error at this rate {mean_abs_pp:.3g} pp mean / {max_abs_pp:.3g} pp max "
        "(hit share)"
        if mean_abs_pp is not None and max_abs_pp is not None
        else "error not measured at this rate"
    )
    return (
        f"{SAMPLED_MARK.strip()} marks SAMPLED figures: LRU stack distances and memory-tier "
        f"points above {exact_below_blocks:,} blocks (SHARDS, rate {rate:g}; {stated}); "
        "everything else exact"
    )


def concurrency_label(concurrency: int, ran: int) -> str:
    """``"16"``, or ``"16 (ran 4: only 4 sessions)"`` when fewer sessions than that exist."""
    if ran == concurrency:
        return str(concurrency)
    return f"{concurrency} (ran {ran}: only {ran} sessions)"


def iobench_comparison_sentences(comparisons: Mapping[str, Any]) -> list[str]:
    """iobench's headline comparisons in words, from the JSON form of ``comparisons``.

    The one wording for the terminal table and the HTML page; the numbers stay in the JSON.
    """
    lines = []
    cmds = comparisons.get("eviction_over_flat_read_commands")
    if cmds is not None:
        lines.append(f"eviction issues {ratio(cmds['ratio'], '-')} the flat layout's read commands")
    for r in comparisons.get("flat_over_eviction_restore_time") or []:
        lines.append(
            f"flat restores in {ratio(r['ratio'], '-')} the eviction layout's time "
            f"at concurrency {r['concurrency']}"
        )
    fio = comparisons.get("flat_over_fio_seq")
    if fio is not None:
        lines.append(
            f"flat restore at concurrency {fio['concurrency']} reads at "
            f"{ratio(fio['ratio'], '-')} fio's best sequential read"
        )
    return lines
