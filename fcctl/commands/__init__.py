"""One module per subcommand; each registers itself on the app passed to ``register``."""
