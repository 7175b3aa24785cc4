"""The one JSON writer: every fcctl document goes through :func:`to_jsonable`.

Rules, the same for every command: a dataclass becomes an object of its fields in declaration
order (a field with ``metadata={"json": False}`` is left out; a dataclass may instead define
``to_json_dict()``); numpy scalars and arrays become Python numbers and lists; NaN and
infinities become ``null`` (a quantity that could not be measured); paths become strings. The
output is strict JSON (``allow_nan=False`` guards the rule).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from collections.abc import Mapping
from pathlib import PurePath
from typing import IO, Any

import numpy as np

from fcctl.common.outdir import write_text_atomic


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (dict, list, str, int, float, bool, None)."""
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        custom = getattr(obj, "to_json_dict", None)
        if callable(custom):
            return to_jsonable(custom())
        return {
            f.name: to_jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.metadata.get("json", True)
        }
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """One JSON document (no trailing newline)."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False)


def write_json(obj: Any, file: IO[str]) -> None:
    """Write exactly one JSON document and a newline to ``file`` (stdout for ``--json``)."""
    file.write(dumps(obj) + "\n")
    file.flush()


def write_json_file(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``path`` atomically: a temporary sibling, then a rename; never half a document."""
    write_text_atomic(path, dumps(obj) + "\n")
