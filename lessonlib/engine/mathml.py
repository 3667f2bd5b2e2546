"""Math rendered at build time: pymdownx.arithmatex's generic output becomes MathML,
which browsers draw natively, so readers need no script and no network; and TeX that
Markdown did not recognise as math is found, so that no reader sees raw `$...$`."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from latex2mathml.converter import convert

_ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">\s*\\[(\[](.*?)\\[)\]]\s*</\1>', re.DOTALL)


def to_mathml(page_html: str) -> str:
    def replace(m: re.Match[str]) -> str:
        tag, tex = m.group(1), html.unescape(m.group(2))
        math = convert(tex, display="block" if tag == "div" else "inline")
        return f'<{tag} class="arithmatex">{math}</{tag}>'

    return _ARITHMATEX.sub(replace, page_html)


# TeX that survived Markdown: two dollars in one run of text, \( \[ \) \], or a command like \frac.
_RAW_TEX = re.compile(r"\$[^$\n]*\$|\\[()\[\]]|\\[a-zA-Z]{2,}")
_SKIP = {"code", "pre", "math", "script", "style", "kbd", "samp"}


class _ProseText(HTMLParser):
    """The page's text outside code, math, scripts and rendered formulas."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: inside something to skip?
        self.leaks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append(bool(self.stack and self.stack[-1]) or tag in _SKIP or "arithmatex" in classes)

    def handle_endtag(self, tag: str) -> None:
        if tag not in _VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self.stack and self.stack[-1]):
            self.leaks += _RAW_TEX.findall(data)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def leftover_tex(page_html: str) -> list[str]:
    """Raw TeX a reader would see: e.g. "$n = $ 768" (a `$` after a space does not close math)."""
    parser = _ProseText()
    parser.feed(page_html)
    parser.close()
    return parser.leaks


def source_line(snippet: str, lines: list[str]) -> int:
    """The 1-based line of the Markdown source that holds `snippet` (1 if none does)."""
    return next((i for i, line in enumerate(lines, start=1) if snippet in line), 1)
