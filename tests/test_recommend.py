"""The recommender: known right thresholds on a hand-made trace, the pick and its ties, the
default grid, reuse across the grid, worker processes equal to one process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fcctl.analyzers.recommend import (
    ALL_MEMORY_TOKENS,
    GridCell,
    RecommendConfig,
    Ttft,
    default_grid,
    grid_from_values,
    pick,
    recommend_thresholds,
    threshold_classes,
)
from fcctl.analyzers.recommend.sweep import (
    MAX_GRID_EXTENSIONS,
    extend_axis,
    matters,
    misplacement_pairs,
    spread_of,
)
from fcctl.analyzers.replay import PRESETS, build_workload
from fcctl.analyzers.traces.readers import read_trace
from fcctl.analyzers.traces.schema import Trace
from fcctl.layout.geometry import model_geometry
from fcctl.layout.placement import (
    DEFAULT_AGENT_CONTEXT_TOKENS,
    DEFAULT_SHORT_REPLY_TOKENS,
    THRESHOLD_REASONS,
    PlacementRule,
    PlacementSignals,
)
from tests.conftest import SAMPLES
from tests.replay_helpers import BLOCK_TOKENS, TINY, tiny_node, trace_of

CHAT_REPLIES = (150, 250)  # every chat reply is in this range (tokens)
AGENT_CONTEXT = 60_000  # every agent turn's context (tokens)
AGENT_REPLY = 3000


def chats_and_agents(seed: int = 1) -> Trace:
    """Two agent sessions (context 60K tokens, replies 3000) and six chat sessions (context
    <= 256 tokens, replies 150-250), four turns each, prompts growing turn by turn; the agents
    come first, so their turns arrive while the chats run."""
    rng = np.random.default_rng(seed)
    hashes, sessions, times, outputs, inputs = [], [], [], [], []
    next_id = 1
    for s in range(8):
        agent = s < 2
        history: list[int] = []
        t = 0.0
        for _ in range(4):
            grow = 20 if agent else 4
            history = history + list(range(next_id, next_id + grow))
            next_id += grow
            hashes.append(list(history))
            sessions.append(f"{'agent' if agent else 'chat'}{s}")
            times.append(t)
            outputs.append(AGENT_REPLY if agent else int(rng.integers(*CHAT_REPLIES)))
            inputs.append(AGENT_CONTEXT if agent else len(history) * BLOCK_TOKENS)
            t += 0.5
    trace = trace_of(hashes, sessions=sessions, timestamps=times, output_tokens=outputs)
    contexts = pl.Series("input_tokens", inputs, dtype=pl.Int64)
    return dataclasses.replace(trace, requests=trace.requests.with_columns(contexts))


GOOD_SHORT = (400, 1000)  # between the chats' replies and the agents' replies
GOOD_AGENT = (1000, 30_000)  # between the chats' contexts and the agents' contexts
# Below them (100, 128) some chats' turns go to SSD: slower restores, nothing gained. (With this
# much host memory, sending the agents to memory as well would cost nothing: the memory-full
# rule keeps what does not fit on SSD; the misplacement rows measure that corner.)


def test_known_right_thresholds_win() -> None:
    # Margins 0: on this small trace the right pairs are only 0.15 % faster (mean TTFT), which
    # the default margins call "does not matter" (test_thresholds_that_do_not_matter).
    config = RecommendConfig(
        geometry=TINY,
        hardware=tiny_node(host=120),
        rates=(0.5, 2.0),
        short_reply_grid=(100, *GOOD_SHORT),
        agent_context_grid=(128, *GOOD_AGENT),
        decision_margin_pp=0.0,
        decision_ttft_margin=0.0,
    )
    result = recommend_thresholds(chats_and_agents(), config)
    rec = result.recommendation
    assert rec.rate == 2.0  # the highest rate
    assert rec.short_reply_tokens in GOOD_SHORT and rec.agent_context_tokens in GOOD_AGENT
    # The tie rule among equal results: the smallest thresholds.
    assert (rec.short_reply_tokens, rec.agent_context_tokens) == (400, 1000)
    at_target = {
        (g.short_reply_tokens, g.agent_context_tokens): g for g in result.grid if g.rate == rec.rate
    }
    good = [at_target[(s, a)] for s in GOOD_SHORT for a in GOOD_AGENT]
    assert len({(g.gpu_hit_share, g.ttft_s, g.ssd_read_bytes) for g in good}) == 1

    def rank(g: GridCell) -> tuple[float, float, float]:
        # The pick rule's order: p99 compared in whole milliseconds.
        return (-(g.gpu_hit_share or 0), round(g.ttft_s.p99 or 0, 3), g.ttft_s.mean or 0)

    # Chats sent to SSD (short-reply 100 or agent-context 128) are strictly worse.
    for (s, a), g in at_target.items():
        if s == 100 or a == 128:
            assert rank(g) > rank(good[0]), (s, a, g)
    assert result.ideal_hit_share is not None
    assert {m.change for m in result.misplacement} == {c for c, _, _ in misplacement_pairs(1, 1)}
    assert set(result.rates[0].policies) == {"memory-only", "tiered", "flat", "flat-fcfs"}
    flat = result.rates[-1].policies["flat"]
    assert flat.gpu_hit_share == rec.gpu_hit_share
    assert result.facts.simulations_reused > 0  # pairs with equal threshold classes


def _cell(
    short: int, agent: int, hit: float, p99: float, mean: float = 1.0, ssd: int = 0
) -> GridCell:
    return GridCell(short, agent, 1.0, hit, Ttft(mean, p99), ssd)


def test_pick_ties_as_documented() -> None:
    cells = [_cell(512, 8192, 0.9, 3.0), _cell(256, 8192, 0.9, 2.0), _cell(128, 4096, 0.8, 1.0)]
    assert pick(cells, "hit") == cells[1]  # equal hit share: the lower p99
    assert pick(cells, "ttft-p99") == cells[2]  # p99 first
    tied = [_cell(512, 8192, 0.9, 2.0), _cell(256, 16384, 0.9, 2.0), _cell(256, 8192, 0.9, 2.0)]
    assert pick(tied, "hit") == tied[2]  # nothing measured differs: smallest short, then agent
    by_mean = [_cell(128, 1, 0.9, 2.0, mean=1.5), _cell(256, 1, 0.9, 2.0, mean=1.2)]
    assert pick(by_mean, "hit") == by_mean[1]
    by_ssd = [_cell(128, 1, 0.9, 2.0, ssd=10), _cell(256, 1, 0.9, 2.0, ssd=5)]
    assert pick(by_ssd, "hit") == by_ssd[1]
    p99_tie = [_cell(128, 1, 0.7, 2.0), _cell(256, 1, 0.9, 2.0)]
    assert pick(p99_tie, "ttft-p99") == p99_tie[1]  # equal p99: the higher hit share
    missing = [GridCell(1, 1, 1.0, None, Ttft(None, None), 0), _cell(2, 1, 0.1, 9.0)]
    assert pick(missing, "hit") == missing[1]
    with pytest.raises(ValueError, match=r"^objective: "):
        pick(cells, "latency")


def test_grid_from_values_hand_computed() -> None:
    # Percentiles of 1..100: 10.9, 25.75, 50.5, 75.25, 90.1 -> 8 (down), 32, 64, 64, 128 (up).
    assert grid_from_values(np.arange(1, 101), 7) == (8, 32, 64, 128)
    assert grid_from_values(np.array([], dtype=np.int64), 7) == (7,)
    assert grid_from_values(np.zeros(10, dtype=np.int64), 7) == (0,)


@pytest.mark.parametrize(
    "sample", ["claude_code_sample.jsonl.gz", "mooncake_conversation_2k.jsonl"]
)
def test_default_grid_covers_the_trace(sample: str) -> None:
    w = build_workload(read_trace(SAMPLES / sample, None), TINY, 8)
    shorts, agents = default_grid(w.input_tokens, w.output_tokens, w.prev_request)
    later = w.prev_request >= 0
    replies, contexts = w.output_tokens[w.prev_request[later]], w.input_tokens[later]
    for grid, values in ((shorts, replies), (agents, contexts)):
        assert 2 <= len(grid) <= 5 and list(grid) == sorted(set(grid))
        assert all(v == 0 or v & (v - 1) == 0 for v in grid)  # powers of two
        assert grid[0] <= np.percentile(values, 10) and grid[-1] >= np.percentile(values, 90)
        # Each decides differently: every candidate splits the trace's values elsewhere.
        assert len({int((values <= v).sum()) for v in grid}) == len(grid)


def test_threshold_classes_follow_the_rule_order() -> None:
    inp = np.array([100, 50_000, 100, 100, 100])
    out = np.array([10, 10, 900, 10, 10])
    prev = np.array([-1, 0, 0, 2, 0])  # request 0 is a first turn
    classes = threshold_classes(inp, out, prev, short_reply_tokens=256, agent_context_tokens=32768)
    # 0: first turn; 1: context over 32768; 2: previous reply 10 is short -> chat; 3: previous
    # reply 900 (request 2) is long; 4: chat.
    assert classes.tolist() == [0, 1, 3, 2, 3]
    every = threshold_classes(inp, out, prev, ALL_MEMORY_TOKENS, ALL_MEMORY_TOKENS)
    assert every.tolist() == [0, 3, 3, 3, 3]
    assert threshold_classes(inp, out, prev, 256, 0).tolist() == [0, 1, 1, 1, 1]


@st.composite
def _requests(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random requests: input and output tokens, each one's previous request (-1 or earlier)."""
    n = draw(st.integers(1, 30))
    tokens = st.integers(0, 100_000)
    inp = np.array(draw(st.lists(tokens, min_size=n, max_size=n)), dtype=np.int64)
    out = np.array(draw(st.lists(tokens, min_size=n, max_size=n)), dtype=np.int64)
    prev = np.array([draw(st.integers(-1, i - 1)) for i in range(n)], dtype=np.int64)
    return inp, out, prev


