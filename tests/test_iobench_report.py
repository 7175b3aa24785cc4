"""Hand-computed medians and ratios, the runs table, and the rendered table."""

from __future__ import annotations

import io
import json

import pytest

from fcctl.common.jsonio import dumps
from fcctl.common.provenance import collect_provenance
from fcctl.iobench.restore import RunResult
from fcctl.iobench.result import (
    SCHEMA_VERSION,
    ChecksumInfo,
    EngineInfo,
    FioRound,
    FioSummary,
    IobenchResult,
    Ratio,
    WorkloadSummary,
    compare,
    summarize,
)
from fcctl.reports.iobench_report import print_summary, runs_frame

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
    assert s.restore_s.p50 == pytest.approx(2.5)
    assert s.restore_s.p99 == pytest.approx(3.97)
    assert s.verified_bytes == 3 * int(2 * GB)
    assert s.mismatched_blocks == 2
    assert s.read_amplification == pytest.approx(1 + 4096 / (2 * GB))


def _result(fio: FioSummary | None = None, flat=None, evic=None):
    flat = flat or (
        summarize([_run("flat", 1, 2.0, (2.0,), 100)]),
        summarize([_run("flat", 16, 1.0, (1.0,), 100)]),
    )
    evic = evic or (
        summarize([_run("eviction", 1, 4.0, (4.0,), 1600)]),
        summarize([_run("eviction", 16, 5.0, (5.0,), 1600)]),
    )
    fio = fio or FioSummary(
        available=True,
        seq_read_bytes_per_s=2.5 * GB,
        replay_bytes_per_s={"flat": 2 * GB, "eviction": GB},
        ioengine="io_uring",
        best_job="seq-4m-qd32",
    )
    layouts = {"flat": flat, "eviction": evic}
    return IobenchResult(
        schema_version=SCHEMA_VERSION,
        engine=EngineInfo(name="posix", o_direct=True, gds=False),
        workload=WorkloadSummary(
            sessions=6, layers=4, block_tokens=16, bytes=6 * 40 * 4 * 4096, model="tiny"
        ),
        fio=fio,
        layouts=layouts,
        comparisons=compare(layouts, fio),
        checksums=ChecksumInfo(requested=True, verified=True),
        provenance=collect_provenance("2026-12-01T00:00:00Z", argv=["test"]),
        engine_reason="test",
    )


def test_comparisons_hand_computed():
    c = _result().comparisons
    assert c.eviction_over_flat_read_commands == Ratio(1, pytest.approx(16))
    # Same bytes: flat takes 2 s vs 4 s at c1, 1 s vs 5 s at c16.
    assert c.flat_over_eviction_restore_time == (
        Ratio(1, pytest.approx(0.5)),
        Ratio(16, pytest.approx(0.2)),
    )
    # 2 GB/s flat at c16 against 2.5 GB/s from fio.
    assert c.flat_over_fio_seq == Ratio(16, pytest.approx(0.8))


def test_comparisons_without_fio_or_without_a_second_layout():
    no_fio = _result(fio=FioSummary(available=False, reason="--no-fio given"))
    assert no_fio.comparisons.flat_over_fio_seq is None
    assert no_fio.comparisons.eviction_over_flat_read_commands == Ratio(1, pytest.approx(16))
    flat_only = compare({"flat": _result().layouts["flat"], "eviction": ()}, _result().fio)
    assert flat_only.eviction_over_flat_read_commands is None
    assert flat_only.flat_over_eviction_restore_time == ()
    assert flat_only.flat_over_fio_seq == Ratio(16, pytest.approx(0.8))


def test_json_document_keys_and_comparisons():
    doc = json.loads(dumps(_result()))
    assert list(doc) == [
        "schema_version",
        "engine",
        "workload",
        "fio",
        "layouts",
        "comparisons",
        "checksums",
        "provenance",
    ]
    assert doc["engine"] == {"name": "posix", "o_direct": True, "gds": False}
    assert doc["workload"] == {
        "sessions": 6,
        "layers": 4,
        "block_tokens": 16,
        "bytes": 3932160,
        "scale": 1.0,
    }
    assert doc["checksums"] == {"requested": True, "verified": True, "off_reason": None}
    assert doc["fio"] == {
        "available": True,
        "seq_read_bytes_per_s": 2.5 * GB,
        "replay_bytes_per_s": {"flat": 2 * GB, "eviction": GB},
    }
    assert doc["comparisons"] == {
        "eviction_over_flat_read_commands": {"concurrency": 1, "ratio": 16.0},
        "flat_over_eviction_restore_time": [
            {"concurrency": 1, "ratio": 0.5},
            {"concurrency": 16, "ratio": 0.2},
        ],
        "flat_over_fio_seq": {"concurrency": 16, "ratio": 0.8},
    }
    assert doc["layouts"]["flat"][0] == {
        "concurrency": 1,
        "read_commands": 100,
        "bytes_requested": int(2 * GB),
        "bytes_read": int(2 * GB) + 4096,
        "read_amplification": pytest.approx(1 + 4096 / (2 * GB)),
        "restore_bytes_per_s": 1 * GB,
        "restore_s": {"p50": 2.0, "p99": 2.0},
        "verified_bytes": int(2 * GB),
        "mismatched_blocks": 0,
        "concurrency_ran": 1,
        "checksum_verified_bytes": 0,
    }
    assert doc["provenance"]["argv"] == ["test"]


