"""Parse and format byte sizes and lists for flags. Binary (KiB, MiB, GiB, TiB) and decimal
(KB, MB, GB, TB) units."""

from __future__ import annotations

import re
from decimal import Decimal

from fcctl.common.errors import UnitError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "p": 1024**5,
    "pb": 1000**5,
    "pib": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, *, what: str = "size") -> int:
    """Parse ``"64GiB"``, ``"1.5TB"``, ``"4096"`` into bytes (an int).

    Bare letters (``k``, ``m``, ``g``, ``t``) are binary, like ``dd`` and fio.
    """
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"{what}: must be >= 0; got {text!r}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UnitError(f"{what}: expected a number with an optional unit like 64GiB; got {text!r}")
    number, unit = m.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise UnitError(
            f"{what}: unknown unit {unit!r} (use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB); "
            f"got {text!r}"
        )
    # Exact decimal arithmetic: 1.5TB is a whole byte count, 0.3KiB (307.2 bytes) is not.
    value = Decimal(number) * factor
    if value != value.to_integral_value():
        raise UnitError(f"{what}: must be a whole number of bytes; got {text!r} ({value} bytes)")
    return int(value)


def parse_size_list(text: str, *, what: str = "sizes") -> list[int]:
    """Parse a comma-separated list of sizes; each must be > 0."""
    items = [s.strip() for s in str(text).split(",")]
    if not any(items) or not all(items):
        raise UnitError(
            f"{what}: expected a comma-separated list like 64GiB,256GiB with no empty item; "
            f"got {text!r}"
        )
    out = []
    for item in items:
        v = parse_size(item, what=what)
        if v <= 0:
            raise UnitError(f"{what}: each size must be > 0; got {item!r}")
        out.append(v)
    return out


def parse_int_list(text: str, *, what: str = "values", minimum: int = 1) -> list[int]:
    """Parse ``"1,4,16"`` into ints, each >= ``minimum``."""
    out = []
    for item in (s.strip() for s in str(text).split(",")):
        if not item:
            raise UnitError(f"{what}: expected whole numbers like 1,4,16; got {text!r}")
        try:
            v = int(item)
        except ValueError:
            raise UnitError(f"{what}: expected whole numbers like 1,4,16; got {text!r}") from None
        if v < minimum:
            raise UnitError(f"{what}: each value must be >= {minimum}; got {v!r}")
        out.append(v)
    if not out:
        raise UnitError(f"{what}: expected whole numbers like 1,4,16; got {text!r}")
    return out


def format_bytes(n: float) -> str:
    """Human form with binary units: ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
