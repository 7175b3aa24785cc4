"""fcctl: decide where LLM KV cache lives (host memory, SSD, or both)."""

from fcctl.common.version import __version__

__all__ = ["__version__"]
