"""The build-time engine: one executor (``page.execute_page``) behind three doors —
the MkDocs plugin, the pytest collector and the CLI."""
