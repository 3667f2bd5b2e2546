"""The built site in a real browser (Debian's Chromium driven by Playwright), as readers see it.

The site is built once per test process (the `site` fixture, tests/conftest.py), served on 127.0.0.1, and
every page is checked for what a reader needs: no errors, no request to any other host, images
with alt text, rendered math, no serious accessibility problem in either palette (axe-core), no
sideways scrolling, figure text that reads on a 360-px phone.
With --screenshots, a picture of each page in each view lands in test-artifacts/screenshots/.

No test waits for a page load or sleeps: each waits for the state it asserts. Our scripts mark
theirs: <html data-lessonlib-ready="/path/"> (docs/javascripts/a11y.js, on every page view,
instant navigation included), data-walkthrough-ready on each walkthrough widget and
data-exploration-ready on each exploration (lessonlib/engine/assets/exploration.js), data-char-model-ready
on the live language models (docs/javascripts/char-models.js: "true", or "failed" if the weights did not load).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from browser_support import CHROMIUM, DESKTOP, NARROW_PHONE, SCHEMES, open_every_details, serious_violations

from lessonlib.engine.builder import source_pages

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (./scripts/test installs Debian's chromium)"
)


def site_pages() -> list[str]:
    """Every page of the site, as the URL path MkDocs gives it, from the sources (collected
    before anything is built; test_the_built_site_has_exactly_these_pages holds it to the build)."""
    docs = ROOT / "docs"
    pages = []
    for path in sorted([*docs.rglob("*.md"), *docs.rglob("*.ipynb")]):
        rel = path.relative_to(docs).with_suffix("").as_posix()
        pages.append("" if rel == "index" else f"{rel}/")
    return pages + ["code/", "code/lessonlib/experiments/cost/"]  # the code pages' index, and one made like all


class _Tolerant(yaml.SafeLoader):
    """mkdocs.yml as data: its !ENV and !!python tags read as nothing."""


_Tolerant.add_multi_constructor("", lambda loader, tag, node: None)


def code_pages() -> list[str]:
    """The code pages the build makes, one per module that mkdocs.yml's source_pages names."""
    packages = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Tolerant)["plugins"]
    (options,) = [p["lessonlib"] for p in packages if isinstance(p, dict) and "lessonlib" in p]
    files = [file for package in options["source_pages"] for _, file in source_pages.module_files(package)]
    return ["code/"] + [f"code/{f.relative_to(ROOT).with_suffix('').as_posix()}/" for f in files]


def redirect_pages() -> list[str]:
    """The old addresses that redirect (moved.yml's pages; mkdocs-redirects writes a page at each)."""
    moved = yaml.safe_load((ROOT / "moved.yml").read_text())
    return [Path(old).with_suffix("").as_posix() + "/" for old in moved["pages"]]


def test_the_built_site_has_exactly_these_pages(site):
    built = sorted(
        "" if p.parent == site.path else p.parent.relative_to(site.path).as_posix() + "/"
        for p in site.path.rglob("index.html")
    )
    assert built == sorted({*site_pages(), *redirect_pages(), *code_pages()})


@pytest.mark.parametrize("anchor, lesson", [("", "recurrent-networks"), ("gradient-reach", "recurrent-networks"),
                                            ("summary", "recurrent-networks"), ("lstm", "gates-and-attention"),
                                            ("attention", "gates-and-attention")])
def test_lesson_1s_old_address_leads_to_the_lesson_that_holds_the_section(reader, base_url, anchor, lesson):
    """moved.yml: the old page redirects to the first new lesson, keeping the anchor, and an anchor
    whose section moved to the second lesson is sent on there (docs/javascripts/moved-anchors.js)."""
    hash_ = f"#{anchor}" if anchor else ""
    reader.page.goto(base_url + "lessons/sequences-to-attention/" + hash_)
    reader.page.wait_for_url(base_url + f"lessons/{lesson}/" + hash_)
    reader.wait_ready()
    if anchor:
        assert reader.page.locator(f"[id='{anchor}']").count() == 1
    assert not reader.errors, reader.errors