@given(
    requests=_requests(),
    short=st.one_of(st.integers(0, 100_000), st.just(ALL_MEMORY_TOKENS)),
    agent=st.one_of(st.integers(0, 100_000), st.just(ALL_MEMORY_TOKENS)),
)
@settings(max_examples=200, deadline=None)
def test_threshold_classes_are_what_the_placement_rule_decides(
    requests: tuple[np.ndarray, np.ndarray, np.ndarray], short: int, agent: int
) -> None:
    """The recommender groups pairs by its classes; each class must be the reason
    PlacementRule.place gives that request's write when memory is free and the prefix unshared
    (the flat policy's signals: context = input tokens, previous reply = the previous request's
    output tokens)."""
    inp, out, prev = requests
    rule = PlacementRule(short, agent)
    classes = threshold_classes(inp, out, prev, short, agent)
    for r in range(inp.shape[0]):
        first = prev[r] < 0
        signals = PlacementSignals(
            turn=0 if first else 1,
            context_tokens=int(inp[r]),
            previous_reply_tokens=None if first else int(out[prev[r]]),
            prefix_ref_count=1,
            memory_free_bytes=1,
            bytes_to_write=0,
        )
        assert THRESHOLD_REASONS[classes[r]] == rule.place(signals).reason, r


def test_worker_processes_give_the_same_result() -> None:
    config = RecommendConfig(
        geometry=TINY,
        hardware=tiny_node(host=120),
        rates=(1.0,),
        short_reply_grid=(100, 400),
        agent_context_grid=(128, 1000),
    )
    one = recommend_thresholds(chats_and_agents(), config)
    two = recommend_thresholds(
        chats_and_agents(), RecommendConfig(**{**config.__dict__, "jobs": 2})
    )
    assert one.grid == two.grid and one.misplacement == two.misplacement
    assert one.recommendation == two.recommendation and one.rates == two.rates


