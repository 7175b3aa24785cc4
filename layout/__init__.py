"""FlatCake storage format: KV geometry, block addresses, session files, read planning, readers.

This package is the drop-in part of fcctl: it imports nothing else of ours and needs only numpy.
torch and kvikio are imported lazily, by the code paths that need them.

The names below are loaded on first use (PEP 562): importing a light module of the package
(``.errors``, ``.geometry``) does not import numpy and every engine with it, which keeps
``fcctl --help`` quick. ``from <package> import FlatStore`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ loads each name
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
    from .geometry import (
        KvGeometry,
        ModelInfo,
        geometry_from_hf_config,
        model_geometry,
        preset_names,
    )
    from .planner import Extent, ReadCommand, ReadPlan, plan_reads
    from .session_file import SessionFile
    from .session_format import TurnRecord, file_bytes, fit_name
    from .staging import RestoreStats, StagingWindow, restore_session
    from .store import FlatStore, RestorePlan, StoredTurn

#: Each public name -> the module of this package that defines it (relative, so a copy of the
#: package under another name loads its own modules).
_HOMES: dict[str, str] = {
    "MEDIUM_MEMORY": ".address",
    "MEDIUM_SSD": ".address",
    "BlockAddress": ".address",
    "decode_address": ".address",
    "decode_addresses": ".address",
    "encode_address": ".address",
    "encode_addresses": ".address",
    "PAGE_BYTES": ".alignment",
    "align_up": ".alignment",
    "aligned_buffer": ".buffers",
    "crc32_combine": ".checksum",
    "crc32_parallel": ".checksum",
    "ENGINES": ".engines",
    "EngineUnavailable": ".engines",
    "KvikioEngine": ".engines",
    "PosixEngine": ".engines",
    "ReadEngine": ".engines",
    "ReadResult": ".engines",
    "drop_file_cache": ".engines",
    "open_engine": ".engines",
    "probe_engine": ".engines",
    "read_plan": ".engines",
    "CorruptSessionFile": ".errors",
    "InputError": ".errors",
    "LayoutError": ".errors",
    "SessionFileExists": ".errors",
    "StoreBusy": ".errors",
    "VerificationError": ".errors",
    "KvGeometry": ".geometry",
    "ModelInfo": ".geometry",
    "geometry_from_hf_config": ".geometry",
    "model_geometry": ".geometry",
    "preset_names": ".geometry",
    "Extent": ".planner",
    "ReadCommand": ".planner",
    "ReadPlan": ".planner",
    "plan_reads": ".planner",
    "SessionFile": ".session_file",
    "TurnRecord": ".session_format",
    "file_bytes": ".session_format",
    "fit_name": ".session_format",
    "RestoreStats": ".staging",
    "StagingWindow": ".staging",
    "restore_session": ".staging",
    "FlatStore": ".store",
    "RestorePlan": ".store",
    "StoredTurn": ".store",
}

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

if not TYPE_CHECKING:  # hidden from mypy, which would otherwise accept any attribute as Any

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value  # later lookups find it without this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
