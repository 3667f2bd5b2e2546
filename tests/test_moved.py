"""Lesson 1's split (moved.yml): the redirect, the anchors and the old address's last mentions agree with the map."""
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MOVED = yaml.safe_load((ROOT / "moved.yml").read_text())


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's !ENV tags read as nothing: only the plugins are looked at."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _redirects() -> dict:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    (plugin,) = [p["redirects"] for p in config["plugins"] if isinstance(p, dict) and "redirects" in p]
    return plugin["redirect_maps"]


def _anchors(page: str) -> set[str]:
    return set(re.findall(r"\{#([\w-]+)\}", (ROOT / "docs" / page).read_text()))


def test_the_old_address_redirects_as_the_map_says():
    assert _redirects() == MOVED["pages"]
    for old, new in MOVED["pages"].items():
        assert not (ROOT / "docs" / old).exists() and (ROOT / "docs" / new).exists()


def test_every_moved_anchor_is_in_the_lesson_the_map_names():
    for anchor, page in MOVED["anchors"].items():
        assert anchor in _anchors(page), f"#{anchor} is not in {page}"
    for page in MOVED["lessons"]:
        assert {"summary", "check"} <= _anchors(page), f"{page} has no summary or knowledge check of its own"


def test_the_redirect_page_sends_an_anchor_that_moved_on_to_its_lesson():
    """The redirect keeps the anchor; moved-anchors.js forwards those the first lesson does not hold."""
    (first,) = MOVED["pages"].values()
    script = (ROOT / "docs" / "javascripts" / "moved-anchors.js").read_text()
    (listed,) = re.findall(r"const MOVED = \[(.*?)\];", script)
    forwarded = set(re.findall(r'"([\w-]+)"', listed))
    assert forwarded == {a for a, page in MOVED["anchors"].items() if page != first and a not in _anchors(first)}


def test_the_old_slug_is_left_only_in_the_map_and_the_redirect():
    found = subprocess.run(["git", "grep", "-l", "sequences-to-attention"], cwd=ROOT, capture_output=True, text=True)
    deliberate = {"moved.yml", "mkdocs.yml", "tests/test_moved.py", "tests/test_site_browser.py"}  # the map, the
    assert set(found.stdout.split()) <= deliberate  # redirect, and the tests that follow the old address
