"""How long and how dense each lesson's core path is, read off the built site.

    .venv/bin/python scripts/lesson_stats.py [--site site] [--check]

For every lesson page built from Markdown (site/lessons/*/index.html), the article's text is
split into:
  core       prose a reader meets without opening anything: outside code, outputs, math and
             collapsed blocks (<details>); headings, lists, tables and figure captions count
  collapsed  the words inside collapsed blocks ("Going deeper", knowledge checks, figure data,
             the list of checks)
  article    every word of the article with every block open, code and outputs included
and it counts numerals per 1,000 core words, `assert` statements in code shown outside collapsed
blocks, code blocks shown (Python and pycon, not outputs), and figures whose alt text equals
their caption. --check exits with status 1 when a lesson is over its budgets (CORE_WORDS,
ARTICLE_WORDS, NUMERALS), or a page shows more than ASSERTS_SHOWN asserts (docs/writing-lessons.md:
at most three stay in shown code).
Standard library only.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"[^\W_]+(?:['’.,-][^\W_]+)*")  # "don't", "3.14", "1,000" and "self-attention" are one word each
NUMERAL = re.compile(r"\d")
ASSERT = re.compile(r"^\s*assert\b", re.M)
CORE_WORDS, ARTICLE_WORDS, NUMERALS = 2700, 9000, 45  # per lesson, at most: one sitting, every note open
LESSONS = ("recurrent-networks", "gates-and-attention", "sequence-models", "transformer", "language-model",
           "recurrence-returns", "delta-rule")
ASSERTS_SHOWN = 3  # asserts in code shown outside collapsed blocks, at most, on every lesson
SKIPPED = {"math", "script", "style", "nav", "svg", "button"}  # never prose
STAMP = ("lessonlib-stamp", "lessonlib-download", "headerlink")  # the build's, not the lesson's


@dataclass
class Stats:
    page: str
    core: list[str] = field(default_factory=list)
    collapsed: list[str] = field(default_factory=list)
    article: int = 0
    asserts_shown: int = 0
    code_shown: int = 0
    figures: int = 0
    alt_is_caption: int = 0

    @property
    def numerals_per_1000(self) -> float:
        numerals = sum(1 for word in self.core if NUMERAL.search(word))
        return 1000 * numerals / max(1, len(self.core))


class _Article(HTMLParser):
    """Walks the <article>, tracking whether each piece of text is code, output, math, collapsed."""

    def __init__(self, stats: Stats) -> None:
        super().__init__(convert_charrefs=True)
        self.stats = stats
        self.stack: list[tuple[str, set[str]]] = []  # open elements: tag, classes
        self.in_article = False
        self.code: list[str] | None = None  # text of the code block being read
        self.alt: str | None = None  # the current figure's alt text
        self.caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = set((attributes.get("class") or "").split())
        if tag == "article":
            self.in_article = True
        if not self.in_article or tag in ("br", "img", "hr", "input", "meta", "link"):
            if tag == "img" and self.in_article:
                self.alt = attributes.get("alt") or ""
            return
        self.stack.append((tag, classes))
        if tag == "pre" and self.code is None and not self._inside("lessonlib-output") and self._shown_code():
            self.code = []
        if tag == "figure":
            self.stats.figures += 1
            self.alt, self.caption = None, None
        if tag == "figcaption":
            self.caption = []

    def handle_endtag(self, tag: str) -> None:
        if not self.in_article:
            return
        if tag == "article":
            self.in_article = False
            return
        while self.stack:
            open_tag, _ = self.stack.pop()
            if open_tag == tag:
                break
        if tag == "pre" and self.code is not None and not any(t == "pre" for t, _ in self.stack):
            self._close_code()
        if tag == "figcaption" and self.caption is not None and self.alt is not None:
            if " ".join("".join(self.caption).split()) == " ".join(self.alt.split()):
                self.stats.alt_is_caption += 1

    def handle_data(self, data: str) -> None:
        if not self.in_article:
            return
        if not any(t in SKIPPED for t, _ in self.stack) and not self._inside(*STAMP):
            self.stats.article += len(WORD.findall(data))
        if self.code is not None:
            self.code.append(data)
            return
        if self.caption is not None and any(t == "figcaption" for t, _ in self.stack):
            self.caption.append(data)
        if any(t in SKIPPED or t in ("pre", "code") for t, _ in self.stack) or self._inside(*STAMP) \
                or self._inside("arithmatex", "lessonlib-output"):
            return
        words = WORD.findall(data)
        (self.stats.collapsed if self._collapsed() else self.stats.core).extend(words)

    def _close_code(self) -> None:
        text = "".join(self.code or [])
        self.code = None
        if not self._collapsed():
            self.stats.code_shown += 1
            self.stats.asserts_shown += len(ASSERT.findall(text))

    def _inside(self, *names: str) -> bool:
        return any(c in names for _, classes in self.stack for c in classes)

    def _collapsed(self) -> bool:
        return any(t == "details" for t, _ in self.stack)

    def _shown_code(self) -> bool:
        """A highlighted Python or pycon block (MkDocs wraps it in div.language-*)."""
        return self._inside("language-python", "language-pycon", "language-py")


def stats_of(html: str, page: str) -> Stats:
    stats = Stats(page)
    _Article(stats).feed(html)
    return stats


def lesson_pages(site: Path) -> list[Path]:
    """The lessons built from Markdown: notebook pages (the exercises) are not lessons."""
    sources = {p.stem for p in (ROOT / "docs" / "lessons").glob("*.md")}
    return sorted(site / "lessons" / name / "index.html" for name in sources if (site / "lessons" / name).is_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a page is over its budget")
    args = parser.parse_args(argv)
    pages = lesson_pages(args.site)
    if not pages:
        parser.error(f"no lessons under {args.site}/lessons: build the site first (./scripts/build)")
    print("| page | core words | collapsed words | article words | numerals per 1,000 core words | asserts shown "
          "| code blocks shown | figures | alt text = caption |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    over = []
    for path in pages:
        name = path.parent.name
        s = stats_of(path.read_text(encoding="utf-8"), name)
        if name in LESSONS and (len(s.core) > CORE_WORDS or s.article > ARTICLE_WORDS
                                or s.numerals_per_1000 > NUMERALS) or s.asserts_shown > ASSERTS_SHOWN:
            over.append(name)
        print(f"| {name} | {len(s.core):,} | {len(s.collapsed):,} | {s.article:,} | {s.numerals_per_1000:.0f} "
              f"| {s.asserts_shown} | {s.code_shown} | {s.figures} | {s.alt_is_caption} of {s.figures} |")
    if over:
        print(f"over budget (lessons: {CORE_WORDS:,} core words, {ARTICLE_WORDS:,} article words, {NUMERALS} "
              f"numerals per 1,000 core words; {ASSERTS_SHOWN} asserts shown): {', '.join(over)}", file=sys.stderr)
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
