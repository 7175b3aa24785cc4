"""iobench's run failures: the machine failed the run, not the user's input (exit status 1)."""

from __future__ import annotations

from fcctl.common.errors import RunFailed


class BenchFailed(RunFailed):
    """The run itself failed (a disk error, a file changed under it): not the user's input.

    The CLI's error handler prints it as one line with exit status 1.
    """


class VerificationFailed(BenchFailed):
    """Bytes read back differ from what was written: ``mismatched_blocks`` pieces."""

    def __init__(self, message: str, *, mismatched_blocks: int) -> None:
        super().__init__(message)
        self.mismatched_blocks = mismatched_blocks
