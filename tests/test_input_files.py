"""Small whole-file inputs (hardware files, iobench profiles, Parquet metadata strings) refuse
FIFOs, devices, oversized files and hostile JSON with one line, exit 2, and never block.

Each case ran into a hang, unbounded memory or a traceback before ``fcctl.common.inputfile``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fcctl.analyzers.traces.trace_metadata import TraceMetadataError, parse_trace_metadata
from fcctl.common.errors import FcctlInputError
from fcctl.common.inputfile import parse_json, read_regular, read_regular_text
from tests.conftest import SAMPLES

CLAUDE = str(SAMPLES / "claude_code_sample.jsonl.gz")


def _replay(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fcctl", "replay", CLAUDE, "--rates", "1", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_fifo_hardware_file_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "hw.toml"
    os.mkfifo(fifo)
    proc = _replay("--hardware", str(fifo), timeout=30)  # a blocking open would time out
    _one_line_exit_2(proc, "hw.toml", "hardware file", "FIFO")


def test_device_io_profile_refused() -> None:
    proc = _replay("--io-profile", "/dev/zero", timeout=30)
    _one_line_exit_2(proc, "/dev/zero", "--io-profile", "character device")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[" * 200_000, "nested deeper"),
        ('{"schema_version": ' + "9" * 5000 + "}", "not usable JSON"),
        ('{"schema_version": 1, ', "not valid JSON"),
    ],
    ids=["deep", "huge-int", "truncated"],
)
def test_hostile_io_profile_json_one_line(tmp_path: Path, text: str, needle: str) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text(text)
    _one_line_exit_2(_replay("--io-profile", str(prof)), "profile.json", "--io-profile", needle)


def test_oversized_hardware_file_refused_before_reading(tmp_path: Path) -> None:
    hw = tmp_path / "big.toml"
    with hw.open("wb") as f:  # sparse: 2 MiB claimed, nothing written
        f.truncate(2 * 2**20)
    _one_line_exit_2(_replay("--hardware", str(hw)), "big.toml", "byte limit")


def test_read_regular_caps_and_kinds(tmp_path: Path) -> None:
    small = tmp_path / "a.json"
    small.write_bytes(b'{"a": 1}')
    assert read_regular(small, "doc", cap_bytes=8) == b'{"a": 1}'
    with pytest.raises(FcctlInputError, match="9 bytes, over the 8 byte limit"):
        small.write_bytes(b'{"a": 12}')
        read_regular(small, "doc", cap_bytes=8)
    with pytest.raises(FcctlInputError, match="is a directory"):
        read_regular(tmp_path, "doc")
    with pytest.raises(FcctlInputError, match="file not found"):
        read_regular(tmp_path / "nope", "doc")
    small.write_bytes(b"\xff\xfe")
    with pytest.raises(FcctlInputError, match="not UTF-8"):
        read_regular_text(small, "doc")


def test_parse_json_failure_shapes() -> None:
    assert parse_json('{"a": [1, 2]}', "x") == {"a": [1, 2]}
    for text in ("[" * 100_000, "1" * 5000, "{"):
        with pytest.raises(FcctlInputError, match=r"^x: not (valid|usable) JSON"):
            parse_json(text, "x")


def test_trace_metadata_deep_nesting_is_a_metadata_error() -> None:
    with pytest.raises(TraceMetadataError, match="must be a JSON object"):
        parse_trace_metadata("[" * 100_000)
