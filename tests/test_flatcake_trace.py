"""FlatCake adapter captures (``FLATCAKE_TRACE``) read by ``fcctl analyze`` (issue #17, item 4):
a session served through the adapters' shared glue is recorded, read back by the ``flatcake``
reader, and analyses to the figures of that session, computed here by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fcctl import api
from fcctl.analyzers.traces.readers import TraceFormatError, detect_format, read_trace
from fcctl.cli import app
from fcctl.layout.adapters.common import SessionKV, StoreOptions
from fcctl.layout.adapters.trace import key_id

PAGE_TOKENS = 16
# One chat of three turns: each prompt repeats the last (prompt + reply) and adds pages.
CHAINS = [[f"p{i}" for i in range(n)] for n in (3, 6, 9)]
REPLIES = [20, 30, 40]


def _serve(tmp_path: Path, trace: Path, session_id: str | None) -> None:
    """Serve the chat as an engine adapter does: look up, load the stored prefix, store the
    rest; each request recorded with its prompt and reply tokens."""
    kv = SessionKV(
        StoreOptions(
            str(tmp_path / "kv"), host_bytes=1 << 20, ssd_bytes=1 << 24, extent_bytes=1 << 16
        ),
        engine="test",
        layers=2,
        layer_page_bytes=128,
        tokens_per_key=PAGE_TOKENS,
        trace=trace,
    )
    rng = np.random.default_rng(5)
    written: dict[str, np.ndarray] = {}
    for chain, reply in zip(CHAINS, REPLIES, strict=True):
        kv.record(
            chain,
            session_id=session_id,
            source="test",
            input_tokens=len(chain) * PAGE_TOKENS,
            output_tokens=reply,
        )
        hits = kv.lookup(chain)
        if hits:
            got = kv.read(chain[:hits])
            assert got is not None
            assert np.array_equal(got, np.stack([written[k] for k in chain[:hits]]))
        new = chain[hits:]
        pages = rng.integers(0, 256, (len(new), 2, 128), dtype=np.uint8)
        written.update(zip(new, pages, strict=True))
        kv.write(new, pages, prefix=chain[:hits], session_id=session_id)
        if session_id is not None:
            kv.set_previous_reply(session_id, reply)
    kv.close(remove=True)


@pytest.mark.parametrize("session_id", ["chat-1", None])
def test_a_served_session_analyses_to_its_own_figures(
    tmp_path: Path, session_id: str | None
) -> None:
    trace_path = tmp_path / "capture.jsonl"
    _serve(tmp_path, trace_path, session_id)
    rows = [json.loads(line) for line in trace_path.read_text().splitlines()]
    assert [r["hash_ids"] for r in rows] == [[key_id(k) for k in c] for c in CHAINS]
    assert len({r["session_id"] for r in rows}) == 1
    assert detect_format(trace_path) == "flatcake"

    trace = read_trace(trace_path)
    assert trace.format == "flatcake" and trace.has_sessions and trace.block_size_tokens == 16
    req = trace.requests
    assert req["turn"].to_list() == [0, 1, 2] and req["parent_request"].to_list() == [None, 0, 1]
    assert req["input_tokens"].to_list() == [48, 96, 144]
    assert req["output_tokens"].to_list() == REPLIES
    assert req["timestamp_s"][0] == 0.0 and req["timestamp_s"].is_sorted()

    result = api.analyze(trace_path)
    t = result.trace
    assert (t.format, t.requests, t.sessions) == ("flatcake", 3, 1)
    # By hand: 3 + 6 + 9 = 18 block accesses of 9 distinct blocks; pages 0-2 are read three
    # times, 3-5 twice, 6-8 once; 3 + 6 = 9 of the 18 accesses are reuses.
    assert (t.block_accesses, t.distinct_blocks) == (18, 9)
    assert result.once_only_block_share == pytest.approx(3 / 9)
    assert result.reuse_access_share == pytest.approx(9 / 18)
    assert result.sessions is not None and result.sessions.count == 1
    assert result.sessions.max_input_tokens.p50 == 144


def test_cli_reads_a_capture(tmp_path: Path) -> None:
    trace_path = tmp_path / "capture.jsonl"
    _serve(tmp_path, trace_path, "chat-1")
    out = CliRunner().invoke(app, ["analyze", str(trace_path), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["trace"]["format"] == "flatcake" and doc["trace"]["requests"] == 3


def _line(**fields: object) -> str:
    row = {
        "flatcake_trace": 1,
        "timestamp_s": 1.0,
        "session_id": "s",
        "hash_ids": [1, 2],
        "block_size_tokens": 16,
        "input_tokens": None,
        "output_tokens": None,
    }
    row.update(fields)
    return json.dumps(row) + "\n"


def test_nulls_take_the_documented_values(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_line() + _line(timestamp_s=3.5, session_id="t", engine="sglang"))
    trace = read_trace(path)
    assert trace.requests["input_tokens"].to_list() == [32, 32]
    assert trace.requests["output_tokens"].to_list() == [0, 0]
    assert trace.requests["timestamp_s"].to_list() == [0.0, 2.5]
    assert any("without output_tokens" in n for n in trace.notes)


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (_line(block_size_tokens=32), "line 2: field 'block_size_tokens' must be 16"),
        (_line(session_id=None), "line 2: field 'session_id'"),
        (_line(hash_ids=[-1]), "line 2: hash_ids[0] must be an integer in [0, 2**64); got -1"),
        (_line(flatcake_trace=2), "line 2: field 'flatcake_trace' must be 1; got 2"),
        (_line(output_tokens=-3), "line 2: field 'output_tokens' must be a non-negative"),
    ],
)
def test_bad_lines_are_one_line_errors(tmp_path: Path, second: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(_line() + second)
    with pytest.raises(TraceFormatError, match=re.escape(message)):
        read_trace(path)
    out = CliRunner().invoke(app, ["analyze", str(path)])
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output
