from __future__ import annotations

import pytest

from fcctl.common.errors import FcctlInputError
from fcctl.common.units import format_bytes, parse_int_list, parse_size, parse_size_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("64GiB", 64 * 2**30),
        ("64 gib", 64 * 2**30),
        ("1.5TB", 1_500_000_000_000),
        ("2k", 2048),
        ("256MiB", 256 * 2**20),
        ("1KB", 1000),
        (7, 7),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "GiB", "12XB", "-5GiB", "1.5", "1e9", "64 GiB extra", "0.3KiB", "1.0000001GiB"]
)
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(FcctlInputError) as e:
        parse_size(text, what="--size-limit")
    assert str(e.value).startswith("--size-limit: ")
    assert repr(text) in str(e.value)


def test_fractional_sizes_that_are_whole_bytes_are_exact() -> None:
    # Decimal arithmetic, not float: 0.5KiB is 512 bytes exactly, 0.3KiB (307.2) is refused.
    assert parse_size("0.5KiB") == 512
    assert parse_size("0.1GB") == 100_000_000
    with pytest.raises(FcctlInputError, match="whole number of bytes"):
        parse_size("0.3KiB", what="--memory")


def test_parse_size_list() -> None:
    assert parse_size_list("64GiB, 256GiB") == [64 * 2**30, 256 * 2**30]
    for bad in ("", ",", "1GiB,,2GiB", "1GiB,", "0,1GiB"):
        with pytest.raises(FcctlInputError):
            parse_size_list(bad, what="--memory")


def test_parse_int_list() -> None:
    assert parse_int_list("1,4,16") == [1, 4, 16]
    for bad in ("", "1,,4", "a", "0", "1.5"):
        with pytest.raises(FcctlInputError):
            parse_int_list(bad, what="--concurrency")


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(1.5 * 2**20) == "1.50 MiB"


def test_report_formats_keep_small_figures_readable() -> None:
    """#16.5: 0.85 is not shown as 0.8, microseconds are not 0.00 ms, and an axis over data that
    are all 0 bytes does not read 1 B, 1 B, 1 B, 0 B."""
    from fcctl.reports import format as fmt
    from fcctl.reports import svg

    assert fmt.number(0.85) == "0.85" and fmt.number(12.345) == "12.3"
    assert fmt.number(0.000123) == "0.000123" and fmt.number(150.4) == "150"
    assert fmt.seconds(5e-6) == "5.00 us" and fmt.seconds(0.0005) == "500 us"
    assert fmt.seconds(0.045) == "45.0 ms" and fmt.seconds(0) == "0 ms"
    labels = [fmt.size(v) for v in svg.distinct_labels(svg.linear_ticks(0, 1), fmt.size)]
    assert labels == ["0 B"]
    ticks = svg.linear_ticks(0, 5e9)
    assert svg.distinct_labels(ticks, fmt.size) == ticks  # a normal axis keeps every tick
