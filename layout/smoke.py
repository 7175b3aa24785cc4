"""Smoke test of the store: ``python -m <package>.smoke`` (``fcctl.layout.smoke`` or an emitted
``flatcake_store.smoke``).

Writes two sessions of two turns each into a temporary directory with :class:`.store.FlatStore`,
restores one of them layer by layer and checks every byte, exercises every rule of the
placement, a reclamation at the watermark and the two-queue scheduler, then removes what it
wrote. Needs numpy only. Uses the package's ``thresholds`` module when there is one (an
emitted package), else the core's defaults. Exit status 0 and ``smoke: ok ...`` on success.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from .geometry import KvGeometry
from .placement import Medium, PlacementRule, Reason
from .store import FlatStore

BLOCK_TOKENS = 16
GEOMETRY = KvGeometry("smoke", layers=4, kv_heads=2, head_dim=64)


def _rule() -> tuple[PlacementRule, str]:
    """The package's recommended thresholds if it has them, else the core's defaults."""
    try:
        thresholds = importlib.import_module(f"{__package__}.thresholds")
    except ImportError:
        return PlacementRule(), "core defaults"
    rule = PlacementRule(
        short_reply_tokens=int(thresholds.SHORT_REPLY_TOKENS),
        agent_context_tokens=int(thresholds.AGENT_CONTEXT_TOKENS),
    )
    return rule, "thresholds.py"


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"smoke: {what}")


def _placement(store: FlatStore, rule: PlacementRule) -> None:
    """Every rule of :mod:`.placement` decides once."""
    short, agent = rule.short_reply_tokens, rule.agent_context_tokens
    cases = [
        (
            dict(
                turn=1,
                context_tokens=8,
                previous_reply_tokens=0,
                prefix_ref_count=1,
                new_tokens=10**12,
            ),
            Reason.MEMORY_FULL,
        ),
        (
            dict(
                turn=0,
                context_tokens=8,
                previous_reply_tokens=None,
                prefix_ref_count=3,
                new_tokens=16,
            ),
            Reason.SHARED_PREFIX,
        ),
        (
            dict(
                turn=0,
                context_tokens=8,
                previous_reply_tokens=None,
                prefix_ref_count=1,
                new_tokens=16,
            ),
            Reason.FIRST_TURN,
        ),
        (
            dict(
                turn=2,
                context_tokens=agent + 1,
                previous_reply_tokens=0,
                prefix_ref_count=1,
                new_tokens=16,
            ),
            Reason.AGENT_CONTEXT,
        ),
        (
            dict(
                turn=2,
                context_tokens=agent,
                previous_reply_tokens=short + 1,
                prefix_ref_count=1,
                new_tokens=16,
            ),
            Reason.LONG_REPLY,
        ),
        (
            dict(
                turn=2,
                context_tokens=agent,
                previous_reply_tokens=short,
                prefix_ref_count=1,
                new_tokens=16,
            ),
            Reason.SHORT_REPLY_CHAT,
        ),
    ]
    for signals, reason in cases:
        got = store.place(**signals, now_s=0.0)  # type: ignore[arg-type]
        _check(got.reason == reason, f"placement {signals}: expected {reason}, got {got}")


def run(directory: Path) -> str:
    """The whole smoke test in ``directory`` (left empty); a one-line summary."""
    rule, source = _rule()
    rng = np.random.default_rng(20261201)
    with FlatStore.open(
        directory / "store",
        GEOMETRY,
        block_tokens=BLOCK_TOKENS,
        host_bytes=2**20,
        ssd_bytes=2**22,
        rule=rule,
        now_s=0.0,
        extent_bytes=2**18,  # small files: the smoke test should not allocate 64 MiB each
    ) as store:
        _placement(store, rule)
        # Two sessions of two turns: the first turn on SSD (first_turn), the second where the
        # rule puts a short chat's turn (memory, unless the thresholds are 0).
        written: dict[str, list[np.ndarray]] = {}
        now = 1.0
        for session in ("s0", "s1"):
            written[session] = []
            for turn, tokens in enumerate((40, 23)):
                placement = store.place(
                    turn=turn,
                    context_tokens=min(64, rule.agent_context_tokens),
                    previous_reply_tokens=None if turn == 0 else 0,
                    prefix_ref_count=1,
                    new_tokens=tokens,
                    now_s=now,
                )
                shape = (GEOMETRY.layers, store.layer_bytes_for(tokens))
                kv = rng.integers(0, 256, shape, dtype=np.uint8)
                stored = store.write_turn(
                    session, turn, kv, tokens=tokens, medium=placement.medium, now_s=now
                )
                _check(stored.medium == placement.medium, f"{session} turn {turn} medium")
                written[session].append(kv)
                now += 1.0
        _check(store.turns("s0")[0].medium == Medium.SSD, "a first turn goes to SSD")
        _check(store.turns("s0")[1].medium == Medium.MEMORY, "a short chat's turn to memory")
        # Restore s0 layer by layer: every byte as written, in turn order.
        plan = store.plan_restore("s0", 63, now_s=now)
        _check(plan.tokens == 63 and len(plan.turns) == 2, f"plan covers both turns: {plan}")
        _check(len(plan.ssd_plans) == GEOMETRY.layers, "one SSD read plan per layer")
        out = np.zeros((GEOMETRY.layers, plan.layer_bytes), dtype=np.uint8)
        read = store.restore(plan, out, now_s=now)
        expected = np.concatenate(written["s0"], axis=1)
        _check(bool(np.array_equal(out, expected)), "restored bytes differ from those written")
        _check(read >= written["s0"][0].nbytes, "the SSD turn was read")
        # A restore of fewer tokens stops at whole turns.
        _check(store.plan_restore("s1", 50, now_s=now).tokens == 40, "whole-turn prefix")
        # Scheduler: a request whose KV is all in memory is ready at once; one reading from SSD
        # waits for its prefetch, then re-enters by its original arrival.
        store.submit("r-ssd", arrival_s=now, ssd_bytes=plan.ssd_read_bytes, now_s=now)
        store.submit("r-mem", arrival_s=now + 0.5, ssd_bytes=0, now_s=now + 0.5)
        _check(store.ready(now + 0.5) == ["r-mem"], "memory request ready at once")
        _check(store.start_prefetches(now + 0.5) == ["r-ssd"], "the SSD prefetch starts")
        store.prefetch_done("r-ssd", now + 1.0)
        _check(store.ready(now + 1.0) == ["r-ssd"], "the SSD request ready after its prefetch")
        # Reclamation: fill SSD past the high watermark; the least recently active session
        # (s1: s0 was just restored) is dropped whole, its file removed.
        now += 2.0
        s1_file = store.session_path("s1")
        _check(s1_file.exists(), "s1 has a session file")
        big = 700
        kv = np.zeros((GEOMETRY.layers, store.layer_bytes_for(big)), dtype=np.uint8)
        while not store.ssd.over_high_watermark():
            session = f"filler-{now:g}"
            store.write_turn(session, 0, kv, tokens=big, medium=Medium.SSD, now_s=now)
            now += 1.0
        dropped = store.reclaim(now)
        names = [str(d.session) for d in dropped]
        _check(bool(names) and names[0] == "s1", f"s1 reclaimed first; got {names}")
        _check(not s1_file.exists(), "a reclaimed session's file is removed")
        _check(not store.ssd.over_high_watermark(), "usage back under the high watermark")
        _check(store.plan_restore("s1", 63, now_s=now).tokens == 0, "s1 restores nothing")
        store.close(remove=True)
    return (
        f"smoke: ok (thresholds from {source}: short reply {rule.short_reply_tokens}, agent "
        f"context {rule.agent_context_tokens} tokens; 2 sessions x 2 turns restored byte for "
        f"byte, {len(dropped)} sessions reclaimed)"
    )


def main() -> int:
    directory = Path(tempfile.mkdtemp(prefix="flatstore-smoke-"))
    try:
        print(run(directory))
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
