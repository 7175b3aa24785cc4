"""SHARDS sampling: the hash, hand-made streams, rate 1 = exact, the exact head, error bounds."""

from __future__ import annotations

import numpy as np
import pytest

from fcctl.analyzers.reuse.memory_tier import reference_lru_hit_share
from fcctl.analyzers.reuse.shards import (
    HASH_SPACE,
    exact_head,
    fixed_size_threshold,
    rate_threshold,
    sample_mask,
    sampled_stack,
    shards_error,
    splitmix64,
)
from fcctl.analyzers.reuse.stack import percentiles_from_counts, stack_distances
from fcctl.analyzers.traces.synth import PROFILES, generate
from fcctl.common.errors import FcctlInputError


def _exact_counts(ids: np.ndarray) -> np.ndarray:
    d = stack_distances(ids)
    return np.bincount(d[d >= 0], minlength=1)


def test_splitmix64_reference_values() -> None:
    # splitmix64 of 0 is the first output of SplittableRandom/splitmix64 seeded with 0.
    assert int(splitmix64([0])[0]) == 0xE220A8397B1DCDAF
    assert splitmix64(np.arange(5, dtype=np.uint64)).dtype == np.uint64
    assert len(set(splitmix64(np.arange(1000)).tolist())) == 1000


def test_rate_threshold_and_bad_rates() -> None:
    assert rate_threshold(1.0) == HASH_SPACE
    assert rate_threshold(0.5) == 1 << 63
    for bad in (0, -0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(FcctlInputError, match="rate"):
            rate_threshold(bad)  # type: ignore[arg-type]


def _ids_by_sampling(threshold: int, count: int, kept: bool) -> list[int]:
    """The first ``count`` ids that the threshold keeps (or drops)."""
    out, x = [], 0
    while len(out) < count:
        if bool(sample_mask(np.array([x], dtype=np.uint64), threshold)[0]) == kept:
            out.append(x)
        x += 1
    return out


def test_hand_made_stream_known_result() -> None:
    t = rate_threshold(0.5)
    a, b = _ids_by_sampling(t, 2, kept=True)
    (c, d) = _ids_by_sampling(t, 2, kept=False)
    # Sampled stream: a b a b a; dropped c, d interleaved change nothing in the sample.
    ids = np.array([a, c, b, d, a, c, b, a], dtype=np.uint64)
    s = sampled_stack(ids, rate=0.5, exact_below_blocks=0)
    assert s.sampled_accesses == 5 and s.sampled_blocks == 2 and s.accesses == 8
    # Sampled re-accesses a(1), b(1), a(1): distance 1 in the sample = 2 real blocks.
    assert s.stack_count.tolist()[:2] == [0, 3]
    assert s.percentiles([50]) == [2.0]
    # Capacity 2 blocks = 1 sampled block: nothing hits; 3 blocks: all three re-accesses.
    # The three sampled re-accesses stand for the estimated real ones: 8 - 2 / 0.5 = 4.
    assert s.lru_hits(2) == 0.0
    assert s.lru_hits(3) == pytest.approx(4.0)


def test_rate_one_is_exact() -> None:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 300, size=5000).astype(np.uint64)
    s = sampled_stack(ids, rate=1.0)
    exact = _exact_counts(ids)
    assert s.method == "exact"
    assert np.array_equal(s.stack_count[: exact.shape[0]], exact)
    for c in (1, 5, 50, 299, 1000):
        assert s.lru_hit_share(c) == pytest.approx(reference_lru_hit_share(ids.tolist(), c))
    assert s.percentiles() == percentiles_from_counts(exact, (50, 90, 99))
    # A fixed size at least the distinct blocks is the exact result too.
    assert sampled_stack(ids, sample_blocks=300).method == "exact"


@pytest.mark.parametrize("seed", range(6))
def test_exact_head_matches_full_stack_distances(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, blocks, depth = (
        int(rng.integers(1, 4000)),
        int(rng.integers(1, 500)),
        int(rng.integers(1, 60)),
    )
    ids = (rng.zipf(1.3, size=n) % blocks).astype(np.uint64)
    exact = _exact_counts(ids)
    want = np.zeros(depth, dtype=np.int64)
    want[: min(depth, exact.shape[0])] = exact[:depth]
    assert np.array_equal(exact_head(ids, depth), want)


def test_head_makes_small_capacities_exact_and_chunks_agree() -> None:
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.2, size=200_000).astype(np.uint64)
    exact = _exact_counts(ids)
    s = sampled_stack(ids, rate=0.01, exact_below_blocks=500)
    cum = np.cumsum(exact)
    for c in (1, 10, 100, 500):
        assert s.lru_hits(c) == pytest.approx(float(cum[c - 1]))
    chunks = [ids[i : i + 7777] for i in range(0, ids.shape[0], 7777)]
    t = sampled_stack(lambda: iter(chunks), rate=0.01, exact_below_blocks=500)
    assert np.array_equal(s.stack_count, t.stack_count)
    assert np.array_equal(s.head_count, t.head_count)
    assert s.percentiles() == t.percentiles()  # and the same twice: deterministic


def test_fixed_size_keeps_the_smallest_hashes() -> None:
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 10_000, size=50_000).astype(np.uint64)
    t = fixed_size_threshold(ids, 500)
    distinct = np.unique(splitmix64(ids))
    assert int(np.sum(distinct < np.uint64(t))) == 500
    assert t == int(distinct[500])
    s = sampled_stack(ids, sample_blocks=500, exact_below_blocks=0)
    assert s.method == "fixed-size" and s.sampled_blocks == 500
    assert s.rate == pytest.approx(t / HASH_SPACE)


def test_error_bound_on_a_synthetic_agent_stream() -> None:
    frames = list(generate(PROFILES["mixed"], 6000, 150, seed=2))
    ids = np.concatenate([f["hash_ids"].explode().drop_nulls().to_numpy() for f in frames]).astype(
        np.uint64
    )
    exact = _exact_counts(ids)
    caps = [int(c) for c in np.geomspace(16, 2**18, 20)]
    pure = shards_error(
        exact, ids.shape[0], sampled_stack(ids, rate=0.1, exact_below_blocks=0), caps
    )
    head = shards_error(exact, ids.shape[0], sampled_stack(ids, rate=0.1), caps)
    assert pure.mean_abs_error_pp < 2.0, pure
    assert head.mean_abs_error_pp <= pure.mean_abs_error_pp + 1e-9
    assert head.mean_abs_error_pp < 0.5 and head.max_abs_error_pp < 2.0, head
    assert all(e is not None and e < 0.1 for e in head.percentile_rel_error.values()), head


def test_arguments_are_checked() -> None:
    ids = np.arange(10, dtype=np.uint64)
    with pytest.raises(FcctlInputError, match="exactly one"):
        sampled_stack(ids)
    with pytest.raises(FcctlInputError, match="exactly one"):
        sampled_stack(ids, rate=0.5, sample_blocks=3)
    with pytest.raises(FcctlInputError, match="sample_blocks"):
        sampled_stack(ids, sample_blocks=0)
    with pytest.raises(FcctlInputError, match="exact_below_blocks"):
        sampled_stack(ids, rate=0.5, exact_below_blocks=-1)
    s = sampled_stack(np.zeros(0, dtype=np.uint64), rate=0.5)
    assert s.accesses == 0 and s.lru_hit_share(10) == 0.0 and s.percentiles() == [None] * 3
