"""A notebook page's large inline stylesheets become files, fetched once for every such page.

mkdocs-jupyter writes JupyterLab's stylesheet (over half a megabyte) into the page of every
exercise. As a file named by its content, a reader's browser fetches and caches it once, and a
changed stylesheet gets a new address, so no browser keeps a stale copy.
"""
from __future__ import annotations

import hashlib
import re

from mkdocs.utils import get_relative_url

FOLDER = "assets/lessonlib"  # in the site
LARGE = 32 * 1024  # characters; a smaller stylesheet stays inline, where it costs no request
_INLINE = re.compile(r'<style type="text/css">(.*?)</style>', re.S)


def shared_stylesheets(html: str, page_url: str) -> tuple[str, dict[str, str]]:
    """`html` (a page at `page_url` in the site) with each inline stylesheet of LARGE characters
    or more replaced, in place, by a link to a file; and those files, {path in the site: CSS}."""
    files: dict[str, str] = {}

    def link(match: re.Match[str]) -> str:
        css = match.group(1).strip()  # @charset counts only as a file's first characters
        if len(css) < LARGE:
            return match.group(0)
        path = f"{FOLDER}/notebook-{hashlib.sha256(css.encode()).hexdigest()[:16]}.css"
        files[path] = css + "\n"
        return f'<link rel="stylesheet" href="{get_relative_url(path, page_url)}">'

    return _INLINE.sub(link, html), files
