"""Numbers typed by hand: numerals in a page's prose and figure captions that do not come from code.

A lesson's numbers should be inline values (`{py} expr`) or printed output, so the page cannot
drift from its code. This finds every numeral in the prose, outside code spans (inline values
and `{lit} text` literals among them), math, code blocks and raw HTML; and in the alt texts and
captions of figures, outside their `{expr}` fields. A deliberate literal (a year, a citation,
"Figure 2") is written `{lit} 1997` in prose, `{'1997'}` in a caption.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

from lessonlib.engine.worker.blocks import parse_page

# The same block structure the engine sees (fences nested in admonitions found), plus the
# tables and $...$ math of the site's Markdown.
_md = MarkdownIt("commonmark").disable("code").enable("table").use(dollarmath_plugin, allow_space=False)
# A number standing on its own: not the 2 of seq2seq or the 64 of float64.
NUMERAL = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_BREAKS = {"softbreak", "hardbreak"}
_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")  # a caption's {expr} fields and {{ }} escapes


@dataclass(frozen=True)
class Numeral:
    line: int  # 1-based Markdown line
    text: str  # the numeral, e.g. "1,600"
    context: str  # the prose around it

    in_caption: bool = False

    def __str__(self) -> str:
        if self.in_caption:
            return (f"numeral {self.text!r} typed in a caption: {self.context!r} (a caption is an f-string over "
                    "the page's values: write {value:.2f})")
        return f"numeral {self.text!r} typed in prose: {self.context!r}"


def hand_typed_numerals(text: str) -> list[Numeral]:
    """Every numeral in the page's prose and captions, in order of lines."""
    found = []
    for token in _md.parse(text):
        if token.type == "inline" and token.map:
            found += _in_inline(token)
    for block in parse_page(text, "<page>").blocks:
        for option in ("alt", "caption"):
            caption = _FIELD.sub("", block.options.get(option, ""))
            found += [Numeral(block.start + 1, m.group(), _around(caption, m), in_caption=True)
                      for m in NUMERAL.finditer(caption)]
    return sorted(found, key=lambda n: n.line)


def _in_inline(token: Token) -> list[Numeral]:
    found, line = [], token.map[0] + 1
    for child in token.children or []:
        if child.type in _BREAKS:
            line += 1
        elif child.type == "text":
            found += [Numeral(line, m.group(), _around(child.content, m)) for m in NUMERAL.finditer(child.content)]
    return found


def _around(text: str, match: re.Match[str]) -> str:
    return text[max(0, match.start() - 30) : match.end() + 30].strip()
