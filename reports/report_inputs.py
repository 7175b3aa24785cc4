"""The inputs of ``fcctl report``: which fcctl command wrote a document, read strictly.

An input is a ``--json`` document or an ``--out`` directory of ``analyze``, ``iobench``,
``replay`` or ``recommend-thresholds``. A document names its command by a ``command`` key when
it has one; otherwise by the keys only that command writes (:data:`KINDS`, checked in order):

| command | its document has | ``--out`` file (``fcctl plan``'s) |
|---|---|---|
| ``recommend-thresholds`` | ``recommendation`` and ``grid`` | ``recommend.json`` |
| ``replay`` | ``rates`` and ``ideal_hit_share``, no ``grid`` | ``replay.json`` |
| ``iobench`` | ``layouts`` and ``fio`` | ``iobench.json`` |
| ``analyze`` | ``verdict`` and ``reuse_distance`` | ``analysis.json`` (``analyze.json``) |

A plan's directory, or its ``plan.json``, stands for the step documents beside it. ``fcctl
synth``'s ``synth.json`` describes a trace and measures nothing: it is refused with a line
that says what to run on it.

Replay and recommend follow the key lists of issues #8 and #9 until those commands land.
Every value the page reads goes through :class:`Node`, so a document that lacks a key or holds
the wrong type is one line naming the file and the key path, never a traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fcctl.common.errors import FcctlInputError
from fcctl.common.inputfile import parse_json, read_regular
from fcctl.common.paths import display_path

from .monitors import is_recorded_trace, read_monitors

#: The newest schema_version of each command's document this fcctl reads.
#: replay 2: the operating point per policy, a decision per rate, TTFT over the window;
#: recommend-thresholds 2: recommendation.matters/spread/why (and replay's policy objects);
#: both 3: ``gpu_hit_share_served``/``ideal_hit_share_served`` per policy.
SUPPORTED_SCHEMA: dict[str, int] = {
    "analyze": 1,
    "iobench": 1,
    "replay": 3,
    "recommend-thresholds": 3,
}


class ReportInputError(FcctlInputError):
    """An input of ``fcctl report`` that is not a readable fcctl document."""


@dataclass(frozen=True)
class Kind:
    """How one command's document is recognised and where its ``--out`` directory keeps it."""

    command: str
    out_file: str
    has: tuple[str, ...]
    lacks: tuple[str, ...] = ()
    #: The name ``fcctl plan`` gives the same document in its directory, when another.
    plan_file: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return (self.out_file,) if self.plan_file is None else (self.out_file, self.plan_file)

    def matches(self, doc: dict[str, Any]) -> bool:
        return all(k in doc for k in self.has) and not any(k in doc for k in self.lacks)


# Most specific first: a recommend document also has replay's ``rates`` and ``ideal_hit_share``.
KINDS: tuple[Kind, ...] = (
    Kind("recommend-thresholds", "recommend.json", ("recommendation", "grid")),
    Kind("replay", "replay.json", ("rates", "ideal_hit_share"), lacks=("grid",)),
    Kind("iobench", "iobench.json", ("layouts", "fio")),
    Kind("analyze", "analysis.json", ("verdict", "reuse_distance"), plan_file="analyze.json"),
)
#: ``fcctl plan``'s own document, and the keys that tell it and synth.json apart.
PLAN_FILE = "plan.json"
_PLAN_KEYS = ("decision", "steps", "out_dir")
_SYNTH_KEYS = ("profile", "partition_rows", "parts")
COMMANDS = tuple(k.command for k in KINDS)
#: The input kind of a trace the FlatCake adapters recorded (not a command's document).
MONITORS = "monitors"
_ALIASES = {"recommend": "recommend-thresholds"}


