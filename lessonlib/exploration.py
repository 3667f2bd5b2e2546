"""Explorations, a figure the reader drives: the public name of the engine's
lessonlib.engine.worker.exploration, where they are made (see its docstring). A page draws one
figure per state (`frame_svg`), wraps each in a `Frame` (with a `Table` of its numbers, if any)
and prints `exploration_html(...)` in a `python exec hide-code html` block; the lessonlib plugin
adds the script and stylesheet that drive it to every site."""
from __future__ import annotations

from lessonlib.engine.worker.exploration import Frame, Table, exploration_html, frame_svg

__all__ = ["Frame", "Table", "exploration_html", "frame_svg"]
