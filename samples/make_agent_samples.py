"""Write the four small SYNTHETIC samples of issue #10: TraceLab, Dynamo, Qwen coder, a CSV log.

Each is a made-up trace in a documented format (docs/trace-formats.md), seeded, a few KB:

* ``tracelab_rounds.jsonl``: three coding-agent sessions (two Claude, one Codex) in TraceLab's
  round format: each round's prompt is the previous prompt and reply plus tool results, the
  provider reports most of it as a cached prefix, and one session has its context compacted
  (a short prefix) half-way. Timing events are ISO 8601 UTC.
* ``dynamo_agentic.jsonl``: Dynamo agentic Mooncake rows: two agent sessions whose later turns
  carry ``delay`` (ms) instead of a timestamp, one that waits for two subagent requests
  (``wait_for``, ``tool_wait_ms``), a shared system prompt (global 512-token block ids) and
  one session-less request.
* ``qwen_coder_sample.jsonl``: the Bailian/Qwen format with ``type`` values ``coder`` and
  ``thinking`` (the real Qwen coder and thinking traces are Git LFS objects not available
  here; the values are stand-ins), 16-token blocks.
* ``generic_log.csv``: a serving log of the kind a team keeps (request id, session, ms
  timestamps, token counts, 64-token block hashes separated by spaces, a parent id, a kind),
  read with ``--columns`` (samples/README.md has the mapping).

The numbers are made up: use the files to exercise the readers, never to draw conclusions.
Run from the repository root: python3 samples/make_agent_samples.py
"""

from __future__ import annotations

import csv
import itertools
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

