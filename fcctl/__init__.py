"""fcctl: decide where LLM KV cache lives (host memory, SSD, or both)."""

__version__ = "0.1.0"
