"""Math rendered at build time: pymdownx.arithmatex's generic output becomes MathML,
which browsers draw natively, so readers need no script and no network."""
from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">\s*\\[(\[](.*?)\\[)\]]\s*</\1>', re.DOTALL)


def to_mathml(page_html: str) -> str:
    def replace(m: re.Match[str]) -> str:
        tag, tex = m.group(1), html.unescape(m.group(2))
        math = convert(tex, display="block" if tag == "div" else "inline")
        return f'<{tag} class="arithmatex">{math}</{tag}>'

    return _ARITHMATEX.sub(replace, page_html)