# Each page is read on one load, in the views that together cover both palettes and both widths:
# the colours (contrast) follow the palette, what scrolls sideways follows the width. A desktop reader
# who prefers the dark palette opens it; then the window narrows to a phone's and the reader switches
# to the light palette, as a reader may. The phone is the narrowest the course is read on, 360 px:
# Material's layout changes at 400 px (25em) and up and ours at 720 px, so any phone up to 400 px wide
# gets the same fluid layout, only wider, and what fits 360 px fits them too. A load and axe's run
# are most of a view's cost; a load at phone width with the light preference is the model widget's
# (tests/test_browser_model.py).


def resize(page, viewport) -> None:
    """The window to `viewport`, once a11y.js has re-checked what now scrolls sideways."""
    checks = int(page.get_attribute("html", "data-lessonlib-checks"))
    page.set_viewport_size(viewport)
    page.wait_for_function(f"() => +document.documentElement.dataset.lessonlibChecks > {checks}")


def assert_fits(page, path, viewport, view) -> None:
    heading = page.locator("article h1").first
    assert heading.is_visible(), f"{path}: no visible main heading on a {view}"
    box = heading.bounding_box()
    assert 0 <= box["x"] and box["x"] + box["width"] <= viewport["width"], f"{path}: heading cut off: {box}"
    open_every_details(page)  # the answers too: wide math and code must scroll in their own boxes
    assert_no_sideways_scrolling(page, path, viewport, view)


def assert_no_sideways_scrolling(page, path, viewport, view) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= viewport["width"], f"{path} scrolls sideways on a {view}: {width}px wide"


def screenshot(request, page, path, view) -> None:
    if request.config.getoption("screenshots"):  # for a person to look at; seconds per long page
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{path.strip('/').replace('/', '-') or 'home'}-{view}.png"), full_page=True)


def article_images(page) -> list[dict]:
    """The article's images, once the browser has finished loading (or failing to load) each."""
    page.wait_for_function("() => [...document.querySelectorAll('article img')].every(i => i.complete)")
    return page.eval_on_selector_all(
        "article img", "els => els.map(e => ({alt: e.alt, width: e.naturalWidth, src: e.src.slice(0, 80)}))"
    )


