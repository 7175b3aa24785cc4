"""The staging window: per stream a double buffer of two layer-sized buffers (skeleton)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from layout.planner import ReadPlan


@dataclass(frozen=True)
class RestoreStats:
    engine: str
    o_direct: bool
    gds: bool | None
    layers: int
    blocks: int
    read_commands: int
    bytes_requested: int
    bytes_read: int
    bytes_scattered: int
    seconds: float
    read_seconds: float
    scatter_seconds: float
    producer_waits: int
    producer_wait_seconds: float

    @property
    def restore_bytes_per_s(self) -> float:
        return self.bytes_scattered / self.seconds if self.seconds > 0 else 0.0


class StagingWindow:
    def __init__(self, layer_bytes: int, *, device: str = "cuda", streams: int = 1) -> None:
        raise NotImplementedError

    def restore_session(
        self,
        plan_per_layer: Sequence[ReadPlan],
        engine: Any,
        kv_cache: Any,
        page_ids: Any,
        *,
        on_layer: Callable[[int], None] | None = None,
    ) -> RestoreStats:
        raise NotImplementedError


def restore_session(
    plan_per_layer: Sequence[ReadPlan],
    engine: Any,
    kv_cache: Any,
    page_ids: Any,
    *,
    window: StagingWindow | None = None,
    device: str | None = None,
    streams: int = 1,
    on_layer: Callable[[int], None] | None = None,
) -> RestoreStats:
    raise NotImplementedError
