"""Errors of the storage core.

Every error a caller can cause with bad input derives from :class:`InputError`, a plain
``ValueError``: library callers catch ``ValueError`` (or the specific subclass) as usual, and
fcctl's CLI maps it to one line on stderr and exit status 2. Messages name parameters (``tp``,
``kv_dtype``), not command-line flags: the CLI maps a parameter to its flag. They name the file,
the place (offset, turn, layer), the field, the rule and ``got {value!r}``.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the caller: a file, a parameter, a size.

    ``parameter`` names the argument at fault (``"kv_dtype"``, ``"tp"``) when there is one; the
    message then starts with ``"{parameter}: "``, which a CLI may replace by its flag.
    """

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class LayoutError(InputError):
    """A layout-level rule was broken (address field out of range, bad geometry, ...)."""


class CorruptSessionFile(LayoutError):
    """A session file is truncated, was left by an interrupted writer, or fails a checksum."""


class VerificationError(LayoutError):
    """Bytes read back do not match what was written."""


class SessionFileExists(LayoutError):
    """A session file was to be created where one exists; an existing file is never replaced."""


class StoreBusy(InputError):
    """A second store for a (node, rank) already held on a directory: one store at a time owns
    a (node, rank)'s session files, across processes and within one."""

    def __init__(self, directory: object, node: int, rank: int, holder: str) -> None:
        held_by = f" (held by {holder})" if holder else ""
        super().__init__(
            f"rank: node {node} rank {rank} already has an open store on {directory}"
            f"{held_by}; one store per (node, rank) and directory at a time: give each engine "
            f"process its own rank (or node), or close the other store; got rank={rank!r}",
            parameter="rank",
        )
        self.directory = directory
        self.node = node
        self.rank = rank
        self.holder = holder