@pytest.mark.parametrize("path", site_pages())
def test_every_page_reads_well_on_a_dark_desktop_and_a_light_360px_phone_with_no_serious_accessibility_violations(
        new_reader, base_url, path, request):
    """On a desktop whose reader prefers the dark palette: its images, its math, its notebook
    downloads, its knowledge checks, its figures restyled for the dark palette; that it fits the
    screen (no sideways scrolling, the heading on view) with no serious accessibility violations.
    Narrowed to a 360-px phone: it still fits; the smallest text of every figure renders at 9 CSS
    px or more (a wide figure keeps its size and scrolls sideways in its own box), and a long
    formula scrolls in its own box: neither widens the page, and the keyboard reaches both. Then in
    the light palette, by the reader's own switch: still no sideways scrolling, the same scrolling
    boxes reachable, no serious accessibility violations (the light palette's contrast), every
    figure the same file at the same size (so its text the same size: FIGURE_IMAGES), and any
    inline SVG measured again."""
    reader = new_reader(viewport=DESKTOP, color_scheme="dark")
    page = reader.open(base_url + path)
    assert page.get_attribute("body", "data-md-color-scheme") == SCHEMES["dark"], "the palette is not the reader's"
    for image in article_images(page):
        assert image["width"] > 0, f"image did not load: {image}"
        assert image["alt"].strip(), f"image without alt text: {image}"
    if path.startswith("lessons/exercise-"):
        wait_for_notebook_styles(page)  # JupyterLab's stylesheet, linked as a file
    math = page.eval_on_selector_all(".arithmatex", "els => els.map(e => !!e.querySelector('math'))")
    assert all(math), "some math was not rendered to MathML"
    text = page.evaluate(  # prose only: code and a notebook's copy text may show TeX
        "() => { const a = document.querySelector('article').cloneNode(true);"
        " a.querySelectorAll('code, pre, script, style, .clipboard-copy-txt').forEach(e => e.remove()); return a.textContent; }"
    )
    raw = sorted(set(re.findall(r"\\[A-Za-z]+|\\[()[\]]|\$\$", text)))  # \frac, \(, $$ ... in prose or math
    assert not raw, f"raw TeX is visible: {raw}"

    for href in page.eval_on_selector_all(NOTEBOOK_LINKS, "els => els.map(e => e.href)"):
        response = page.request.get(href)
        assert response.ok, href
        nbformat.validate(nbformat.reads(response.text(), as_version=4))

    questions = page.locator(QUESTIONS)
    for i in range(questions.count()):  # each answer stays hidden until its question is opened
        question = questions.nth(i)
        answer = question.locator(":scope > :not(summary)").first
        assert question.get_attribute("open") is None and not answer.is_visible(), f"{path}: answer {i} shows"
        question.locator("summary").click()
        answer.wait_for(state="visible")

    filters = page.eval_on_selector_all(".lessonlib-figure img", "els => els.map(e => getComputedStyle(e).filter)")
    assert all(f != "none" for f in filters), "a figure is not restyled for the dark palette"

    assert_fits(page, path, DESKTOP, "desktop")  # opens every <details>: the answers' math and code too
    assert not (violations := serious_violations(page)), "\n".join(violations)
    screenshot(request, page, path, "desktop-dark")

    phone = "360-px phone"
    resize(page, NARROW_PHONE)
    assert_fits(page, path, NARROW_PHONE, phone)
    assert_formulas_and_figures_scroll_in_reachable_boxes(page, path, "dark")
    assert_figure_text_reads(page, path, "dark")
    dark = page.evaluate(FIGURE_IMAGES)
    page.evaluate(ONE_FRAME)

    page.click("[data-md-component=palette] label:not([hidden])")
    page.wait_for_selector(f"body[data-md-color-scheme={SCHEMES['light']}]")
    assert_no_sideways_scrolling(page, path, NARROW_PHONE, f"{phone} in the light palette")
    assert_formulas_and_figures_scroll_in_reachable_boxes(page, path, "light")
    assert not (violations := serious_violations(page)), "\n".join(violations)
    screenshot(request, page, path, "phone-light")
    assert_figure_text_reads(page, path, "light", images=False)  # inline SVGs only; the images:
    assert page.evaluate(FIGURE_IMAGES) == dark, f"{path}: a figure's file or size changes with the palette"
    assert not reader.errors, reader.errors
    assert reader.hosts <= {"127.0.0.1", "data"}, f"requests beyond this site: {reader.hosts}"


def test_the_accessibility_check_names_serious_violations_and_no_others(reader):
    """What the test above asserts empty can fill: faint text and an image without alt text are
    named (axe: serious, critical); a page without landmarks or a main heading (moderate) is not."""
    reader.page.set_content('<html lang="en"><head><title>Faint</title></head><body>'
                            '<p style="color: #aaa; background: #fff">Faint words on white</p>'
                            '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="></body></html>')
    assert sorted(line.split()[1] for line in serious_violations(reader.page)) == ["color-contrast", "image-alt"]


def wait_for_notebook_styles(page) -> None:
    """Until the page links a notebook stylesheet (lessonlib/engine/builder/stylesheets.py) and every one
    it links has loaded; a page without one times out."""
    page.wait_for_function("() => { const rules = [...document.querySelectorAll('link[href*=\"/notebook-\"]')]"
                           ".map(l => l.sheet ? l.sheet.cssRules.length : 0);"
                           " return rules.length > 0 && rules.every(n => n > 100); }")


