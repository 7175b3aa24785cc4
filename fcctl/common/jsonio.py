"""The one JSON writer: every fcctl document goes through :func:`to_jsonable`.

Rules, the same for every command: a dataclass becomes an object of its fields in declaration
order (a field with ``metadata={"json": False}`` is left out; a dataclass may instead define
``to_json_dict()``); numpy scalars and arrays become Python numbers and lists; NaN and
infinities become ``null`` (a quantity that could not be measured); paths become strings. The
output is strict JSON (``allow_nan=False`` guards the rule).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import IO, Any

import numpy as np

from fcctl.common.errors import FcctlInputError
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


def from_jsonable(tp: Any, value: Any) -> Any:
    """``value`` (plain JSON values, as :func:`to_jsonable` wrote them) read back as ``tp``: a
    dataclass from an object of its fields (those left out of the document take their
    defaults; keys no field names go to an ``extra`` mapping field where the class has one, as
    :class:`~fcctl.common.provenance.Provenance` merges it in), tuples from arrays, mappings
    with their values read as the value type; numbers, strings and ``Any`` as they are. So
    ``dumps(from_jsonable(C, json.loads(dumps(c))))`` is ``dumps(c)``."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            if arg is not type(None) and _fits(arg, value):
                return from_jsonable(arg, value)
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_from(tp, value)
    args = typing.get_args(tp)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v) for v in value)
        if args:
            return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=True))
        return tuple(value)
    if origin in (list, collections.abc.Sequence):
        return [from_jsonable(args[0] if args else Any, v) for v in value]
    if origin in (dict, collections.abc.Mapping):
        return {k: from_jsonable(args[1] if args else Any, v) for k, v in value.items()}
    return value


_T = typing.TypeVar("_T")


def from_document(cls: type[_T], doc: Mapping[str, Any], *, schema_version: int, what: str) -> _T:
    """A command's ``--json`` document ``doc`` read back as its result class ``cls``
    (:func:`from_jsonable`); a document of another ``schema_version`` is refused, naming
    ``what`` it should have been."""
    got = doc.get("schema_version") if isinstance(doc, Mapping) else None
    if got != schema_version:
        raise FcctlInputError(f"{what}: schema_version must be {schema_version}; got {got!r}")
    result: _T = from_jsonable(cls, dict(doc))
    return result


def _fits(tp: Any, value: Any) -> bool:
    """Whether ``value`` can be a ``tp`` (choosing among a union's members)."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (tuple, list, collections.abc.Sequence):
        return isinstance(value, list)
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    # Resolved once per class: a replay document holds hundreds of the same few dataclasses.
    return typing.get_type_hints(cls)


def _dataclass_from(cls: type, doc: Any) -> Any:
    if not isinstance(doc, dict):
        raise FcctlInputError(f"{cls.__name__}: expected a JSON object; got {type(doc).__name__}")
    hints = _type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    kwargs = {
        f.name: from_jsonable(hints[f.name], doc[f.name])
        for f in fields
        if f.metadata.get("json", True) and f.name in doc
    }
    names = {f.name for f in fields}
    rest = {k: v for k, v in doc.items() if k not in names}
    if rest and "extra" in names:
        kwargs["extra"] = rest
    missing = [
        f.name
        for f in fields
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise FcctlInputError(f"{cls.__name__}: the document lacks {', '.join(missing)}")
    return cls(**kwargs)
