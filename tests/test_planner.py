"""Read planner: command counts, gap merging at/below/above the threshold, amplification."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fcctl.layout.errors import LayoutError
from fcctl.layout.planner import DEFAULT_GAP_BYTES, Extent, ReadCommand, plan_reads

KiB = 1024
MiB = 1024 * KiB


def test_single_extent_is_one_command() -> None:
    plan = plan_reads([Extent("f", 8192, 4096)])
    assert plan.commands == (ReadCommand("f", 8192, 4096, 0),)
    assert plan.read_commands == 1
    assert (plan.bytes_requested, plan.bytes_read, plan.buffer_bytes) == (4096, 4096, 4096)
    assert plan.read_amplification == 1.0


def test_adjacent_extents_merge_in_any_order() -> None:
    exts = [Extent("f", 2 * 100, 100, "c"), Extent("f", 0, 100, "a"), Extent("f", 100, 100, "b")]
    plan = plan_reads(exts)
    assert plan.commands == (ReadCommand("f", 0, 300, 0),)
    # Placements follow the input order and say where each extent landed.
    assert [(e.tag, at) for e, at in plan.placements] == [("c", 200), ("a", 0), ("b", 100)]


@pytest.mark.parametrize(
    ("gap", "commands", "bytes_read"),
    [
        (DEFAULT_GAP_BYTES - 1, 1, 2 * 4096 + DEFAULT_GAP_BYTES - 1),  # below: read across
        (DEFAULT_GAP_BYTES, 2, 2 * 4096),  # at the threshold: NOT merged
        (DEFAULT_GAP_BYTES + 1, 2, 2 * 4096),  # above
    ],
)
def test_gap_threshold(gap: int, commands: int, bytes_read: int) -> None:
    plan = plan_reads([Extent("f", 0, 4096), Extent("f", 4096 + gap, 4096)])
    assert plan.read_commands == commands
    assert plan.bytes_requested == 2 * 4096
    assert plan.bytes_read == bytes_read
    assert plan.read_amplification == pytest.approx(bytes_read / 8192)


def test_gap_zero_merges_only_touching() -> None:
    touching = plan_reads([Extent("f", 0, 10), Extent("f", 10, 10)], gap_bytes=0)
    apart = plan_reads([Extent("f", 0, 10), Extent("f", 11, 10)], gap_bytes=0)
    assert (touching.read_commands, apart.read_commands) == (1, 2)


def test_amplification_arithmetic() -> None:
    # 3 pieces of 1 KiB with 3 KiB holes under a 4 KiB threshold: 1 command, 9 KiB read.
    exts = [Extent("f", i * 4 * KiB, KiB) for i in range(3)]
    plan = plan_reads(exts, gap_bytes=4 * KiB)
    assert plan.read_commands == 1
    assert plan.bytes_requested == 3 * KiB
    assert plan.bytes_read == 9 * KiB
    assert plan.read_amplification == 3.0
    assert [at for _, at in plan.placements] == [0, 4 * KiB, 8 * KiB]


def test_overlapping_extents_count_once() -> None:
    plan = plan_reads([Extent("f", 0, 100), Extent("f", 50, 100), Extent("f", 60, 10)])
    assert plan.commands == (ReadCommand("f", 0, 150, 0),)
    assert plan.bytes_requested == 150
    assert plan.read_amplification == 1.0
    assert [at for _, at in plan.placements] == [0, 50, 60]


def test_files_never_merge_and_sort_by_name() -> None:
    plan = plan_reads(
        [Extent("b", 0, 10), Extent("a", 10, 10), Extent("a", 0, 10), Extent("b", 10, 5)]
    )
    assert plan.commands == (ReadCommand("a", 0, 20, 0), ReadCommand("b", 0, 15, 20))
    assert plan.files == ("a", "b")
    assert plan.buffer_bytes == 35


def test_split_into_max_command_bytes() -> None:
    plan = plan_reads([Extent("f", 0, 10 * MiB)], max_command_bytes=4 * MiB)
    assert [(c.offset, c.length, c.buffer_offset) for c in plan.commands] == [
        (0, 4 * MiB, 0),
        (4 * MiB, 4 * MiB, 4 * MiB),
        (8 * MiB, 2 * MiB, 8 * MiB),
    ]
    assert plan.bytes_read == 10 * MiB


def test_alignment_widens_and_counts_in_bytes_read() -> None:
    plan = plan_reads([Extent("f", 100, 50)], align=4096)
    assert plan.commands == (ReadCommand("f", 0, 4096, 0),)
    assert plan.bytes_read == 4096 and plan.bytes_requested == 50
    assert plan.read_amplification == 4096 / 50
    assert plan.placements[0][1] == 100  # the extent's bytes sit at its offset inside the block


def test_alignment_merges_runs_it_makes_touch() -> None:
    # A 5000-byte hole is above a 4 KiB threshold, but widening to 4 KiB makes the runs touch.
    plan = plan_reads([Extent("f", 0, 100), Extent("f", 5100, 100)], gap_bytes=4096, align=4096)
    assert plan.commands == (ReadCommand("f", 0, 8192, 0),)
    assert [at for _, at in plan.placements] == [0, 5100]


def test_aligned_split_stays_aligned() -> None:
    plan = plan_reads([Extent("f", 1000, 3 * 8192)], align=4096, max_command_bytes=8192)
    assert all(c.offset % 4096 == 0 and c.length % 4096 == 0 for c in plan.commands)
    assert all(c.buffer_offset % 4096 == 0 for c in plan.commands)
    assert [c.length for c in plan.commands] == [8192, 8192, 8192, 4096]


def test_empty_plan() -> None:
    plan = plan_reads([])
    assert plan.commands == () and plan.bytes_read == 0 and plan.read_amplification == 1.0


@pytest.mark.parametrize(
    ("extents", "kw", "match"),
    [
        ([Extent("f", -1, 10)], {}, "offset must be >= 0; got -1"),
        ([Extent("f", 0, 0)], {}, "length must be >= 1; got 0"),
        ([Extent("f", 0, 1)], {"gap_bytes": -1}, "gap_bytes"),
        ([Extent("f", 0, 1)], {"align": 0}, "align"),
        ([Extent("f", 0, 1)], {"align": 4096, "max_command_bytes": 6000}, "multiple of align"),
        ([("f", 0, 1)], {}, "must be an Extent"),
    ],
)
def test_bad_input(extents: list, kw: dict, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        plan_reads(extents, **kw)


def _execute(plan, files: dict[str, bytes]) -> bytearray:
    """Reference executor: copy each command's bytes (zeros past a file's end)."""
    buf = bytearray(plan.buffer_bytes)
    for c in plan.commands:
        data = files[c.file][c.offset : c.end]
        buf[c.buffer_offset : c.buffer_offset + len(data)] = data
    return buf


extent_st = st.builds(
    Extent, st.sampled_from(["a", "b"]), st.integers(0, 20_000), st.integers(1, 3000)
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(extent_st, max_size=25),
    st.integers(0, 5000),
    st.sampled_from([1, 512, 4096]),
    st.sampled_from([None, 4096, 12288]),
)
def test_plan_properties(exts: list[Extent], gap: int, align: int, max_cmd: int | None) -> None:
    files = {name: bytes((i * 7 + ord(name)) % 251 for i in range(30_000)) for name in "ab"}
    plan = plan_reads(exts, gap_bytes=gap, align=align, max_command_bytes=max_cmd)
    buf = _execute(plan, files)
    # Every requested extent's bytes are where the plan says.
    for e, at in plan.placements:
        assert buf[at : at + e.length] == files[e.file][e.offset : e.end]
    assert [e for e, _ in plan.placements] == exts
    # Accounting: commands tile the buffer; bytes_read >= distinct requested bytes.
    assert plan.bytes_read == sum(c.length for c in plan.commands) == plan.buffer_bytes
    distinct = sum(
        len({i for e in exts if e.file == f for i in range(e.offset, e.end)}) for f in "ab"
    )
    assert plan.bytes_requested == distinct
    assert plan.bytes_read >= plan.bytes_requested
    # No two commands read the same byte; each obeys alignment and the size cap.
    seen: dict[str, list[tuple[int, int]]] = {}
    for c in plan.commands:
        assert c.offset % align == 0 and c.length % align == 0 and c.buffer_offset % align == 0
        if max_cmd is not None:
            assert c.length <= max_cmd
        for s, t in seen.get(c.file, []):
            assert c.end <= s or c.offset >= t
        seen.setdefault(c.file, []).append((c.offset, c.end))
    # Fewer commands than extents when unsplit (merging never adds commands).
    if max_cmd is None:
        assert plan.read_commands <= len(exts)
