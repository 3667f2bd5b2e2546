"""The language-model lesson's models in the reader's browser (docs/javascripts/char-models.js).

The page publishes the trained LSTM's and GPT's weights and, for three prompts, the logits PyTorch
computes from exactly those tensors (lessonlib/export.py). Here Debian's Chromium loads the built
page, runs the page's own script on the prompts, and every logit must be within 1e-4 of
PyTorch's (the GPT both step by step and in one pass over the window); then the widget is driven
by keyboard alone, in both palettes and on a 360-px screen: the prediction, an LSTM cell's
colouring, a head's attention. A burst of typing, and a key typed at the end of a long prompt, are
counted (predictions shown, positions read, the shading kept), never timed: scripts/bench_browser_model.py
times them. Hostile input (emoji, joiners, right-to-left and control characters, a top-k out of range),
reduced motion, failed weights and a page without JavaScript are checked too.
Uses the readers and the one browser of tests/conftest.py (the site
is built once per test process). PREBUILT_SITE=DIR serves a site already built instead
(one with at least the language-model page, such as a mini site of that page alone).
"""
from __future__ import annotations

import json
import re

import pytest
from browser_support import CHROMIUM, NARROW_PHONE, SCHEMES, serious_violations, shading_contrast_problems

# the site tests' browser fixtures, shared: pytest finds a fixture by its name in this module

PAGE = "lessons/language-model/"
TOLERANCE = 1e-4
READY = "() => document.querySelector('.char-model').dataset.charModelReady"

