"""Numbers typed by hand: numerals in a page's prose that do not come from code.

A lesson's numbers should be inline values (`{py} expr`) or printed output, so the page cannot
drift from its code. This finds every numeral in the prose, outside code spans (inline values
and `{lit} text` literals among them), math, code blocks and raw HTML. A deliberate literal
(a year, a citation, "Figure 2") is written `{lit} 1997` and shown as plain text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

# The same block structure the engine sees (fences nested in admonitions found), plus the
# tables and $...$ math of the site's Markdown.
_md = MarkdownIt("commonmark").disable("code").enable("table").use(dollarmath_plugin, allow_space=False)
# A number standing on its own: not the 2 of seq2seq or the 64 of float64.
NUMERAL = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_BREAKS = {"softbreak", "hardbreak"}


@dataclass(frozen=True)
class Numeral:
    line: int  # 1-based Markdown line
    text: str  # the numeral, e.g. "1,600"
    context: str  # the prose around it

    def __str__(self) -> str:
        return f"numeral {self.text!r} typed in prose: {self.context!r}"


def hand_typed_numerals(text: str) -> list[Numeral]:
    """Every numeral in the page's prose, in order."""
    found = []
    for token in _md.parse(text):
        if token.type == "inline" and token.map:
            found += _in_inline(token)
    return found


def _in_inline(token: Token) -> list[Numeral]:
    found, line = [], token.map[0] + 1
    for child in token.children or []:
        if child.type in _BREAKS:
            line += 1
        elif child.type == "text":
            for m in NUMERAL.finditer(child.content):
                start, end = max(0, m.start() - 30), m.end() + 30
                found.append(Numeral(line, m.group(), child.content[start:end].strip()))
    return found
