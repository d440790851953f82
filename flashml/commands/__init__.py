"""Sub-commands of the `flashml` CLI: each module exposes `register(subparsers)`."""
