"""fcctl's domain errors, above the storage core's :class:`~fcctl.layout.errors.InputError`.

Library code raises these and never exits; the CLI's one handler (:mod:`fcctl.errors`) maps
them to exit statuses: bad input (any :class:`InputError`, so the core's errors too) is one line
and status 2, a run that failed on the machine (:class:`RunFailed`) status 1.
"""

from __future__ import annotations

from fcctl.layout.errors import InputError


class FcctlInputError(InputError):
    """Bad input to fcctl: a trace, a flag, an output path. One line, exit status 2."""


class UnitError(FcctlInputError):
    """A size or count string could not be parsed."""


class RunFailed(RuntimeError):
    """The run itself failed (a disk filled, a child process died): exit status 1."""


__all__ = ["FcctlInputError", "InputError", "RunFailed", "UnitError"]
