"""Write samples/bailian_synthetic.jsonl: a SYNTHETIC trace in the Alibaba Bailian/Qwen format.

No real Bailian trace is available here (the public files are Git LFS objects), so this
seeded script makes a small stand-in with the documented fields (chat_id, parent_chat_id,
timestamp in seconds, input_length, output_length, type, turn, hash_ids of 16-token prefix
blocks). It has multi-turn chats (each turn resends the conversation so far, so its blocks
extend its parent's) and a few system prompts shared across chats. The numbers are made up;
use it to exercise the reader, never to draw conclusions about real workloads.

Run from the repository root: python3 samples/make_bailian_synthetic.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20260330
BLOCK_TOKENS = 16
CHATS = 40
OUT = Path(__file__).with_name("bailian_synthetic.jsonl")


def main() -> None:
    rng = random.Random(SEED)
    # Block "contents" are opaque tokens; a prefix's hash id is assigned on first sight, so
    # equal ids mean an equal prefix up to that block (as in the real traces).
    prefix_ids: dict[tuple[int, ...], int] = {}
    next_content = 0

    def fresh_blocks(n: int) -> list[int]:
        nonlocal next_content
        blocks = list(range(next_content, next_content + n))
        next_content += n
        return blocks

    def hash_ids(blocks: list[int]) -> list[int]:
        ids = []
        for k in range(len(blocks)):
            ids.append(prefix_ids.setdefault(tuple(blocks[: k + 1]), len(prefix_ids)))
        return ids

    system_prompts = [fresh_blocks(n) for n in (12, 20, 6)]
    chat_numbers = rng.sample(range(100_000, 999_999), CHATS * 8)
    rows = []
    clock_s = 0.0
    for _ in range(CHATS):
        clock_s += rng.expovariate(1 / 4.0)
        context = list(rng.choice(system_prompts))
        parent = -1
        t = clock_s
        kind = rng.choice(["text", "text", "text", "search", "image", "file"])
        for turn in range(1, rng.randint(1, 6) + 1):
            context += fresh_blocks(rng.randint(1, 8))  # the new user message
            input_length = len(context) * BLOCK_TOKENS - rng.randint(0, BLOCK_TOKENS - 1)
            output_length = rng.randint(5, 400)
            chat_id = chat_numbers.pop()
            rows.append(
                {
                    "chat_id": chat_id,
                    "parent_chat_id": parent,
                    "timestamp": round(t, 3),
                    "input_length": input_length,
                    "output_length": output_length,
                    "type": kind,
                    "turn": turn,
                    "hash_ids": hash_ids(context),
                }
            )
            context += fresh_blocks(-(-output_length // BLOCK_TOKENS))  # the reply
            parent = chat_id
            t += rng.uniform(5.0, 90.0)
    rows.sort(key=lambda row: row["timestamp"])
    with OUT.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(", ", ": ")) + "\n")
    print(f"wrote {OUT} ({len(rows)} requests, {CHATS} chats)")


if __name__ == "__main__":
    main()
