"""Session amplification (analyzers/replay/amplify.py; docs/simulator.md, "Session
amplification"): copies keep their session's statistics, cross-session sharing survives, the
working set grows K-fold less the shared blocks, K = 1 changes nothing, open-loop staggering is
seeded, concurrency past the sessions amplifies, and bad or oversized K is refused before work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from replay_helpers import TINY, random_session_trace, random_time_trace, tiny_node, trace_of
from typer.testing import CliRunner

import fcctl
from fcctl.analyzers.replay import ReplayConfig, build_workload, replay_trace
from fcctl.analyzers.replay.amplify import amplify_workload, own_blocks
from fcctl.analyzers.replay.workload import Workload
from fcctl.cli import app
from fcctl.common.errors import FcctlInputError
from tests.conftest import SAMPLES
from tests.plan_helpers import SMALL_REQUESTS, small_trace

runner = CliRunner()
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
ONE_POINT = ["--rates", "1", "--policies", "memory-only", "--gpus", "2", "--jobs", "1"]


def _sessions(w: Workload) -> dict[int, np.ndarray]:
    """Each session's requests in turn order."""
    order = np.lexsort((w.turn, w.session))
    cuts = np.flatnonzero(np.diff(w.session[order])) + 1
    return {int(w.session[g[0]]): g for g in np.split(order, cuts)}