def test_runs_frame_and_table():
    result = _result()
    frame = runs_frame(result)
    assert frame.height == 4
    assert frame.filter(frame["layout"] == "eviction")["fio_replay_bytes_per_s"].to_list() == [
        GB,
        GB,
    ]
    buf = io.StringIO()
    print_summary(result, file=buf, width=140)
    text = buf.getvalue()
    assert "1,600" in text and "2.00 GB/s" in text and "0.40 GB/s" in text
    assert "best sequential direct read 2.50 GB/s (seq-4m-qd32)" in text
    assert "flat restore at concurrency 16 reads at 0.80x fio's best sequential read" in text
    assert "verified" in text and "BAD" not in text
    d = json.loads(dumps(result))
    assert d["layouts"]["flat"][1]["restore_bytes_per_s"] == pytest.approx(2 * GB)
    assert d["fio"]["replay_bytes_per_s"] == {"flat": 2 * GB, "eviction": GB}


def test_repeats_table_says_all_verified_names_the_median_and_fits_80_columns():
    import dataclasses

    flat = (summarize([_run("flat", 1, w, (w,), 100) for w in (2.0, 1.0, 4.0)]),)
    evic = (summarize([_run("eviction", 1, w, (w,), 1600) for w in (4.0, 5.0, 3.0)]),)
    base = _result()
    fio = dataclasses.replace(
        base.fio,
        rounds=tuple(
            FioRound(rate * GB, job, {}, {})
            for rate, job in ((2.0, "seq-1m-qd8"), (3.0, "seq-4m-qd32"), (2.5, "seq-8m-qd16"))
        ),
    )
    result = _result(fio=fio, flat=flat, evic=evic)
    buf = io.StringIO()
    print_summary(result, file=buf, width=80)
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


def test_a_concurrency_above_the_sessions_is_labelled_with_what_ran():
    """A "16" row of a 4-session workload ran 4 restores at once: the table and JSON say so."""
    flat = (summarize([_run("flat", 16, 1.0, (1.0, 1.0, 1.0, 1.0), 100)]),)
    evic = (summarize([_run("eviction", 16, 2.0, (2.0, 2.0, 2.0, 2.0), 1600)]),)
    result = _result(flat=flat, evic=evic)
    assert result.layouts["flat"][0].concurrency_ran == 4
    assert json.loads(dumps(result))["layouts"]["eviction"][0]["concurrency_ran"] == 4
    buf = io.StringIO()
    print_summary(result, file=buf, width=140)
    assert buf.getvalue().count("16 (ran 4: only 4 sessions)") == 2


def test_human_output_names_the_scale_of_a_trace_workload_and_the_checksums():
    import dataclasses

    base = _result()
    scaled = dataclasses.replace(
        base,
        workload=dataclasses.replace(base.workload, source="trace.jsonl", scale=0.0123),
        checksums=ChecksumInfo(True, False, "layer checksums not verified (GPU destination)"),
    )
    buf = io.StringIO()
    print_summary(scaled, file=buf, width=140)
    text = buf.getvalue()
    assert "workload: trace.jsonl, token counts scaled by 0.0123" in text
    assert "not checked in the timed region: layer checksums not verified (GPU" in text
    buf = io.StringIO()
    print_summary(base, file=buf, width=140)
    assert "scaled by" not in buf.getvalue()
    assert "checked every layer checksum inside the timed region" in buf.getvalue()


def test_checksum_info_says_why_verification_was_off():
    """Reads into GPU memory the engine cannot check (kvikio into CuPy) are named, not hidden."""
    import dataclasses

    from fcctl.iobench.config import IobenchConfig
    from fcctl.iobench.run import _checksum_info, _Measured

    gpu_note = "layer checksums not verified (GPU destination)"
    checked = dataclasses.replace(
        _run("flat", 1, 1.0, (1.0,), 100), checksums_verified=True, checksum_verified_bytes=7
    )
    on_gpu = dataclasses.replace(_run("flat", 4, 1.0, (1.0,), 100), notes=(gpu_note,))
    config = IobenchConfig()
    info = _checksum_info(config, _Measured(runs={("flat", 1): [checked]}))
    assert info == ChecksumInfo(requested=True, verified=True, off_reason=None)
    info = _checksum_info(config, _Measured(runs={("flat", 1): [checked], ("flat", 4): [on_gpu]}))
    assert info == ChecksumInfo(True, False, gpu_note)
    off = _checksum_info(
        IobenchConfig(verify_checksums=False), _Measured(runs={("flat", 1): [on_gpu]})
    )
    assert off == ChecksumInfo(False, False, "--no-verify-checksums given")
    assert _checksum_info(config, _Measured()).verified is False  # flat not run
