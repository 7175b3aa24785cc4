"""The placement thresholds as data: read a ``thresholds.toml``, or the file an environment
variable names, into a :class:`.placement.PlacementRule`.

``fcctl recommend-thresholds --emit`` writes ``thresholds.toml`` beside the package; its
``thresholds.py`` calls :func:`package_rule` at import, so an operator changes the thresholds by
editing the file, or points ``FLATCAKE_THRESHOLDS`` at another one, without touching code. The
file's table ``[thresholds]`` holds ``short_reply_tokens`` and ``agent_context_tokens``
(integers >= 0); other tables (``[source]``) are ignored here. An adapter's ``rule=`` argument
wins over both (:func:`resolve_rule`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import InputError
from .placement import PlacementRule

#: Names a thresholds file that replaces the package's own ``thresholds.toml``.
THRESHOLDS_ENV = "FLATCAKE_THRESHOLDS"
_FIELDS = ("short_reply_tokens", "agent_context_tokens")


def rule_from_mapping(data: Mapping[str, Any], where: str) -> PlacementRule:
    """The rule of a parsed thresholds document (its ``[thresholds]`` table)."""
    table = data.get("thresholds")
    if not isinstance(table, Mapping):
        raise InputError(
            f"{where}: needs a [thresholds] table; got keys {sorted(data)!r}",
            parameter="thresholds",
        )
    values = {}
    for name in _FIELDS:
        value = table.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InputError(
                f"{where}: [thresholds] {name} must be an integer >= 0 tokens; got {value!r}",
                parameter="thresholds",
            )
        values[name] = value
    return PlacementRule(**values)


def read_rule(path: str | os.PathLike[str]) -> PlacementRule:
    """The rule in the TOML file ``path``; a missing or malformed file is an ``InputError``."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise InputError(
            f"{p}: cannot read the thresholds file ({e.strerror})", parameter="thresholds"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: not valid TOML ({e})", parameter="thresholds") from None
    except RecursionError:  # arrays or tables nested past the parser's depth
        raise InputError(
            f"{p}: not usable TOML: nested deeper than the parser allows", parameter="thresholds"
        ) from None
    except ValueError as e:  # an integer past CPython's 4300-digit conversion limit
        raise InputError(f"{p}: not usable TOML: {e}", parameter="thresholds") from None
    return rule_from_mapping(data, str(p))


def package_rule(
    default_file: str | os.PathLike[str] | None, fallback: PlacementRule | None = None
) -> PlacementRule:
    """The rule a package uses: the file ``$FLATCAKE_THRESHOLDS`` names when set, else
    ``default_file`` (the package's ``thresholds.toml``) when it exists, else ``fallback``
    (else the core's defaults)."""
    override = os.environ.get(THRESHOLDS_ENV)
    if override:
        return read_rule(override)
    if default_file is not None and Path(default_file).is_file():
        return read_rule(default_file)
    return fallback or PlacementRule()


def resolve_rule(rule: PlacementRule | str | os.PathLike[str] | None = None) -> PlacementRule:
    """What an adapter places with: ``rule`` (a rule, or a thresholds file) when given; else
    ``$FLATCAKE_THRESHOLDS``; else the emitted package's ``thresholds.toml`` (when this core is
    an emitted package); else the core's defaults."""
    if isinstance(rule, PlacementRule):
        return rule
    if rule is not None:
        return read_rule(rule)
    here = Path(__file__).resolve().parent / "thresholds.toml"
    return package_rule(here)
