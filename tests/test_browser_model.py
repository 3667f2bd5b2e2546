"""The language-model lesson's models in the reader's browser (docs/javascripts/char-models.js).

The page publishes the trained LSTM's and GPT's weights and, for three prompts, the logits PyTorch
computes from exactly those tensors (lessonlib/export.py). Here Debian's Chromium loads the built
page, runs the page's own script on the prompts, and every logit must be within 1e-4 of
PyTorch's; then the widget is driven by keyboard alone, in both palettes and on a 360-px screen.
Uses the fixtures of tests/test_site_browser.py and the one browser of tests/conftest.py (the site
is built once per test process).
"""
from __future__ import annotations

import json
import re

import pytest
import test_site_browser
from test_site_browser import CHROMIUM, SCHEMES, serious_violations

# the site tests' browser fixtures, shared: pytest finds a fixture by its name in this module
base_url, new_reader, reader = test_site_browser.base_url, test_site_browser.new_reader, test_site_browser.reader

PAGE = "lessons/language-model/"
TOLERANCE = 1e-4
READY = "() => document.querySelector('.char-model').dataset.charModelReady"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium")

COMPARE = """async ([manifests, reference]) => {
    const api = window.lessonlibCharModels, out = {};
    for (const [name, url] of Object.entries(manifests)) {
        const model = await api.load(url);
        let worst = 0, count = 0;
        reference.prompts.forEach((prompt, k) => {
            const {tokens, skipped} = api.encode(model, prompt);
            if (skipped.length || tokens.length !== [...prompt].length) throw new Error('prompt not in the vocabulary');
            const got = api.logits(model, tokens), want = reference.logits[name][k];
            if (got.length !== want.length) throw new Error(`${name}: ${got.length} positions, not ${want.length}`);
            got.forEach((row, i) => row.forEach((v, j) => {
                worst = Math.max(worst, Number.isFinite(v) ? Math.abs(v - want[i][j]) : Infinity); count++; }));
        });
        out[name] = {worst, count};
    }
    return out;
}"""


def published(site) -> tuple[dict, dict]:
    """The widget's manifests (names beside the page) and the reference logits the page published."""
    folder = site.path / PAGE
    html = (folder / "index.html").read_text(encoding="utf-8")
    models = json.loads(re.search(r'class="char-model" data-models="([^"]+)"', html).group(1).replace("&quot;", '"'))
    (reference,) = folder.glob("reference-*.json")
    return models, json.loads(reference.read_text())


def test_the_published_files_are_named_by_content_and_small(site):
    models, _ = published(site)
    folder = site.path / PAGE
    from lessonlib import export

    for name, manifest in models.items():
        data = (folder / manifest).read_bytes()
        weights = json.loads(data)["weights"]
        assert export.content_name(name, data, "json") == manifest
        assert export.content_name(name, (folder / weights).read_bytes(), "bin") == weights
        assert len(data) + (folder / weights).stat().st_size <= 2**20, f"{name}: over 1 MB"


def test_the_pages_own_script_computes_pytorchs_logits(reader, site, base_url):
    models, reference = published(site)
    page = reader.open(base_url + PAGE)
    result = page.evaluate(COMPARE, [models, reference])
    print("largest logit difference:", {name: f"{r['worst']:.2e} over {r['count']:,} logits" for name, r in result.items()})
    for name in ("lstm", "gpt"):
        assert result[name]["count"] == sum(len(p) for p in reference["prompts"]) * len(reference["logits"][name][0][0])
        assert result[name]["worst"] <= TOLERANCE, f"{name}: a logit differs from PyTorch's by {result[name]['worst']:.2e}"
    assert not reader.errors, reader.errors


def state(page) -> dict:
    return page.evaluate("""() => { const w = document.querySelector('.char-model');
        const text = s => w.querySelector(s).textContent.trim();
        return {status: text('.char-model__status'), note: text('.char-model__note'),
                rows: [...w.querySelectorAll('.char-model__table tbody tr')].map(r => [...r.cells].map(c => c.textContent)),
                bars: w.querySelectorAll('.char-model__bar').length, written: text('.char-model__written'),
                top: w.dataset.top}; }""")


def clear_status(page) -> None:
    """Before an action: the announcement it makes is then the one waited for."""
    page.evaluate("() => { document.querySelector('.char-model__status').textContent = ''; }")


