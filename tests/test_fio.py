from __future__ import annotations

import json
import os

import pytest

from fcctl.iobench import fio

MiB = 2**20


def _doc(jobs):
    return json.dumps({"fio version": "fio-3.33", "jobs": jobs})


def test_parse_fio_json_skips_notes_and_reads_rates():
    text = "note: both iodepth >= 1 and synchronous I/O engine are selected\n" + _doc(
        [
            {
                "jobname": "seq-4m-qd32",
                "error": 0,
                "job options": {"bs": "4194304", "iodepth": "32"},
                "read": {"io_bytes": 3 * 2**30, "runtime": 1500},
            },
            {
                "jobname": "seq-1m-qd8",
                "error": 0,
                "job options": {"bs": "1M", "iodepth": "8"},
                "read": {"io_bytes": 2**30, "runtime": 1000},
            },
        ]
    )
    jobs = fio.parse_fio_json(text)
    assert [j.name for j in jobs] == ["seq-4m-qd32", "seq-1m-qd8"]
    assert jobs[0].request_bytes == 4 * MiB and jobs[0].iodepth == 32
    assert jobs[0].read_bytes_per_s == pytest.approx(2**31)
    assert jobs[1].request_bytes == MiB and jobs[1].read_bytes_per_s == pytest.approx(2**30)
    report = fio.FioReport(available=True, seq_jobs=tuple(jobs))
    assert report.best_seq_job.name == "seq-4m-qd32"
    assert report.seq_read_bytes_per_s == pytest.approx(2**31)


def test_parse_fio_json_rejects_failed_jobs_and_garbage():
    with pytest.raises(fio.FioError, match="error 5"):
        fio.parse_fio_json(_doc([{"jobname": "x", "error": 5, "read": {}}]))
    with pytest.raises(fio.FioError, match="no JSON"):
        fio.parse_fio_json("fio: engine io_uring not loadable")
    with pytest.raises(fio.FioError, match="does not parse"):
        fio.parse_fio_json('{"jobs": [')


def test_write_iolog_v2(tmp_path):
    log = tmp_path / "a.iolog"
    n = fio.write_iolog(log, [("/d/x", 0, 4096), ("/d/y", 8192, 65536), ("/d/x", 4096, 4096)])
    assert n == 3
    assert log.read_text().splitlines() == [
        "fio version 2 iolog",
        "/d/x add",
        "/d/y add",
        "/d/x open",
        "/d/y open",
        "/d/x read 0 4096",
        "/d/y read 8192 65536",
        "/d/x read 4096 4096",
        "/d/x close",
        "/d/y close",
    ]
    with pytest.raises(fio.FioError, match="whitespace"):
        fio.write_iolog(tmp_path / "b.iolog", [("/d/a b", 0, 4096)])


def test_real_fio_seq_and_replay(tmp_path, fio_bin):
    files = []
    for name in ("a.bin", "b.bin"):
        p = tmp_path / name
        p.write_bytes(os.urandom(4 * MiB))
        files.append(str(p))
    engine, _ = fio.pick_ioengine(fio_bin, files[0])
    assert engine in fio.IOENGINES
    jobs = fio.seq_read_jobs(
        fio_bin, files, ioengine=engine, runtime_s=0.3, request_bytes=(MiB,), iodepths=(1, 4)
    )
    assert [j.name for j in jobs] == ["seq-1m-qd1", "seq-1m-qd4"]
    for j in jobs:
        assert j.io_bytes > 0 and j.read_bytes_per_s > 0 and j.request_bytes == MiB
    logs = []
    for k, f in enumerate(files):
        log = tmp_path / f"r{k}.iolog"
        fio.write_iolog(log, [(f, off, 64 * 1024) for off in range(0, 4 * MiB, 128 * 1024)])
        logs.append(log)
    job = fio.replay(fio_bin, logs, ioengine=engine, iodepth=1)
    # Two streams of 32 reads of 64 KiB, replayed exactly (at depth 1 fio counts every read).
    assert job.io_bytes == 2 * 32 * 64 * 1024
    assert job.read_bytes_per_s > 0
    # fio never writes: the data is unchanged after --readonly runs.
    assert all((tmp_path / n).stat().st_size == 4 * MiB for n in ("a.bin", "b.bin"))


def test_fio_round_names_each_phase_as_it_starts(tmp_path, fio_bin):
    """The progress bar's line during fio: what fio is doing now, in order."""
    from fcctl.iobench.fio_reference import fio_round, fio_setup
    from fcctl.iobench.flat import write_flat_layout
    from fcctl.iobench.restore import flat_restores
    from tests.iobench_helpers import tiny_workload

    wl = tiny_workload(sessions=2, blocks=8, turns=2)
    layout = write_flat_layout(wl, tmp_path / "flat")
    files = [str(p) for p in layout.session_files]
    setup = fio_setup(True, files)
    phases: list[str] = []
    fio_round(
        setup,
        files,
        {"flat": flat_restores(wl, layout)},
        tmp_path,
        runtime_s=0.05,
        streams=2,
        on_phase=phases.append,
    )
    assert phases == ["sequential reference reads", "replaying the flat layout's reads"]
