"""An independent, slow, obviously-correct checker of ``fcctl analyze --json`` figures.

Nothing here goes through our readers or kernels: each raw trace file is parsed with ``json``
/ ``csv`` / ``gzip``, put in analysis order exactly as issue #2 §2-§3 defines it, and every
figure is recomputed in plain Python (sets, dicts, an ``OrderedDict`` LRU) and
``numpy.percentile``; the CLI's JSON must agree. Inputs are the bundled samples and small
random traces (seeded), so the whole file runs in seconds.

Definitions followed (issue #2):
* analysis order: requests by timestamp, stable (file order breaks ties); Claude Code:
  sessions in file order, requests of a session (subagent requests at marker ``t`` + own
  ``t``, nested markers add up) sorted by time, stable in listing order;
* Claude Code hash ids are local to a session: the block key is (session line, id);
* once-only block share, reuse access share, reuse distances (requests, seconds, LRU stack
  distance = distinct *other* blocks accessed since the previous access, and x block bytes);
* per-session KV = distinct blocks x block tokens x KV bytes per token; turns; largest input;
* memory tier: LRU of floor(capacity_bytes / block_bytes) blocks, hit share over all accesses.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()
Q = (50, 90, 99)
# llama-3.1-8b, written out: 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes (bf16).
LLAMA_8B_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2


class Req:
    """One request in analysis order: time, sizes, block keys, session key (or None)."""

    def __init__(self, t: float, inp: int, out: int, blocks: list[Any], session: Any) -> None:
        self.t, self.inp, self.out, self.blocks, self.session = t, inp, out, blocks, session


# --- raw parsing (json/csv only) --------------------------------------------------------------


def _lines(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return [line for line in raw.split(b"\n") if line.strip()]


def parse_mooncake(path: Path) -> list[Req]:
    rows = [json.loads(line) for line in _lines(path)]
    reqs = [
        Req(r["timestamp"] / 1000.0, r["input_length"], r["output_length"], r["hash_ids"], None)
        for r in rows
    ]
    return sorted(reqs, key=lambda q: q.t)  # sorted() is stable


def parse_bailian(path: Path) -> list[Req]:
    rows = [json.loads(line) for line in _lines(path)]
    by_id = {r["chat_id"]: r for r in rows}

    def root(r: dict[str, Any]) -> int:
        while r["parent_chat_id"] != -1:
            if r["parent_chat_id"] not in by_id:
                return r["parent_chat_id"]
            r = by_id[r["parent_chat_id"]]
        return r["chat_id"]

    reqs = [
        Req(r["timestamp"], r["input_length"], r["output_length"], r["hash_ids"], root(r))
        for r in rows
    ]
    return sorted(reqs, key=lambda q: q.t)


def parse_claude_code(path: Path) -> list[Req]:
    out: list[Req] = []
    for line_no, line in enumerate(_lines(path)):
        session = json.loads(line)
        mine: list[Req] = []
        _walk(session["requests"], 0.0, line_no, mine)
        out.extend(sorted(mine, key=lambda q: q.t))
    return out


def _walk(requests: list[dict[str, Any]], t0: float, session: int, out: list[Req]) -> None:
    """Requests in listing order; a subagent marker's requests at marker t + own t."""
    for r in requests:
        if r.get("type") == "subagent":
            _walk(r["requests"], t0 + r["t"], session, out)
        else:
            blocks = [(session, h) for h in r["hash_ids"]]
            out.append(Req(t0 + r["t"], r["in"], r["out"], blocks, session))


def parse_azure(path: Path) -> list[Req]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"].strip()[:26]) for r in rows]
    t0 = min(stamps)
    reqs = [
        Req(
            (s - t0).total_seconds(),
            int(r["ContextTokens"]),
            int(r["GeneratedTokens"]),
            [],
            None,
        )
        for s, r in zip(stamps, rows, strict=True)
    ]
    return sorted(reqs, key=lambda q: q.t)


# --- reference metrics ------------------------------------------------------------------------


def pct(values: list[float]) -> list[float] | None:
    return None if not values else [float(v) for v in np.percentile(values, Q)]


