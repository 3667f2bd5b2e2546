"""The built site in a real browser (Debian's Chromium driven by Playwright), as readers see it.

The site is built once (the lesson pages ran earlier in the same test run, so the build is warm),
served on 127.0.0.1, and every page is checked for what a reader needs: no errors, no request to
any other host, images with alt text, rendered math, legible dark mode, no sideways scrolling on
a phone. Screenshots land in test-artifacts/screenshots/.
"""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
PHONE, DESKTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 900}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (./scripts/test installs Debian's chromium)"
)


def site_pages() -> list[str]:
    """Every page of the site, as the URL path MkDocs gives it."""
    docs = ROOT / "docs"
    pages = []
    for path in sorted([*docs.rglob("*.md"), *docs.rglob("*.ipynb")]):
        rel = path.relative_to(docs).with_suffix("").as_posix()
        pages.append("" if rel == "index" else f"{rel}/")
    return pages


@pytest.fixture(scope="session")
def base_url(tmp_path_factory):
    """Serve the built site on a free port of 127.0.0.1; the build is told that address, since
    Material's instant navigation only follows links under site_url."""
    site = tmp_path_factory.mktemp("site")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    url = f"http://127.0.0.1:{server.server_port}/"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": url}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert build.returncode == 0, build.stderr
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield url
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"],
        )
        yield browser
        browser.close()


class Reader:
    """One browser tab that records console errors and every host it contacts."""

    def __init__(self, browser, viewport=DESKTOP, **context_options) -> None:
        self.context = browser.new_context(viewport=viewport, **context_options)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.hosts: set[str] = set()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.hosts.add(urlparse(r.url).hostname or urlparse(r.url).scheme))

    def open(self, url: str):
        self.page.goto(url, wait_until="networkidle")
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def reader(browser):
    reader = Reader(browser)
    yield reader
    reader.close()


@pytest.mark.parametrize("path", site_pages())
def test_every_page_reads_well(reader, base_url, path):
    page = reader.open(base_url + path)
    images = page.eval_on_selector_all(
        "article img", "els => els.map(e => ({alt: e.alt, width: e.naturalWidth, src: e.src.slice(0, 40)}))"
    )
    for image in images:
        assert image["width"] > 0, f"image did not load: {image}"
        assert image["alt"].strip(), f"image without alt text: {image}"
    math = page.eval_on_selector_all(".arithmatex", "els => els.map(e => !!e.querySelector('math'))")
    assert all(math), "some math was not rendered to MathML"
    text = page.evaluate(  # prose only: code may show TeX on purpose
        "() => { const a = document.querySelector('article').cloneNode(true);"
        " a.querySelectorAll('code, pre, script, style').forEach(e => e.remove()); return a.textContent; }"
    )
    for raw in ("\\(", "\\[", "$$", "\\frac", "\\tanh"):
        assert raw not in text, f"raw TeX {raw!r} is visible"

    page.click("[data-md-component=palette] label:not([hidden])")
    assert page.get_attribute("body", "data-md-color-scheme") == "slate"
    filters = page.eval_on_selector_all(".lessonlib-figure img", "els => els.map(e => getComputedStyle(e).filter)")
    assert all(f != "none" for f in filters), "a figure is not restyled for the dark palette"

    assert not reader.errors, reader.errors
    assert reader.hosts <= {"127.0.0.1", "data"}, f"requests beyond this site: {reader.hosts}"


