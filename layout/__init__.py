"""FlatCake storage format: KV geometry, block addresses, session files, read planning, readers.

This package is the drop-in part of fcctl: it imports nothing else of ours and needs only numpy.
torch and kvikio are imported lazily, by the code paths that need them.
"""

from .address import (
    MEDIUM_MEMORY,
    MEDIUM_SSD,
    BlockAddress,
    decode_address,
    decode_addresses,
    encode_address,
    encode_addresses,
)
from .errors import CorruptSessionFile, InputError, LayoutError, VerificationError
from .geometry import KvGeometry, geometry_from_hf_config, model_geometry
from .planner import Extent, ReadCommand, ReadPlan, plan_reads
from .readers import (
    ENGINES,
    EngineUnavailable,
    ReadEngine,
    ReadResult,
    drop_file_cache,
    open_engine,
    probe_engine,
)
from .session_file import SessionFile, TurnRecord
from .staging import RestoreStats, StagingWindow, restore_session

__all__ = [
    "ENGINES",
    "MEDIUM_MEMORY",
    "MEDIUM_SSD",
    "BlockAddress",
    "CorruptSessionFile",
    "EngineUnavailable",
    "Extent",
    "InputError",
    "KvGeometry",
    "LayoutError",
    "ReadCommand",
    "ReadEngine",
    "ReadPlan",
    "ReadResult",
    "RestoreStats",
    "SessionFile",
    "StagingWindow",
    "TurnRecord",
    "VerificationError",
    "decode_address",
    "decode_addresses",
    "drop_file_cache",
    "encode_address",
    "encode_addresses",
    "geometry_from_hf_config",
    "model_geometry",
    "open_engine",
    "plan_reads",
    "probe_engine",
    "restore_session",
]