def lru_hits(stream: list[Any], capacity: int) -> int:
    cache: OrderedDict[Any, None] = OrderedDict()
    hits = 0
    for b in stream:
        if b in cache:
            hits += 1
            cache.move_to_end(b)
        elif capacity > 0:
            cache[b] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def infer_sessions(reqs: list[Req], block_tokens: int) -> list[int]:
    """docs/analyze.md's prefix-chain rule, by brute force over all earlier requests."""
    session: list[int] = []
    continued: set[int] = set()
    n = 0
    for q, rq in enumerate(reqs):
        best, best_k = -1, 0
        for r in range(q):
            rr = reqs[r]
            k = min(len(rr.blocks), rr.inp // block_tokens)
            if k >= 1 and len(rq.blocks) > k and rq.blocks[:k] == rr.blocks[:k] and k >= best_k:
                best, best_k = r, k  # longest prefix; ties -> the latest request
        if best >= 0 and best not in continued:
            continued.add(best)
            session.append(session[best])
        else:
            session.append(n)
            n += 1
    return session


def reference(reqs: list[Req], block_tokens: int, caps_bytes: list[int]) -> dict[str, Any]:
    bpt = LLAMA_8B_BYTES_PER_TOKEN
    block_bytes = block_tokens * bpt
    stream = [(b, r) for r, q in enumerate(reqs) for b in q.blocks]
    counts: dict[Any, int] = {}
    for b, _ in stream:
        counts[b] = counts.get(b, 0) + 1
    d_req: list[int] = []
    d_sec: list[float] = []
    d_stack: list[int] = []
    last_pos: dict[Any, int] = {}
    last_req: dict[Any, int] = {}
    # Stack distance = distinct other blocks whose latest access lies strictly between the
    # previous access of b and now: count latest positions > p (a numpy vector for speed).
    dense: dict[Any, int] = {}
    latest = np.full(max(len(counts), 1), -1, dtype=np.int64)
    for i, (b, r) in enumerate(stream):
        if b in last_pos:
            p = last_pos[b]
            d_stack.append(int(np.count_nonzero(latest > p)))
            d_req.append(r - last_req[b])
            d_sec.append(reqs[r].t - reqs[last_req[b]].t)
        last_pos[b] = i
        last_req[b] = r
        latest[dense.setdefault(b, len(dense))] = i
    n_acc = len(stream)
    reuse = n_acc - len(counts)
    blocks_only = [b for b, _ in stream]
    tier = []
    for c in caps_bytes:
        hits = lru_hits(blocks_only, c // block_bytes)
        share = hits / n_acc if n_acc else None
        tier.append(
            {
                "capacity_bytes": c,
                "capacity_blocks": c // block_bytes,
                "lru_hit_share": share,
                "share_of_ideal": hits / reuse if reuse else None,
            }
        )
    doc: dict[str, Any] = {
        "requests": len(reqs),
        "block_accesses": n_acc,
        "distinct_blocks": len(counts),
        "once_only_block_share": (
            sum(1 for v in counts.values() if v == 1) / len(counts) if counts else None
        ),
        "reuse_access_share": reuse / n_acc if n_acc else None,
        "requests_d": pct(d_req),
        "seconds_d": pct(d_sec),
        "stack_blocks": pct(d_stack),
        "stack_bytes": pct([d * block_bytes for d in d_stack]),
        "memory_tier": tier,
        "input_p": pct([q.inp for q in reqs]),
        "output_p": pct([q.out for q in reqs]),
    }
    if reqs and reqs[0].session is None:
        if n_acc:
            ids = infer_sessions(reqs, block_tokens)
            for q, s in zip(reqs, ids, strict=True):
                q.session = s
    if reqs and reqs[0].session is not None:
        sessions: dict[Any, list[Req]] = {}
        for q in reqs:
            sessions.setdefault(q.session, []).append(q)
        kv = [
            len({b for q in qs for b in q.blocks}) * block_tokens * bpt for qs in sessions.values()
        ]
        doc["num_sessions"] = len(sessions)
        doc["kv"] = [*pct(kv), float(max(kv)), float(np.mean(kv))]
        doc["turns"] = pct([len(qs) for qs in sessions.values()])
        doc["max_input"] = pct([max(q.inp for q in qs) for qs in sessions.values()])
    else:
        doc["num_sessions"] = None
    return doc


# --- comparison -------------------------------------------------------------------------------


def _close(got: Any, want: Any, what: str) -> None:
    if want is None:
        assert got is None, f"{what}: got {got!r}, reference None"
        return
    if isinstance(want, list):
        assert got is not None and len(got) == len(want), f"{what}: got {got!r}, want {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{what}[{i}]")
        return
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9), f"{what}: got {got!r}, want {want!r}"


