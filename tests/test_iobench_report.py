"""Hand-computed medians and ratios, the runs table, and the rendered table."""

from __future__ import annotations

import io

import pytest
from fcctl.iobench.bench import FioSummary, IobenchResult, summarize
from fcctl.iobench.restore import RunResult
from fcctl.reports.iobench_report import ratios, render_table, runs_frame

from tests.iobench_helpers import tiny_workload

GB = 1e9


def _run(layout, conc, wall_s, restore_s, commands, mismatched=0):
    return RunResult(
        layout=layout,
        concurrency=conc,
        read_commands=commands,
        bytes_requested=int(2 * GB),
        bytes_read=int(2 * GB) + 4096,
        wall_s=wall_s,
        restore_s=restore_s,
        verified_bytes=int(2 * GB),
        mismatched_blocks=mismatched,
    )


def test_summarize_takes_medians_and_sums_verification():
    runs = [_run("flat", 4, w, (1.0, 2.0, 3.0, 4.0), 64) for w in (1.0, 2.0, 4.0)]
    runs[2] = _run("flat", 4, 4.0, (1.0, 2.0, 3.0, 4.0), 64, mismatched=2)
    s = summarize(runs)
    # Rates 2, 1, 0.5 GB/s: the median is 1 GB/s.
    assert s.restore_bytes_per_s == pytest.approx(1 * GB)
    assert s.restore_p50_s == pytest.approx(2.5)
    assert s.restore_p99_s == pytest.approx(3.97)
    assert s.verified_bytes == 3 * int(2 * GB)
    assert s.mismatched_blocks == 2
    assert s.read_amplification == pytest.approx(1 + 4096 / (2 * GB))


def _result():
    flat = (
        summarize([_run("flat", 1, 2.0, (2.0,), 100)]),
        summarize([_run("flat", 16, 1.0, (1.0,), 100)]),
    )
    evic = (
        summarize([_run("eviction", 1, 4.0, (4.0,), 1600)]),
        summarize([_run("eviction", 16, 5.0, (5.0,), 1600)]),
    )
    fio = FioSummary(
        available=True,
        ioengine="io_uring",
        seq_read_bytes_per_s=2.5 * GB,
        best_job="seq-4m-qd32",
        replay_bytes_per_s={"flat": 2 * GB, "eviction": GB},
    )
    return IobenchResult(
        engine_name="posix",
        o_direct=True,
        gds=None,
        engine_reason="test",
        workload=tiny_workload(),
        fio=fio,
        layouts={"flat": flat, "eviction": evic},
        provenance={},
    )


def test_ratios_hand_computed():
    r = ratios(_result())
    assert r["eviction_over_flat_read_commands"] == pytest.approx(16)
    # Same bytes: flat takes 2 s vs 4 s at c1, 1 s vs 5 s at c16.
    assert r["flat_over_eviction_restore_time_c1"] == pytest.approx(0.5)
    assert r["flat_over_eviction_restore_time_c16"] == pytest.approx(0.2)
    # 2 GB/s flat at c16 against 2.5 GB/s from fio.
    assert r["flat_c16_over_fio_seq"] == pytest.approx(0.8)


def test_runs_frame_and_table():
    result = _result()
    frame = runs_frame(result)
    assert frame.height == 4
    assert frame.filter(frame["layout"] == "eviction")["fio_replay_bytes_per_s"].to_list() == [
        GB,
        GB,
    ]
    buf = io.StringIO()
    render_table(result, file=buf, width=140)
    text = buf.getvalue()
    assert "1,600" in text and "2.00 GB/s" in text and "0.40 GB/s" in text
    assert "best sequential direct read 2.50 GB/s (seq-4m-qd32)" in text
    assert "flat restore at concurrency 16 reads at 0.80x fio's best sequential read" in text
    assert "verified" in text and "BAD" not in text
    d = result.to_json_dict()
    assert d["layouts"]["flat"][1]["restore_bytes_per_s"] == pytest.approx(2 * GB)
    assert d["fio"]["replay_bytes_per_s"] == {"flat": 2 * GB, "eviction": GB}


def test_repeats_table_says_all_verified_names_the_median_and_fits_80_columns():
    import dataclasses

    flat = (summarize([_run("flat", 1, w, (w,), 100) for w in (2.0, 1.0, 4.0)]),)
    evic = (summarize([_run("eviction", 1, w, (w,), 1600) for w in (4.0, 5.0, 3.0)]),)
    base = _result()
    fio = dataclasses.replace(
        base.fio,
        samples=(
            {"seq_read_bytes_per_s": 2.0 * GB, "best_job": "seq-1m-qd8"},
            {"seq_read_bytes_per_s": 3.0 * GB, "best_job": "seq-4m-qd32"},
            {"seq_read_bytes_per_s": 2.5 * GB, "best_job": "seq-8m-qd16"},
        ),
    )
    result = dataclasses.replace(base, fio=fio, layouts={"flat": flat, "eviction": evic})
    buf = io.StringIO()
    render_table(result, file=buf, width=80)
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [
        w
        for w in (line.split() for line in lines)
        if w[:1] in (["flat"], ["eviction"]) and w[1] == "1"
    ]
    # 3 repeats x 2 GB verified each = every requested byte of every repeat: "all".
    assert [r[-1] for r in rows] == ["all", "all"]
    # Median of 1, 2, 0.5 GB/s and of 0.5, 0.4, 0.67 GB/s.
    assert rows[0][4:6] == ["1.00", "GB/s"] and rows[1][4:6] == ["0.50", "GB/s"]
    assert "fio (io_uring): best sequential direct read 2.50 GB/s (median of 3)" in lines
