"""``fcctl plan --resume`` reuses a step only when its inputs and its output are those recorded:
a dataset's replaced parts, a truncated or hostile step document, a damaged record; a plan
interrupted by a real signal continues where it stopped."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import fcctl
from fcctl.common.errors import FcctlInputError
from fcctl.common.progress import Progress
from fcctl.layout.errors import InputError
from fcctl.planning import (
    MARKER,
    PARTIAL,
    PlanDirectory,
    PlanRunner,
    check_plan_dir,
    content_digest,
    file_identity,
    read_plan,
)
from tests.plan_helpers import (
    fcctl as run_fcctl,
)
from tests.plan_helpers import (
    one_error_line,
    small_trace,
    start_fcctl,
    tmpfs,
    wait_for,
)

FAST = {"jobs": 1, "rate": 2.0, "replicas": 1}
DEEP = "[" * 100_000 + "]" * 100_000


def statuses(out: Path) -> dict[str, str]:
    return {s["name"]: s["status"] for s in read_plan(out)["steps"]}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small trace and its finished plan (copy it before changing it)."""
    where = tmp_path_factory.mktemp("plan")
    trace = small_trace(where)
    fcctl.plan(trace, where / "p", **FAST)
    return trace, where / "p"


def copy_of(plan: Path, tmp_path: Path) -> Path:
    out = tmp_path / "p"
    shutil.copytree(plan, out)
    return out


