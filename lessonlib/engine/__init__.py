"""The build-time engine: one executor (``page.execute_pages``) behind three doors — the MkDocs
plugin, the pytest collector and the CLI. Each page runs in a worker process of its own."""

SEED = 0  # every page, and every memoized call, starts from this seed in random, NumPy and torch
