from __future__ import annotations

import shutil

import pytest

from fcctl.common.errors import FcctlInputError
from fcctl.iobench.safety import GiB, margin_bytes, prepare_workspace


def test_margin_is_the_larger_of_1gib_and_5_percent():
    assert margin_bytes(10 * GiB) == GiB
    assert margin_bytes(100 * GiB) == 5 * GiB


def test_new_dir_is_created_and_removed(tmp_path):
    target = tmp_path / "bench"
    ws = prepare_workspace(target)
    assert ws.root.parent == target and ws.root.is_dir()
    (ws.root / "data").write_bytes(b"x")
    ws.cleanup()
    assert not target.exists()


def test_existing_empty_dir_is_left_empty(tmp_path):
    ws = prepare_workspace(tmp_path)
    (ws.root / "data").write_bytes(b"x")
    ws.cleanup()
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_non_empty_dir_needs_force_and_others_files_survive(tmp_path):
    (tmp_path / "theirs.txt").write_text("keep me")
    with pytest.raises(FcctlInputError, match="not empty"):
        prepare_workspace(tmp_path)
    ws = prepare_workspace(tmp_path, force=True)
    (ws.root / "data").write_bytes(b"x")
    ws.cleanup()
    assert [p.name for p in tmp_path.iterdir()] == ["theirs.txt"]


def test_keep_keeps(tmp_path):
    ws = prepare_workspace(tmp_path, keep=True)
    (ws.root / "data").write_bytes(b"x")
    ws.cleanup()
    assert (ws.root / "data").exists()


def test_bad_paths(tmp_path):
    with pytest.raises(FcctlInputError, match="parent directory does not exist"):
        prepare_workspace(tmp_path / "missing" / "bench")
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(FcctlInputError, match="must be a directory"):
        prepare_workspace(f)


def test_more_than_the_free_space_is_refused(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(FcctlInputError, match="not enough free space"):
        prepare_workspace(tmp_path, bytes_needed=free + 1)
    # Within the margin is refused too; nothing was created.
    with pytest.raises(FcctlInputError, match="not enough free space"):
        prepare_workspace(tmp_path, bytes_needed=max(1, free - GiB // 2))
    assert list(tmp_path.iterdir()) == []