def _reuse_share(w: Workload, requests: np.ndarray) -> float:
    """A session's own ideal hit share: re-accesses within it over its accesses."""
    blocks = np.concatenate([w.blocks_of(int(r)) for r in requests])
    return (blocks.shape[0] - np.unique(blocks).shape[0]) / blocks.shape[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_copy_keeps_its_sessions_statistics(seed: int) -> None:
    w = build_workload(random_session_trace(seed, sessions=7), TINY, 3)
    k = 3
    a = amplify_workload(w, k, seed=seed)
    assert (a.requests, a.sessions) == (k * w.requests, k * w.sessions)
    originals = _sessions(w)
    copies = _sessions(a)
    for s, reqs in originals.items():
        for j in range(k):
            got = copies[s * k + j]
            assert got.tolist() == (reqs * k + j).tolist()  # request r's copy j is r * K + j
            for field in ("turn", "input_tokens", "output_tokens", "timestamps_s"):
                assert getattr(a, field)[got].tolist() == getattr(w, field)[reqs].tolist()
            assert np.diff(a.offsets)[got].tolist() == np.diff(w.offsets)[reqs].tolist()
            prev = w.prev_request[reqs]
            assert a.prev_request[got].tolist() == np.where(prev >= 0, prev * k + j, -1).tolist()
            assert _reuse_share(a, got) == _reuse_share(w, reqs)
            assert (a.worker[got] == (s * k + j) % a.workers).all()
    assert a.fingerprint == f"{w.fingerprint}+amplified:3x:seed={seed}"


def test_a_prefix_two_sessions_share_is_shared_by_every_copy() -> None:
    # Sessions a and b share the system prompt 1, 2, 3; each has its own blocks after it.
    trace = trace_of(
        [[1, 2, 3, 10], [1, 2, 3, 10, 11], [1, 2, 3, 20], [1, 2, 3, 20, 21, 22]],
        sessions=["a", "a", "b", "b"],
        timestamps=[0.0, 1.0, 0.0, 2.0],
    )
    w = build_workload(trace, TINY, 2)
    k = 4
    a = amplify_workload(w, k)
    prompt = a.blocks_of(0)[:3].tolist()
    own: list[int] = []
    for r in range(a.requests):
        blocks = a.blocks_of(r).tolist()
        assert blocks[:3] == prompt
        own += blocks[3:]
    # Own blocks: 10, 11 (a) and 20, 21, 22 (b), fresh in every copy, never shared between copies.
    assert len(set(own)) == 5 * k
    assert own_blocks(w).sum() == 5


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_working_set_grows_k_fold_less_the_shared_blocks(k: int) -> None:
    w = build_workload(random_session_trace(4, sessions=8), TINY, 2)
    shared = w.num_blocks - int(own_blocks(w).sum())
    assert shared > 0  # the helper gives some sessions a common prompt
    a = amplify_workload(w, k)
    assert a.num_blocks == k * w.num_blocks - (k - 1) * shared
    assert np.unique(a.block).shape[0] == a.num_blocks
    assert a.block.max() == a.num_blocks - 1  # dense ids
    assert a.block_accesses == k * w.block_accesses


def test_open_loop_staggering_is_seeded() -> None:
    w = build_workload(random_time_trace(3), TINY, 2)
    assert not w.closed_loop and w.duration_s
    first = amplify_workload(w, 3, seed=7)
    again = amplify_workload(w, 3, seed=7)
    other = amplify_workload(w, 3, seed=8)
    assert first.timestamps_s.tolist() == again.timestamps_s.tolist()
    assert first.timestamps_s.tolist() != other.timestamps_s.tolist()
    # Copy 0 is the original; each copy of a session moves by one offset in [0, duration).
    assert first.timestamps_s[0::3].tolist() == w.timestamps_s.tolist()
    for j in (1, 2):
        shift = first.timestamps_s[j::3] - w.timestamps_s
        assert ((shift >= 0) & (shift < w.duration_s)).all()
        for s in range(w.sessions):
            assert np.ptp(shift[w.session == s]) < 1e-9
    assert first.fingerprint != other.fingerprint


def test_closed_loop_copies_keep_the_sessions_clock() -> None:
    w = build_workload(random_session_trace(1), TINY, 2)
    assert w.closed_loop
    a = amplify_workload(w, 2, seed=5)
    assert a.timestamps_s.tolist() == np.repeat(w.timestamps_s, 2).tolist()
    assert a.duration_s == w.duration_s


def test_concurrency_beyond_the_sessions_amplifies_that_point() -> None:
    trace = random_session_trace(2, sessions=5)
    config = ReplayConfig(
        geometry=TINY, hardware=tiny_node(), policies=("memory-only",), concurrency=(3, 11)
    )
    result = replay_trace(trace, config)
    requests = trace.requests.height
    by_c = {p.concurrency: p for p in result.rates}
    assert by_c[3].amplify == 1 and by_c[11].amplify == 3  # ceil(11 / 5)
    assert by_c[3].policies["memory-only"].requests == requests
    assert by_c[11].policies["memory-only"].requests == 3 * requests
    assert by_c[11].policies["memory-only"].sessions_active.max == 11


def _json_run(*args: str) -> dict:
    result = runner.invoke(app, ["replay", CLAUDE, *ONE_POINT, "--json", *args])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    doc.pop("provenance")
    return doc


def test_amplify_one_is_byte_identical_to_none() -> None:
    assert json.dumps(_json_run("--amplify", "1")) == json.dumps(_json_run())


def test_replay_with_amplify_serves_k_times_the_requests() -> None:
    once = _json_run()
    twice = _json_run("--amplify", "2")
    assert twice["load"]["amplify"] == 2 and once["load"]["amplify"] == 1
    assert twice["trace"]["sessions"] == 2 * once["trace"]["sessions"]
    assert twice["trace"]["fingerprint"].endswith("+amplified:2x:seed=0")
    p1 = once["rates"][0]["policies"]["memory-only"]
    p2 = twice["rates"][0]["policies"]["memory-only"]
    served1 = p1["requests"] - p1["rejected_requests"]["count"]
    served2 = p2["requests"] - p2["rejected_requests"]["count"]
    assert served1 > 0 and served2 == 2 * served1
    assert twice["rates"][0]["amplify"] == 2
    human = runner.invoke(app, ["replay", CLAUDE, *ONE_POINT, "--amplify", "2"])
    assert human.exit_code == 0, human.output
    assert human.stdout.startswith(f"amplified 2x: {2 * once['trace']['sessions']:,} sessions\n")


@pytest.mark.parametrize("bad", ["0", "-3", "nan", "1.5", "four"])
def test_a_bad_amplify_is_one_line_naming_the_flag(bad: str) -> None:
    # The real entry point: it turns typer's usage errors (nan, 1.5) into one line too.
    args = [sys.executable, "-m", "fcctl", "replay", CLAUDE, *ONE_POINT, "--amplify", bad]
    result = subprocess.run(args, capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--amplify" in lines[0], result.stderr
    assert result.stdout == ""


def test_an_amplification_over_the_budget_is_refused_before_work(tmp_path: Path) -> None:
    out = tmp_path / "r"
    for k, budget in (("4", "520MiB"), (str(10**15), "8GiB")):
        args = ["--amplify", k, "--memory-budget", budget, "--out", str(out)]
        result = runner.invoke(app, ["replay", CLAUDE, *ONE_POINT, *args])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fcctl: error: --amplify: "), lines
        assert "over the memory budget" in lines[0] and "--sample-sessions" in lines[0]
        assert not out.exists()


def test_a_concurrency_needing_more_than_the_budget_is_refused() -> None:
    with pytest.raises(FcctlInputError) as e:
        fcctl.replay(CLAUDE, concurrency=[10**9], memory_budget_bytes=8 << 30, jobs=1)
    assert e.value.parameter == "concurrency" and "over the memory budget" in str(e.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan"), True, "2"])
def test_the_library_names_the_parameter(bad: object) -> None:
    w = build_workload(random_session_trace(0), TINY, 2)
    with pytest.raises(FcctlInputError) as e:
        amplify_workload(w, bad)  # type: ignore[arg-type]
    assert e.value.parameter == "amplify" and str(e.value).startswith("amplify: ")


def test_plan_amplifies_its_replay_and_recommend_and_analyzes_the_trace_as_is(
    tmp_path: Path,
) -> None:
    source = small_trace(tmp_path)
    out = tmp_path / "p"
    args = ["plan", str(source), "-o", str(out), "--jobs", "1", "--concurrency", "4,all"]
    r = runner.invoke(app, [*args, "--amplify", "2"])
    assert r.exit_code == 0, r.output
    replay = json.loads((out / "replay.json").read_text())
    recommend = json.loads((out / "recommend.json").read_text())
    analyze = json.loads((out / "analyze.json").read_text())
    assert replay["load"]["amplify"] == 2 and recommend["provenance"]["amplify"] == 2
    assert replay["trace"]["requests"] == 2 * SMALL_REQUESTS
    assert recommend["trace"]["requests"] == 2 * SMALL_REQUESTS
    assert analyze["trace"]["requests"] == SMALL_REQUESTS
    sessions = replay["trace"]["sessions"]
    assert r.stdout.startswith(f"amplified 2x: {sessions:,} sessions\n")
    # The same plan at K = 2 is not the plan at K = 1: --resume reruns replay and recommend.
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "replay.json").read_text())["load"]["amplify"] == 1


def test_recommend_thresholds_sweeps_the_copies() -> None:
    args = ["recommend-thresholds", CLAUDE, "--rates", "1", "--short-reply", "256,1024"]
    args += ["--agent-context", "4096", "--gpus", "2", "--jobs", "1"]
    r = runner.invoke(app, [*args, "--amplify", "2"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("amplified 2x: 10 sessions\n")