@pytest.mark.parametrize("path", site_pages())
def test_screenshots_and_no_sideways_scrolling_on_a_phone(browser, base_url, path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = path.strip("/").replace("/", "-") or "home"
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        reader = Reader(browser, viewport=viewport)
        page = reader.open(base_url + path)
        page.screenshot(path=str(ARTIFACTS / f"{name}-{label}.png"), full_page=True)
        if label == "phone":
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= viewport["width"], f"{path} scrolls sideways on a phone: {width}px wide"
        reader.close()


def test_every_notebook_download_is_a_valid_notebook(reader, base_url):
    checked = 0
    for path in site_pages():
        page = reader.open(base_url + path)
        for href in page.eval_on_selector_all("a[download], a[href$='.ipynb']", "els => els.map(e => e.href)"):
            response = page.request.get(href)
            assert response.ok, href
            nbformat.validate(nbformat.reads(response.text(), as_version=4))
            checked += 1
    assert checked >= 2, "expected notebook downloads on the lessons and the exercise"


def test_search_finds_the_forget_gate(reader, base_url):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = reader.open(base_url)
    # The index loads in a web worker; a query typed before it is ready finds nothing, so retype.
    for _ in range(20):
        page.fill("input.md-search__input", "")
        page.locator("input.md-search__input").press_sequentially("forget gate", delay=20)
        try:
            page.wait_for_selector(".md-search-result__item", timeout=1500)
            break
        except PlaywrightTimeout:
            continue
    results = page.inner_text(".md-search-result")
    assert "forget gate" in results.lower()


def test_knowledge_check_answers_stay_hidden_until_asked(reader, base_url):
    page = reader.open(base_url + "lessons/sequence-models/")
    questions = page.locator("details.question")
    assert questions.count() == 4
    for i in range(4):
        question = questions.nth(i)
        answer = question.locator(":scope > :not(summary)").first
        assert question.get_attribute("open") is None and not answer.is_visible()
        question.locator("summary").click()
        assert answer.is_visible()


WALKTHROUGH = "lessons/sequences-to-attention/"


def walkthrough_state(page) -> dict:
    return page.evaluate(
        """() => {
        const w = document.querySelector('.lstm-walkthrough');
        const part = name => w.querySelector('.lstm-walkthrough__' + name).textContent.trim();
        const row = w.querySelector('tbody tr[aria-current=step]');
        return {status: part('status'), result: part('result'), plugged: part('plugged'),
                row: row && [...row.cells].map(c => c.textContent.trim()),
                play: w.querySelector('button[data-action=play]').textContent.trim()};
    }"""
    )


def assert_matches_table(state: dict) -> None:
    title, formula, plugged, result = state["row"]
    assert state["plugged"] == plugged and state["result"] == result, state


def test_walkthrough_starts_paused_and_steps_by_mouse_and_keyboard_alone(reader, base_url):
    page = reader.open(base_url + WALKTHROUGH)
    first = walkthrough_state(page)
    assert first["status"].startswith("Step 1 of ") and first["play"] == "Play"
    page.wait_for_timeout(3000)
    assert walkthrough_state(page)["status"] == first["status"], "it must not play by itself"
    assert_matches_table(first)
    total = int(first["status"].split(" of ")[1].split(":")[0])

    page.click(".lstm-walkthrough button[data-action=next]")
    assert walkthrough_state(page)["status"].startswith("Step 2 of ")
    page.click(".lstm-walkthrough button[data-action=previous]")
    assert walkthrough_state(page)["status"].startswith("Step 1 of ")

    # Keyboard alone: Tab from the top of the page to the Next button, then Enter, Space and arrows.
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(300):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.action === 'next'"):
            break
    else:
        pytest.fail("the Next button cannot be reached with Tab")
    for n, key in enumerate(["Enter", " ", "ArrowRight"], start=2):
        page.keyboard.press(key)
        state = walkthrough_state(page)
        assert state["status"].startswith(f"Step {min(n, total)} of "), (key, state)
        assert_matches_table(state)
    assert not reader.errors, reader.errors


def test_walkthrough_shows_every_step_of_its_table(reader, base_url):
    page = reader.open(base_url + WALKTHROUGH)
    rows = page.locator(".lstm-walkthrough tbody tr").count()
    assert rows >= 5
    for n in range(1, rows + 1):
        state = walkthrough_state(page)
        assert state["status"].startswith(f"Step {n} of {rows}")
        assert_matches_table(state)
        if n < rows:
            page.click(".lstm-walkthrough button[data-action=next]")
    assert page.get_attribute(".lstm-walkthrough button[data-action=next]", "aria-disabled") == "true"


def test_walkthrough_table_alone_without_javascript(browser, base_url):
    reader = Reader(browser, java_script_enabled=False)
    page = reader.open(base_url + WALKTHROUGH)
    assert page.locator(".lstm-walkthrough table").is_visible()
    assert not page.locator(".lstm-walkthrough__player").is_visible()
    reader.close()


def test_walkthrough_works_after_instant_navigation(reader, base_url):
    page = reader.open(base_url + WALKTHROUGH)
    page.evaluate("window.__no_reload = true")
    page.click("a.md-footer__link--prev")  # the previous page, Home
    page.wait_for_url(base_url)
    page.locator(f"article a[href$='{WALKTHROUGH.rstrip('/')}/']").first.click()
    page.wait_for_selector(".lstm-walkthrough__player:not([hidden])")
    assert page.evaluate("window.__no_reload === true"), "navigation reloaded the page: instant loading is off"
    page.click(".lstm-walkthrough button[data-action=next]")
    assert walkthrough_state(page)["status"].startswith("Step 2 of ")
    assert not reader.errors, reader.errors
