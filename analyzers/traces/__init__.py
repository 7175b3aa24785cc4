"""Traces in: the readers, the canonical table and its Parquet form, datasets, synthetic traces,
session schedules. Imports nothing else of ``fcctl.analyzers``."""