class Node:
    """A value inside a document, with the file and key path for error messages."""

    __slots__ = ("path", "value", "where")

    def __init__(self, value: Any, where: str, path: str = "") -> None:
        self.value, self.where, self.path = value, where, path

    def _fail(self, rule: str) -> ReportInputError:
        return ReportInputError(
            f"{self.where}: {self.path or 'document'}: {rule}; got {_short(self.value)}"
        )

    def _child(self, key: str | int) -> str:
        return (
            f"{self.path}[{key}]"
            if isinstance(key, int)
            else (f"{self.path}.{key}" if self.path else key)
        )

    def __contains__(self, key: str) -> bool:
        return isinstance(self.value, dict) and key in self.value

    def __getitem__(self, key: str) -> Node:
        if not isinstance(self.value, dict):
            raise self._fail("expected an object")
        if key not in self.value:
            raise ReportInputError(f"{self.where}: {self._child(key)}: missing")
        return Node(self.value[key], self.where, self._child(key))

    def get(self, key: str) -> Node | None:
        """The child ``key``, or None when it is absent or null."""
        if not isinstance(self.value, dict) or self.value.get(key) is None:
            return None
        return self[key]

    def is_null(self) -> bool:
        return self.value is None

    def as_num(self) -> float | None:
        """A number (int or float), or None for JSON null."""
        v = self.value
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self._fail("expected a number or null")
        return v

    def need_num(self) -> float:
        v = self.as_num()
        if v is None:
            raise self._fail("expected a number")
        return v

    def as_int(self) -> int | None:
        v = self.as_num()
        if v is not None and not float(v).is_integer():
            raise self._fail("expected a whole number")
        return None if v is None else int(v)

    def as_str(self) -> str:
        if not isinstance(self.value, str):
            raise self._fail("expected a string")
        return self.value

    def as_opt_str(self) -> str | None:
        return None if self.value is None else self.as_str()

    def as_bool(self) -> bool:
        if not isinstance(self.value, bool):
            raise self._fail("expected true or false")
        return self.value

    def as_list(self) -> list[Node]:
        if not isinstance(self.value, list):
            raise self._fail("expected a list")
        return [Node(v, self.where, self._child(i)) for i, v in enumerate(self.value)]

    def as_items(self) -> list[tuple[str, Node]]:
        if not isinstance(self.value, dict):
            raise self._fail("expected an object")
        return [(k, Node(v, self.where, self._child(k))) for k, v in self.value.items()]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.as_list())


def _short(value: Any) -> str:
    text = json.dumps(value)[:60] if not isinstance(value, str) else repr(value[:60])
    return text


@dataclass(frozen=True)
class Input:
    """One recognised document: its command, the JSON file read, and the ``--out`` directory
    it sits in (None for a bare ``--json`` document: the Parquet tables are then absent)."""

    command: str
    file: Path
    shown: str  # the file as messages and the page name it
    doc: Node
    directory: Path | None

    @property
    def schema_version(self) -> int:
        v = self.doc["schema_version"].as_int()
        return 0 if v is None else v

    @property
    def fingerprint(self) -> str | None:
        """The trace's fingerprint the document states (analyzers/traces/fingerprint.py), or
        None when it states none (iobench, a bounded analysis, an older document). A run on
        sampled sessions (issue #19) is measured on the trace its ``sampling`` was drawn from:
        its ``source_fingerprint`` (None when it was not computed, as for a dataset); one on
        amplified sessions, the trace it amplified."""
        sampling = self.doc.get("sampling")
        if sampling is not None and sampling.get("method") is not None:
            source = sampling.get("source_fingerprint")
            return source.as_str() if source is not None else None
        trace = self.doc.get("trace")
        fp = trace.get("fingerprint") if trace is not None else None
        # A run on amplified sessions (--amplify) was measured on the trace its copies came
        # from: its fingerprint is that trace's plus "+amplified:Kx:seed=S" (docs/simulator.md
        # section 1.3), so a plan's analyze (the trace as is) and replay still reconcile.
        return fp.as_str().partition("+amplified:")[0] if fp is not None else None

    @property
    def trace_path(self) -> str | None:
        trace = self.doc.get("trace")
        path = trace.get("path") if trace is not None else None
        return path.as_str() if path is not None else None


def _identify(doc: dict[str, Any], where: str) -> str | None:
    if all(k in doc for k in _SYNTH_KEYS):
        raise ReportInputError(
            f"{where}: the description of a trace that fcctl synth wrote, not a measurement; "
            "report the output of fcctl analyze, replay or plan run on its directory"
        )
    named = doc.get("command")
    if isinstance(named, str):
        command = _ALIASES.get(named, named)
        if command not in COMMANDS:
            raise ReportInputError(
                f"{where}: command {named!r} is not one fcctl report reads ({', '.join(COMMANDS)})"
            )
        return command
    return next((k.command for k in KINDS if k.matches(doc)), None)