def _p(d: dict[str, Any] | None, keys: tuple[str, ...] = ("p50", "p90", "p99")) -> Any:
    if d is None or all(d[k] is None for k in keys):
        return None
    return [d[k] for k in keys]


def _analyze_doc(path: Path, caps: list[int], chunk_accesses: int | None, *flags: str) -> Any:
    """The --json document: through the CLI, or (to set the kernel's chunk size, which has no
    flag) through the library with the CLI's defaults."""
    if chunk_accesses is None:
        memory = ",".join(f"{c}B" for c in caps)
        res = runner.invoke(app, ["analyze", str(path), "--json", "--memory", memory, *flags])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)
    from fcctl.analyzers.reuse.analyze import analyze_trace
    from fcctl.analyzers.traces.readers import read_trace
    from fcctl.common.jsonio import to_jsonable
    from fcctl.layout.geometry import model_geometry

    assert not flags, "flags go through the CLI only"
    result = analyze_trace(
        read_trace(path),
        geometry=model_geometry("llama-3.1-8b"),
        memory_capacities_bytes=caps,
        chunk_accesses=chunk_accesses,
    )
    return to_jsonable(result)


def check(
    path: Path,
    reqs: list[Req],
    block_tokens: int,
    caps: list[int],
    *flags: str,
    chunk_accesses: int | None = None,
) -> None:
    caps = sorted(set(caps))  # analyze reports capacities ascending, without repeats
    doc = _analyze_doc(path, caps, chunk_accesses, *flags)
    ref = reference(reqs, block_tokens, caps)
    assert doc["kv"]["bytes_per_token"] == LLAMA_8B_BYTES_PER_TOKEN
    assert doc["kv"]["block_bytes"] == block_tokens * LLAMA_8B_BYTES_PER_TOKEN
    assert doc["trace"]["requests"] == ref["requests"]
    assert doc["trace"]["sessions"] == ref["num_sessions"]
    rs = doc["request_sizes"]
    _close(_p(rs["input_tokens"]), ref["input_p"], "input_tokens")
    _close(_p(rs["output_tokens"]), ref["output_p"], "output_tokens")
    assert doc["trace"]["block_accesses"] == ref["block_accesses"]
    assert doc["trace"]["distinct_blocks"] == ref["distinct_blocks"]
    _close(doc["once_only_block_share"], ref["once_only_block_share"], "once_only_block_share")
    _close(doc["reuse_access_share"], ref["reuse_access_share"], "reuse_access_share")
    rd = doc["reuse_distance"]
    _close(_p(rd["requests"]), ref["requests_d"], "reuse_distance.requests")
    _close(_p(rd["seconds"]), ref["seconds_d"], "reuse_distance.seconds")
    _close(_p(rd["stack_blocks"]), ref["stack_blocks"], "reuse_distance.stack_blocks")
    _close(_p(rd["stack_bytes"]), ref["stack_bytes"], "reuse_distance.stack_bytes")
    for got, want in zip(doc["memory_tier"], ref["memory_tier"], strict=True):
        assert got["capacity_bytes"] == want["capacity_bytes"]
        assert got["capacity_blocks"] == want["capacity_blocks"]
        _close(got["lru_hit_share"], want["lru_hit_share"], f"lru_hit_share@{got}")
        _close(got["share_of_ideal"], want["share_of_ideal"], f"share_of_ideal@{got}")
    if ref["num_sessions"] is not None:
        s = doc["sessions"]
        _close(_p(s["kv_bytes"], ("p50", "p90", "p99", "max", "mean")), ref["kv"], "sessions.kv")
        _close(_p(s["turns"]), ref["turns"], "sessions.turns")
        _close(_p(s["max_input_tokens"]), ref["max_input"], "sessions.max_input_tokens")


# --- bundled samples --------------------------------------------------------------------------

MIB = 1 << 20


