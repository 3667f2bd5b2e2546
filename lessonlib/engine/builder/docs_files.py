"""Which files of docs/ are published: the pages, the web assets (styles, scripts, images,
fonts), and any other file a page links to. A page's helper modules and data files, which it
reads when it runs, are not, unless a page links them (a download)."""
from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

WEB_ASSETS = {".css", ".js", ".mjs", ".map", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".avif", ".ico",
              ".woff", ".woff2", ".ttf", ".otf", ".eot", ".html", ".htm", ".webmanifest"}
WEB_NAMES = {"robots.txt", "CNAME", "humans.txt", "security.txt"}
# Markdown links and images [text](target), reference definitions [id]: target, HTML src/href.
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)|^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)|\b(?:src|href)\s*=\s*[\"']([^\"']+)",
                   re.M)


def linked(page_uri: str, markdown: str) -> set[str]:
    """The docs-relative paths of the local files a page's Markdown links to."""
    found = set()
    for match in _LINK.finditer(markdown):
        target = next(group for group in match.groups() if group)
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path:
            continue
        path = unquote(parts.path)
        base = "" if path.startswith("/") else posixpath.dirname(page_uri)
        found.add(posixpath.normpath(posixpath.join(base, path.lstrip("/"))))
    return found


def unpublished(files: Iterable[tuple[str, bool]], links: set[str]) -> list[str]:
    """Of (docs-relative path, is a page) pairs, the paths not to publish."""
    return [uri for uri, page in files
            if not page and uri not in links and posixpath.splitext(uri)[1].lower() not in WEB_ASSETS
            and posixpath.basename(uri) not in WEB_NAMES]
