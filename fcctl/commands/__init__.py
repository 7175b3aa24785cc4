"""One module per subcommand; each registers itself on the app passed to ``register``."""

# The trace formats, for --help. Spelled out here rather than read from
# ``analyzers.traces.readers.FORMATS`` so that `fcctl --help` does not import polars;
# tests/test_cli_imports.py checks the two agree.
FORMAT_NAMES: tuple[str, ...] = (
    "mooncake",
    "claude-code",
    "bailian",
    "azure",
    "parquet",
    "tracelab",
    "dynamo",
    "flatcake",
    "generic",
)
