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
from .alignment import PAGE_BYTES, align_up
from .buffers import aligned_buffer
from .checksum import crc32_combine, crc32_parallel
from .engines import (
    ENGINES,
    EngineUnavailable,
    KvikioEngine,
    PosixEngine,
    ReadEngine,
    ReadResult,
    drop_file_cache,
    open_engine,
    probe_engine,
    read_plan,
)
from .errors import (
    CorruptSessionFile,
    InputError,
    LayoutError,
    SessionFileExists,
    StoreBusy,
    VerificationError,
)
from .geometry import KvGeometry, ModelInfo, geometry_from_hf_config, model_geometry, preset_names
from .planner import Extent, ReadCommand, ReadPlan, plan_reads
from .session_file import SessionFile
from .session_format import TurnRecord, file_bytes, fit_name
from .staging import RestoreStats, StagingWindow, restore_session
from .store import FlatStore, RestorePlan, StoredTurn

__all__ = [
    "ENGINES",
    "MEDIUM_MEMORY",
    "MEDIUM_SSD",
    "PAGE_BYTES",
    "BlockAddress",
    "CorruptSessionFile",
    "EngineUnavailable",
    "Extent",
    "FlatStore",
    "InputError",
    "KvGeometry",
    "KvikioEngine",
    "LayoutError",
    "ModelInfo",
    "PosixEngine",
    "ReadCommand",
    "ReadEngine",
    "ReadPlan",
    "ReadResult",
    "RestorePlan",
    "RestoreStats",
    "SessionFile",
    "SessionFileExists",
    "StagingWindow",
    "StoreBusy",
    "StoredTurn",
    "TurnRecord",
    "VerificationError",
    "align_up",
    "aligned_buffer",
    "crc32_combine",
    "crc32_parallel",
    "decode_address",
    "decode_addresses",
    "drop_file_cache",
    "encode_address",
    "encode_addresses",
    "file_bytes",
    "fit_name",
    "geometry_from_hf_config",
    "model_geometry",
    "open_engine",
    "plan_reads",
    "preset_names",
    "probe_engine",
    "read_plan",
    "restore_session",
]