def test_target_rate_and_objective() -> None:
    config = RecommendConfig(
        geometry=TINY,
        hardware=tiny_node(host=120),
        rates=(2.0,),
        target_rate=0.5,
        short_reply_grid=(100, 400),
        agent_context_grid=(128, 1000),
        objective="ttft-p99",
        decision_margin_pp=0.0,
        decision_ttft_margin=0.0,
    )
    result = recommend_thresholds(chats_and_agents(), config)
    assert [r.rate for r in result.rates] == [0.5, 2.0]  # the target rate is added
    rec = result.recommendation
    at = [g for g in result.grid if g.rate == 0.5]
    # The pick compares p99 in whole milliseconds.
    assert rec.rate == 0.5
    assert round(rec.ttft_s.p99 or 0, 3) == min(round(g.ttft_s.p99 or 0, 3) for g in at)
    if rec.matters:
        chosen = pick(at, "ttft-p99")
        assert (rec.short_reply_tokens, rec.agent_context_tokens) == (
            chosen.short_reply_tokens,
            chosen.agent_context_tokens,
        )
    else:  # at 0.5 req/s every pair measures the same: even margins of 0 see no difference
        assert rec.spread.hit_share_pp == 0 and rec.spread.ttft_mean_ratio == 1
        assert len({(g.gpu_hit_share, g.ttft_s.mean) for g in at}) == 1
        assert (rec.short_reply_tokens, rec.agent_context_tokens) == (
            DEFAULT_SHORT_REPLY_TOKENS,
            DEFAULT_AGENT_CONTEXT_TOKENS,
        )


