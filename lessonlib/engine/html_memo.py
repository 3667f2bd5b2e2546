"""HTML that a build renders the same way from the same source every time, kept between builds:
highlighted code (Pygments, through pymdownx.highlight) and MathML (latex2mathml). They took a
third of a warm build's time, every build, for code and formulas that had not changed.

An entry is keyed on its source and on everything that renders it: the options, and the
versions of the packages that do the rendering; never on file times. The memo is one file, read
once per build and replaced at its end by the entries that build used, so it holds one site's
worth and no more.
"""
from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pymdownx.highlight import Highlight, HighlightExtension

from lessonlib.engine.cache import write_atomically

RENDERERS = ("Pygments", "pymdown-extensions", "latex2mathml")


class HtmlMemo:
    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: remember within this build only
        self.renderers = [version(name) for name in RENDERERS]
        self.stored = _load(path)
        self.used: dict[str, str] = {}

    def get(self, kind: str, source: Any, render: Callable[[], str]) -> str:
        """The HTML `render()` makes from `source` (anything JSON can hold), rendered at most once."""
        try:
            key = hashlib.sha256(json.dumps([kind, self.renderers, source], sort_keys=True).encode()).hexdigest()
        except TypeError:  # an option JSON cannot hold: render it, keep nothing
            return render()
        if key not in self.used:
            self.used[key] = self.stored[key] if key in self.stored else render()
        return self.used[key]

    def save(self) -> None:
        if self.path is not None and self.used != self.stored:
            write_atomically(self.path, json.dumps(self.used))
            self.stored = dict(self.used)


def _load(path: Path | None) -> dict[str, str]:
    try:
        stored = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):  # absent, or cut short: render again
        return {}
    ok = isinstance(stored, dict) and all(isinstance(v, str) for v in stored.values())
    return stored if ok else {}


class MemoHighlightExtension(HighlightExtension):
    """pymdownx.highlight whose code blocks come from an HtmlMemo. SuperFences highlights with
    the highlighter the registered highlight extension hands out (get_pymdownx_highlighter)."""

    def __init__(self, memo: HtmlMemo, **configs: Any) -> None:
        self.memo = memo
        super().__init__(**configs)

    def get_pymdownx_highlighter(self) -> Callable[..., Highlight]:
        return functools.partial(MemoHighlight, memo=self.memo)


class MemoHighlight(Highlight):
    def __init__(self, md: Any, memo: HtmlMemo, **options: Any) -> None:
        super().__init__(md, **options)
        self.memo, self.options = memo, options

    def highlight(self, src: str, language: str, *args: Any, **kwargs: Any) -> Any:
        render = functools.partial(super().highlight, src, language, *args, **kwargs)
        # Inline code comes back as an element, and an HTML title is put in the page's stash:
        # neither is a string that can be kept.
        html_title = self.title_mode == "html" or any(isinstance(t, dict) for t in self.auto_title_map.values())
        if kwargs.get("inline") or html_title:
            return render()
        return self.memo.get("highlight", [self.options, src, language, args, kwargs], render)
