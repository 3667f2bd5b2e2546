"""HTML that a build renders the same way from the same source every time, kept between builds:
highlighted code (Pygments, through pymdownx.highlight), MathML (latex2mathml) and, through
search_memo, Material's search entries. They took a third of a warm build's time, every build,
for code and formulas that had not changed.

An entry is keyed on its source and on everything that renders it: the options, the versions
of the packages that do the rendering and the engine modules that call them; never on file
times. The memo is one file, read once per build and rewritten at its end when the build
rendered something new, without the entries that none of the last few builds used: it holds a
few builds' worth and no more.
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

from lessonlib.engine.worker.store import source_fingerprint, write_atomically

RENDERERS = ("Pygments", "pymdown-extensions", "latex2mathml")
OWN_CODE = ("builder/html_memo", "builder/mathml", "builder/search_memo")  # the engine modules whose HTML it keeps


class HtmlMemo:
    """Entries by key, each with the last "generation" that used it. A build that renders
    anything new writes the memo as the next generation; an entry none of the last KEEP
    generations used is dropped. A build that rendered nothing new writes nothing."""

    KEEP = 8  # generations: a full build and an EXECUTE=0 preview, or two branches, don't evict each other

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: remember within this build only
        self.renderers = [*(version(name) for name in RENDERERS), source_fingerprint(*OWN_CODE)]
        self.generation, self.entries = _load(path)  # key -> [generation last used, html]
        self.used: set[str] = set()
        self.added = False

    def get(self, kind: str, source: Any, render: Callable[[], str]) -> str:
        """The HTML `render()` makes from `source` (anything JSON can hold), rendered at most once."""
        try:
            key = hashlib.sha256(json.dumps([kind, self.renderers, source], sort_keys=True).encode()).hexdigest()
        except TypeError:  # an option JSON cannot hold: render it, keep nothing
            return render()
        if key not in self.entries:
            self.entries[key] = [self.generation, render()]
            self.added = True
        self.used.add(key)
        return self.entries[key][1]

    def save(self) -> None:
        if self.path is None or not self.added:
            return
        generation = self.generation + 1
        for key in self.used:
            self.entries[key][0] = generation
        kept = {key: entry for key, entry in self.entries.items() if generation - entry[0] < self.KEEP}
        write_atomically(self.path, json.dumps({"generation": generation, "entries": kept}))
        self.generation, self.entries, self.added = generation, kept, False


def _load(path: Path | None) -> tuple[int, dict[str, list]]:
    if path is None:
        return 0, {}
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        generation, entries = stored["generation"], stored["entries"]
        if isinstance(generation, int) and all(isinstance(g, int) and isinstance(html, str)
                                               for g, html in entries.values()):
            return generation, entries
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, cut short or not ours
        pass
    return 0, {}


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