@pytest.mark.slow
def test_default_run_on_the_mooncake_synthetic_trace(shared_traces: Path) -> None:
    """The default grid and rates on a whole public trace: structure and the pick's rule."""
    trace = read_trace(shared_traces / "mooncake" / "synthetic_trace.jsonl", None)
    w = build_workload(trace, model_geometry("llama-3.1-8b"), 8)
    shorts, agents = default_grid(w.input_tokens, w.output_tokens, w.prev_request)
    result = recommend_thresholds(
        trace,
        RecommendConfig(
            geometry=model_geometry("llama-3.1-8b"), hardware=PRESETS["h200-8x"], jobs=2
        ),
    )
    assert len(result.grid) == len(shorts) * len(agents) * 4
    rec = result.recommendation
    at = [g for g in result.grid if g.rate == rec.rate]
    assert (
        pick(at, "hit").gpu_hit_share == rec.gpu_hit_share == max(g.gpu_hit_share or 0 for g in at)
    )
    for r in result.rates:
        assert r.policies["flat"].gpu_hit_share <= (result.ideal_hit_share or 1) + 1e-12


def test_spread_and_matters_by_the_margins() -> None:
    def cell(hit: float, mean: float) -> GridCell:
        return GridCell(1, 1, 1.0, hit, Ttft(mean, mean), 0)

    same = spread_of([cell(0.5, 1.0), cell(0.5, 1.0)], 1.0, 0.1)
    assert (same.hit_share_pp, same.ttft_mean_ratio, matters(same)) == (0.0, 1.0, False)
    # 1 pp apart is within a 1 pp margin; just over it matters.
    assert not matters(spread_of([cell(0.50, 1.0), cell(0.51, 1.0)], 1.0, 0.1))
    assert matters(spread_of([cell(0.50, 1.0), cell(0.5101, 1.0)], 1.0, 0.1))
    # 10 % slower is within a 10 % margin; 11 % matters even with equal hit shares.
    assert not matters(spread_of([cell(0.5, 1.0), cell(0.5, 1.1)], 1.0, 0.1))
    assert matters(spread_of([cell(0.5, 1.0), cell(0.5, 1.11)], 1.0, 0.1))
    assert not matters(spread_of([cell(0.5, 1.0)], 0.0, 0.0))  # one pair: nothing to choose
    # A pair without figures cannot be shown equal: it matters (the pick rule decides).
    assert matters(
        spread_of([cell(0.5, 1.0), GridCell(2, 2, 1.0, None, Ttft(None, None), 0)], 1.0, 0.1)
    )


def test_extend_axis_rule() -> None:
    assert extend_axis((128, 256, 1024), 1024) == 2048  # the largest: double it
    assert extend_axis((128, 256, 1024), 128) == 64  # the smallest: half it
    assert extend_axis((1, 8), 1) == 0 and extend_axis((0, 8), 0) is None  # 0 is the floor
    assert extend_axis((128, 256, 1024), 256) is None  # inside: nothing to extend
    assert extend_axis((256,), 256) is None  # one value: no edge to speak of


def test_default_grid_extends_when_the_pick_sits_on_its_edge() -> None:
    """Margins 0 on the hand-made trace with a big host: the pick starts on both default axes'
    largest values, so each gains the next power of two; the final pick is measured on the grid
    as extended and the notes say what was added."""
    config = RecommendConfig(
        geometry=TINY,
        hardware=tiny_node(host=400),
        rates=(0.5, 2.0),
        decision_margin_pp=0.0,
        decision_ttft_margin=0.0,
    )
    trace = chats_and_agents()
    w = build_workload(trace, TINY, 1)
    shorts0, agents0 = default_grid(w.input_tokens, w.output_tokens, w.prev_request)
    result = recommend_thresholds(trace, config)
    rec = result.recommendation
    shorts = sorted({g.short_reply_tokens for g in result.grid})
    agents = sorted({g.agent_context_tokens for g in result.grid})
    added_s, added_a = sorted(set(shorts) - set(shorts0)), sorted(set(agents) - set(agents0))
    assert added_s and added_a and set(shorts0) <= set(shorts) and set(agents0) <= set(agents)
    assert len(added_s) <= MAX_GRID_EXTENSIONS and len(added_a) <= MAX_GRID_EXTENSIONS
    assert added_s[0] == 2 * max(shorts0) and added_a[0] == 2 * max(agents0)
    # The grid is still a full product at every rate (each added pair ran at each rate).
    assert len(result.grid) == len(shorts) * len(agents) * 2
    at = [g for g in result.grid if g.rate == rec.rate]
    assert rec.matters and (rec.short_reply_tokens, rec.agent_context_tokens) == (
        pick(at, "hit").short_reply_tokens,
        pick(at, "hit").agent_context_tokens,
    )
    notes = " ".join(result.facts.notes)
    assert f"short-reply grid was extended by {added_s[0]:,}" in notes
    assert f"agent-context grid was extended by {added_a[0]:,}" in notes
    assert "wider" not in notes