# What axe reads after a test that changes the widget alone: the page around it is read whole, as
# loaded, by the site's per-page test (a dark desktop, then a light 360-px phone: each palette, each width).
WIDGET = ".char-model"
PREDICTIONS = "+document.querySelector('.char-model').dataset.predictions"  # moves once per prediction shown
LONG = "To be, or not to be. " * 500  # 10,500 characters

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
            // step by step (the LSTM; the GPT through its KV cache), and the GPT's whole window in one pass:
            // every row's logits, and the last row's alone (what the widget reads)
            const paths = [[api.logits(model, tokens), want]];
            if (name === 'gpt') paths.push([api.gptForward(model, tokens, true).logits, want],
                                           [[api.gptForward(model, tokens).logits], want.slice(-1)]);
            for (const [got, rows] of paths) {
                if (got.length !== rows.length) throw new Error(`${name}: ${got.length} positions, not ${rows.length}`);
                got.forEach((row, i) => row.forEach((v, j) => {
                    worst = Math.max(worst, Number.isFinite(v) ? Math.abs(v - rows[i][j]) : Infinity); count++; }));
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
        rows = sum(len(p) for p in reference["prompts"]) * (2 if name == "gpt" else 1)
        rows += len(reference["prompts"]) if name == "gpt" else 0  # the last rows alone
        assert result[name]["count"] == rows * len(reference["logits"][name][0][0])
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
    reader = new_reader(viewport=NARROW_PHONE, color_scheme=scheme)
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
    s = wait_status(page, r"^Top-k 3\. LSTM: most likely")
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
    start = int(page.input_value(".char-model__cell"))  # the cell the page names (lstm_cells), not 0
    clear_status(page)
    page.keyboard.press("ArrowUp")
    s = wait_status(page, rf"^Cell {start + 1}, tanh\(c\) over the \d+ characters read: highest [+−]\d\.\d\d at ")
    shading = inside(page)
    assert shading["text"] == page.evaluate("document.querySelector('.char-model__prompt').value").replace("😀\x07", "")
    assert shading["titles"] == len(shading["text"]) and shading["coloured"] >= len(shading["text"]) - 1, shading
    assert shading["hidden"] == "true", "the shading is hidden from screen readers: the summary says it in words"
    assert s["status"] == shading["summary"]

    # a 10,000-character prompt is read whole, its shading in a box of its own
    set_prompt(page, LONG[:10000])
    assert page.inner_text(".char-model__inside-summary").startswith(f"Cell {start + 1}, tanh(c) over the 10,000 characters read")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360, "fits a 360-px screen"
    assert not (violations := serious_violations(page, within=WIDGET)), "\n".join(violations)
    assert not (low := shading_contrast_problems(page)), "shaded characters under AA contrast:\n" + "\n".join(low)
    assert not reader.errors, reader.errors
    assert reader.hosts <= {"127.0.0.1", "data"}, reader.hosts


def inside(page) -> dict:
    """The shaded characters (hidden from screen readers) and the summary of what they show."""
    return page.evaluate("""() => { const w = document.querySelector('.char-model__shaded'),
            spans = [...w.querySelectorAll('[title]')];
        return {text: w.textContent, titles: spans.length,
                coloured: spans.filter(s => s.style.backgroundColor && !/, 0\\)$/.test(s.style.backgroundColor)).length,
                hidden: w.getAttribute('aria-hidden'),
                summary: document.querySelector('.char-model__inside-summary').textContent}; }""")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_heads_attention_by_keyboard(new_reader, base_url, scheme):
    reader = new_reader(viewport=NARROW_PHONE, color_scheme=scheme)
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
    assert not (violations := serious_violations(page, within=WIDGET)), "\n".join(violations)
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
    curves = page.locator("article figure.lessonlib-figure:not(.char-model__figure) img[alt^=\"Each model's first run\"]")
    assert curves.count() == 1
    assert figure.get_attribute("src") == curves.get_attribute("src")
    assert figure.get_attribute("alt") == curves.get_attribute("alt")
    assert page.evaluate("document.querySelector('.char-model__fallback img').naturalWidth") > 0, "the image loads"


def shown_after(page, action) -> None:
    """Do `action`, then wait until the prediction it causes is shown."""
    before = page.evaluate(PREDICTIONS)
    action()
    page.wait_for_function(f"() => {PREDICTIONS} > {before}")


def set_prompt(page, text: str) -> None:
    """The whole prompt at once, as a paste would; its prediction shown."""
    shown_after(page, lambda: page.evaluate("t => { const p = document.querySelector('.char-model__prompt');"
                                            " p.value = t; p.dispatchEvent(new Event('input')); }", text))


def lstm_page(new_reader, base_url):
    page = new_reader().open(base_url + PAGE)
    shown_after(page, lambda: page.check("input[value=lstm]"))
    return page


def test_a_key_at_the_end_of_a_long_prompt_reads_one_character(new_reader, base_url):
    """The LSTM carries its state: one key typed at the end of 10,500 characters is one step, and
    the shading keeps what it drew and adds the one character (scripts/bench_browser_model.py
    times it: at most 16 ms). The paste itself is read a slice at a time, the page answering between."""
    page = lstm_page(new_reader, base_url)
    page.evaluate("() => { const note = document.querySelector('.char-model__note'); window.notes = [];"
                  " new MutationObserver(() => notes.push(note.textContent)).observe(note, {childList: true}); }")
    set_prompt(page, LONG)
    assert "Reading: 1,000 of 10,500 characters…" in page.evaluate("notes"), "the paste is read a slice at a time"
    before = page.evaluate("() => { document.querySelector('.char-model__shaded [title]').dataset.kept = '';"
                           " return lessonlibCharModels.stats.steps; }")
    page.locator(".char-model__prompt").focus()
    page.keyboard.press("Control+End")
    shown_after(page, lambda: page.keyboard.press("T"))
    steps, kept, shaded = page.evaluate("""() => [lessonlibCharModels.stats.steps,
        !!document.querySelector('.char-model__shaded [data-kept]'),
        document.querySelectorAll('.char-model__shaded [title]').length]""")
    assert steps - before == 1, f"{steps - before} LSTM steps for one key typed at the end"
    assert kept, "the characters shaded before the key are kept, not drawn again"
    assert shaded == len(LONG) + 1


NOTE_PARTS = """selector => { const e = document.querySelector(selector), text = e.textContent;
    // where each piece of the sentence outside the characters named starts: in reading order if nothing garbles it
    const starts = [...e.childNodes].filter(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim()).map(n => {
        const range = document.createRange(); range.selectNodeContents(n);
        const first = range.getClientRects()[0]; return [first.top, first.left]; });
    return {text, items: [...e.querySelectorAll('bdi')].map(b => b.textContent),
            inOrder: starts.every(([top, left], i) => !i || top > starts[i - 1][0] + 2
                                  || (Math.abs(top - starts[i - 1][0]) <= 2 && left > starts[i - 1][1])),
            invisible: /[\\p{Cc}\\p{Cf}]/u.test(text)}; }"""


def test_characters_are_counted_as_a_reader_sees_them(new_reader, base_url):
    """Four emoji are four characters, whatever their code points; a zero-width joiner on its own is
    named, never an empty item."""
    page = new_reader().open(base_url + PAGE)
    set_prompt(page, "\u200dHam. 👍🏽❤️👨‍👩‍👧🇫🇷\nTo b")  # the emoji: 11 code points
    note = page.evaluate(NOTE_PARTS, ".char-model__note")
    assert note["text"].startswith("Skipped 5 characters the model has never seen"), note
    assert note["items"] == ["U+200D", "👍🏽", "❤️", "👨‍👩‍👧", "🇫🇷"], note
    assert page.evaluate(NOTE_PARTS, ".char-model__status")["items"] == note["items"]


def test_right_to_left_and_control_characters_are_shown_isolated(new_reader, base_url):
    """A right-to-left override, a Hebrew letter and a bell, each named in a <bdi>: the sentence
    around them reads in order, in the note and in what is announced."""
    page = new_reader().open(base_url + PAGE)
    set_prompt(page, "To be\u202e, or \u05e9 not\x07 to b")
    for part in (".char-model__note", ".char-model__status"):
        got = page.evaluate(NOTE_PARTS, part)
        assert got["items"] == ["U+202E", "\u05e9", "U+0007"], got
        assert "Skipped 3 characters the model has never seen (" in got["text"], got
        assert not got["invisible"], f"{part}: a control character itself, not its name"
        assert got["inOrder"], f"{part}: the sentence around the characters is out of order"
    assert not (violations := serious_violations(page, within=WIDGET)), "\n".join(violations)


def test_a_top_k_out_of_range_is_corrected_and_said(new_reader, base_url):
    page = new_reader().open(base_url + PAGE)
    field = page.locator(".char-model__top-k")
    vocab = field.get_attribute("max")
    for typed, used in (("0", "1"), ("-5", "1"), ("2.6", "3"), ("1000", vocab), ("5", "5")):
        clear_status(page)
        shown_after(page, lambda: field.fill(typed))
        assert field.input_value() == used, f"top-k {typed}: the field shows {field.input_value()}"
        said = (f"Top-k {used}. " if typed == used
                else f"Top-k takes a whole number from 1 to {vocab}: {typed} became {used}. ")
        assert state(page)["status"].startswith(said + "Transformer: most likely"), state(page)["status"]
    rows = state(page)["rows"]
    assert sum(float(p.rstrip("%")) > 0 for _, p in rows) == 5, rows
    clear_status(page)
    page.click(".char-model__write")
    assert wait_status(page, "^Wrote")["status"] == "Wrote 200 characters at temperature 1.0, top-k 5."


def test_the_cell_view_is_a_bounded_box_counted_in_the_prompt(new_reader, base_url):
    """10,500 characters shaded in a box that scrolls, open at the prompt's end; the summary and
    each character's title count positions in the prompt, a skipped character included."""
    page = lstm_page(new_reader, base_url)
    prompt = "😀\n" + LONG
    set_prompt(page, prompt)
    box = page.evaluate("""() => { const b = document.querySelector('.char-model__shaded');
        return {overflow: getComputedStyle(b).overflowY, height: b.clientHeight, content: b.scrollHeight,
                end: b.scrollTop + b.clientHeight, viewport: innerHeight,
                last: [...b.querySelectorAll('[title]')].at(-1).title}; }""")
    assert box["overflow"] in ("auto", "scroll") and box["height"] <= box["viewport"] / 2 < box["content"], box
    assert box["end"] >= box["content"] - 2, "the box opens at the prompt's end, where the reader types"
    assert box["last"].startswith(f"space, character {len(prompt):,}:"), box["last"]
    summary = page.inner_text(".char-model__inside-summary")
    found = re.findall(r"[+−]\d\.\d\d at (\S+) \(character ([\d,]+)\)", summary)
    assert len(found) == 6, summary
    names = {" ": "space", "\n": "newline"}
    for name, position in found:
        assert names.get(c := prompt[int(position.replace(",", "")) - 1], c) == name, (name, position, summary)
