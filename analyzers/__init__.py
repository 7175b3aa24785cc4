"""Trace ingestion and KV-reuse analysis."""
