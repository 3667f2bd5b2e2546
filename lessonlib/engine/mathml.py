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


# TeX that survived Markdown: two dollars in one run of text, \( \[ \) \], or a command like \frac;
# inside rendered math, a command latex2mathml did not know (it shows it as text).
_RAW_TEX = re.compile(r"\$[^$\n]*\$|\\[()\[\]]|\\[a-zA-Z]{2,}")
_RAW_COMMAND = re.compile(r"\\[a-zA-Z]+")
_SKIP = {"code", "pre", "script", "style", "kbd", "samp"}


class _ProseText(HTMLParser):
    """Raw TeX in the page's text: outside code and scripts, and inside rendered math."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []  # per open element: "skip", "math" or "text"
        self.leaks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        outer = self.stack[-1] if self.stack else "text"
        kind = "skip" if outer == "skip" or tag in _SKIP else "math" if outer == "math" or tag == "math" else "text"
        self.stack.append(kind)

    def handle_endtag(self, tag: str) -> None:
        if tag not in _VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        kind = self.stack[-1] if self.stack else "text"
        if kind != "skip":
            self.leaks += (_RAW_COMMAND if kind == "math" else _RAW_TEX).findall(data)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def leftover_tex(page_html: str) -> list[str]:
    """Raw TeX a reader would see, in a page whose math is rendered (to_mathml): e.g. "$n = $ 768"
    (a `$` after a space does not close math), or a command inside a formula that has no MathML."""
    parser = _ProseText()
    parser.feed(page_html)
    parser.close()
    return parser.leaks


def source_line(snippet: str, lines: list[str]) -> int:
    """The 1-based line of the Markdown source that holds `snippet`, or the longest start of it
    (a leaked command may have run into the next word); 1 if none does."""
    for end in range(len(snippet), 2, -1):
        line = next((i for i, text in enumerate(lines, start=1) if snippet[:end] in text), None)
        if line is not None:
            return line
    return 1
