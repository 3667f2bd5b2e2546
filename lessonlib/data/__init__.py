"""Data files that ship with lessonlib (see each folder's README for source and licence)."""
