"""The layouts iobench compares: a :class:`BenchLayout` protocol and the :data:`LAYOUTS` registry.

A layout says how many bytes it needs, writes the workload under a directory, and (once
written) plans every session's cold, layer-wise restore and names the files a cold run drops
from the page cache. Adding a layout is one class and one registry entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .config import IobenchConfig
from .eviction import EvictionLayout, eviction_bytes_needed, write_eviction_layout
from .flat import FlatLayout, flat_bytes_needed, write_flat_layout
from .restore import SessionRestore, eviction_restores, flat_restores
from .workload import IoWorkload


class WrittenLayout(Protocol):
    """One layout on disk."""

    @property
    def files(self) -> tuple[str, ...]:
        """Every data file; a cold run drops each from the page cache first."""
        ...

    @property
    def memory_tier_bytes(self) -> int | None:
        """The tiered baseline's memory tier (None for a layout without one)."""
        ...

    def plan_restores(self, config: IobenchConfig) -> list[SessionRestore]:
        """Every session's restore plans, session order."""
        ...


class BenchLayout(Protocol):
    """A layout iobench can write; registered in :data:`LAYOUTS` under its ``name``."""

    name: str

    def bytes_needed(self, workload: IoWorkload) -> int:
        """Bytes the layout takes on disk (for the free-space check before writing)."""
        ...

    def write(
        self,
        workload: IoWorkload,
        directory: Path,
        config: IobenchConfig,
        on_bytes: Callable[[int], None] | None = None,
    ) -> WrittenLayout:
        """Write ``workload`` under ``directory``; ``on_bytes(n)`` after each ``n`` KV bytes."""
        ...


@dataclass(frozen=True)
class WrittenFlat:
    workload: IoWorkload
    layout: FlatLayout

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(str(p) for p in self.layout.session_files)

    @property
    def memory_tier_bytes(self) -> int | None:
        return None

    def plan_restores(self, config: IobenchConfig) -> list[SessionRestore]:
        return flat_restores(
            self.workload,
            self.layout,
            gap_bytes=config.gap_bytes,
            max_command_bytes=config.max_command_bytes,
        )


@dataclass(frozen=True)
class WrittenEviction:
    workload: IoWorkload
    layout: EvictionLayout

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(str(p) for p in self.layout.bucket_files)

    @property
    def memory_tier_bytes(self) -> int | None:
        return self.layout.memory_tier_bytes

    def plan_restores(self, config: IobenchConfig) -> list[SessionRestore]:
        # The baseline reads every (block, layer) piece on its own: no gap merging, no split.
        return eviction_restores(self.workload, self.layout)


class FlatBench:
    """One FC-CIO session file per session (:mod:`fcctl.iobench.flat`)."""

    name = "flat"

    def bytes_needed(self, workload: IoWorkload) -> int:
        return flat_bytes_needed(workload)

    def write(
        self,
        workload: IoWorkload,
        directory: Path,
        config: IobenchConfig,
        on_bytes: Callable[[int], None] | None = None,
    ) -> WrittenFlat:
        return WrittenFlat(workload, write_flat_layout(workload, directory, on_bytes=on_bytes))


class EvictionBench:
    """The tiered baseline's buckets in eviction order (:mod:`fcctl.iobench.eviction`)."""

    name = "eviction"

    def bytes_needed(self, workload: IoWorkload) -> int:
        return eviction_bytes_needed(workload)

    def write(
        self,
        workload: IoWorkload,
        directory: Path,
        config: IobenchConfig,
        on_bytes: Callable[[int], None] | None = None,
    ) -> WrittenEviction:
        layout = write_eviction_layout(
            workload,
            directory,
            bucket_bytes=config.bucket_bytes,
            memory_tier_bytes=config.memory_tier_bytes,
            on_bytes=on_bytes,
        )
        return WrittenEviction(workload, layout)


# Keys in iobench.config.LAYOUT_NAMES order (a test checks the two agree).
LAYOUTS: dict[str, BenchLayout] = {"flat": FlatBench(), "eviction": EvictionBench()}
