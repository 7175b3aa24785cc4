"""Rendering: rich summaries, Parquet tables and PNG charts for fcctl's results.

Libraries in ``analyzers``/``iobench`` return numbers; this package only turns them into
tables, files and pictures. matplotlib is imported lazily (Agg backend) when charts are written.
"""
