"""The language-model lesson's models in the reader's browser (docs/javascripts/char-models.js).

The page publishes the trained LSTM's and GPT's weights and, for three prompts, the logits PyTorch
computes from exactly those tensors (lessonlib/export.py). Here Debian's Chromium loads the built
page, runs the page's own script on the prompts, and every logit must be within 1e-4 of
PyTorch's (the GPT both step by step and in one pass over the window); then the widget is driven
by keyboard alone, in both palettes and on a 360-px screen: the prediction, an LSTM cell's
colouring, a head's attention. A burst of typing is counted (predictions shown, positions read),
never timed; reduced motion, failed weights and a page without JavaScript are checked too.
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
            const want = reference.logits[name][k];
            // step by step (the LSTM; the GPT through its KV cache), and the GPT's whole window in one pass
            const paths = [api.logits(model, tokens)];
            if (name === 'gpt') paths.push(api.gptForward(model, tokens, true).logits);
            for (const got of paths) {
                if (got.length !== want.length) throw new Error(`${name}: ${got.length} positions, not ${want.length}`);
                got.forEach((row, i) => row.forEach((v, j) => {
                    worst = Math.max(worst, Number.isFinite(v) ? Math.abs(v - want[i][j]) : Infinity); count++; }));
            }
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
        paths = 2 if name == "gpt" else 1
        assert result[name]["count"] == paths * sum(len(p) for p in reference["prompts"]) * len(reference["logits"][name][0][0])
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

    # the LSTM's cells: one chosen by the arrow keys colours every character read, and is announced
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('char-model__cell')")
    clear_status(page)
    page.keyboard.press("ArrowUp")
    s = wait_status(page, r"^Cell 1, tanh\(c\) over the \d+ characters read: highest [+−]\d\.\d\d at ")
    shading = inside(page)
    assert shading["text"] == page.evaluate("document.querySelector('.char-model__prompt').value").replace("😀\x07", "")
    assert shading["titles"] == len(shading["text"]) and shading["coloured"] >= len(shading["text"]) - 1, shading
    assert shading["hidden"] == "true", "the shading is hidden from screen readers: the summary says it in words"
    assert s["status"] == shading["summary"]

    # a 10,000-character prompt is cut, with a note
    clear_status(page)
    page.evaluate("() => { const p = document.querySelector('.char-model__prompt');"
                  " p.value = 'To be, or not to be. '.repeat(500).slice(0, 10000); p.dispatchEvent(new Event('input')); }")
    s = wait_status(page, "reads the last 2,000 of these 10,000 characters")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360, "fits a 360-px screen"
    assert not (violations := serious_violations(page)), "\n".join(violations)
    assert not reader.errors, reader.errors
    assert reader.hosts <= {"127.0.0.1", "data"}, reader.hosts


def inside(page) -> dict:
    """The shaded characters (hidden from screen readers) and the summary of what they show."""
    return page.evaluate("""() => { const w = document.querySelector('.char-model__shaded'), spans = [...w.children];
        return {text: spans.map(s => s.textContent).join(''), titles: spans.filter(s => s.title).length,
                coloured: spans.filter(s => s.style.backgroundColor && !/, 0\\)$/.test(s.style.backgroundColor)).length,
                hidden: w.getAttribute('aria-hidden'),
                summary: document.querySelector('.char-model__inside-summary').textContent}; }""")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_heads_attention_by_keyboard(new_reader, base_url, scheme):
    reader = new_reader(viewport={"width": 360, "height": 800}, color_scheme=scheme)
    page = reader.open(base_url + PAGE)
    page.wait_for_function(READY)
    page.evaluate("() => { const p = document.querySelector('.char-model__prompt');"
                  " p.value = 'To be, or not to be: that is the question. '.repeat(3); p.dispatchEvent(new Event('input')); }")
    wait_status(page, r"reads the last 64 of these 129 characters")
    page.locator(".char-model__layer").focus()
    clear_status(page)
    page.keyboard.press("ArrowUp")  # layer 2
    page.keyboard.press("Tab")  # its head
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")  # head 3
    s = wait_status(page, r"^Layer 2, head 3, from the last character, space: ")
    shading = inside(page)
    assert len(shading["text"]) == 64 and shading["titles"] == 64, "the window: the last 64 characters"
    assert shading["text"] == ("To be, or not to be: that is the question. " * 3)[-64:]
    shares = [float(x) for x in re.findall(r"(\d+)% on ", s["status"])]
    assert len(shares) == 3 and shares == sorted(shares, reverse=True) and sum(shares) <= 101, s["status"]
    want = page.evaluate("""async (text) => { const api = window.lessonlibCharModels;
        const w = document.querySelector('.char-model'), model = await api.load(JSON.parse(w.dataset.models).gpt);
        const weights = api.gptForward(model, api.encode(model, text).tokens.slice(-64)).attention[1][2];
        return [...weights].sort((a, b) => b - a).slice(0, 3).map(x => Math.round(100 * x)); }""",
                         "To be, or not to be: that is the question. " * 3)
    assert shares == want, "the shares are layer 2, head 3's"
    assert page.evaluate("document.documentElement.scrollWidth") <= 360, "fits a 360-px screen"
    assert not (violations := serious_violations(page)), "\n".join(violations)
    assert not reader.errors, reader.errors


def test_fast_typing_never_queues_stale_work(new_reader, base_url):
    """A burst of keystrokes, each an input event, before the page can draw: one prediction, for the
    last prompt, and no more forward steps than one reading of the window."""
    page = new_reader().open(base_url + PAGE)
    page.wait_for_function(READY)
    before = page.evaluate("() => [+document.querySelector('.char-model').dataset.predictions,"
                           " lessonlibCharModels.stats.steps]")
    page.evaluate("""() => { const p = document.querySelector('.char-model__prompt');
        for (const ch of 'e, or not to be, that is the q') { p.value += ch; p.dispatchEvent(new Event('input')); } }""")
    page.wait_for_function(f"() => +document.querySelector('.char-model').dataset.predictions > {before[0]}")
    page.wait_for_timeout(300)  # time enough for any queued work to show itself
    after = page.evaluate("() => [+document.querySelector('.char-model').dataset.predictions,"
                          " lessonlibCharModels.stats.steps]")
    assert after[0] - before[0] == 1, f"{after[0] - before[0]} predictions for one burst of 30 keystrokes"
    final = "Ham.\nTo be, or not to be, or not to be, that is the q"
    assert after[1] - before[1] <= len(final), f"{after[1] - before[1]} forward steps: more than one reading of the prompt"
    want = page.evaluate("""async (text) => { const api = window.lessonlibCharModels;
        const w = document.querySelector('.char-model'), model = await api.load(JSON.parse(w.dataset.models).gpt);
        const row = api.gptForward(model, api.encode(model, text).tokens).logits;
        return model.vocab[row.indexOf(Math.max(...row))]; }""", final)
    assert page.evaluate("document.querySelector('.char-model__prompt').value") == final
    assert state(page)["top"] == {" ": "space", "\n": "newline"}.get(want, want), "the prediction shown is the last prompt's"


def test_reduced_motion_moves_nothing(new_reader, base_url):
    page = new_reader(reduced_motion="reduce").open(base_url + PAGE)
    page.wait_for_function(READY)
    moving = page.evaluate("""() => [...document.querySelectorAll('.char-model, .char-model *')].filter(e => {
        const s = getComputedStyle(e);
        return s.transitionDuration.split(',').some(d => parseFloat(d) > 0) || s.animationName !== 'none'; }).length""")
    assert moving == 0, f"{moving} elements of the widget move under prefers-reduced-motion"


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
    assert page.locator(".char-model__fallback figure img").is_visible()


def test_a_second_model_that_fails_to_load_leaves_the_first_running(new_reader, base_url):
    """The LSTM loads once the page is idle; if it fails, the transformer keeps working, the LSTM
    cannot be chosen, and one line says so."""
    reader = new_reader()
    reader.page.route(re.compile(r".*/lstm-[0-9a-f]+\.bin$"), lambda route: route.abort())
    page = reader.open(base_url + PAGE)
    page.wait_for_function(READY)
    assert page.evaluate(READY) == "true"
    page.wait_for_function("() => document.querySelector('input[value=lstm]').disabled")
    error = page.locator(".char-model__error")
    assert error.is_visible() and "LSTM could not be loaded" in error.inner_text() and "\n" not in error.inner_text()
    assert page.locator(".char-model__live").is_visible()
    assert page.locator("input[value=gpt]").is_checked()
    page.locator(".char-model__prompt").fill("To be")
    page.wait_for_function("() => document.querySelector('.char-model__status').textContent.startsWith('Transformer')")


def test_without_javascript_the_samples_stand_in(new_reader, base_url):
    page = new_reader(java_script_enabled=False).page
    page.goto(base_url + PAGE)
    assert page.locator(".char-model__fallback pre").count() >= 3
    assert not page.locator(".char-model__live").is_visible()
    # beside the samples, the lesson's learning curves: the same file and alt text as the figure above
    figure = page.locator(".char-model__fallback figure img")
    assert figure.is_visible()
    curves = page.locator("article figure.lessonlib-figure:not(.char-model__figure) img[alt^='All three models fall']")
    assert curves.count() == 1
    assert figure.get_attribute("src") == curves.get_attribute("src")
    assert figure.get_attribute("alt") == curves.get_attribute("alt")
    assert page.evaluate("document.querySelector('.char-model__fallback img').naturalWidth") > 0, "the image loads"
