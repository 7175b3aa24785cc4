"""Domain errors.

Every error a user can cause with bad input derives from :class:`FcctlInputError`, a
``ValueError``. The CLI maps it to one line on stderr and exit status 2; library callers catch
``ValueError`` (or the specific subclass) as usual. Messages name the file, the place (line,
row, offset), the field, the rule and ``got {value!r}``.
"""

from __future__ import annotations


class FcctlInputError(ValueError):
    """Bad input from the user: a file, a flag, a size. Rendered as one line, exit status 2."""


class LayoutError(FcctlInputError):
    """A layout-level rule was broken (address field out of range, bad geometry, ...)."""


class UnitError(FcctlInputError):
    """A size or count string could not be parsed."""


class CorruptSessionFile(LayoutError):
    """A session file is truncated, was left by an interrupted writer, or fails a checksum."""


class VerificationError(LayoutError):
    """Bytes read back do not match what was written."""