def wait_status(page, pattern: str) -> dict:
    page.wait_for_function("p => new RegExp(p).test(document.querySelector('.char-model__status').textContent)", arg=pattern)
    return state(page)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_widget_by_keyboard_alone(new_reader, base_url, scheme):
    reader = new_reader(viewport={"width": 360, "height": 800}, color_scheme=scheme)
    page = reader.open(base_url + PAGE)
    assert page.get_attribute("body", "data-md-color-scheme") == SCHEMES[scheme]
    page.wait_for_function(READY)
    assert page.evaluate(READY) == "true"
    first = state(page)
    assert len(first["rows"]) == 10 and first["bars"] == 10, first
    assert first["status"] == "", "nothing announced before the reader changes anything"
    assert first["rows"][0][0] == "e", "after 'to b' the transformer's first choice is 'e', as on the page"

    page.locator(".char-model__prompt").focus()  # then keys only
    page.keyboard.press("Control+End")
    clear_status(page)
    page.keyboard.type("e, or not")
    s = wait_status(page, r"^Transformer: most likely next character")
    assert len(s["rows"]) == 10 and s["rows"][0][0] == s["top"]
    shares = [float(p.rstrip("%")) for _, p in s["rows"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.1

    clear_status(page)
    page.keyboard.insert_text("😀\x07")  # hostile: an emoji and a control character
    s = wait_status(page, "Skipped 2 characters")
    assert "U+0007" in s["note"] and "😀" in s["note"]

    clear_status(page)
    page.keyboard.press("Shift+Tab")  # back to the model's radio buttons: the arrow picks the LSTM
    page.keyboard.press("ArrowUp")
    s = wait_status(page, r"^LSTM: most likely")
    assert page.is_checked("input[value=lstm]")

    page.keyboard.press("Tab")  # the prompt
    page.keyboard.press("Tab")  # temperature: down to 0.1, nearly greedy
    clear_status(page)
    page.keyboard.press("Home")
    s = wait_status(page, r"^LSTM: most likely next character")
    assert page.inner_text(".char-model__temperature-value") == "0.1"
    page.keyboard.press("Tab")  # top-k
    page.keyboard.press("Control+a")
    clear_status(page)
    page.keyboard.type("3")
    s = wait_status(page, "^LSTM")
    page.wait_for_function("() => document.querySelectorAll('.char-model__table tbody tr').length === 10")
    s = state(page)
    assert sum(float(p.rstrip("%")) > 0 for _, p in s["rows"]) <= 3, "top-k 3: three characters at most"

    page.keyboard.press("Tab")  # the button
    clear_status(page)
    page.keyboard.press("Enter")
    wait_status(page, "^Wrote 200 characters")
    assert len(page.evaluate("() => document.querySelector('.char-model__written').textContent")) == 200

    # a 10,000-character prompt is cut, with a note
    clear_status(page)
    page.evaluate("() => { const p = document.querySelector('.char-model__prompt');"
                  " p.value = 'To be, or not to be. '.repeat(500).slice(0, 10000); p.dispatchEvent(new Event('input')); }")
    s = wait_status(page, "reads the last 2,000 of these 10,000 characters")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360, "fits a 360-px screen"
    assert not (violations := serious_violations(page)), "\n".join(violations)
    assert not reader.errors, reader.errors
    assert reader.hosts <= {"127.0.0.1", "data"}, reader.hosts


def test_weights_that_fail_to_load_give_one_line_and_the_samples_stay(new_reader, base_url):
    reader = new_reader()
    reader.page.route(re.compile(r".*/gpt-[0-9a-f]+\.bin$"), lambda route: route.abort())
    page = reader.open(base_url + PAGE)
    page.wait_for_function(READY)
    assert page.evaluate(READY) == "failed"
    error = page.locator(".char-model__error")
    assert error.is_visible() and "could not be loaded" in error.inner_text() and "\n" not in error.inner_text()
    assert page.locator(".char-model__fallback pre").first.is_visible()
    assert not page.locator(".char-model__live").is_visible()


def test_without_javascript_the_samples_stand_in(new_reader, base_url):
    page = new_reader(java_script_enabled=False).page
    page.goto(base_url + PAGE)
    assert page.locator(".char-model__fallback pre").count() >= 3
    assert not page.locator(".char-model__live").is_visible()
