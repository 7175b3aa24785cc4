"""iobench: measure flat per-session KV files against the eviction-ordered baseline on a real disk.

Library entry point: :func:`iobench.bench.run_iobench` with an :class:`iobench.bench.IobenchConfig`.
"""
