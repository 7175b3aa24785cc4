"""``fcctl iobench`` end to end on a few MiB of real files, and its bad-input handling."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fcctl.cli import app
from fcctl.iobench.restore import run_restore
from fcctl.iobench.run import RunHooks
from tests.conftest import REPO, SAMPLES
from tests.iobench_helpers import (
    app_with_hooks,
    small_iobench_args,
    start_iobench,
    tiny_model_config,
    wait_for_restores,
)

runner = CliRunner()
RUN_KEYS = {
    "concurrency",
    "read_commands",
    "bytes_requested",
    "bytes_read",
    "read_amplification",
    "restore_bytes_per_s",
    "restore_s",
    "verified_bytes",
    "mismatched_blocks",
    "concurrency_ran",
    "checksum_verified_bytes",
}


def test_end_to_end_json(tmp_path, fio_bin):
    bench = tmp_path / "bench"
    bench.mkdir()
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            *small_iobench_args(tmp_path),
            "--dir",
            str(bench),
            "--json",
            "--fio-runtime",
            "0.2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)  # exactly one JSON document on stdout
    assert set(doc) == {
        "schema_version",
        "engine",
        "workload",
        "fio",
        "layouts",
        "comparisons",
        "checksums",
        "provenance",
    }
    assert doc["schema_version"] == 1
    # Flat layer checksums were checked inside the timed region (the default).
    assert doc["checksums"] == {"requested": True, "verified": True, "off_reason": None}
    assert doc["engine"]["name"] in ("posix", "kvikio")
    assert set(doc["engine"]) == {"name", "o_direct", "gds"}
    assert isinstance(doc["engine"]["o_direct"], bool) and isinstance(doc["engine"]["gds"], bool)
    if doc["engine"]["name"] == "posix":
        assert doc["engine"]["gds"] is False
    # 4 sessions x 20 pages x 4 layers x 4 KiB.
    assert doc["workload"] == {
        "sessions": 4,
        "layers": 4,
        "block_tokens": 16,
        "bytes": 4 * 20 * 4 * 4096,
        "scale": 1.0,
    }
    assert doc["fio"]["available"] is True
    assert doc["fio"]["seq_read_bytes_per_s"] > 0
    # Files this small get smaller sequential requests, named by their real size.
    seq_jobs = doc["provenance"]["fio"]["rounds"][0]["seq_jobs"]
    assert seq_jobs and all(not n.startswith("seq-0m") for n in seq_jobs)
    assert set(doc["fio"]["replay_bytes_per_s"]) == {"flat", "eviction"}
    assert all(v > 0 for v in doc["fio"]["replay_bytes_per_s"].values())
    for layout, commands in (("flat", 4 * 4 * 4), ("eviction", 4 * 20 * 4)):
        runs = doc["layouts"][layout]
        assert [r["concurrency"] for r in runs] == [1, 2]
        for r in runs:
            assert set(r) == RUN_KEYS
            assert set(r["restore_s"]) == {"p50", "p99"}
            assert r["read_commands"] == commands
            assert r["bytes_requested"] == doc["workload"]["bytes"]
            assert r["verified_bytes"] == doc["workload"]["bytes"]
            assert r["mismatched_blocks"] == 0
            assert r["restore_bytes_per_s"] > 0
            assert r["concurrency_ran"] == r["concurrency"]
            # Only the flat files store layer checksums.
            want = r["bytes_requested"] if layout == "flat" else 0
            assert r["checksum_verified_bytes"] == want
    flat1, evic1 = doc["layouts"]["flat"][0], doc["layouts"]["eviction"][0]
    assert doc["comparisons"]["eviction_over_flat_read_commands"] == {
        "concurrency": 1,
        "ratio": (4 * 20 * 4) / (4 * 4 * 4),
    }
    assert [r["concurrency"] for r in doc["comparisons"]["flat_over_eviction_restore_time"]] == [
        1,
        2,
    ]
    assert doc["comparisons"]["flat_over_eviction_restore_time"][0]["ratio"] == pytest.approx(
        evic1["restore_bytes_per_s"] / flat1["restore_bytes_per_s"]
    )
    assert doc["comparisons"]["flat_over_fio_seq"]["concurrency"] == 2
    prov = doc["provenance"]
    for key in ("fcctl_version", "host", "kernel", "filesystem", "started_utc", "finished_utc"):
        assert prov[key]
    for key in ("numpy", "argv", "settings", "restore_bytes_per_s_samples", "fio", "notes"):
        assert key in prov
    assert "engine" in result.stderr  # which engine ran and why
    assert list(bench.iterdir()) == []  # everything written was removed
    assert json.loads((out / "iobench.json").read_text())["layouts"] == doc["layouts"]
    assert {p.name for p in out.iterdir()} == {
        "iobench.json",
        "runs.parquet",
        "restore_bytes_per_s.png",
        "read_commands.png",
    }
    import polars as pl

    assert pl.read_parquet(out / "runs.parquet").height == 4


def test_table_output_and_keep_without_fio(tmp_path):
    bench = tmp_path / "bench"
    result = runner.invoke(
        app,
        [
            *small_iobench_args(tmp_path),
            "--dir",
            str(bench),
            "--no-fio",
            "--layout",
            "flat",
            "--keep",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "flat" in result.stdout and "fio: not run" in result.stdout
    kept = [p for p in bench.iterdir()]
    assert len(kept) == 1 and any(kept[0].rglob("*.fcc"))


def test_trace_workload_through_the_cli(tmp_path):
    cfg = tiny_model_config(tmp_path / "tiny.json")
    result_args = [
        "iobench",
        "--trace",
        str(SAMPLES / "claude_code_sample.jsonl.gz"),
        "--model-config",
        str(cfg),
        "--sessions",
        "3",
        "--size-limit",
        "2MiB",
        "--concurrency",
        "2",
        "--no-fio",
        "--json",
    ]
    result = runner.invoke(
        app,
        [
            "iobench",
            "--trace",
            str(SAMPLES / "claude_code_sample.jsonl.gz"),
            "--model-config",
            str(cfg),
            "--sessions",
            "3",
            "--size-limit",
            "2MiB",
            "--concurrency",
            "2",
            "--no-fio",
            "--json",
            "--dir",
            str(tmp_path / "b"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert 1 <= doc["workload"]["sessions"] <= 3 and doc["workload"]["bytes"] <= 2 * 2**20
    assert doc["fio"] == {
        "available": False,
        "seq_read_bytes_per_s": None,
        "replay_bytes_per_s": {"flat": None, "eviction": None},
    }
    # Scaled down to fit 2 MiB: the factor is in the JSON and in the human output.
    scale = doc["workload"]["scale"]
    assert 0 < scale < 1
    human = runner.invoke(
        app,
        [a for a in result_args if a != "--json"] + ["--dir", str(tmp_path / "c")],
    )
    assert human.exit_code == 0, human.stderr
    assert f"token counts scaled by {scale:.4g}" in " ".join(human.stdout.split())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dir", "{tmp}/missing/bench"], "parent directory does not exist"),
        (["--dir", "{tmp}/afile"], "must be a directory"),
        (["--size-limit", "12XB"], "unknown unit"),
        (["--concurrency", "0"], "--concurrency"),
        (["--layout", "sideways"], "--layout"),
        (["--bucket-size", "1KiB"], "--bucket-size"),
        (["--tokens", "100000000000", "--size-limit", "1PiB"], "too large for this machine"),
        (["--sessions", "100000000", "--size-limit", "1PiB"], "too large for this machine"),
        (["--tokens", "320", "--size-limit", "1MiB"], "--sessions to at most 3"),
        (["--sessions", "100000000"], "raise --size-limit to at least"),
        (["--tokens", "10000000000000"], "--tokens to at most"),
        (["--fio-runtime", "nan"], "--fio-runtime: must be a finite number; got nan"),
        (["--fio-runtime", "inf"], "--fio-runtime: must be a finite number; got inf"),
        (["--fio-runtime", "0"], "--fio-runtime: must be between"),
        (["--scale", "nan"], "--scale: must be a finite number; got nan"),
        (["--scale", "inf"], "--scale: must be a finite number; got inf"),
        (["--scale", "-inf"], "--scale: must be a finite number; got -inf"),
        (["--free-margin", "lots"], "--free-margin"),
        (["--free-margin", "1PiB"], "--free-margin 1125899906842624"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, extra, message):
    (tmp_path / "afile").write_text("")
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    result = runner.invoke(app, [*small_iobench_args(tmp_path), "--no-fio", *extra])
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fcctl: error: ") and message in lines[0]
    assert result.stdout == ""


def test_unknown_model_is_one_line_and_exit_2():
    result = runner.invoke(app, ["iobench", "--model", "gpt-9", "--no-fio"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--model" in result.stderr


def test_non_empty_dir_is_refused_without_force(tmp_path):
    (tmp_path / "theirs").write_text("x")
    result = runner.invoke(app, [*small_iobench_args(tmp_path), "--no-fio", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "not empty" in result.stderr
    result = runner.invoke(
        app,
        [
            *small_iobench_args(tmp_path),
            "--no-fio",
            "--dir",
            str(tmp_path),
            "--force",
            "--layout",
            "flat",
            "--concurrency",
            "1",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs", "tiny.json"]


def test_cleanup_after_an_exception(tmp_path):
    def boom(*args, **kwargs):
        raise RuntimeError("injected failure during the restore")

    bench = tmp_path / "bench"
    bench.mkdir()
    from fcctl.iobench.config import IobenchConfig
    from fcctl.iobench.run import run_iobench
    from fcctl.layout.geometry import geometry_from_hf_config

    config = IobenchConfig(
        directory=bench,
        geometry=geometry_from_hf_config(tiny_model_config(tmp_path / "t.json")),
        sessions=2,
        tokens=320,
        turns=2,
        bucket_bytes=64 * 1024,
        fio=False,
    )
    with pytest.raises(RuntimeError, match="injected"):
        run_iobench(config, hooks=RunHooks(restore_runner=boom))
    assert list(bench.iterdir()) == []


def test_cleanup_after_ctrl_c(tmp_path):
    """A real process interrupted while writing removes what it wrote."""
    bench = tmp_path / "bench"
    bench.mkdir()
    # About 256 MiB per layout: long enough to be interrupted while writing or restoring.
    proc = start_iobench(
        tmp_path, bench, "--sessions", "8", "--tokens", "16384", "--turns", "4", "--repeat", "5"
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(bench.rglob("*.fcc")):
        time.sleep(0.05)
    assert any(bench.rglob("*.fcc")), "the benchmark never started writing"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert list(bench.iterdir()) == []
    shutil.rmtree(bench)


def test_corruption_on_disk_fails_the_run_with_exit_1(tmp_path):
    """A byte flipped on disk before the first restore: counted, printed, and the run fails."""
    real = run_restore
    flipped = []

    def corrupt_then_run(name, restores, *args, **kwargs):
        if not flipped:
            cmd = restores[0].plans[1].commands[0]
            fd = os.open(cmd.file, os.O_RDWR)
            try:
                old = os.pread(fd, 1, cmd.offset + 10)
                os.pwrite(fd, bytes([old[0] ^ 0xFF]), cmd.offset + 10)
                os.fsync(fd)
            finally:
                os.close(fd)
            flipped.append(name)
        return real(name, restores, *args, **kwargs)

    bench = tmp_path / "bench"
    result = runner.invoke(
        app_with_hooks(RunHooks(restore_runner=corrupt_then_run)),
        [
            *small_iobench_args(tmp_path),
            "--no-fio",
            "--json",
            "--dir",
            str(bench),
            # Checksums off, so the damage reaches the pattern check after the timed region
            # (with them on the engine stops the run first: the next test).
            "--no-verify-checksums",
        ],
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["checksums"] == {
        "requested": False,
        "verified": False,
        "off_reason": "--no-verify-checksums given",
    }
    # The corrupted piece is read (and caught) by every run of that layout: 2 concurrencies.
    assert [r["mismatched_blocks"] for r in doc["layouts"][flipped[0]]] == [1, 1]
    other = "eviction" if flipped[0] == "flat" else "flat"
    assert all(r["mismatched_blocks"] == 0 for r in doc["layouts"][other])
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fcctl: error: verification failed: 2 block pieces read back wrong")
    assert "session 0 layer 1" in last
    assert not bench.exists()


def test_a_damaged_flat_file_fails_its_layer_checksum_inside_the_restore(tmp_path):
    """Checksums on (the default): a flipped byte stops the run, naming file, turn and layer."""
    real = run_restore

    def corrupt_flat_then_run(name, restores, *args, **kwargs):
        if name == "flat":
            extent = next(e for e, _ in restores[0].plans[1].placements if e.tag == (2, 1))
            fd = os.open(extent.file, os.O_RDWR)
            try:
                old = os.pread(fd, 1, extent.offset + 10)
                os.pwrite(fd, bytes([old[0] ^ 0xFF]), extent.offset + 10)
                os.fsync(fd)
            finally:
                os.close(fd)
        return real(name, restores, *args, **kwargs)

    bench = tmp_path / "bench"
    result = runner.invoke(
        app_with_hooks(RunHooks(restore_runner=corrupt_flat_then_run)),
        [*small_iobench_args(tmp_path), "--no-fio", "--json", "--dir", str(bench)],
    )
    assert result.exit_code == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fcctl: error: restores failed: ")
    assert "session-00000.fcc: turn 2 layer 1: layer checksum mismatch" in last
    assert result.stdout == "" and not bench.exists()


def test_sigterm_while_restoring_removes_everything(tmp_path):
    """SIGTERM (as a job runner sends it) during the restore runs: exit 143, nothing left."""
    bench = tmp_path / "bench"
    bench.mkdir()
    proc = start_iobench(
        tmp_path,
        bench,
        "--sessions",
        "4",
        "--tokens",
        "2048",
        "--repeat",
        "50",
        "--concurrency",
        "1",
    )
    wait_for_restores(bench)
    time.sleep(0.3)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert err.decode().strip().splitlines()[-1] == "fcctl: interrupted by SIGTERM"
    assert out == b""
    assert list(bench.iterdir()) == []


def test_scale_must_be_positive_for_a_synthetic_run_too(tmp_path):
    result = runner.invoke(app, [*small_iobench_args(tmp_path), "--no-fio", "--scale", "-1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "fcctl: error: --scale: must be > 0; got -1.0"


def test_layouts_alternate_and_swap_who_goes_first(tmp_path):
    """Run order over 2 repeats: flat, eviction per concurrency, then eviction first."""
    real = run_restore
    order = []

    def recording(name, restores, *args, **kwargs):
        order.append((name, kwargs["concurrency"]))
        return real(name, restores, *args, **kwargs)

    result = runner.invoke(
        app_with_hooks(RunHooks(restore_runner=recording)),
        [
            *small_iobench_args(tmp_path),
            "--no-fio",
            "--json",
            "--repeat",
            "2",
            "--dir",
            str(tmp_path / "b"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert order == [
        ("flat", 1),
        ("eviction", 1),
        ("flat", 2),
        ("eviction", 2),
        ("eviction", 1),
        ("flat", 1),
        ("eviction", 2),
        ("flat", 2),
    ]
    doc = json.loads(result.stdout)
    # Medians of 2 repeats, but verification sums over both: every byte, twice.
    for runs in doc["layouts"].values():
        assert [r["verified_bytes"] for r in runs] == [2 * doc["workload"]["bytes"]] * 2


def test_a_file_truncated_under_the_run_fails_it_with_exit_1(tmp_path):
    """A bucket cut short before a restore: one line naming the file and the short read."""
    real = run_restore
    cut = []

    def truncate_then_run(name, restores, *args, **kwargs):
        if name == "eviction" and not cut:
            path = restores[0].plans[0].commands[0].file
            os.truncate(path, 4096)
            cut.append(path)
        return real(name, restores, *args, **kwargs)

    bench = tmp_path / "bench"
    result = runner.invoke(
        app_with_hooks(RunHooks(restore_runner=truncate_then_run)),
        [*small_iobench_args(tmp_path), "--no-fio", "--dir", str(bench)],
    )
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("fcctl: error: restores failed: ")
    assert cut[0] in lines[-1] and "short read: the file is 4096 bytes long" in lines[-1]
    assert result.stdout == ""
    assert not bench.exists()


def test_a_memory_filesystem_is_called_out(tmp_path):
    from fcctl.iobench.run import filesystem_of

    shm = Path("/dev/shm")
    if not shm.is_dir() or filesystem_of(shm).type != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    bench = shm / f"fcctl-test-{os.getpid()}"
    try:
        result = runner.invoke(
            app,
            [
                *small_iobench_args(tmp_path),
                "--no-fio",
                "--json",
                "--concurrency",
                "1",
                "--dir",
                str(bench),
            ],
        )
        assert result.exit_code == 0, result.stderr
        assert "is on tmpfs (memory, not a disk)" in result.stderr
        notes = json.loads(result.stdout)["provenance"]["notes"]
        assert any("tmpfs (memory, not a disk)" in n for n in notes)
        assert not bench.exists()
    finally:
        shutil.rmtree(bench, ignore_errors=True)


def test_buffers_gpu_without_a_gpu_is_refused_before_writing(tmp_path):
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is here")
    except Exception:
        pass
    bench = tmp_path / "bench"
    bench.mkdir()
    result = runner.invoke(
        app, [*small_iobench_args(tmp_path), "--no-fio", "--buffers", "gpu", "--dir", str(bench)]
    )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith("fcctl: error: --buffers: CuPy ")
    assert list(bench.iterdir()) == []


def test_fio_reference_keeps_every_request_size_when_some_files_are_small(tmp_path, fio_bin):
    """Small bucket files do not shrink fio's requests: it reads the files that hold 8 MiB."""
    cfg = tiny_model_config(tmp_path / "tiny.json")  # 1 KiB per token: 8 MiB sessions
    result = runner.invoke(
        app,
        [
            "iobench",
            "--model-config",
            str(cfg),
            "--sessions",
            "2",
            "--tokens",
            "8192",
            "--turns",
            "1",
            "--bucket-size",
            "64KiB",
            "--concurrency",
            "1",
            "--fio-runtime",
            "0.1",
            "--json",
            "--dir",
            str(tmp_path / "b"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    jobs = json.loads(result.stdout)["provenance"]["fio"]["rounds"][0]["seq_jobs"]
    assert sorted(jobs) == sorted(f"seq-{m}m-qd{q}" for m in (1, 4, 8) for q in (8, 16, 32))
    assert all(v > 0 for v in jobs.values())


def _quick(tmp_path: Path, *extra: str):
    return runner.invoke(
        app,
        [
            *small_iobench_args(tmp_path),
            "--no-fio",
            "--layout",
            "flat",
            "--concurrency",
            "1",
            "--dir",
            str(tmp_path / "b"),
            *extra,
        ],
    )


def test_out_is_all_or_nothing_and_force_replaces_only_an_earlier_output(tmp_path):
    out = tmp_path / "out"
    result = _quick(tmp_path, "--out", str(out))
    assert result.exit_code == 0, result.stderr
    first = json.loads((out / "iobench.json").read_text())
    assert first["schema_version"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp left
    # Not empty: refused before the run, and left as it was.
    result = _quick(tmp_path, "--out", str(out))
    assert result.exit_code == 2 and "not empty (pass --force" in result.stderr
    assert json.loads((out / "iobench.json").read_text()) == first
    # --force replaces an earlier iobench output ...
    result = _quick(tmp_path, "--out", str(out), "--force")
    assert result.exit_code == 0, result.stderr
    second = json.loads((out / "iobench.json").read_text())
    assert second["provenance"]["started_utc"] >= first["provenance"]["started_utc"]
    # ... but never a directory without iobench.json in it.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("x")
    result = _quick(tmp_path, "--out", str(theirs), "--force")
    assert result.exit_code == 2 and "iobench.json" in result.stderr
    assert [p.name for p in theirs.iterdir()] == ["keep.txt"]
    (tmp_path / "afile").write_text("")
    result = _quick(tmp_path, "--out", str(tmp_path / "afile"))
    assert result.exit_code == 2 and "not a directory" in result.stderr


def test_layout_registry_matches_the_layout_names():
    from fcctl.iobench.config import LAYOUT_NAMES
    from fcctl.iobench.layouts import LAYOUTS

    assert tuple(LAYOUTS) == LAYOUT_NAMES
    assert all(layout.name == name for name, layout in LAYOUTS.items())


def test_the_kvikio_install_hint_appears_only_when_kvikio_was_asked_for(tmp_path):
    import importlib.util

    if importlib.util.find_spec("kvikio") is not None:
        pytest.skip("kvikio is installed here: there is no install hint to show")
    plain = runner.invoke(
        app, [*small_iobench_args(tmp_path), "--no-fio", "--dir", str(tmp_path / "a")]
    )
    assert plain.exit_code == 0, plain.stderr
    assert "kvikio is not installed" in plain.stderr and "pip install" not in plain.stderr
    asked = runner.invoke(
        app,
        [
            *small_iobench_args(tmp_path),
            "--no-fio",
            "--engine",
            "kvikio",
            "--dir",
            str(tmp_path / "b"),
        ],
    )
    assert asked.exit_code == 2 and "pip install" in asked.stderr


def test_restore_memory_stays_bounded_by_the_pool_not_the_workload(tmp_path):
    """Peak RSS of a real run in a child process grows by the pool, not by the workload.

    16 MiB per layout restored through a 2 MiB pool budget: before the pool, every session of
    both layouts had its own buffer (32 MiB more at the peak).
    """
    cfg = tiny_model_config(tmp_path / "tiny.json", layers=32)
    child = f"""
from fcctl.iobench.config import IobenchConfig
from fcctl.iobench.run import run_iobench
from fcctl.layout.geometry import geometry_from_hf_config


def status_kib(field):
    # /proc, not ru_maxrss: a child's ru_maxrss starts at its forked parent's (pytest's) RSS.
    line = next(x for x in open("/proc/self/status") if x.startswith(field + ":"))
    return int(line.split()[1])


# Resident now, not the peak so far: the imports' peak must not hide the run's growth.
before = status_kib("VmRSS")
result = run_iobench(IobenchConfig(
    directory={str(tmp_path / "bench")!r}, geometry=geometry_from_hf_config({str(cfg)!r}),
    sessions=16,
    tokens=128, turns=2, concurrency=(1, 2), fio=False, bucket_bytes=2**20,
    restore_buffer_budget_bytes=2 * 2**20))
after = status_kib("VmHWM")  # the peak
assert result.mismatched_blocks == 0 and result.workload.bytes == 16 * 2**20
print(before, after, result.provenance.extra["settings"].restore_buffer_pool_bytes)
"""
    done = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    before_kib, after_kib, pool = map(int, done.stdout.split())
    assert pool == 2 * 2**20  # two 1 MiB sessions: the budget, at least the concurrency
    grown = (after_kib - before_kib) * 1024
    # Writers, plans and threads take about 13 MiB here; two layouts of buffers would add 32.
    assert grown < 24 * 2**20, f"peak RSS grew by {grown} bytes for a 16 MiB workload"