def test_mooncake_sample_matches_reference() -> None:
    path = SAMPLES / "mooncake_conversation_2k.jsonl"
    block = 512 * LLAMA_8B_BYTES_PER_TOKEN
    caps = [block - 1, block, 10 * block, 100 * block + 5, 1000 * block, 64 << 30]
    check(path, parse_mooncake(path), 512, caps)


def test_claude_code_sample_matches_reference() -> None:
    path = SAMPLES / "claude_code_sample.jsonl.gz"
    caps = [8 * MIB, 80 * MIB, 800 * MIB, 8000 * MIB, 64 << 30]
    reqs = parse_claude_code(path)
    check(path, reqs, 64, caps)
    # Per-session clocks: duration_s is the longest session's span (docs/analyze.md).
    spans: dict[Any, list[float]] = {}
    for q in reqs:
        spans.setdefault(q.session, []).append(q.t)
    doc = json.loads(runner.invoke(app, ["analyze", str(path), "--json"]).stdout)
    longest = max(max(ts) - min(ts) for ts in spans.values())
    assert doc["trace"]["duration_s"] == pytest.approx(longest, rel=1e-12)
    assert doc["request_sizes"]["arrival_rate_per_s"] is None


def test_bailian_sample_matches_reference() -> None:
    path = SAMPLES / "bailian_synthetic.jsonl"
    caps = [2 * MIB, 20 * MIB, 200 * MIB, 2000 * MIB]
    check(path, parse_bailian(path), 16, caps)


