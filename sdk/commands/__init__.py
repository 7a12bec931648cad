"""One module per ``devicefit`` subcommand; each exposes ``register(subparsers)``."""
