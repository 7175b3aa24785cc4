"""The command-line strings the flags hold ("1,3", "512GiB", "capped:60", "4,16,all"), turned
into the Python values the API takes, at the edge: the library never parses them.

Each parser names the API parameter it makes in its errors (``parameter``), so that the CLI
shows the flag (fcctl/errors.py) and a caller of the API sees its own argument. No typer and
nothing heavy is imported here: the API's one deprecation shim (fcctl/api.py,
``_STRING_PARAMETERS``) reuses these parsers for the strings it still accepts for a release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from fcctl.common.errors import FcctlInputError, UnitError

if TYPE_CHECKING:
    from fcctl.analyzers.replay.load import ThinkTime

#: What ``rates="auto"`` asks for (a mode, not a list to parse): light load to saturation.
AUTO: Literal["auto"] = "auto"


def _named(parameter: str, parse: Callable[[], Any]) -> Any:
    """``parse()``, its unit error named by ``parameter`` (the units module knows only what)."""
    try:
        return parse()
    except UnitError as e:
        raise UnitError(str(e), parameter=parameter) from None


def size(text: str, parameter: str) -> int:
    """``"64GiB"``, ``"1.5TB"``, ``"4096"`` as bytes."""
    from fcctl.common.units import parse_size

    return int(_named(parameter, lambda: parse_size(text, what=parameter)))


def optional_size(text: str | None, parameter: str) -> int | None:
    return None if text is None else size(text, parameter)


def size_list(text: str, parameter: str) -> list[int]:
    """``"64GiB,256GiB"`` as bytes, each > 0."""
    from fcctl.common.units import parse_size_list

    return list(_named(parameter, lambda: parse_size_list(text, what=parameter)))


def int_list(text: str, parameter: str) -> list[int]:
    """``"1,4,16"`` as whole numbers >= 1."""
    from fcctl.common.units import parse_int_list

    return list(_named(parameter, lambda: parse_int_list(text, what=parameter)))


def numbers(text: str, parameter: str, example: str = "0.1,0.5") -> tuple[float, ...]:
    """``"0.1,0.5"`` as floats (the API checks their range)."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise FcctlInputError(
            f"{parameter}: expected comma-separated numbers like {example}; got {text!r}",
            parameter=parameter,
        ) from None


def rates(text: str, parameter: str = "rates") -> tuple[float, ...] | Literal["auto"]:
    """``"0.1,0.5"`` as floats, or the ``"auto"`` sweep."""
    if text.strip() == AUTO:
        return AUTO
    return numbers(text, parameter, "0.1,0.5 or auto")


def names(text: str, parameter: str = "policies") -> tuple[str, ...]:
    """``"memory-only,flat"`` as names (empty items dropped; the API checks the names)."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def grid(text: str, parameter: str) -> tuple[int, ...]:
    """``"256,512,1024"`` as a threshold grid (tokens)."""
    from fcctl.analyzers.recommend.grid import parse_grid

    return parse_grid(text, parameter)


def concurrency(text: str, parameter: str = "concurrency") -> tuple[int | Literal["all"], ...]:
    """``"4,16,all"`` as session counts, ``"all"`` kept as the mode it names (every session)."""
    from fcctl.analyzers.replay.load import parse_concurrency

    counts = parse_concurrency(text, parameter)
    return tuple("all" if c is None else c for c in counts)


def think_time(text: str, parameter: str = "think_time") -> ThinkTime:
    """``original``, ``none``, ``capped:S`` or ``scale:K`` as a ``ThinkTime``."""
    from fcctl.analyzers.replay.load import parse_think_time

    return parse_think_time(text, parameter)