def read_document(file: Path, directory: Path | None = None) -> Input:
    """Parse ``file`` and identify its command; every failure is one :class:`ReportInputError`."""
    where = display_path(file)
    # A regular file under the cap: a FIFO or a device is refused without blocking on it.
    data = read_regular(file, "report input", error=ReportInputError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportInputError(f"{where}: not UTF-8 text, so not an fcctl JSON document") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        # Every fcctl document is one object: a file that does not end with its closing
        # brace was cut short (a copy interrupted, a disk filled), which says more than the
        # parser's complaint about whatever the cut happened to split.
        cut = "" if text.rstrip().endswith("}") else " (truncated: the file ends mid-document)"
        raise ReportInputError(
            f"{where}: not valid JSON{cut}: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except (RecursionError, ValueError):
        # Nested past the parser, or a 4300-digit integer: parse_json says so in one line
        # (it raises for the same text).
        parse_json(text, where, error=ReportInputError)
        raise
    if not isinstance(doc, dict):
        raise ReportInputError(
            f"{where}: not an fcctl document: expected a JSON object; got {type(doc).__name__}"
        )
    command = _identify(doc, where)
    if command is None:
        raise ReportInputError(
            f"{where}: not an output of fcctl {', '.join(COMMANDS)} (none of their keys: "
            + "; ".join(f"{k.command}: {'+'.join(k.has)}" for k in KINDS)
            + ")"
        )
    found = Input(command, file, where, Node(doc, where), directory)
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ReportInputError(
            f"{where}: schema_version: expected a whole number; got {_short(version)}"
        )
    newest = SUPPORTED_SCHEMA.get(command, 1)
    if version > newest:
        raise ReportInputError(
            f"{where}: schema_version {version} of fcctl {command} is newer than this fcctl "
            f"reads (up to {newest}); upgrade fcctl"
        )
    if version < 1:
        raise ReportInputError(f"{where}: schema_version must be >= 1; got {version}")
    return found


def read_input(path: Path) -> list[Input]:
    """The documents of one INPUT: a JSON file, or an ``--out`` directory's known JSON files."""
    where = display_path(path)
    if path.is_file() and path.name == PLAN_FILE and _is_plan(path):
        path = path.parent  # a plan's document: the step documents beside it
    if path.is_dir():
        known = [path / n for k in KINDS for n in k.files if (path / n).is_file()]
        if known:
            return [read_document(f, path) for f in known]
        if (path / "synth.json").is_file():
            read_document(path / "synth.json")  # refused, saying what it is
        # Any other JSON file at the top may still be one (a renamed document): recognised by
        # its keys; unrecognised ones are left alone, since a directory may hold anything.
        found = []
        for f in sorted(path.glob("*.json")):
            try:
                found.append(read_document(f, path))
            except ReportInputError:
                continue
        if not found:
            names = ", ".join(n for k in KINDS for n in k.files)
            raise ReportInputError(
                f"{where}: directory holds no fcctl document (looked for {names} and any "
                "*.json with a command's keys)"
            )
        return found
    if not path.exists():
        raise ReportInputError(f"{where}: no such file or directory")
    if path.is_file() and is_recorded_trace(path):
        # A trace the FlatCake adapters recorded: the Monitors section (reports/monitors.py).
        doc = {"schema_version": 1, "monitors": read_monitors(path)}
        return [Input(MONITORS, path, where, Node(doc, where), None)]
    return [read_document(path)]


def _is_plan(file: Path) -> bool:
    """Whether ``file`` parses as ``fcctl plan``'s own document (its keys)."""
    try:
        doc = json.loads(read_regular(file, "report input", error=ReportInputError))
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and all(k in doc for k in _PLAN_KEYS)


def check_same_trace(inputs: dict[str, Input], *, allow_mixed: bool) -> bool:
    """Refuse documents measured on different traces (their ``trace.fingerprint`` differ),
    naming both, unless ``allow_mixed``; True when they are mixed (then each section says its
    trace). Documents without a fingerprint are not compared."""
    known = [(i, i.fingerprint) for i in inputs.values() if i.fingerprint is not None]
    for other, fp in known[1:]:
        first, fp0 = known[0]
        if fp != fp0:
            if allow_mixed:
                return True
            raise ReportInputError(
                f"{other.shown} (fcctl {other.command}, trace {other.trace_path}) and "
                f"{first.shown} (fcctl {first.command}, trace {first.trace_path}) were measured "
                "on different traces (their trace fingerprints differ); one report decides for "
                "one trace (pass --allow-mixed to show them side by side anyway)"
            )
    return False


def read_inputs(paths: Sequence[Path]) -> dict[str, Input]:
    """Every input by command; two documents of one command are refused (one run each)."""
    by_command: dict[str, Input] = {}
    for p in paths:
        for found in read_input(Path(p)):
            earlier = by_command.get(found.command)
            if earlier is not None:
                raise ReportInputError(
                    f"{found.shown}: a second fcctl {found.command} document (the first: "
                    f"{earlier.shown}); a report shows one run of each command"
                )
            by_command[found.command] = found
    if not by_command:
        raise ReportInputError("no input given")
    return by_command
