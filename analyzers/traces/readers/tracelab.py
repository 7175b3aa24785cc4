"""TraceLab rounds (uw-syfi/TraceLab), JSON Lines: one LLM round of a coding-agent session a line.

Source: https://github.com/uw-syfi/TraceLab, ``example_sessions/sanitized/round_trace.jsonl``,
the normalised "round" format of the TraceLab dataset (357,161 Claude Code and Codex rounds of
43 developers, CC BY 4.0, released as ``syfi_coding_trace.jsonl.gz``); a 19-round copy is in
``../shared/traces/tracelab_sample/``. Fields read (others are ignored):

* ``session_id``: non-empty string; ``round_index``: integer >= 0, unique within the session;
* ``input_tokens_total``, ``prefix_tokens``, ``newly_append_tokens``, ``output_tokens``:
  integers >= 0. ``prefix_tokens`` is the part of the prompt the provider served from its
  prompt cache, ``newly_append_tokens`` the rest, so ``prefix_tokens + newly_append_tokens``
  must equal ``input_tokens_total`` (anything else is an error naming the line);
* ``timing_events``: a non-empty list of objects, each with a string ``event_type`` and an
  ISO 8601 ``timestamp`` (``2026-06-01T05:40:20.151Z``; one without an offset is taken as UTC);
* ``provider``, ``model``: optional strings, only counted in the notes.

Mapping (``order == "time"``: the timestamps are one wall clock shared by all sessions):

* ``timestamp_s``: a round arrives when its prompt is complete, at the **latest** timestamp of
  its input events (``event_type`` ``user_message`` or ``tool_result``: a round that waits on
  two tools is sent after the second returns); a round without input events arrives at its
  earliest event. Seconds since the earliest arrival in the file.
* ``session_id`` as given; ``turn`` = ``round_index``; ``parent_request`` = the session's round
  with the next lower ``round_index`` (null for the session's first round).
* **Blocks are synthesised** (the trace has no block hashes), ``BLOCK_SIZE_TOKENS`` = 64 like
  the Claude Code reader, full blocks only (``floor(input_tokens_total / 64)`` per round). A
  session's rounds are taken in ``round_index`` order. Its *running context* is the previous
  round's prompt followed by that round's reply (``input_tokens_total + output_tokens``
  tokens, empty before the first round), whose ``floor(... / 64)`` blocks form the *chain*:
  the previous prompt's blocks, then new ids for the blocks its reply completed (a serving
  engine holds the reply's KV too, and providers report cached prefixes that run into the
  previous reply). A round reuses the first ``min(floor(prefix_tokens / 64), len(chain))``
  blocks of the chain and gets new ids for the rest of its prompt; its prompt and reply then
  become the running context. So a ``prefix_tokens`` shorter than the running context (the
  cache dropped, the context was edited) forks the chain there, and one longer than it (the
  provider had a system prompt cached by an earlier session, as in most first rounds) reuses
  only the session's own blocks: the rest count as new, so reuse is a lower bound there (the
  notes count such rounds).
* **Block ids**: the n-th new block of the session at 0-based file position ``s`` (order of
  first appearance) is ``(s + 1) << 40 | n``, the Claude Code reader's namespacing: ids of
  different sessions never collide, and a new block never takes an id used before. Sessions
  share no blocks, so a prefix cached across sessions is not visible.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fcctl.common.progress import Progress

from ..schema import Trace
from ._common import (
    DEFAULT_MAX_LINE_BYTES,
    build_frame,
    fail,
    first_json_record,
    hash_column,
    iter_json_lines,
    non_negative_int,
    optional_text,
    show,
    stable_time_order,
    synthesised_id_cap,
    text,
)
from .claude_code import LOCAL_ID_BITS, MAX_SESSIONS, namespace_base

BLOCK_SIZE_TOKENS = 64
INPUT_EVENTS = frozenset({"user_message", "tool_result"})
_SIGNATURE = ("round_index", "prefix_tokens", "input_tokens_total")
_MAX_TURN = 2**31 - 1


def round_arrival_s(events: Any, path: Path, place: str) -> float:
    """Epoch seconds at which a round's prompt was complete (the rule in the module docstring)."""
    if not isinstance(events, list) or not events:
        raise fail(
            path,
            place,
            f"field 'timing_events' must be a non-empty list of events; got {show(events)}",
        )
    first_any: float | None = None
    last_input: float | None = None
    for i, event in enumerate(events):
        field = f"timing_events[{i}]"
        if not isinstance(event, dict):
            raise fail(path, place, f"{field} must be an object; got {show(event)}")
        kind = event.get("event_type")
        if type(kind) is not str:
            raise fail(path, place, f"{field}.event_type must be a string; got {show(kind)}")
        stamp = event.get("timestamp")
        try:
            moment = datetime.fromisoformat(stamp)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise fail(
                path,
                place,
                f"{field}.timestamp must be an ISO 8601 time like 2026-06-01T05:40:20.151Z; "
                f"got {show(stamp)}",
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp()
        first_any = seconds if first_any is None else min(first_any, seconds)
        if kind in INPUT_EVENTS:
            last_input = seconds if last_input is None else max(last_input, seconds)
    assert first_any is not None
    return last_input if last_input is not None else first_any


class TraceLabReader:
    name = "tracelab"
    description = (
        "TraceLab rounds JSONL: session_id, round_index, prefix_tokens (blocks synthesised)"
    )

    def sniff(self, head: bytes) -> bool:
        record = first_json_record(head)
        return isinstance(record, dict) and all(k in record for k in _SIGNATURE)

    def read(
        self, path: Path, progress: Progress, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> Trace:
        ordinal_of: dict[str, int] = {}
        session_ids: list[str] = []
        ordinals: list[int] = []
        rounds: list[int] = []
        inputs: list[int] = []
        prefixes: list[int] = []
        outputs: list[int] = []
        arrivals: list[float] = []
        lines: list[int] = []
        models: Counter[str] = Counter()
        for lineno, record in iter_json_lines(
            path, progress=progress, max_line_bytes=max_line_bytes
        ):
            place = f"line {lineno}"
            session = text(record, "session_id", path, place)
            round_index = non_negative_int(record, "round_index", path, place)
            if round_index > _MAX_TURN:
                raise fail(path, place, f"field 'round_index' must be < 2**31; got {round_index!r}")
            total = non_negative_int(record, "input_tokens_total", path, place)
            prefix = non_negative_int(record, "prefix_tokens", path, place)
            appended = non_negative_int(record, "newly_append_tokens", path, place)
            if prefix + appended != total:
                raise fail(
                    path,
                    place,
                    "field 'newly_append_tokens' must equal input_tokens_total - prefix_tokens "
                    f"({total} - {prefix} = {total - prefix}); got {appended!r}",
                )
            outputs.append(non_negative_int(record, "output_tokens", path, place))
            arrivals.append(round_arrival_s(record.get("timing_events"), path, place))
            provider = optional_text(record, "provider", path, place)
            model = optional_text(record, "model", path, place)
            models["/".join(p for p in (provider, model) if p) or "unnamed"] += 1
            ordinal = ordinal_of.setdefault(session, len(ordinal_of))
            if ordinal >= MAX_SESSIONS:
                raise fail(path, place, f"more than {MAX_SESSIONS} sessions cannot be namespaced")
            session_ids.append(session)
            ordinals.append(ordinal)
            rounds.append(round_index)
            inputs.append(total)
            prefixes.append(prefix)
            lines.append(lineno)

        values, offsets, parents, capped = self._chains(
            path, np.asarray(ordinals), rounds, inputs, outputs, prefixes, lines
        )
        arrival = np.asarray(arrivals, dtype=np.float64)
        frame = build_frame(
            path=path,
            timestamp_s=arrival - arrival.min(),
            input_tokens=np.asarray(inputs, dtype=np.int64),
            output_tokens=np.asarray(outputs, dtype=np.int64),
            block_size_tokens=BLOCK_SIZE_TOKENS,
            hash_ids=hash_column(values, offsets),
            session_id=session_ids,
            turn=rounds,
            parent_request=parents,
        )
        n = len(rounds)
        notes = [
            "blocks are synthesised from provider-reported prefix lengths (prefix_tokens): each "
            f"round reuses the first floor(prefix_tokens / {BLOCK_SIZE_TOKENS}) blocks of its "
            "session's previous prompt and reply and appends new ones; the trace has no block "
            "hashes",
            "sessions share no blocks: a prefix the provider cached across sessions (a common "
            "system prompt) is not visible",
        ]
        if capped:
            notes.append(
                f"{capped} of {n} rounds report a cached prefix longer than their session's "
                "previous prompt and reply (e.g. a system prompt cached by an earlier session); "
                "only the session's own blocks are reused there, so reuse is a lower bound"
            )
        notes.append("rounds by model: " + ", ".join(f"{m} {c}" for m, c in models.most_common(5)))
        return Trace(
            path=str(path),
            format=self.name,
            requests=stable_time_order(frame),
            order="time",
            has_hashes=True,
            has_sessions=True,
            block_size_tokens=BLOCK_SIZE_TOKENS,
            notes=tuple(notes),
        )

    @staticmethod
    def _chains(
        path: Path,
        ordinals: np.ndarray,
        rounds: list[int],
        inputs: list[int],
        outputs: list[int],
        prefixes: list[int],
        lines: list[int],
    ) -> tuple[np.ndarray, np.ndarray, list[int | None], int]:
        """Synthesised block ids of every row (file order), parents, and the capped-round count.

        Returns ``(values, offsets, parent_rows, capped)``: row ``i``'s ids are
        ``values[offsets[i]:offsets[i + 1]]``.
        """
        n = len(rounds)
        order = np.lexsort((np.asarray(rounds, dtype=np.int64), ordinals))
        per_row: list[np.ndarray] = [np.zeros(0, dtype=np.uint64)] * n
        parents: list[int | None] = [None] * n
        capped = 0
        chain = np.zeros(0, dtype=np.uint64)
        previous_context = 0
        next_serial = 0
        last: int | None = None
        id_cap = synthesised_id_cap()
        ids_so_far = 0
        for row in order.tolist():
            if last is None or ordinals[last] != ordinals[row]:
                chain = np.zeros(0, dtype=np.uint64)
                previous_context = 0
                next_serial = 0
            elif rounds[last] == rounds[row]:
                raise fail(
                    path,
                    f"line {max(lines[last], lines[row])}",
                    f"field 'round_index' must be unique within a session; got {rounds[row]!r} "
                    f"again (first at line {min(lines[last], lines[row])})",
                )
            else:
                parents[row] = last
            if prefixes[row] > previous_context:
                capped += 1
            reused = min(prefixes[row] // BLOCK_SIZE_TOKENS, chain.shape[0])
            prompt_blocks = inputs[row] // BLOCK_SIZE_TOKENS
            context_blocks = (inputs[row] + outputs[row]) // BLOCK_SIZE_TOKENS
            fresh = context_blocks - reused  # the prompt's new blocks, then the reply's
            # Checked before np.arange/concatenate allocate: a 300-byte line can claim 10**12
            # tokens, which would otherwise be a 116 GiB array.
            ids_so_far += prompt_blocks + fresh
            if ids_so_far > id_cap:
                raise fail(
                    path,
                    f"line {lines[row]}",
                    f"field 'input_tokens_total' ({inputs[row]!r}) with 'output_tokens' "
                    f"({outputs[row]!r}) needs more synthesised {BLOCK_SIZE_TOKENS}-token block "
                    f"ids than the memory cap allows for this file ({id_cap}, a quarter of "
                    f"physical memory); got {ids_so_far} ids so far",
                )
            if next_serial + fresh >= 2**LOCAL_ID_BITS:
                raise fail(
                    path,
                    f"line {lines[row]}",
                    f"a session of more than 2**{LOCAL_ID_BITS} synthesised blocks cannot be "
                    "namespaced",
                )
            base = np.uint64(namespace_base(int(ordinals[row])))
            new = np.arange(next_serial, next_serial + fresh, dtype=np.uint64) | base
            chain = np.concatenate((chain[:reused], new))
            per_row[row] = chain[:prompt_blocks]
            previous_context = inputs[row] + outputs[row]
            next_serial += fresh
            last = row
        lengths = np.fromiter((b.shape[0] for b in per_row), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(per_row) if n else np.zeros(0, dtype=np.uint64)
        return values, offsets, parents, capped