def test_resume_over_replaced_dataset_parts_runs_every_step(tmp_path: Path) -> None:
    parts = tmp_path / "g"
    parts.mkdir()
    first, second = small_trace(tmp_path), small_trace(tmp_path, skip=1000)
    for trace in (first, second):
        done = run_fcctl("convert", trace, "-o", parts / f"{trace.stem}.parquet", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    spec = str(parts / "*.parquet")
    (parts / f"{second.stem}.parquet").rename(tmp_path / "later.parquet")
    # The identity is the parts the dataset reader expands the glob to, not the glob itself.
    identity = file_identity(spec)
    assert [Path(f[0]).name for f in identity["files"]] == [f"{first.stem}.parquet"]
    out = tmp_path / "p"
    fcctl.plan(spec, out, **FAST)
    before = json.loads((out / "analyze.json").read_text())
    # Another trace's part in place of the first: the same glob, another trace.
    (parts / f"{first.stem}.parquet").unlink()
    (tmp_path / "later.parquet").rename(parts / f"{second.stem}.parquet")
    fcctl.plan(spec, out, resume=True, **FAST)
    assert set(statuses(out).values()) == {"ran"}
    after = json.loads((out / "analyze.json").read_text())
    assert after["trace"]["fingerprint"] != before["trace"]["fingerprint"]


@pytest.mark.parametrize(
    ("name", "damage", "reran"),
    [
        ("recommend.json", lambda text: text[: len(text) * 3 // 10], ["recommend", "report"]),
        ("analyze.json", lambda text: text[: len(text) // 2], None),
        ("replay.json", lambda text: DEEP, ["replay", "recommend", "report"]),
    ],
    ids=["recommend-cut-to-30-percent", "analyze-cut-in-half", "replay-deeply-nested"],
)
def test_a_damaged_step_document_is_a_changed_step(
    finished: tuple[Path, Path], tmp_path: Path, name: str, damage, reran: list[str] | None
) -> None:
    trace, plan = finished
    out = copy_of(plan, tmp_path)
    doc = out / name
    doc.write_text(damage(doc.read_text()))
    fcctl.plan(trace, out, resume=True, **FAST)  # no JSONDecodeError
    steps = statuses(out)
    ran = [s for s, status in steps.items() if status == "ran"]
    assert ran == (reran or list(steps)), steps
    assert json.loads(doc.read_text()).keys() == json.loads((plan / name).read_text()).keys()


def test_intact_checks_the_recorded_digest_and_the_document(tmp_path: Path) -> None:
    doc = tmp_path / "analyze.json"
    doc.write_text('{"a": 1}\n')
    record = {"name": "analyze", "fingerprint": "f", "digest": content_digest(doc)}
    held = PlanDirectory(tmp_path, {"steps": [record]}, [])
    runner = PlanRunner(held, True, Progress(enabled=False))
    assert runner.intact("analyze", doc, "f") == record["digest"]
    assert runner.intact("analyze", doc, "other inputs") is None
    doc.write_text('{"a": 2}\n')  # same size, other bytes
    assert runner.intact("analyze", doc, "f") is None
    # A record that matches a document that does not parse (an edited record) is not trusted.
    doc.write_text(DEEP)
    record["digest"] = content_digest(doc)
    assert runner.intact("analyze", doc, "f") is None


def test_an_unreadable_plan_record_resumes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "p"
    out.mkdir()
    (out / MARKER).write_text(DEEP)
    assert check_plan_dir(out, resume=True, force=False) == {}
    with pytest.raises(FcctlInputError, match="nested deeper than the parser allows"):
        read_plan(out)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_an_interrupted_plan_keeps_its_finished_steps_and_resumes(
    tmp_path: Path, signum: signal.Signals
) -> None:
    trace = small_trace(tmp_path)
    args = ["plan", trace, "-o", tmp_path / "p", "--jobs", "1", "--rate", "2", "--replicas", "1"]
    proc = start_fcctl(*args, cwd=tmp_path)
    partial = tmp_path / "p" / PARTIAL

    def analyze_recorded() -> bool:
        try:
            steps = json.loads(partial.read_text())["steps"]
        except (OSError, ValueError):
            return False
        return any(s["name"] == "analyze" for s in steps)

    try:
        wait_for(analyze_recorded, proc, "the analysis was recorded")
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (143 if signum == signal.SIGTERM else 130), stderr
    assert "Traceback" not in stderr, stderr
    left = sorted(p.name for p in (tmp_path / "p").iterdir())
    assert MARKER not in left and PARTIAL in left and "analyze.json" in left, left
    assert not [name for name in left if name.startswith(".")], left  # no temporaries
    # Without --resume the unfinished plan is named, not called "not an fcctl plan".
    done = run_fcctl(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert "holds an unfinished plan" in one_error_line(done.stderr)
    done = run_fcctl(*args, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    steps = statuses(tmp_path / "p")
    assert steps["analyze"] == "reused" and steps["report"] == "ran", steps
    assert not partial.exists()


def test_a_plan_interrupted_before_its_first_step_leaves_nothing(tmp_path: Path) -> None:
    from tests.plan_helpers import MOONCAKE  # a whole analysis of seconds, to land inside

    out = tmp_path / "new" / "p"
    proc = start_fcctl(
        "plan", MOONCAKE, "-o", out, "--jobs", "1", "--rate", "2", "--replicas", "1", cwd=tmp_path
    )
    try:
        wait_for((out / PARTIAL).exists, proc, "the plan started its first step")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_second_plan_into_the_same_directory_is_refused_at_once(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    other = small_trace(tmp_path, skip=1000)
    out = tmp_path / "p"
    first = start_fcctl(
        "plan", trace, "-o", out, "--jobs", "1", "--rate", "2", "--replicas", "1", cwd=tmp_path
    )
    try:
        wait_for((out / PARTIAL).exists, first, "the first plan started")
        # Stopped, the first plan stays mid-run (holding its lock) however slow the others are.
        first.send_signal(signal.SIGSTOP)
        for extra in ([], ["--resume"], ["--force"]):
            done = run_fcctl(
                "plan", other, "-o", out, "--jobs", "1", "--replicas", "1", *extra, cwd=tmp_path
            )
            assert done.returncode == 2, done.stderr
            line = one_error_line(done.stderr)
            assert "another fcctl plan is writing into this directory" in line, line
        first.send_signal(signal.SIGCONT)
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
        assert first.returncode == 143  # the first one ran until told to stop
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # Only the first plan's trace was ever read into the directory.
    if (out / "analyze.json").exists():
        doc = json.loads((out / "analyze.json").read_text())
        assert Path(doc["trace"]["path"]).name == trace.name


@pytest.mark.parametrize(
    "bad",
    [
        {"rate": -1.0},
        {"concurrency": -1},
        {"concurrency": "4", "rate": 2.0},
        {"think_time": "sometimes"},
        {"slo_ttft_p99_s": -1.0},
        {"host_memory_sweep": ["lots"]},
        {"model": "nonesuch-9b"},
    ],
    ids=lambda bad: ",".join(bad),
)
def test_bad_parameters_are_refused_before_the_disk(tmp_path: Path, bad: dict) -> None:
    trace = small_trace(tmp_path)
    with pytest.raises(ValueError) as caught:
        fcctl.plan(trace, tmp_path / "new" / "p", jobs=1, **bad)
    assert isinstance(caught.value, InputError), caught.value
    assert sorted(p.name for p in tmp_path.iterdir()) == [trace.name]


def test_bad_input_found_by_a_step_leaves_nothing(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    missing = tmp_path / "nonesuch.jsonl"
    with pytest.raises(FcctlInputError, match="no such file"):
        fcctl.plan(missing, tmp_path / "p1", **FAST)
    # A trace the reader refuses only once it reads it: the analysis finds it, mid-plan.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(trace.read_text() + '{"timestamp": "soon"}\n')
    with pytest.raises(ValueError):
        fcctl.plan(bad, tmp_path / "new" / "p2", format="mooncake", **FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([trace.name, bad.name])


def test_a_full_disk_mid_plan_is_status_1_and_resumes_with_room(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    # Room for the analysis and the record, not for the replay's document.
    with tmpfs(tmp_path / "fs", "64k") as fs:
        args = ["plan", trace, "-o", fs / "p", "--jobs", "1", "--rate", "2", "--replicas", "1"]
        done = run_fcctl(*args, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        line = one_error_line(done.stderr)
        assert line.startswith(f"fcctl: error: {fs / 'p'}: disk full while the replay step wrote")
        left = sorted(p.name for p in (fs / "p").iterdir())
        assert left == ["analyze.json", PARTIAL], left  # no temporary, no half document
        grown = subprocess.run(["mount", "-o", "remount,size=4m", str(fs)], check=False)
        assert grown.returncode == 0
        done = run_fcctl(*args, "--resume", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        steps = statuses(fs / "p")
        assert steps["analyze"] == "reused" and steps["replay"] == "ran", steps


def test_emitting_from_a_reused_recommendation_keeps_its_document(
    finished: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, plan = finished
    out = copy_of(plan, tmp_path)
    recommended = (out / "recommend.json").read_bytes()
    fcctl.plan(trace, out, resume=True, emit=True, emit_name="fcs", **FAST)
    assert statuses(out)["recommend"] == "reused" and statuses(out)["emit"] == "ran"
    assert (out / "recommend.json").read_bytes() == recommended
    fcctl.plan(trace, out, resume=True, emit=True, emit_name="fcs", **FAST)
    assert set(statuses(out).values()) == {"reused"}


def test_a_step_that_runs_drops_the_records_of_the_steps_after_it(tmp_path: Path) -> None:
    for name in ("analyze.json", "replay.json", "recommend.json"):
        (tmp_path / name).write_text('{"a": 1}\n')
    digest = content_digest(tmp_path / "analyze.json")
    earlier = [
        {"name": n, "fingerprint": n, "digest": digest} for n in ("analyze", "replay", "recommend")
    ]
    (tmp_path / MARKER).write_text(json.dumps({"steps": earlier}))
    runner = PlanRunner(PlanDirectory(tmp_path, {"steps": earlier}, []), True, Progress())
    assert not runner.step("analyze", "analyze", lambda p: pytest.fail("reused, not run"))
    assert runner.step("replay", "other inputs", lambda p: p.write_text('{"b": 2}\n'))
    # Interrupted here, the record keeps analyze and the new replay; recommend, which read the
    # old replay, is no longer described as the directory's.
    partial = json.loads((tmp_path / PARTIAL).read_text())
    assert [(s["name"], s["fingerprint"]) for s in partial["steps"]] == [
        ("analyze", "analyze"),
        ("replay", "other inputs"),
    ]
    assert not (tmp_path / MARKER).exists()
