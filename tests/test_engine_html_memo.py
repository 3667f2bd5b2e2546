"""The HTML memo: highlighted code and MathML kept between builds, identical to rendering afresh."""
from __future__ import annotations

import json
from pathlib import Path

import markdown
import pymdownx.highlight
import pytest
from mkdocs.config import load_config

from lessonlib.engine.builder.html_memo import HtmlMemo, MemoHighlightExtension
from lessonlib.engine.builder.mathml import to_mathml
from lessonlib.engine.builder.plugin import LessonPlugin

ROOT = Path(__file__).resolve().parent.parent
PAGE = '''\
Some `#!python x = 1` inline code.

```python
def f(x):
    return x + 1  # a comment
```

```python title="step.py" hl_lines="2"
a = 1
b = a * 2
```

```pycon
>>> 2 + 2
4
```
'''
EXTENSIONS = ["pymdownx.superfences", "pymdownx.inlinehilite", "attr_list"]


def html(page: str, memo: HtmlMemo | None, **options) -> str:
    """`page` rendered as the site renders it; with `memo`, through the plugin's highlighter."""
    highlight = MemoHighlightExtension(memo, **options) if memo else pymdownx.highlight.makeExtension(**options)
    return markdown.Markdown(extensions=[*EXTENSIONS, highlight]).convert(page)


@pytest.fixture
def pygments_calls(monkeypatch) -> list[str]:
    """The sources Pygments is asked to highlight."""
    calls: list[str] = []
    real = pymdownx.highlight.highlight

    def counted(src, lexer, formatter):
        calls.append(src)
        return real(src, lexer, formatter)

    monkeypatch.setattr(pymdownx.highlight, "highlight", counted)
    return calls


def test_memo_output_is_byte_identical_and_a_later_build_highlights_nothing_again(tmp_path, pygments_calls):
    options = {"pygments_lang_class": True}
    fresh = html(PAGE, None, **options)
    assert len(pygments_calls) == 4  # three blocks, one inline span
    first = HtmlMemo(tmp_path / "html.json")
    assert html(PAGE, first, **options) == fresh
    first.save()
    pygments_calls.clear()

    later = HtmlMemo(tmp_path / "html.json")  # the next build, in a new process
    assert html(PAGE, later, **options) == fresh
    assert pygments_calls == ["x = 1"]  # inline code is an element, not kept; every block came from the memo


def test_memo_is_keyed_on_the_options_and_the_code_so_nothing_stale_is_served(tmp_path):
    memo = HtmlMemo(tmp_path / "html.json")
    assert html(PAGE, memo, pygments_lang_class=True) == html(PAGE, None, pygments_lang_class=True)
    assert html(PAGE, memo, pygments_lang_class=False) == html(PAGE, None, pygments_lang_class=False)
    edited = PAGE.replace("x + 1", "x + 2")
    assert html(edited, memo) == html(edited, None)
    assert html(PAGE, memo, pygments_lang_class=True) != html(PAGE, memo, pygments_lang_class=False)


def build(memo_file: Path, page: str) -> HtmlMemo:
    """One build of `page`: load the memo, render, save."""
    memo = HtmlMemo(memo_file)
    html(page, memo)
    memo.save()
    return memo


def test_an_entry_stays_while_one_of_the_last_builds_used_it(tmp_path, pygments_calls):
    memo_file = tmp_path / "html.json"
    build(memo_file, PAGE)
    for i in range(HtmlMemo.KEEP - 1):  # other builds, each with something new (a preview, a branch)
        build(memo_file, f"```python\nbranch = {i}\n```\n")
    pygments_calls.clear()
    build(memo_file, PAGE)
    assert pygments_calls == ["x = 1"]  # every block of PAGE was still kept: only the inline span ran
    for i in range(HtmlMemo.KEEP):
        build(memo_file, f"```python\nlater = {i}\n```\n")
    stored = json.loads(memo_file.read_text())["entries"]
    assert len(stored) == HtmlMemo.KEEP and all("later" in html for _, html in stored.values())


def test_a_build_that_renders_nothing_new_writes_nothing(tmp_path):
    memo_file = tmp_path / "html.json"
    build(memo_file, PAGE)
    before = memo_file.read_bytes()
    build(memo_file, PAGE)
    assert memo_file.read_bytes() == before
    assert json.loads(before)["generation"] == 1


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"key": "<p>html</p>"}',
                                     '{"generation": 2, "entries": {"key": "<p>html</p>"}}'])
def test_a_damaged_memo_file_is_rendered_afresh(tmp_path, content):
    (tmp_path / "html.json").write_text(content)
    memo = HtmlMemo(tmp_path / "html.json")
    assert html(PAGE, memo) == html(PAGE, None)
    memo.save()
    assert json.loads((tmp_path / "html.json").read_text())["generation"] == 1


def test_mathml_from_the_memo_equals_mathml_converted_afresh(tmp_path):
    page = '<p><span class="arithmatex">\\(h_t = \\tanh(W x_t)\\)</span></p><div class="arithmatex">\\[0.9^{40}\\]</div>'
    fresh = to_mathml(page)
    assert "<math" in fresh and "<msup>" in fresh
    memo = HtmlMemo(tmp_path / "html.json")
    assert to_mathml(page, memo) == fresh
    memo.save()
    later = HtmlMemo(tmp_path / "html.json")
    assert set(later.entries) == memo.used and len(memo.used) == 2
    assert to_mathml(page, later) == fresh


def test_the_plugin_highlights_the_sites_code_through_its_memo(tmp_path, monkeypatch):
    """The site's own mkdocs.yml: the plugin puts its memo in place of pymdownx.highlight,
    with the same options, and the memo lives in the cache folder."""
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(tmp_path))
    config = load_config(str(ROOT / "mkdocs.yml"))
    plugin: LessonPlugin = config.plugins["lessonlib"]
    plugin.on_config(config)
    (highlight,) = [e for e in config.markdown_extensions if isinstance(e, MemoHighlightExtension)]
    assert "pymdownx.highlight" not in config.markdown_extensions
    assert highlight.getConfigs()["pygments_lang_class"] is True
    assert plugin.memo.path == tmp_path / "html.json"
