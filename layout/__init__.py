"""FlatCake storage format: KV geometry, block addresses, session files, read planning, readers.

This package is the drop-in part of fcctl: it imports nothing else of ours and needs only numpy.
torch and kvikio are imported lazily, by the code paths that need them.
"""

from layout.errors import FcctlInputError, LayoutError
from layout.geometry import KvGeometry, geometry_from_hf_config, model_geometry

__all__ = ["FcctlInputError", "KvGeometry", "LayoutError", "geometry_from_hf_config", "model_geometry"]
