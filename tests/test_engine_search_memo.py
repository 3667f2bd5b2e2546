"""Material's search entries kept in the HTML memo: the index is what the search plugin writes
without it, and a later build does not parse an unchanged page again."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from material.plugins.search import plugin as search
from mkdocs.config import load_config
from mkdocs.structure.toc import get_toc

from lessonlib.engine.builder import plugin as lesson_plugin
from lessonlib.engine.builder.html_memo import HtmlMemo
from lessonlib.engine.builder.search_memo import memoize_search

ROOT = Path(__file__).resolve().parent.parent
CONTENT = '''<h1 id="rnns">RNNs</h1>
<p>A cell reads one step.</p>
<div class="highlight"><pre><span></span><code><span class="n">h</span> <span class="o">=</span> <span class="n">cell</span><span class="p">(</span><span class="n">x</span><span class="p">)</span>
</code></pre></div>
<h2 id="gates">Gates <a class="headerlink" href="#gates">&para;</a></h2>
<p>The gate decides.</p>
'''
TOKENS = [{"level": 1, "id": "rnns", "name": "RNNs", "html": "RNNs", "data-toc-label": "", "children": [
    {"level": 2, "id": "gates", "name": "Gates", "html": "Gates", "data-toc-label": "", "children": []}]}]


def page(content: str = CONTENT, url: str = "rnn/", meta: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(content=content, url=url, title="RNNs", meta=meta or {"tags": ["rnn"]},
                           toc=get_toc(TOKENS))


class SearchSite:
    """The search plugin's index as the site configures it, optionally through the memo."""

    def __init__(self, memo: HtmlMemo | None) -> None:
        self.index = search.SearchIndex(lang=["en"], separator=r"[\s\-]+", pipeline=["stemmer"],
                                        fields={"title": {"boost": 1e3}, "text": {"boost": 1.0}})
        if memo is not None:
            memoize_search([SimpleNamespace(search_index=self.index)], memo)

    def index_file(self, *pages: SimpleNamespace) -> str:
        for p in pages:
            self.index.add_entry_from_context(p)
        return self.index.generate_search_index(None)


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The HTML the search plugin parses."""
    fed: list[str] = []
    real = search.Parser.feed
    monkeypatch.setattr(search.Parser, "feed", lambda self, data: (fed.append(data), real(self, data))[1])
    return fed


def test_the_index_is_byte_identical_and_a_later_build_parses_no_unchanged_page(tmp_path, parses):
    pages = [page(), page(url="gru/", meta={"search": {"boost": 2}})]
    fresh = SearchSite(None).index_file(*pages)
    assert '"location":"rnn/#gates"' in fresh and '"tags":["rnn"]' in fresh and '"boost":2' in fresh
    memo = HtmlMemo(tmp_path / "html.json")
    assert SearchSite(memo).index_file(*pages) == fresh
    memo.save()
    parses.clear()
    assert SearchSite(HtmlMemo(tmp_path / "html.json")).index_file(*pages) == fresh
    assert parses == []  # fails if the memo is bypassed


@pytest.mark.parametrize("change", [
    {"content": CONTENT.replace("decides", "opens")},
    {"url": "lstm/"},
    {"meta": {"tags": ["gates"]}},
])
def test_a_page_whose_html_address_or_front_matter_changed_is_parsed_again(tmp_path, change):
    memo = HtmlMemo(tmp_path / "html.json")
    SearchSite(memo).index_file(page())
    memo.save()
    changed = page(**change)
    assert SearchSite(HtmlMemo(tmp_path / "html.json")).index_file(changed) == SearchSite(None).index_file(changed)


def test_front_matter_json_cannot_hold_is_indexed_without_the_memo(tmp_path):
    odd = page(meta={"tags": ["rnn"], "date": object()})
    memo = HtmlMemo(tmp_path / "html.json")
    assert SearchSite(memo).index_file(odd) == SearchSite(None).index_file(odd)
    assert memo.entries == {}


def test_the_plugin_memoizes_the_sites_search_index(tmp_path, monkeypatch):
    """The site's own mkdocs.yml: after every plugin's on_config, the plugin's on_pre_build
    routes the search plugin's index through its memo."""
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lesson_plugin, "execute_pages", lambda *args, **kwargs: [])
    config = load_config(str(ROOT / "mkdocs.yml"))
    config = config.plugins.on_config(config)
    config.site_dir = str(tmp_path / "site")  # the build's staging folder goes beside it
    config.plugins["lessonlib"].on_pre_build(config)
    index = config.plugins["material/search"].search_index
    index.add_entry_from_context(page())
    assert index.entries and len(config.plugins["lessonlib"].memo.entries) == 1
