"""fcctl/common: the JSON writer, provenance, progress, the atomic --out directory, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from fcctl.common.errors import FcctlInputError, RunFailed
from fcctl.common.jsonio import dumps, to_jsonable, write_json, write_json_file
from fcctl.common.outdir import OutDirError, atomic_out_dir, check_out_dir
from fcctl.common.progress import Progress
from fcctl.common.provenance import collect_provenance, utc_now
from fcctl.common.version import fcctl_version
from fcctl.errors import exit_status_of, input_error_message
from fcctl.layout.errors import InputError, LayoutError


@dataclass(frozen=True)
class _Inner:
    share: float
    count: np.int64


@dataclass(frozen=True)
class _Doc:
    name: str
    inner: _Inner
    values: tuple[float, ...]
    hidden: list[int] = field(default_factory=list, metadata={"json": False})


def test_json_writer_one_rule_for_nan_numpy_and_dataclasses() -> None:
    doc = _Doc("x", _Inner(float("nan"), np.int64(3)), (1.5, float("inf"), np.float32(2.0)))
    assert to_jsonable(doc) == {
        "name": "x",
        "inner": {"share": None, "count": 3},
        "values": [1.5, None, 2.0],
    }
    assert type(to_jsonable(doc)["inner"]["count"]) is int
    assert json.loads(dumps({"a": np.array([1, 2]), "p": Path("/x")})) == {"a": [1, 2], "p": "/x"}
    with pytest.raises(TypeError, match="not JSON-serialisable: object"):
        to_jsonable(object())


def test_write_json_is_one_document(tmp_path: Path) -> None:
    buf = io.StringIO()
    write_json({"a": float("-inf")}, buf)
    assert buf.getvalue().endswith("}\n") and json.loads(buf.getvalue()) == {"a": None}
    target = tmp_path / "doc.json"
    write_json_file({"k": 1}, target)
    assert json.loads(target.read_text()) == {"k": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]  # no temporary left


def test_provenance_records_versions_without_importing_torch() -> None:
    probe = (
        "import json, sys\n"
        "from fcctl.common.provenance import collect_provenance\n"
        "p = collect_provenance('2026-01-01T00:00:00Z', argv=['x']).to_json_dict()\n"
        "print(json.dumps({'p': p, 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["torch"] is False
    p = doc["p"]
    assert p["fcctl_version"] == fcctl_version() and p["argv"] == ["x"]
    assert p["numpy"] == np.__version__
    for key in ("python", "polars", "numba", "torch", "kvikio", "cuda_runtime", "host"):
        assert key in p
    assert p["started_utc"] == "2026-01-01T00:00:00Z" and p["finished_utc"].endswith("Z")


def test_provenance_extra_cannot_overwrite_a_standard_key() -> None:
    p = collect_provenance(utc_now(), extra={"directory": "/d"})
    assert p.to_json_dict()["directory"] == "/d"
    with pytest.raises(ValueError, match="host"):
        collect_provenance(utc_now(), extra={"host": "other"}).to_json_dict()


def test_progress_draws_nothing_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress(enabled=True, delay_s=0) as p:
        assert not p.active  # pytest's captured stderr is not a terminal
        with p.task("work", total=10, unit="items") as t:
            t.advance(5)
            t.update(10)
    assert capsys.readouterr().err == ""


def test_progress_waits_before_drawing() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80)
    with Progress(enabled=True, delay_s=30, console=console) as p:
        assert p.active
        with p.task("short work", total=1) as t:
            t.advance(1)
    assert "short work" not in buf.getvalue()  # finished before the delay: never drawn
    buf2 = io.StringIO()
    console2 = Console(file=buf2, force_terminal=True, width=80)
    with Progress(enabled=True, delay_s=0, console=console2) as p, p.task("long work", 2) as t:
        t.advance(1)
    assert "long work" in buf2.getvalue()


def _write(d: Path, marker: str = "result.json") -> None:
    (d / marker).write_text("{}")
    (d / "table.parquet").write_bytes(b"x")


def test_atomic_out_dir_writes_all_at_once(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with atomic_out_dir(out, force=False, marker="result.json", command="demo") as d:
        _write(d)
        assert not out.exists()  # nothing visible until the block succeeded
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "table.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_atomic_out_dir_leaves_nothing_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with pytest.raises(KeyboardInterrupt):
        with atomic_out_dir(out, force=False, marker="result.json", command="demo") as d:
            _write(d)
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_atomic_out_dir_force_replaces_only_its_own_output(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(OutDirError, match="not empty"):
        check_out_dir(out, force=False, marker="result.json", command="demo")
    with pytest.raises(OutDirError, match="only an earlier demo output"):
        check_out_dir(out, force=True, marker="result.json", command="demo")
    assert (out / "precious.txt").read_text() == "keep me"
    (out / "precious.txt").unlink()
    _write(out)
    (out / "old.txt").write_text("old")
    with atomic_out_dir(out, force=True, marker="result.json", command="demo") as d:
        _write(d)
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "table.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_atomic_out_dir_refuses_a_file_and_a_missing_marker(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OutDirError, match="not a directory"):
        check_out_dir(f, force=True, marker="m", command="demo")
    with pytest.raises(RuntimeError, match=r"without its result\.json"):
        with atomic_out_dir(tmp_path / "o", force=False, marker="result.json", command="demo"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_one_handler_maps_errors_to_exit_statuses() -> None:
    assert exit_status_of(FcctlInputError("x")) == 2
    assert exit_status_of(LayoutError("x")) == 2  # the core's errors are bad input too
    assert exit_status_of(RunFailed("disk full")) == 1
    assert exit_status_of(KeyboardInterrupt()) == 130
    sigterm = KeyboardInterrupt()
    sigterm.exit_status = 143  # type: ignore[attr-defined]
    assert exit_status_of(sigterm) == 143


def test_core_parameter_names_become_flags() -> None:
    e = InputError("kv_dtype: unknown dtype; got 'fp7'", parameter="kv_dtype")
    assert input_error_message(e) == "--kv-dtype: unknown dtype; got 'fp7'"
    e = InputError("config_path: not found", parameter="config_path")
    assert input_error_message(e, {"config_path": "--model-config"}) == "--model-config: not found"
    # Without a parameter, or when the message does not lead with it, the text is kept.
    assert input_error_message(InputError("file.bin: truncated")) == "file.bin: truncated"


def test_display_path_quotes_control_characters() -> None:
    from fcctl.common.paths import display_path

    assert display_path("traces/a b.jsonl") == "traces/a b.jsonl"
    assert display_path(Path("/tmp/x.json")) == "/tmp/x.json"
    assert display_path("bad\nname.jsonl") == "'bad\\nname.jsonl'"
    assert display_path("esc\x1b[31m.jsonl") == "'esc\\x1b[31m.jsonl'"
    assert "\n" not in display_path("a\nb") and "\x1b" not in display_path("\x1b")


def test_progress_shows_an_estimate_of_time_left() -> None:
    """#16.6/#19.4: a long step's bar says how much time is left (rich's estimate from the
    rate so far), beside the time elapsed."""
    import io

    from rich.console import Console
    from rich.progress import TimeRemainingColumn

    from fcctl.common.progress import Progress

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    progress = Progress(enabled=True, console=console)
    assert progress.active
    assert any(isinstance(c, TimeRemainingColumn) for c in progress._rich.columns)
    with progress, progress.task("replaying", total=10) as task:
        task.update(5)
