"""Issue #19.2: ``--sample-sessions RATE`` keeps whole sessions by convert's session hash, the
same ones every run, nests (a then b is a*b), reads a dataset's kept part only, keeps the load
per node, and says what it kept and the error measured at that rate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fcctl import api
from fcctl.analyzers.traces.dataset import read_dataset
from fcctl.analyzers.traces.partitioned import session_bucket
from fcctl.analyzers.traces.sampling import (
    NO_SESSION_PREFIX,
    sample_trace,
    session_hash,
    threshold,
)
from fcctl.analyzers.traces.schema import Trace
from fcctl.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()
CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")
MOONCAKE = str(SAMPLES / "mooncake_conversation_2k.jsonl")
FAST = ["--rates", "1", "--policies", "memory-only,flat"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """A small synthetic trace with many sessions (multi-part dataset, read whole)."""
    out = tmp_path_factory.mktemp("synth") / "s"
    r = runner.invoke(
        app,
        [
            "synth",
            "--requests",
            "600",
            "--sessions",
            "80",
            "-o",
            str(out),
            "--partition-rows",
            "200",
        ],
    )
    assert r.exit_code == 0, r.output
    return read_dataset(out)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "parts"
    r = runner.invoke(
        app,
        ["convert", CLAUDE, "-o", str(out), "--partition-by", "session-hash", "--partitions", "3"],
    )
    assert r.exit_code == 0, r.output
    return out


def _doc(*args: str) -> dict:  # type: ignore[type-arg]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_the_hash_is_converts() -> None:
    for sid in ("a", "session-7", "ünï", ""):
        assert session_bucket(sid, 16) == session_hash(sid) % 16
        assert session_bucket(sid, 65_536) == session_hash(sid) % 65_536
    assert threshold(1.0) == 1 << 64 and threshold(0.5) == 1 << 63


def test_whole_sessions_are_kept_by_their_hash(synth: Trace) -> None:
    sampled, kept = sample_trace(synth, 0.25)
    ids = synth.requests["session_id"]
    chosen = {s for s in ids.unique().to_list() if session_hash(s) < threshold(0.25)}
    assert set(sampled.requests["session_id"].unique().to_list()) == chosen
    # every request of a chosen session, in the original order
    expect = synth.requests.filter(ids.is_in(list(chosen)))
    assert sampled.requests["hash_ids"].to_list() == expect["hash_ids"].to_list()
    assert sampled.requests["request_index"].to_list() == list(range(expect.height))
    assert (kept.sessions_kept, kept.requests_kept) == (len(chosen), expect.height)
    assert 0 < kept.sessions_kept < kept.sessions_total == ids.n_unique()
    # parents stay within the kept requests, renumbered
    parents = sampled.requests["parent_request"].drop_nulls().to_numpy()
    assert np.all(parents < np.flatnonzero(sampled.requests["parent_request"].is_not_null()))


def test_sampling_nests(synth: Trace) -> None:
    once, _ = sample_trace(synth, 0.1)
    twice, kept = sample_trace(sample_trace(synth, 0.5)[0], 0.2)
    assert twice.requests.equals(once.requests)
    assert twice.session_sample_rate == once.session_sample_rate == 0.1
    assert kept.rate == 0.1 and kept.base_rate == 0.5
    quarter, _ = sample_trace(sample_trace(synth, 0.5)[0], 0.5)
    assert quarter.requests.equals(sample_trace(synth, 0.25)[0].requests)


def test_requests_without_session_ids_are_their_own_sessions() -> None:
    trace = api.read_trace(MOONCAKE)
    sampled, kept = sample_trace(trace, 0.1)
    assert kept.sessions_total == kept.requests_total == trace.num_requests
    keys = [f"{NO_SESSION_PREFIX}{i}" for i in range(trace.num_requests)]
    chosen = [i for i, k in enumerate(keys) if session_hash(k) < threshold(0.1)]
    assert kept.requests_kept == len(chosen) > 0
    assert sampled.requests["timestamp_s"].to_list() == [
        trace.requests["timestamp_s"][i] for i in chosen
    ]


def test_rate_one_is_the_whole_trace_and_runs_repeat() -> None:
    whole = _doc("replay", CLAUDE, *FAST)
    one = _doc("replay", CLAUDE, *FAST, "--sample-sessions", "1")
    assert one["rates"] == whole["rates"]
    assert whole["sampling"] is None
    assert one["sampling"]["requests"] == {"kept": 264, "total": 264}
    a = _doc("replay", CLAUDE, *FAST, "--sample-sessions", "0.5")
    b = _doc("replay", CLAUDE, *FAST, "--sample-sessions", "0.5")
    assert a["rates"] == b["rates"] and a["sampling"] == b["sampling"]
    assert a["trace"]["requests"] == a["sampling"]["requests"]["kept"] < 264


def test_a_sampled_dataset_equals_the_sampled_file(dataset: Path) -> None:
    a = _doc("replay", CLAUDE, *FAST, "--sample-sessions", "0.5")
    b = _doc("replay", str(dataset), *FAST, "--sample-sessions", "0.5")
    assert a["rates"] == b["rates"]
    # a file's fingerprint is computed while it is in memory; a dataset's block ids are read
    # for the kept requests only
    analyzed = _doc("analyze", CLAUDE)["trace"]["fingerprint"]
    assert a["sampling"].pop("source_fingerprint") == analyzed
    assert b["sampling"].pop("source_fingerprint") is None
    assert a["sampling"] == b["sampling"]
    s = a["sampling"]
    assert s["sessions"] == {"kept": 1, "total": 5}
    assert s["block_accesses"]["total"] == 268_683
    assert 0 < s["block_accesses"]["kept"] < s["block_accesses"]["total"]


def test_the_memory_budget_counts_the_kept_part_only(dataset: Path) -> None:
    # 768 MiB base + 40 B an access + 1 KiB a request: 778.5 MiB whole, 769 MiB sampled.
    args = ["replay", str(dataset), *FAST, "--memory-budget", "772MiB"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "over the memory budget" in r.stderr
    r = runner.invoke(app, [*args, "--sample-sessions", "0.5"])
    assert r.exit_code == 0, r.output


def test_the_load_per_node_is_kept() -> None:
    doc = _doc(
        "replay",
        CLAUDE,
        "--rates",
        "0.7",
        "--rate",
        "0.3",
        "--policies",
        "flat",
        "--sample-sessions",
        "0.5",
    )
    scaling = doc["sampling"]["load_scaling"]
    assert scaling["method"] == "same-node-load" and scaling["rate_factor"] == 1.0
    offered = [r["policies"]["flat"]["offered_rate"] for r in doc["rates"]]
    assert offered == [r["rate"] for r in doc["rates"]] == [0.3, 0.7]
    assert doc["operating_point"]["rate"] == 0.3
    for r in doc["rates"]:
        achieved = r["policies"]["flat"]["achieved_rate"]["whole"]
        assert 0 < achieved <= r["rate"] * 1.1
    closed = _doc(
        "replay", CLAUDE, "--concurrency", "2", "--policies", "flat", "--sample-sessions", "0.5"
    )
    assert [r["concurrency"] for r in closed["rates"]] == [2]


def test_terminal_output_and_the_stated_error() -> None:
    """One replica samples one set of sessions: the error is not measured, and it says how to
    measure it (issue #36 item 17: no table from other traces)."""
    r = runner.invoke(app, ["replay", CLAUDE, *FAST, "--sample-sessions", "0.5"])
    assert r.exit_code == 0, r.output
    assert "sampled: 50 % of sessions (1 of 5)" in r.stdout
    assert "not measured (one sample: run --replicas 3 or more" in r.stdout
    doc = _doc("replay", CLAUDE, *FAST, "--sample-sessions", "0.5")
    assert doc["sampling"]["measured_error"] == "not measured"


def test_replicas_sample_other_sessions_and_state_the_error_across_them() -> None:
    """Replica i samples with salt seed + i, so it is the one-replica replay at seed + i: three
    session sets, and the stated error is the range across those three runs (hand-checked)."""
    args = {"rates": [1.0], "policies": ["memory-only", "flat"], "jobs": 1}
    three = api.replay(CLAUDE, sample_sessions=0.5, replicas=3, seed=4, **args)
    alone = [api.replay(CLAUDE, sample_sessions=0.5, seed=4 + i, **args) for i in range(3)]
    kept = [r.sampling.sessions.kept for r in alone if r.sampling is not None]
    fingerprints = {r.trace.fingerprint for r in alone}
    assert len(kept) == 3 and len(fingerprints) > 1  # other sessions in some replica
    note = f"sampling per replica: salts 4..6 kept {', '.join(map(str, kept))} of 5 sessions"
    assert note in three.notes
    # The document is replica 0's (its spread alone reads all three).
    assert [dataclasses.replace(p, spread=None) for p in three.rates[0].policies.values()] == [
        dataclasses.replace(p, spread=None) for p in alone[0].rates[0].policies.values()
    ]
    err = three.sampling.measured_error if three.sampling is not None else None
    assert err is not None and not isinstance(err, str)
    hits = {
        n: [r.rates[0].policies[n].gpu_hit_share_served for r in alone]
        for n in ("memory-only", "flat")
    }
    by_hand = max(100 * (max(h) - min(h)) for h in hits.values())
    assert err.gpu_hit_share_abs_pp == pytest.approx(by_hand, abs=1e-9)
    means = [r.rates[0].policies["flat"].ttft_s.mean for r in alone]
    assert err.ttft_mean_rel >= (max(means) - min(means)) / float(np.median(means)) - 1e-12
    assert err.measured_on.startswith("3 replicas of this trace's sample")


def test_recommend_and_plan_are_sampled(tmp_path: Path) -> None:
    doc = _doc(
        "recommend-thresholds",
        CLAUDE,
        "--rates",
        "1",
        "--short-reply",
        "128,512",
        "--agent-context",
        "65536",
        "--jobs",
        "1",
        "--sample-sessions",
        "0.5",
    )
    assert doc["sampling"]["sessions"] == {"kept": 1, "total": 5}
    out = tmp_path / "p"
    r = runner.invoke(
        app,
        [
            "plan",
            MOONCAKE,
            "-o",
            str(out),
            "--jobs",
            "1",
            "--rate",
            "2",
            "--sample-sessions",
            "0.5",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "sampled: 50 % of sessions" in r.stdout
    replay = json.loads((out / "replay.json").read_text())
    recommend = json.loads((out / "recommend.json").read_text())
    # The replay's three replicas sample their own sessions (replica 0 the one recommend
    # reads) and state the error across them; the recommendation's one sample cannot.
    rep_error = replay["sampling"].pop("measured_error")
    assert rep_error["measured_on"].startswith("3 replicas of this trace's sample")
    assert recommend["sampling"].pop("measured_error") == "not measured"
    assert replay["sampling"] == recommend["sampling"]
    assert any(n.startswith("sampling per replica: salts 0..2 kept") for n in replay["notes"])
    assert replay["sampling"]["requests"]["total"] == 2000
    assert "Sampled: 50 % of sessions" in (out / "report.html").read_text()


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.1", "nan", "inf"])
@pytest.mark.parametrize("command", ["replay", "recommend-thresholds", "plan"])
def test_bad_rates_exit_2_with_one_line(command: str, bad: str, tmp_path: Path) -> None:
    extra = ["-o", str(tmp_path / "p")] if command == "plan" else []
    r = runner.invoke(app, [command, CLAUDE, *extra, "--sample-sessions", bad])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sample-sessions: must satisfy 0 < rate <= 1" in lines[0]
    assert not (tmp_path / "p").exists()


def test_a_rate_that_keeps_nothing_is_refused() -> None:
    r = runner.invoke(app, ["replay", CLAUDE, *FAST, "--sample-sessions", "0.01"])
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and "keeps none of its 5 sessions" in r.stderr


def test_the_api_keyword_validates() -> None:
    with pytest.raises(ValueError, match="sample_sessions: must satisfy"):
        api.replay(CLAUDE, sample_sessions=2.0)
    with pytest.raises(ValueError, match="sample_sessions: must satisfy"):
        api.recommend_thresholds(CLAUDE, sample_sessions=0)
