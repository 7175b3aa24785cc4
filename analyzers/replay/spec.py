"""One simulation's settings (:class:`RunSpec`) and the interface of the block store it runs on.

A :class:`RunSpec` is everything a :class:`~fcctl.analyzers.replay.engine.Simulation` reads
besides the workload, the policy and the load point: the KV geometry, the node, the placement
rule, the schedule's seed, what a cancelled tiered prefetch's bytes become, the router, the
think time between a session's turns, and whether the per-request tables are kept. It is
checked where it is made, each message naming the parameter at fault, so the engine and the
policies read typed fields and restate no default.

:class:`Store` is what the engine and the policies call on the store, and :class:`StoreFactory`
what makes one: :class:`~fcctl.analyzers.replay.store.FastStore` (arrays and numba kernels) or
:class:`~fcctl.analyzers.replay.reference.ReferenceStore` (plain Python, one step per block),
which the tests hold equal. Whether a store is the reference is its own ``reference`` flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fcctl.common.errors import FcctlInputError
from fcctl.layout.geometry import KvGeometry
from fcctl.layout.placement import PlacementRule

from .hardware import Hardware, with_values
from .load import ThinkTime

if TYPE_CHECKING:
    import numpy as np

    from .flatcost import SegmentTable

DEFAULT_SEED = 0
#: What a cancelled tiered prefetch's bytes become: thrown away (recomputed) or delivered.
CANCEL_MODES: tuple[str, ...] = ("discard", "credit")
#: Routers (docs/simulator.md, "Routers"); the default is Dynamo's KV-aware cost.
ROUTERS: tuple[str, ...] = ("kv-aware", "sticky", "round-robin", "least-loaded")
DEFAULT_ROUTER = "kv-aware"


def _require(ok: bool, parameter: str, rule: str, value: object) -> None:
    if not ok:
        raise FcctlInputError(f"{parameter}: {rule}; got {value!r}", parameter=parameter)


@dataclass(frozen=True)
class RunSpec:
    """One simulation's settings (module docstring); every field checked on construction."""

    geometry: KvGeometry
    hardware: Hardware
    placement: PlacementRule = field(default_factory=PlacementRule)
    seed: int = DEFAULT_SEED
    #: One of :data:`CANCEL_MODES`.
    cancel: str = "discard"
    #: One of :data:`ROUTERS`: which worker a request goes to.
    router: str = DEFAULT_ROUTER
    think_time: ThinkTime = field(default_factory=ThinkTime)
    #: Keep each simulation's per-request table (``PolicyResult.table``, for ``--out``).
    keep_tables: bool = False

    def __post_init__(self) -> None:
        _require(isinstance(self.geometry, KvGeometry), "geometry", "a KvGeometry", self.geometry)
        _require(isinstance(self.hardware, Hardware), "hardware", "a Hardware", self.hardware)
        _require(
            isinstance(self.placement, PlacementRule),
            "placement",
            "a PlacementRule",
            self.placement,
        )
        _require(
            isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0,
            "seed",
            "must be an integer >= 0",
            self.seed,
        )
        _require(
            self.cancel in CANCEL_MODES, "cancel", f"one of {', '.join(CANCEL_MODES)}", self.cancel
        )
        _require(self.router in ROUTERS, "router", f"one of {', '.join(ROUTERS)}", self.router)
        _require(
            isinstance(self.think_time, ThinkTime), "think_time", "a ThinkTime", self.think_time
        )
        _require(
            isinstance(self.keep_tables, bool), "keep_tables", "True or False", self.keep_tables
        )

    def with_sizes(self, sizes: Mapping[str, int]) -> RunSpec:
        """This spec on the node with ``sizes`` (hardware field -> bytes) where they differ
        from its own: one size point of a sweep (:mod:`.sweep`)."""
        changed = {f: v for f, v in sizes.items() if v != getattr(self.hardware, f)}
        if not changed:
            return self
        return dataclasses.replace(self, hardware=with_values(self.hardware, changed, "size sweep"))


class Store(Protocol):
    """Where every block is (:mod:`.store`): what the engine and the policies call."""

    #: Peak of the host blocks held, all pools together.
    h_peak: int

    def host_pool(self, worker: int) -> int: ...
    def lookup_lru(
        self, blk: np.ndarray, worker: int, use_ssd: bool
    ) -> tuple[int, int, int, int]: ...
    def prefix_codes(self, p: int) -> np.ndarray: ...
    def gpu_insert(self, blk: np.ndarray, worker: int, cap: int | None = None) -> None: ...
    def gpu_prefix(self, blk: np.ndarray, worker: int) -> int: ...
    def gpu_prefixes(self, blk: np.ndarray) -> list[int]: ...
    def gpu_trim(self, worker: int, cap: int) -> None: ...
    def gpu_pin(self, blk: np.ndarray, worker: int, cap: int) -> None: ...
    def gpu_unpin(self, blk: np.ndarray, worker: int, cap: int) -> None: ...
    def gpu_pinned(self, worker: int) -> int: ...
    def host_insert(self, blk: np.ndarray, tiered: bool, worker: int = 0) -> None: ...
    @property
    def host_used_blocks(self) -> int: ...
    def host_used_blocks_of(self, pool: int) -> int: ...
    @property
    def ssd_used_blocks(self) -> int: ...
    @property
    def ssd_peak_blocks(self) -> int: ...
    @property
    def ssd_recycled_blocks(self) -> int: ...
    @property
    def ssd_written_blocks(self) -> int: ...
    def lookup_flat(
        self, blk: np.ndarray, worker: int
    ) -> tuple[int, int, int, int, np.ndarray]: ...
    def unstored_flat(self, blk: np.ndarray, worker: int) -> np.ndarray: ...
    def assign(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None: ...
    def clear(self, blocks: np.ndarray, segment: int, on_ssd: bool, *, pool: int) -> None: ...
    def flat_read_cost(
        self,
        runs: np.ndarray,
        segs: SegmentTable,
        *,
        layers: int,
        record_bytes: int,
        piece_bytes: int,
    ) -> tuple[int, int]: ...
    def add_refs(self, blk: np.ndarray, delta: int) -> None: ...
    def refs_of(self, blocks: np.ndarray) -> np.ndarray: ...


class StoreFactory(Protocol):
    """A store class: its constructor's capacities are in blocks (``host_blocks``: one pool's).

    ``reference``: the plain reference implementation, kept for checking the fast one; a
    replay runs its simulations in this process, one after another."""

    reference: bool

    def __call__(
        self,
        *,
        num_blocks: int,
        max_request_blocks: int,
        workers: int,
        gpu_blocks: int,
        host_blocks: int,
        host_pools: int = 1,
        ssd_blocks: int = 0,
        blocks_per_bucket: int = 1,
        high_watermark: float = 0.9,
        low_watermark: float = 0.8,
        total_accesses: int = 0,
    ) -> Store: ...