def test_azure_sample_matches_reference() -> None:
    path = SAMPLES / "azure_conv_1k.csv"
    reqs = parse_azure(path)
    res = runner.invoke(app, ["analyze", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["reuse_access_share"] is None and doc["once_only_block_share"] is None
    assert doc["trace"]["block_accesses"] is None and doc["sessions"] is None
    rs = doc["request_sizes"]
    _close(_p(rs["input_tokens"]), pct([q.inp for q in reqs]), "input_tokens")
    _close(_p(rs["output_tokens"]), pct([q.out for q in reqs]), "output_tokens")
    _close(
        _p(rs["kv_bytes"]),
        pct([q.inp * LLAMA_8B_BYTES_PER_TOKEN for q in reqs]),
        "request kv_bytes",
    )
    duration = max(q.t for q in reqs) - min(q.t for q in reqs)
    assert doc["trace"]["duration_s"] == pytest.approx(duration, rel=1e-9)
    assert doc["request_sizes"]["arrival_rate_per_s"] == pytest.approx(len(reqs) / duration)


# --- random small traces ----------------------------------------------------------------------


def _prefix_ids(rng: random.Random, table: dict[tuple[int, ...], int], n_blocks: int) -> list[int]:
    """Prefix hashes as real traces have them: the id of block k names blocks 0..k."""
    # Pick an existing chain to extend (shared prefixes and multi-turn growth) or start afresh.
    chains = [k for k in table if len(k) <= n_blocks]
    seq: list[int] = list(rng.choice(chains)) if chains and rng.random() < 0.7 else []
    seq = seq[: rng.randint(0, len(seq))] if seq and rng.random() < 0.3 else seq
    while len(seq) < n_blocks:
        seq.append(rng.randint(0, 3))
    seq = seq[:n_blocks]
    ids = []
    for k in range(1, len(seq) + 1):
        ids.append(table.setdefault(tuple(seq[:k]), rng.randrange(2**64)))
    return ids


@pytest.mark.parametrize("seed", range(6))
def test_random_mooncake_traces(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    table: dict[tuple[int, ...], int] = {}
    lines = []
    t = 0
    for _ in range(rng.randint(1, 60)):
        t += rng.choice([0, 0, 1, 250, 1000, 3333])  # ties on purpose
        n = rng.randint(0, 7)
        inp = max(0, n * 512 - rng.randint(0, 511)) if n else rng.randint(0, 3)
        row = {
            "timestamp": t if rng.random() < 0.8 else max(0, t - rng.randint(0, 2000)),
            "input_length": inp,
            "output_length": rng.randint(0, 900),
            "hash_ids": _prefix_ids(rng, table, n),
        }
        lines.append(json.dumps(row))
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    block = 512 * LLAMA_8B_BYTES_PER_TOKEN
    check(path, parse_mooncake(path), 512, [block, 2 * block, 5 * block, 40 * block])


def _cc_requests(rng: random.Random, depth: int, t_max: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(rng.randint(0, 6)):
        t = rng.choice([0.0, 1.0, 2.5, round(rng.uniform(0, t_max), 3)])
        if depth < 2 and rng.random() < 0.25:
            out.append({"t": t, "type": "subagent", "requests": _cc_requests(rng, depth + 1, 5)})
            continue
        ids = [rng.randint(0, 12) for _ in range(rng.randint(0, 6))]
        out.append(
            {
                "t": t,
                "type": "n",
                "in": 64 * len(ids) + rng.randint(0, 63),
                "out": 7,
                "hash_ids": ids,
            }
        )
    return out


def _random_claude_code_trace(tmp_path: Path, seed: int) -> Path:
    rng = random.Random(100 + seed)
    sessions = []
    for k in range(rng.randint(1, 5)):
        reqs = _cc_requests(rng, 0, 30.0)
        if not any("hash_ids" in r for r in reqs):
            reqs.append({"t": 1.0, "type": "n", "in": 64, "out": 1, "hash_ids": [1]})
        sessions.append(
            {"id": f"trace_{k:04d}", "block_size": 64, "hash_id_scope": "local", "requests": reqs}
        )
    path = tmp_path / "cc.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps(s).encode() + b"\n" for s in sessions)))
    return path


CC_BLOCK_BYTES = 64 * LLAMA_8B_BYTES_PER_TOKEN
CC_CAPS = [CC_BLOCK_BYTES, 3 * CC_BLOCK_BYTES, 9 * CC_BLOCK_BYTES, 50 * CC_BLOCK_BYTES]


@pytest.mark.parametrize("seed", range(6))
def test_random_claude_code_traces(tmp_path: Path, seed: int) -> None:
    path = _random_claude_code_trace(tmp_path, seed)
    check(path, parse_claude_code(path), 64, CC_CAPS)


@pytest.mark.parametrize("seed", range(4))
def test_random_bailian_traces(tmp_path: Path, seed: int) -> None:
    rng = random.Random(200 + seed)
    table: dict[tuple[int, ...], int] = {}
    rows: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 40)):
        earlier = [r["chat_id"] for r in rows]
        parent = rng.choice(earlier) if earlier and rng.random() < 0.6 else -1
        if parent == -1 and rng.random() < 0.1:
            parent = 10_000 + i  # a parent that is not in the file
        n = rng.randint(0, 6)
        rows.append(
            {
                "chat_id": i,
                "parent_chat_id": parent,
                "timestamp": rng.choice([0, 1, 1.5, 7, i]),
                "input_length": n * 16,
                "output_length": 3,
                "type": "text",
                "turn": 1,
                "hash_ids": _prefix_ids(rng, table, n),
            }
        )
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    block = 16 * LLAMA_8B_BYTES_PER_TOKEN
    check(path, parse_bailian(path), 16, [block, 4 * block, 30 * block])


# --- real traces beside the repository (slow: run with -m slow) -------------------------------


@pytest.mark.slow
def test_whole_mooncake_traces_match_reference(shared_traces: Path) -> None:
    block = 512 * LLAMA_8B_BYTES_PER_TOKEN
    for name in ("synthetic_trace.jsonl", "conversation_trace.jsonl"):
        path = shared_traces / "mooncake" / name
        caps = [16 << 30, 64 << 30, 256 << 30, 1 << 40, 7 * block + 3]
        check(path, parse_mooncake(path), 512, caps)


@pytest.mark.slow
def test_claude_code_session_subset_matches_reference(shared_traces: Path, tmp_path: Path) -> None:
    # Every 50th session of the whole trace (15 sessions, subagents included).
    src = shared_traces / "weka_kv_cache_tester" / "claude_code_traces.jsonl.gz"
    keep = [line for i, line in enumerate(_lines(src)) if i % 50 == 7]
    path = tmp_path / "subset.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(keep) + b"\n"))
    caps = [8 * MIB, 800 * MIB, 16 << 30, 64 << 30]
    check(path, parse_claude_code(path), 64, caps)


# --- --out tables -----------------------------------------------------------------------------


def _distances(reqs: list[Req]) -> dict[str, list[float]]:
    """Every re-access's distance in requests, seconds and stack blocks (as in reference())."""
    stream = [(b, r) for r, q in enumerate(reqs) for b in q.blocks]
    last_pos: dict[Any, int] = {}
    last_req: dict[Any, int] = {}
    dense: dict[Any, int] = {}
    latest = np.full(max(len({b for b, _ in stream}), 1), -1, dtype=np.int64)
    out: dict[str, list[float]] = {"requests": [], "seconds": [], "stack_blocks": []}
    for i, (b, r) in enumerate(stream):
        if b in last_pos:
            out["stack_blocks"].append(int(np.count_nonzero(latest > last_pos[b])))
            out["requests"].append(r - last_req[b])
            out["seconds"].append(reqs[r].t - reqs[last_req[b]].t)
        last_pos[b], last_req[b] = i, r
        latest[dense.setdefault(b, len(dense))] = i
    return out


@pytest.mark.parametrize(
    ("sample", "parse", "block_tokens"),
    [
        ("claude_code_sample.jsonl.gz", parse_claude_code, 64),
        ("bailian_synthetic.jsonl", parse_bailian, 16),
    ],
)
def test_out_tables_match_reference(sample: str, parse: Any, block_tokens: int, tmp_path: Path):
    import polars as pl

    path = SAMPLES / sample
    out = tmp_path / "out"
    res = runner.invoke(app, ["analyze", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    reqs = parse(path)
    dist = _distances(reqs)
    block_bytes = block_tokens * LLAMA_8B_BYTES_PER_TOKEN
    hist = pl.read_parquet(out / "histograms.parquet")
    for metric, values, scale in (
        ("requests", dist["requests"], 1),
        ("seconds", dist["seconds"], 1),
        ("stack_blocks", dist["stack_blocks"], 1),
        ("stack_bytes", dist["stack_blocks"], block_bytes),
    ):
        part = hist.filter(pl.col("metric") == metric)
        assert int(part["count"].sum()) == len(values), metric
        scaled = np.asarray(values, dtype=np.float64) * scale
        for lo, hi, count in part.select("bucket_lo", "bucket_hi", "count").iter_rows():
            want = int(np.count_nonzero((scaled >= lo) & (scaled < hi)))
            assert count == want, (metric, lo, hi)
    # Per request: blocks, and how many of them were seen earlier.
    table = pl.read_parquet(out / "requests.parquet")
    seen: set[Any] = set()
    reused = []
    for q in reqs:
        reused.append(sum(1 for b in q.blocks if b in seen))
        seen.update(q.blocks)
    assert table["blocks"].to_list() == [len(q.blocks) for q in reqs]
    assert table["reused_blocks"].to_list() == reused
    assert table["input_tokens"].to_list() == [q.inp for q in reqs]
    # Per session: turns and distinct blocks, matched by session id.
    sessions = pl.read_parquet(out / "sessions.parquet")
    by_key: dict[Any, list[Req]] = {}
    for q in reqs:
        by_key.setdefault(q.session, []).append(q)
    got = sorted(
        zip(sessions["turns"].to_list(), sessions["distinct_blocks"].to_list(), strict=True)
    )
    want = sorted((len(qs), len({b for q in qs for b in q.blocks})) for qs in by_key.values())
    assert got == want
    # The hit curve, point by point, against a plain LRU.
    curve = pl.read_parquet(out / "memory_tier_curve.parquet")
    stream = [b for q in reqs for b in q.blocks]
    for cap, share in list(curve.select("capacity_blocks", "lru_hit_share").iter_rows())[::7]:
        assert share == pytest.approx(lru_hits(stream, cap) / len(stream), abs=1e-12), cap


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_tiny_kernel_chunks_give_the_same_figures(chunk: int, tmp_path: Path) -> None:
    # The kernel walks the stream in chunks of whole requests (4 M accesses in production),
    # carrying state across calls; tiny chunks put chunk boundaries everywhere.
    path = SAMPLES / "bailian_synthetic.jsonl"
    check(path, parse_bailian(path), 16, [2 * MIB, 20 * MIB, 200 * MIB], chunk_accesses=chunk)
    path = _random_claude_code_trace(tmp_path, 3)
    check(path, parse_claude_code(path), 64, CC_CAPS, chunk_accesses=chunk)