NOTEBOOK_LINKS = "a[download], a[href$='.ipynb']"
QUESTIONS = "details.question"


def test_the_lessons_offer_notebooks_and_knowledge_checks(site):
    """What the test above clicks through is there to click: every lesson and exercise page links
    its notebook, and every lesson asks questions."""
    for source in sorted((ROOT / "docs" / "lessons").glob("*.*")):
        built = (site.path / "lessons" / source.stem / "index.html").read_text(encoding="utf-8")
        assert re.search(rf'<a href="{source.stem}\.ipynb" download>', built), f"{source.name}: no notebook download"
        if source.suffix == ".md":
            assert re.search(r'<details class="question', built), f"{source.name}: no knowledge check"


def test_the_search_index_holds_each_pages_prose_and_code_but_not_the_checks_or_the_code_listings(site):
    """Every full page load builds the search index in the reader's browser: it holds what a reader
    searches for (a lesson's prose and code, a module's names and what each is), not the checks
    appendix (the page's sentences said again) or every line of a module."""
    entries = json.loads((site.path / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    text = {}
    for entry in entries:
        page = entry["location"].partition("#")[0]
        text[page] = text.get(page, "") + entry["title"] + " " + entry["text"]
    assert "forget gate" in text["lessons/gates-and-attention/"] and "<code>" in text["lessons/transformer/"]
    assert "source_page (function)" in text["code/lessonlib/engine/builder/source_pages/"]
    assert not [page for page, words in text.items() if "Each sentence quoted below is checked" in words]
    assert not [page for page, words in text.items() if page.startswith("code/") and "<pre>" in words]


# The smallest text of every figure on view, in CSS px as rendered. A figure is an <img> of an SVG
# (lessonlib.engine.worker.svg), in which matplotlib writes each text (a group "text_N") as a
# <text>, not as glyph outlines (svg.fonttype "none"): the SVG, drawn inline off-screen at the
# image's rendered size, gives each one's font size times the scale its viewBox and transforms
# apply. Every figure's SVG goes in at once, each in a box of its own (one layout of the page, not one
# per figure; their ids may repeat, which no size depends on, and matplotlib sets each text's font on
# the text itself). An SVG inline in the page (none yet) is measured where it is. With `images`
# false, the inline SVGs alone.
FIGURE_TEXT = """async images => {
    const smallest = svg => {
        const outlined = [...svg.querySelectorAll('g[id^=text_]')].filter(g => !g.querySelector('text'));
        if (outlined.length) return {outlined: outlined.length};
        const sizes = [...svg.querySelectorAll('text, tspan')].filter(t => t.textContent.trim()).map(t => {
            const m = t.getScreenCTM();
            return parseFloat(getComputedStyle(t).fontSize) * Math.sqrt(Math.abs(m.a * m.d - m.b * m.c));
        });
        return {px: sizes.length ? Math.min(...sizes) : null};
    };
    const shown = [...(images ? document.querySelectorAll('article img') : [])]
        .map(img => [img, img.getBoundingClientRect()]).filter(([, box]) => box.width);  // on view
    const files = await Promise.all(shown.map(async ([img]) => (await fetch(img.currentSrc)).text()));
    const host = document.createElement('div');  // every figure's SVG at once: the page is laid out once
    host.style.cssText = 'position: absolute; left: -100000px; top: 0; visibility: hidden';
    const drawn = shown.map(([img, box], i) => {
        const svg = new DOMParser().parseFromString(files[i], 'image/svg+xml').documentElement;
        svg.setAttribute('width', box.width);
        svg.setAttribute('height', box.height);
        const holder = document.createElement('div');  // each in a box of its own, one under the other
        holder.append(document.importNode(svg, true));
        host.append(holder);
        return holder.firstChild;
    });
    document.body.append(host);
    const figures = shown.map(([img, box], i) => (
        {figure: img.currentSrc.split('/').pop().slice(0, 40), width: box.width, ...smallest(drawn[i])}));
    host.remove();
    for (const svg of document.querySelectorAll('article svg'))
        if (svg.querySelector('text')) figures.push({figure: 'inline SVG', ...smallest(svg)});
    return figures;
}"""

# What FIGURE_TEXT measures an <img> by, and all the palette could change of it: the file shown and
# the size it is drawn at. An SVG in an <img> is a document of its own, out of the page's stylesheets'
# reach, so with the same file at the same size its text is the same size.
FIGURE_IMAGES = """() => [...document.querySelectorAll('article img')].map(img => {
    const box = img.getBoundingClientRect(); return [img.currentSrc, box.width, box.height]; })"""

# Every exploration's frames on view at once, laid out as each is when it is the one shown; and back.
EVERY_FRAME = """() => document.querySelectorAll('.lessonlib-exploration__frame:not(.is-current)')
    .forEach(f => { f.classList.add('is-current'); f.dataset.everyFrame = ''; })"""
ONE_FRAME = """() => document.querySelectorAll('[data-every-frame]')
    .forEach(f => { f.classList.remove('is-current'); delete f.dataset.everyFrame; })"""

# What scrolls sideways in its own box (figures, display maths), and whether the keyboard reaches it.
SCROLLERS = """() => [...document.querySelectorAll('article :is(.lessonlib-figure, div.arithmatex)')]
    .filter(box => box.scrollWidth > box.clientWidth)
    .map(box => ({box: box.className, overflow: getComputedStyle(box).overflowX,
                  focusable: box.tabIndex === 0 && !!box.getAttribute('aria-label')}))"""

MIN_FIGURE_TEXT_PX = 9


def assert_formulas_and_figures_scroll_in_reachable_boxes(page, path, scheme) -> None:
    for box in page.evaluate(SCROLLERS):
        assert box["overflow"] in ("auto", "scroll") and box["focusable"], f"{path} ({scheme}): {box}"


def assert_figure_text_reads(page, path, scheme, images=True) -> None:
    page.evaluate(EVERY_FRAME)
    figures = page.evaluate(FIGURE_TEXT, images)
    outlined = [f for f in figures if "outlined" in f]
    assert not outlined, f"{path}: text drawn as outlines, which this test cannot measure: {outlined}"
    small = [f for f in figures if f["px"] is not None and f["px"] < MIN_FIGURE_TEXT_PX]
    assert not small, f"{path} ({scheme}): figure text under {MIN_FIGURE_TEXT_PX} px at 360 px: {small}"


def test_search_finds_the_forget_gate(reader, base_url):
    page = reader.open(base_url)
    # The index loads in a web worker; until then the result panel says "Initializing search".
    page.wait_for_function(
        "() => { const m = document.querySelector('.md-search-result__meta');"
        " return m && m.textContent.trim() && !/initializing/i.test(m.textContent); }"
    )
    page.locator("input.md-search__input").press_sequentially("forget gate")  # keystrokes, as Material listens
    page.wait_for_selector(".md-search-result__item")
    assert "forget gate" in page.inner_text(".md-search-result").lower()


WALKTHROUGH = "lessons/gates-and-attention/"


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


def expect_step(page, n: int) -> dict:
    """Wait for the widget to show step n (a handler's update may land after the event), then its state."""
    from playwright.sync_api import expect

    expect(page.locator(".lstm-walkthrough__status")).to_have_text(re.compile(rf"^Step {n} of "))
    return walkthrough_state(page)


PLAY_INTERVAL_MS = 2500  # docs/javascripts/walkthrough.js


def test_walkthrough_starts_paused_and_steps_by_mouse_and_keyboard_alone(reader, base_url):
    page = reader.page
    page.clock.install()  # the page's timers run on a clock this test moves, not on the wall clock
    reader.open(base_url + WALKTHROUGH)
    first = walkthrough_state(page)
    assert first["status"].startswith("Step 1 of ") and first["play"] == "Play"
    page.clock.run_for(3 * PLAY_INTERVAL_MS)
    assert walkthrough_state(page)["status"] == first["status"], "it must not play by itself"
    assert_matches_table(first)
    total = int(first["status"].split(" of ")[1].split(":")[0])

    page.click(".lstm-walkthrough button[data-action=next]")
    expect_step(page, 2)
    page.click(".lstm-walkthrough button[data-action=previous]")
    expect_step(page, 1)

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
        assert_matches_table(expect_step(page, min(n, total)))

    # Play does advance on the same clock: the check above could have seen autoplay.
    page.click(".lstm-walkthrough button[data-action=previous]")
    page.click(".lstm-walkthrough button[data-action=play]")
    page.clock.run_for(PLAY_INTERVAL_MS)
    assert walkthrough_state(page)["play"] == "Pause"
    expect_step(page, min(5, total))
    assert not reader.errors, reader.errors


def test_walkthrough_shows_every_step_of_its_table(reader, base_url):
    page = reader.open(base_url + WALKTHROUGH)
    rows = page.locator(".lstm-walkthrough tbody tr").count()
    assert rows >= 5
    for n in range(1, rows + 1):
        state = expect_step(page, n)
        assert state["status"].startswith(f"Step {n} of {rows}")
        assert_matches_table(state)
        if n < rows:
            page.click(".lstm-walkthrough button[data-action=next]")
    assert page.get_attribute(".lstm-walkthrough button[data-action=next]", "aria-disabled") == "true"


def test_walkthrough_table_alone_without_javascript(new_reader, base_url):
    page = new_reader(java_script_enabled=False).page
    page.goto(base_url + WALKTHROUGH)  # no script will mark anything: the loaded page is the final state
    assert page.locator(".lstm-walkthrough table").is_visible()
    assert not page.locator(".lstm-walkthrough__player").is_visible()


def test_walkthrough_works_after_instant_navigation(reader, base_url):
    page = reader.open(base_url + WALKTHROUGH)
    page.evaluate("window.__no_reload = true")
    page.locator("article a[href$='recurrent-networks/']").first.click()  # the lesson before, which links back
    page.wait_for_url(base_url + "lessons/recurrent-networks/")
    reader.wait_ready()
    page.locator(f"article a[href$='{WALKTHROUGH.removeprefix('lessons/').rstrip('/')}/']").first.click()
    page.wait_for_url(base_url + WALKTHROUGH)
    reader.wait_ready()
    assert page.evaluate("window.__no_reload === true"), "navigation reloaded the page: instant loading is off"
    images = article_images(page)  # figures are files beside the page: found from its new address
    assert images and all(image["width"] > 0 for image in images), images
    page.click(".lstm-walkthrough button[data-action=next]")
    expect_step(page, 2)
    assert not reader.errors, reader.errors


def test_an_exercise_reached_by_instant_navigation_has_its_notebook_styles(reader, base_url):
    page = reader.open(base_url + "lessons/sequence-models/")
    page.evaluate("window.__no_reload = true")
    page.click("a.md-footer__link--next")  # the next page, the exercise on attention
    page.wait_for_url(base_url + "lessons/exercise-attention/")
    reader.wait_ready()
    assert page.evaluate("window.__no_reload === true"), "navigation reloaded the page: instant loading is off"
    wait_for_notebook_styles(page)
    assert not reader.errors, reader.errors


# Explorations (lessonlib/engine/worker/exploration.py): where each is, by its control's label, and the
# keys that move it (a range input and a radio group take the arrow keys natively).
EXPLORATIONS = {
    "radius": ("lessons/recurrent-networks/", "Spectral radius of W_h"),
    "forget-bias": ("lessons/gates-and-attention/", "Forget-gate bias, each of the two vectors"),
    "query": ("lessons/transformer/", "Query (position)"),
    "causal-mask": ("lessons/transformer/", "Causal mask"),
    "authors-example": ("writing-lessons/", "Power"),
}


def test_every_exploration_is_listed(site):
    """Each exploration the site has is driven below: a new one must be added to EXPLORATIONS."""
    import html

    found = set()
    for page in site.path.rglob("index.html"):
        path = "" if page.parent == site.path else page.parent.relative_to(site.path).as_posix() + "/"
        if path.startswith("code/"):  # the engine's code, which names the class
            continue
        for name in re.findall(r'class="lessonlib-exploration__label"[^>]*>([^<]*)<', page.read_text()):
            found.add((path, html.unescape(name)))
    assert found == set(EXPLORATIONS.values())


def exploration(page, control: str):
    label = page.locator(".lessonlib-exploration__label", has_text=re.compile(f"^{re.escape(control)}$"))
    return page.locator(".lessonlib-exploration", has=label)


def exploration_state(root) -> dict:
    """What a reader gets now: the frame on view (its image and alt text), the announcement, the control."""
    return root.evaluate(
        """root => {
        const hash = text => [...text].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261);
        const visible = [...root.querySelectorAll('.lessonlib-exploration__frame')]
            .filter(f => getComputedStyle(f).display !== 'none');
        const img = visible.length === 1 ? visible[0].querySelector('img') : null;
        const range = root.querySelector('input[type=range]');
        const checked = root.querySelector('input[type=radio]:checked');
        return {frames: root.querySelectorAll('.lessonlib-exploration__frame').length, shown: visible.length,
                frame: root.dataset.frame, label: visible.length === 1 ? visible[0].dataset.label : null,
                alt: img && img.alt, src: img && hash(img.src), width: img && img.naturalWidth,
                status: root.querySelector('.lessonlib-exploration__status').textContent,
                valuetext: range && range.getAttribute('aria-valuetext'),
                checked: checked && checked.parentElement.textContent.trim(),
                focused: root.contains(document.activeElement) && document.activeElement.matches('input')};
    }"""
    )


def tab_into(page, root) -> None:
    """By keyboard: open the collapsed block the exploration sits in (Enter on its summary), then
    from the last stop before the control press Tab once; the control must take the focus."""
    if root.evaluate("r => !!r.closest('details:not([open])')"):
        page.evaluate("r => r.closest('details').querySelector('summary').focus()", root.element_handle())
        page.keyboard.press("Enter")
        page.wait_for_function("r => r.closest('details').open", arg=root.element_handle())
    page.evaluate(
        """root => {
        const control = root.querySelector('input[type=range], input[type=radio]:checked');
        const stops = [...document.querySelectorAll('a[href], button, input, summary, [tabindex]')].filter(e =>
            e.tabIndex >= 0 && e.getClientRects().length && !root.contains(e)
            && (e.compareDocumentPosition(control) & Node.DOCUMENT_POSITION_FOLLOWING));
        stops[stops.length - 1].focus();
    }""",
        root.element_handle(),
    )
    page.keyboard.press("Tab")
    assert exploration_state(root)["focused"], "Tab does not reach the exploration's control"


@pytest.mark.parametrize("which", EXPLORATIONS)
def test_exploration_moves_by_keyboard_alone(reader, base_url, which):
    from playwright.sync_api import expect

    path, control = EXPLORATIONS[which]
    page = reader.open(base_url + path)
    root = exploration(page, control)
    page.wait_for_function("r => [...r.querySelectorAll('img')].every(i => i.complete)",  # each frame is a file
                           arg=root.element_handle())
    first = exploration_state(root)
    assert first["frames"] >= 2 and first["shown"] == 1 and first["width"] > 0, first
    assert first["status"] == "", "nothing is announced before the reader moves it"
    tab_into(page, root)
    start = int(first["frame"])
    forward = start + 1 if start + 1 < first["frames"] else start - 1
    page.keyboard.press("ArrowRight" if forward > start else "ArrowLeft")
    expect(root).to_have_attribute("data-frame", str(forward))
    moved = exploration_state(root)
    assert moved["shown"] == 1 and moved["width"] > 0, moved
    assert moved["alt"] and moved["alt"] != first["alt"] and moved["src"] != first["src"], "the figure changes"
    assert moved["label"] in moved["status"] and moved["alt"] in moved["status"], "the new state is announced"
    assert moved["label"] in (moved["valuetext"] or moved["checked"]), "the control says the state"
    visited = {first["alt"], moved["alt"]}
    for key in ("End", "Home") if first["valuetext"] is not None else ("ArrowRight", "ArrowRight"):
        page.keyboard.press(key)
        state = exploration_state(root)
        assert state["shown"] == 1 and state["status"].endswith(state["alt"]), state
        visited.add(state["alt"])
    assert len(visited) >= min(3, first["frames"]) or first["frames"] == 2, visited
    assert not reader.errors, reader.errors


def test_explorations_are_their_frames_without_javascript(new_reader, base_url):
    page = new_reader(java_script_enabled=False).page
    for path in sorted({path for path, _ in EXPLORATIONS.values()}):
        page.goto(base_url + path)
        for which, (where, control) in EXPLORATIONS.items():
            if where != path:
                continue
            root = exploration(page, control)
            root.evaluate("r => { const d = r.closest('details'); if (d) d.open = true; }")
            state = root.evaluate(
                """r => ({frames: [...r.querySelectorAll('.lessonlib-exploration__frame')].map(f => ({
                    shown: f.getClientRects().length > 0, alt: f.querySelector('img').alt,
                    label: f.querySelector('.lessonlib-exploration__frame-label').textContent})),
                    control: r.querySelector('.lessonlib-exploration__controls').getClientRects().length > 0})"""
            )
            assert not state["control"], f"{which}: a control that does nothing without JavaScript"
            assert len(state["frames"]) >= 2 and all(f["shown"] and f["alt"] for f in state["frames"]), which
            assert len({f["alt"] for f in state["frames"]}) == len(state["frames"]), f"{which}: one finding per frame"
            assert all(f["label"].startswith(control + ": ") for f in state["frames"]), which


def test_exploration_works_after_instant_navigation(reader, base_url):
    path, control = EXPLORATIONS["query"]
    page = reader.open(base_url + path)
    page.evaluate("window.__no_reload = true")
    page.click("a.md-footer__link--prev")
    reader.wait_ready()
    page.click("a.md-footer__link--next")
    page.wait_for_url(base_url + path)
    reader.wait_ready()
    assert page.evaluate("window.__no_reload === true"), "navigation reloaded the page: instant loading is off"
    root = exploration(page, control)
    before = exploration_state(root)
    tab_into(page, root)
    page.keyboard.press("ArrowRight")
    assert exploration_state(root)["alt"] != before["alt"]
    assert not reader.errors, reader.errors


def test_explorations_print_every_frame(reader, base_url):
    """In print the control is gone and every frame is there, each with its label, as without JavaScript."""
    path = EXPLORATIONS["causal-mask"][0]
    page = reader.open(base_url + path)
    page.emulate_media(media="print")
    for which, (where, control) in EXPLORATIONS.items():
        if where != path:
            continue
        root = exploration(page, control)
        state = root.evaluate(
            """r => ({shown: [...r.querySelectorAll('.lessonlib-exploration__frame')].map(f => f.getClientRects().length > 0),
                labels: [...r.querySelectorAll('.lessonlib-exploration__frame-label')].map(l => l.getClientRects().length > 0),
                control: r.querySelector('.lessonlib-exploration__controls').getClientRects().length > 0})"""
        )
        assert not state["control"] and len(state["shown"]) >= 2, which
        assert all(state["shown"]) and all(state["labels"]), which
