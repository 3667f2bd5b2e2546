"""Each lesson read in one sitting, measured on the built site as scripts/lesson_stats.py measures it."""
from __future__ import annotations

import importlib

import pytest
import script_modules  # noqa: F401  (puts scripts/ on the path)

lesson_stats = importlib.import_module("lesson_stats")


@pytest.mark.parametrize("lesson", lesson_stats.LESSONS)
def test_a_lesson_is_within_its_words_and_shows_few_asserts(site, lesson):
    html = (site.path / "lessons" / lesson / "index.html").read_text(encoding="utf-8")
    stats = lesson_stats.stats_of(html, lesson)
    assert len(stats.core) <= lesson_stats.CORE_WORDS, f"{lesson}: {len(stats.core):,} core words"
    assert stats.article <= lesson_stats.ARTICLE_WORDS, f"{lesson}: {stats.article:,} words with every note open"
    assert stats.asserts_shown <= lesson_stats.ASSERTS_SHOWN
    assert stats.numerals_per_1000 <= lesson_stats.NUMERALS


def test_the_article_count_reads_code_outputs_and_notes_and_the_core_count_only_open_prose():
    html = ('<article><p>One two three.</p><details><summary>Note</summary><p>four five</p></details>'
            '<div class="language-python"><pre><code>six = 7</code></pre></div>'
            '<p class="lessonlib-stamp">stamp words</p></article>')
    stats = lesson_stats.stats_of(html, "page")
    assert stats.core == ["One", "two", "three"] and stats.collapsed == ["Note", "four", "five"]
    assert stats.article == 3 + 3 + 2  # the stamp is the build's, not the lesson's
