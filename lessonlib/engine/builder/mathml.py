"""Math rendered at build time: pymdownx.arithmatex's generic output becomes MathML,
which browsers draw natively, so readers need no script and no network; and TeX that
Markdown did not recognise as math is found, so that no reader sees raw `$...$`."""
from __future__ import annotations

import functools
import hashlib
import html
import json
import re

from lessonlib.engine.builder.html_memo import HtmlMemo

_ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">\s*\\[(\[](.*?)\\[)\]]\s*</\1>', re.DOTALL)


def to_mathml(page_html: str, memo: HtmlMemo | None = None) -> str:
    def replace(m: re.Match[str]) -> str:
        tag, tex = m.group(1), html.unescape(m.group(2))
        display = "block" if tag == "div" else "inline"
        render = functools.partial(_convert, tex, display)
        math = memo.get("mathml", [tex, display], render) if memo else render()
        return f'<{tag} class="arithmatex">{math}</{tag}>'

    return _ARITHMATEX.sub(replace, page_html)


def _convert(tex: str, display: str) -> str:
    from latex2mathml.converter import (
        convert,  # here: a warm build takes its math from the memo
    )

    return convert(tex, display=display)


# TeX that survived Markdown: two dollars in one run of text, \( \[ \) \], or a command like \frac;
# inside rendered math, a command latex2mathml did not know (it shows it as text).
_RAW_TEX = re.compile(r"\$[^$\n]*\$|\\[()\[\]]|\\[a-zA-Z]{2,}")
_RAW_COMMAND = re.compile(r"\\[a-zA-Z]+")
# One pass over the page, in order: an element whose text is not prose (code, scripts: skipped
# whole), rendered math (its text may only hold MathML, no TeX command), or any other tag.
_TOKEN = re.compile(r"<(code|pre|script|style|kbd|samp)\b[^>]*>.*?</\1\s*>|<math\b[^>]*>(.*?)</math\s*>|<[^>]*>",
                    re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")


def leftover_tex(page_html: str, memo: HtmlMemo | None = None) -> list[str]:
    """Raw TeX a reader would see, in a page whose math is rendered (to_mathml): e.g. "$n = $ 768"
    (a `$` after a space does not close math), or a command inside a formula that has no MathML.
    Text is read between tags, so a match never spans one."""
    if memo is None:
        return _leftover_tex(page_html)
    digest = hashlib.sha256(page_html.encode()).hexdigest()  # the key, not the page's whole text
    return json.loads(memo.get("leftover-tex", digest, lambda: json.dumps(_leftover_tex(page_html))))


def _leftover_tex(page_html: str) -> list[str]:
    leaks: list[str] = []
    start = 0
    for token in _TOKEN.finditer(page_html):
        leaks += _RAW_TEX.findall(html.unescape(page_html[start : token.start()]))
        if token.group(2) is not None:
            for text in _TAG.split(token.group(2)):
                leaks += _RAW_COMMAND.findall(html.unescape(text))
        start = token.end()
    return leaks + _RAW_TEX.findall(html.unescape(page_html[start:]))


def source_line(snippet: str, lines: list[str]) -> int:
    """The 1-based line of the Markdown source that holds `snippet`, or the longest start of it
    (a leaked command may have run into the next word); 1 if none does."""
    for end in range(len(snippet), 2, -1):
        line = next((i for i, text in enumerate(lines, start=1) if snippet[:end] in text), None)
        if line is not None:
            return line
    return 1
