"""The build-time engine: one executor (``page.execute_pages``) behind three doors — the MkDocs
plugin, the pytest collector and the CLI. Each page runs in a worker process of its own."""