SEED = 20261201
HERE = Path(__file__).parent
START = datetime(2026, 6, 1, 9, 0, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def write_jsonl(name: str, rows: list[dict]) -> None:
    with (HERE / name).open("w") as out:
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


def tracelab(rng: random.Random) -> None:
    rows = []
    for number, (provider, model, rounds) in enumerate(
        [
            ("claude", "claude-opus-4-8", 8),
            ("codex", "gpt-5.4", 7),
            ("claude", "claude-sonnet-4-9", 6),
        ]
    ):
        session = f"{provider}:{number:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        clock = START + timedelta(minutes=7 * number, seconds=rng.uniform(0, 30))
        context = 0  # the previous prompt and reply, in tokens
        for index in range(rounds):
            added = rng.randint(300, 3000)
            if index == 0:
                prefix, added = rng.choice((0, 6912, 14208)), rng.randint(2000, 6000)
            elif number == 1 and index == 4:
                prefix = 3456  # the context was compacted: only the system prompt is cached
            else:
                prefix = context - rng.randint(0, 40)
            total = prefix + added
            output = rng.randint(40, 1500)
            first = "user_message" if index in (0, 3) else "tool_result"
            events = [{"event_type": first, "timestamp": iso(clock), "source": "sample"}]
            if first == "tool_result" and rng.random() < 0.5:
                clock += timedelta(seconds=rng.uniform(1, 12))  # a second tool returns later
                events.append({"event_type": "tool_result", "timestamp": iso(clock)})
            clock += timedelta(seconds=rng.uniform(1, 6))
            events.append({"event_type": "text", "timestamp": iso(clock)})
            clock += timedelta(seconds=rng.uniform(0.1, 2))
            events.append({"event_type": "tool_call", "timestamp": iso(clock)})
            rows.append(
                {
                    "provider": provider,
                    "session_id": session,
                    "round_index": index,
                    "model": model,
                    "input_tokens_total": total,
                    "prefix_tokens": prefix,
                    "newly_append_tokens": added,
                    "output_tokens": output,
                    "reasoning_output_tokens": None,
                    "timing_events": events,
                }
            )
            context = total + output
            clock += timedelta(seconds=rng.uniform(0.5, 20))  # the tool runs
    rows.sort(key=lambda r: r["timing_events"][0]["timestamp"])  # sessions interleave in time
    write_jsonl("tracelab_rounds.jsonl", rows)


def counter() -> Callable[[int], list[int]]:
    """``fresh(n)``: the next ``n`` integers of a sequence starting at 0 (new block ids)."""
    taken = itertools.count()
    return lambda n: [next(taken) for _ in range(n)]


def dynamo(rng: random.Random) -> None:
    fresh = counter()
    system = fresh(6)  # a system prompt of 6 blocks shared by both agents
    rows = []
    for number, start_ms in enumerate((0, 2400)):
        session = f"agent-{number}"
        context = list(system)
        for turn in range(5):
            context = context + fresh(rng.randint(1, 4))
            row = {
                "request_id": f"{session}-t{turn}",
                "session_id": session,
                "input_length": len(context) * 512 - rng.randint(1, 500),
                "output_length": rng.randint(50, 700),
                "hash_ids": list(context),
            }
            if turn == 0:
                row["timestamp"] = start_ms
            elif number == 0 and turn == 3:
                # the agent fans out to two subagents and waits for both
                for k in range(2):
                    sub = {
                        "request_id": f"{session}-sub{k}",
                        "session_id": f"{session}-sub{k}",
                        "input_length": 4 * 512 - 10,
                        "output_length": 300,
                        "hash_ids": system[:2] + fresh(2),
                        "wait_for": [f"{session}-t{turn - 1}"],
                        "delay": 50,
                    }
                    rows.append(sub)
                row["wait_for"] = [f"{session}-sub0", f"{session}-sub1"]
                row["tool_wait_ms"] = rng.randint(100, 900)
            else:
                row["delay"] = rng.randint(200, 3000)
            rows.append(row)
    rows.append({"timestamp": 1200, "input_length": 700, "output_length": 20, "hash_ids": fresh(2)})
    write_jsonl("dynamo_agentic.jsonl", rows)


def qwen(rng: random.Random) -> None:
    prefix_ids: dict[tuple[int, ...], int] = {}
    fresh = counter()

    def hash_ids(blocks: list[int]) -> list[int]:
        return [
            prefix_ids.setdefault(tuple(blocks[: k + 1]), len(prefix_ids))
            for k in range(len(blocks))
        ]

    system = {"coder": fresh(10), "thinking": fresh(4)}
    rows = []
    chat = 500_000
    clock = 0.0
    for _ in range(12):
        kind = rng.choice(("coder", "coder", "thinking"))
        clock += rng.expovariate(1 / 3.0)
        context = list(system[kind])
        parent = -1
        t = clock
        for turn in range(1, rng.randint(1, 4) + 1):
            context = context + fresh(rng.randint(2, 12))
            chat += rng.randint(1, 90)
            rows.append(
                {
                    "chat_id": chat,
                    "parent_chat_id": parent,
                    "timestamp": round(t, 3),
                    "input_length": len(context) * 16 - rng.randint(0, 15),
                    "output_length": rng.randint(20, 900 if kind == "thinking" else 300),
                    "type": kind,
                    "turn": turn,
                    "hash_ids": hash_ids(context),
                }
            )
            context = context + fresh(rng.randint(1, 6))  # the reply joins the context
            parent = chat
            t += rng.uniform(5, 40)
    rows.sort(key=lambda r: r["timestamp"])
    write_jsonl("qwen_coder_sample.jsonl", rows)


def generic(rng: random.Random) -> None:
    next_id = 1000
    rows = []
    for number in range(4):
        session = f"team-{number}"
        context: list[int] = []
        clock_ms = number * 1700 + rng.randint(0, 900)
        parent = ""
        for turn in range(rng.randint(2, 4)):
            new = list(range(next_id, next_id + rng.randint(2, 5)))
            next_id += len(new)
            context = context + new
            request = f"r{len(rows):03d}"
            rows.append(
                {
                    "request_id": request,
                    "session": session,
                    "ts_ms": clock_ms,
                    "prompt_tokens": len(context) * 64 + rng.randint(0, 63),
                    "completion_tokens": rng.randint(10, 400),
                    "block_hashes": " ".join(map(str, context)),
                    "parent_id": parent,
                    "kind": "chat" if turn == 0 else "tool",
                }
            )
            parent = request
            clock_ms += rng.randint(800, 5000)
    rows.sort(key=lambda r: r["ts_ms"])
    with (HERE / "generic_log.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(SEED)
    tracelab(rng)
    dynamo(rng)
    qwen(rng)
    generic(rng)


if __name__ == "__main__":
    main()
