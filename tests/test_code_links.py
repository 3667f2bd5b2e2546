"""The code behind every result, one click away on the built site, offline: each source block's
label and each memoized function's name in the lessons link to lines of a code page the site has."""
from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "docs" / "lessons").glob("*.md"))
MEMO_NAMES = re.compile(r'^\s*```python [^\n]*\bmemo="([^"]+)"', re.M)


def _target(site: Path, page: Path, href: str) -> tuple[Path, str]:
    """The file and anchor a relative link on `page` leads to."""
    path, _, anchor = href.partition("#")
    assert not urllib.parse.urlsplit(href).scheme, f"{href}: not on the site"
    return (page.parent / path / "index.html").resolve(), anchor


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_source_label_and_memoized_name_links_to_its_lines(site, lesson):
    page = site.path / "lessons" / lesson / "index.html"
    html = page.read_text(encoding="utf-8")
    labels = re.findall(r'<span class="filename">(.*?)</span>', html)
    code_labels = [label for label in labels if ".py, line " in label]
    assert all(label.startswith("<a href=") for label in code_labels), code_labels
    links = re.findall(r'<span class="filename"><a href="([^"]+)">', html)
    names = {name.rpartition(".")[2] for names in MEMO_NAMES.findall((ROOT / "docs/lessons" / f"{lesson}.md")
                                                                     .read_text(encoding="utf-8"))
             for name in names.split()}
    for name in names:
        found = re.findall(rf'<a class="lessonlib-code-link" href="([^"]+)"><span class="n">{name}</span></a>', html)
        assert found, f"{lesson}: {name} is memoized but never linked"
        links += found
    for href in links:
        target, anchor = _target(site.path, page, href)
        assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), href
