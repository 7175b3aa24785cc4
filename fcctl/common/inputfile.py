"""Small input files read safely: a regular file, under a size cap, parsed without a traceback.

Every file fcctl reads whole (a hardware description, an iobench profile, a report's JSON
documents, metadata strings) goes through :func:`read_regular`: FIFOs, devices and sockets are
refused before anything blocks on them (``/dev/zero`` never ends, a FIFO never answers), and a
file larger than its cap is refused before it is read into memory. :func:`parse_json` turns
every way a JSON text can fail (syntax, nesting deeper than the parser's recursion, integers
longer than Python's 4300-digit conversion limit) into one :class:`FcctlInputError` line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from fcctl.common.errors import FcctlInputError
from fcctl.common.paths import display_path

# Far above any fcctl document (a replay --json of a long sweep is a few MB), far below memory.
DEFAULT_JSON_CAP_BYTES = 256 * 2**20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words ("a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(
    path: str | os.PathLike[str],
    what: str,
    *,
    cap_bytes: int = DEFAULT_JSON_CAP_BYTES,
    error: type[FcctlInputError] = FcctlInputError,
) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``cap_bytes``.

    ``what`` names the file's role in messages ("hardware file", "--io-profile"). The file is
    opened with ``O_NONBLOCK`` so a FIFO swapped in after a check cannot hang the open, its type
    is checked on the open descriptor, and at most ``cap_bytes + 1`` bytes are ever read (a file
    that grows while being read is still bounded).
    """
    p = Path(path)
    shown = display_path(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{shown}: {what}: file not found") from None
    except OSError as e:
        raise error(f"{shown}: {what}: cannot open it ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{shown}: {what}: is {file_kind(st.st_mode)}, expected a regular file")
        if st.st_size > cap_bytes:
            raise error(
                f"{shown}: {what}: {st.st_size} bytes, over the {cap_bytes} byte limit "
                "for this kind of file"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = cap_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise error(f"{shown}: {what}: grew past the {cap_bytes} byte limit while read")
        return b"".join(chunks)
    except OSError as e:
        raise error(f"{shown}: {what}: cannot read it ({e.strerror})") from None
    finally:
        os.close(fd)


def read_regular_text(
    path: str | os.PathLike[str],
    what: str,
    *,
    cap_bytes: int = DEFAULT_JSON_CAP_BYTES,
    error: type[FcctlInputError] = FcctlInputError,
) -> str:
    """:func:`read_regular`, decoded as UTF-8 (an undecodable file is one error line)."""
    data = read_regular(path, what, cap_bytes=cap_bytes, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"{display_path(path)}: {what}: not UTF-8 text (byte {e.start}: {data[e.start]:#04x})"
        ) from None


def parse_json(
    text: str | bytes, where: str, *, error: type[FcctlInputError] = FcctlInputError
) -> Any:
    """``json.loads(text)``; every failure is one ``error`` line starting with ``where``.

    Beyond syntax errors: nesting deeper than the interpreter's recursion limit raises
    RecursionError inside json, and an integer literal longer than 4300 digits raises
    ValueError (CPython's int conversion limit); both are refusals of the input, not crashes.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(
            f"{where}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except RecursionError:
        raise error(f"{where}: not usable JSON: nested deeper than the parser allows") from None
    except UnicodeDecodeError:
        raise error(f"{where}: not valid JSON: not UTF-8 text") from None
    except ValueError as e:  # the integer-string conversion limit
        raise error(f"{where}: not usable JSON: {e}") from None


__all__ = [
    "DEFAULT_JSON_CAP_BYTES",
    "file_kind",
    "parse_json",
    "read_regular",
    "read_regular_text",
]
