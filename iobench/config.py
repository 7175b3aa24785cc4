"""``IobenchConfig``: every knob of one ``fcctl iobench`` run, checked when it is made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fcctl.analyzers.kvmodel.tiered import DEFAULT_BUCKET_BYTES
from fcctl.common.errors import FcctlInputError
from fcctl.layout.alignment import PAGE_BYTES
from fcctl.layout.geometry import KvGeometry, model_geometry

GiB = 2**30
# Every layout iobench knows, in the order runs and JSON list them (the registry is
# iobench.layouts.LAYOUTS).
LAYOUT_NAMES = ("flat", "eviction")
BUFFER_CHOICES = ("auto", "host", "gpu")
FIO_RUNTIME_RANGE_S = (0.001, 3600.0)
# Restore destinations are reused: a run restores its sessions in waves into a pool of at
# least (highest concurrency) buffers, more while they fit this budget (iobench.restore).
RESTORE_BUFFER_BUDGET_BYTES = 1 * GiB


@dataclass(frozen=True)
class IobenchConfig:
    """Every knob of a run; sizes in bytes. See ``fcctl iobench --help`` for the flags."""

    directory: Path | None = None
    force: bool = False
    keep: bool = False
    layout: str = "both"
    trace: Path | None = None
    trace_format: str | None = None
    scale: float = 1.0
    size_limit_bytes: int = 2 * GiB
    sessions: int = 16
    tokens: int = 1024
    turns: int = 4
    # The KV written: one rank's of this geometry (its tp and dtype included), resolved once by
    # the caller (fcctl.geometry(...)); the default model's by default.
    geometry: KvGeometry = field(default_factory=lambda: model_geometry("llama-3.1-8b"))
    block_tokens: int = 16
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    memory_tier_bytes: int | None = None
    concurrency: tuple[int, ...] = (1, 4, 16)
    repeat: int = 1
    engine: str | None = None
    engine_threads: int | None = None
    gap_bytes: int = 64 * 1024
    max_command_bytes: int | None = None
    fio: bool = True
    fio_runtime_s: float = 1.5
    # Restore destinations: "host" memory, "gpu" (CuPy device arrays), or "auto" (gpu for the
    # kvikio engine when CuPy sees a GPU, else host).
    buffers: str = "auto"
    # Check each flat layer range's checksum inside the timed region (the engine's verify).
    verify_checksums: bool = True
    # Free space left untouched on the target filesystem; None: max(1 GiB, 5% of it).
    free_margin_bytes: int | None = None
    # The restore buffer pool's budget (a library knob: tests and embedders bound memory).
    restore_buffer_budget_bytes: int = RESTORE_BUFFER_BUDGET_BYTES

    def __post_init__(self) -> None:
        if self.layout not in (*LAYOUT_NAMES, "both"):
            raise FcctlInputError(
                f"layout: must be flat, eviction or both; got {self.layout!r}", parameter="layout"
            )
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise FcctlInputError(
                f"concurrency: each value must be >= 1; got {self.concurrency!r}",
                parameter="concurrency",
            )
        # NaN and infinity pass "> 0" checks one way or the other; refuse them by name first.
        for name, value in (("scale", self.scale), ("fio_runtime_s", self.fio_runtime_s)):
            if not math.isfinite(value):
                raise FcctlInputError(
                    f"{name}: must be a finite number; got {value!r}", parameter=name
                )
        if not self.scale > 0:  # checked here so a synthetic run refuses it too
            raise FcctlInputError(f"scale: must be > 0; got {self.scale!r}", parameter="scale")
        if self.repeat < 1:
            raise FcctlInputError(f"repeat: must be >= 1; got {self.repeat!r}", parameter="repeat")
        if self.size_limit_bytes < 1:
            raise FcctlInputError(
                f"size_limit_bytes: must be > 0; got {self.size_limit_bytes!r}",
                parameter="size_limit_bytes",
            )
        if self.engine_threads is not None and self.engine_threads < 1:
            raise FcctlInputError(
                f"engine_threads: must be >= 1; got {self.engine_threads!r}",
                parameter="engine_threads",
            )
        if self.max_command_bytes is not None and (
            self.max_command_bytes < PAGE_BYTES or self.max_command_bytes % PAGE_BYTES
        ):
            raise FcctlInputError(
                f"max_command_bytes: must be a multiple of {PAGE_BYTES} bytes; "
                f"got {self.max_command_bytes!r}",
                parameter="max_command_bytes",
            )
        if self.buffers not in BUFFER_CHOICES:
            raise FcctlInputError(
                f"buffers: must be auto, host or gpu; got {self.buffers!r}", parameter="buffers"
            )
        # fio takes whole milliseconds, and an hour per job is past any honest reference.
        if not FIO_RUNTIME_RANGE_S[0] <= self.fio_runtime_s <= FIO_RUNTIME_RANGE_S[1]:
            raise FcctlInputError(
                f"fio_runtime_s: must be between {FIO_RUNTIME_RANGE_S[0]} and "
                f"{FIO_RUNTIME_RANGE_S[1]:.0f} seconds; got {self.fio_runtime_s!r}",
                parameter="fio_runtime_s",
            )
        if self.free_margin_bytes is not None and self.free_margin_bytes < 0:
            raise FcctlInputError(
                f"free_margin_bytes: must be >= 0; got {self.free_margin_bytes!r}",
                parameter="free_margin_bytes",
            )

    @property
    def layouts(self) -> tuple[str, ...]:
        """The layouts this run writes and restores, in :data:`LAYOUT_NAMES` order."""
        return LAYOUT_NAMES if self.layout == "both" else (self.layout,)
