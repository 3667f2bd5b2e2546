"""How fast the language-model lesson's models run in Chromium (docs/javascripts/char-models.js).

    PYTHONPATH=$PWD .venv/bin/python scripts/bench_browser_model.py [--site DIR] [--runs N]

Serves a built site (--site: a folder `mkdocs build` wrote; without it, the site is built into a
temporary folder, from the cache), opens the language-model page in Debian's Chromium, and prints:

- the time to the widget's first prediction (the page's own mark, data-first-prediction-ms),
  from the start of navigation and from DOMContentLoaded (the page itself, 200 kB of HTML and
  the theme's scripts, takes most of the first), and what the page downloaded, in all and for
  the models. The page fetches the model it shows first (the transformer) as soon as its script
  runs, predicts, and fetches the LSTM once idle;
- the LSTM's time per character (one step, state carried; the input-to-gate products are a
  table, one row per character);
- the GPT's time per character while its window fills (one position through the KV cache), and
  once the window slides. The strategy then: a full reread of the last 64 characters (the
  learned positions end at 64, so every cached key and value stands at a new position), in one
  pass over the window (gptForward): each weight matrix against all 64 rows at once, into
  Float64Array buffers allocated once per model, nothing allocated per character;
- for each model, one key typed at the end of a 10,000-character prompt in the widget: a real
  keystroke, timed from its input event (the event's own timestamp) to the prediction shown (the
  widget's count of predictions moves once bars, table and cell view are updated) and laid out
  (a forced layout, so that the page's own cost of the new DOM counts too), over --keys keys.

Each time is the median of --runs runs (of --keys keys for typing). A benchmark, not a test: it
asserts nothing.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = "lessons/language-model/"

MEASURE = """async ([runs]) => {
    const api = window.lessonlibCharModels, w = document.querySelector('.char-model');
    const urls = JSON.parse(w.dataset.models), out = {};
    const median = xs => xs.sort((a, b) => a - b)[xs.length >> 1];
    const lstm = await api.load(urls.lstm), gpt = await api.load(urls.gpt);  // the page's own, loaded once
    const text = 'Ham.\\nTo be, or not to be, that is the question: whether tis nobler in the mind to suffer';
    const ids = [...text].map(c => lstm.ids.get(c));
    let times = [];
    for (let r = 0; r < runs; r++) {
        const state = api.lstmState(lstm);
        const t0 = performance.now();
        for (const id of ids) api.lstmStep(lstm, state, id);  // the state, updated in place
        times.push((performance.now() - t0) / ids.length);
    }
    out.lstm_ms_per_char = median(times);
    times = [];
    for (let r = 0; r < runs; r++) {
        const caches = api.gptCache(gpt);
        const t0 = performance.now();
        for (const id of ids.slice(0, 64)) api.gptStep(gpt, caches, id);
        times.push((performance.now() - t0) / 64);
    }
    out.gpt_filling_ms_per_char = median(times);
    times = [];
    for (let r = 0; r < runs; r++) {
        const t0 = performance.now();
        for (let k = 1; k <= 10; k++) api.gptForward(gpt, ids.slice(k, k + 64));  // ten slides, one window each
        times.push((performance.now() - t0) / 10);
    }
    out.gpt_sliding_ms_per_char = median(times);
    out.first_prediction_ms = Number(w.dataset.firstPredictionMs);
    out.first_prediction_after_dom_ms = out.first_prediction_ms -
        performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd;
    // what the page itself downloaded: each address once (the loads above fetch the models again)
    const resources = [...new Map(performance.getEntriesByType('resource').map(e => [e.name, e])).values()];
    out.downloaded_kb = resources.reduce((s, e) => s + (e.encodedBodySize || 0), 0) / 1024;
    out.models_kb = resources.filter(e => /\\/(lstm|gpt)-[0-9a-f]+\\.(json|bin)$/.test(e.name))
        .reduce((s, e) => s + (e.encodedBodySize || 0), 0) / 1024;
    return out;
}"""


# Per key: from the input event to the prediction shown and laid out (see the docstring)
WATCH_KEYS = """() => {
    const w = document.querySelector('.char-model');
    window.benchKeys = [];
    let typed = null;
    w.addEventListener('input', (e) => { typed = e.timeStamp; }, true);  // capture: before the widget's own
    new MutationObserver(() => {
        if (typed === null) return;
        void document.body.offsetHeight;  // layout now: the new bars and shading count
        window.benchKeys.push(performance.now() - typed);
        typed = null;
    }).observe(w, {attributes: true, attributeFilter: ['data-predictions']});
}"""
PREDICTIONS = "+document.querySelector('.char-model').dataset.predictions"  # moves once per prediction shown
LONG_PROMPT = "'To be, or not to be. '.repeat(500).slice(0, 10000)"


def typing_ms(page, kind: str, keys: int) -> list[float]:
    """The time of each key typed at the end of a 10,000-character prompt, `kind` chosen, sorted."""
    radio = f"input[name=char-model-kind][value={kind}]"
    if not page.is_checked(radio):
        before = page.evaluate(PREDICTIONS)
        page.check(radio)
        page.wait_for_function(f"() => {PREDICTIONS} > {before}", timeout=120_000)
    before = page.evaluate(PREDICTIONS)
    page.evaluate(f"() => {{ const p = document.querySelector('.char-model__prompt'); p.value = {LONG_PROMPT};"
                  " p.dispatchEvent(new Event('input')); }")
    page.wait_for_function(f"() => {PREDICTIONS} > {before}", timeout=120_000)
    page.evaluate(WATCH_KEYS)
    page.locator(".char-model__prompt").focus()
    page.keyboard.press("Control+End")
    for typed, key in enumerate(("Tobeornot" * keys)[:keys]):
        page.keyboard.press(key)
        page.wait_for_function(f"() => window.benchKeys.length > {typed}")
        page.wait_for_timeout(50)  # each key on its own, as typed
    return sorted(page.evaluate("() => window.benchKeys"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one into a temporary folder)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keys", type=int, default=21, help="keys typed at the end of the long prompt, per model")
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory="."))
    url = f"http://127.0.0.1:{server.server_port}/"
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site
        if site is None:
            site = Path(tmp) / "site"
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": url}
            subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)], cwd=ROOT, env=env,
                           check=True)
        server.RequestHandlerClass = functools.partial(_Quiet, directory=str(site.resolve()))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(url + PAGE)
            page.wait_for_function("() => document.querySelector('.char-model')?.dataset.charModelReady",
                                   timeout=120_000)
            result = page.evaluate(MEASURE, [args.runs])
            for kind in ("lstm", "gpt"):
                page.reload()
                page.wait_for_function("() => document.querySelector('.char-model')?.dataset.charModelReady")
                times = typing_ms(page, kind, args.keys)
                result[f"{kind}_key_at_10000_ms"] = times[len(times) // 2]
                result[f"{kind}_key_at_10000_all_ms"] = [round(t, 1) for t in times]
            browser.close()
        server.shutdown()
    print(json.dumps(result, indent=1))
    print(f"first prediction {result['first_prediction_ms']:.0f} ms after navigation began, "
          f"{result['first_prediction_after_dom_ms']:.0f} ms after DOMContentLoaded (goal 300 ms); "
          f"downloaded {result['downloaded_kb']:,.0f} kB in all, {result['models_kb']:,.0f} kB of it the two models")
    print(f"LSTM {result['lstm_ms_per_char']:.3f} ms per character (goal 1 ms)")
    print(f"GPT {result['gpt_filling_ms_per_char']:.3f} ms per character while the window fills, KV cache (goal 2 ms); "
          f"{result['gpt_sliding_ms_per_char']:.2f} ms once it slides, one pass over 64 characters (bound 15 ms)")
    print(f"one key at the end of a 10,000-character prompt, input event to the prediction shown (median of "
          f"{args.keys} keys, goal 16 ms): LSTM {result['lstm_key_at_10000_ms']:.1f} ms, "
          f"transformer {result['gpt_key_at_10000_ms']:.1f} ms")


if __name__ == "__main__":
    main()
