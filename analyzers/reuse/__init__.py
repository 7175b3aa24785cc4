"""Reuse analysis (``fcctl analyze``): the LRU stack kernel, SHARDS, exact and bounded passes,
the Dask engine, sessions, memory tiers and the verdict. Imports ``traces`` and ``kvmodel``."""
