"""Material's search entries, page by page, from the HtmlMemo.

The search plugin cuts every page's HTML into sections with an HTMLParser, every build, a large
share of a warm build's own work, most of it spent on the spans of highlighted code. A
page's entries depend only on what the key below holds, so a page whose HTML, title, table of
contents and front matter have not changed gets its entries from the memo; the index written
is byte-identical.
"""
from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterable
from importlib.metadata import version
from typing import Any

from lessonlib.engine.builder.html_memo import HtmlMemo

SEARCH_INDEX = ("material.plugins.search.plugin", "SearchIndex")


def memoize_search(plugins: Iterable[Any], memo: HtmlMemo) -> None:
    """Make the site's Material search index (made anew by each build's on_config) take each
    page's entries from `memo`."""
    for plugin in plugins:
        index = getattr(plugin, "search_index", None)
        kind = type(index)
        if (kind.__module__, kind.__qualname__) != SEARCH_INDEX:
            continue
        if sys.modules[kind.__module__].jieba is not None:  # its dictionaries would belong in the key
            continue
        renderer = version("mkdocs-material")
        index.add_entry_from_context = functools.partial(_add_entry, index, memo, renderer)


def _add_entry(index: Any, memo: HtmlMemo, renderer: str, page: Any) -> None:
    def render() -> str:
        scratch = type(index)(**index.config)
        scratch.add_entry_from_context(page)
        return json.dumps(scratch.entries, default=str)  # as the index file writes them

    source = [renderer, index.config, page.url, page.title, page.meta, _toc(page.toc), page.content]
    index.entries.extend(json.loads(memo.get("search", source, render)))


def _toc(items: Iterable[Any]) -> list:
    return [[item.id, item.url, item.title, _toc(item.children)] for item in items]
