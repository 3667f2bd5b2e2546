"""What the browser tests share: Debian's Chromium, the viewports and palettes, a Reader (one tab
that records console errors and the hosts it contacts) and axe-core's serious
violations. The fixtures that make readers (base_url, new_reader, reader) are in conftest.py."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = Path("/usr/bin/chromium")
PHONE, DESKTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 900}
NARROW_PHONE = {"width": 360, "height": 800}  # the narrowest screen the course is read on
SCHEMES = {"light": "default", "dark": "slate"}  # the reader's preference -> Material's palette
TIMEOUT_MS = 60_000  # for any state to arrive, on a loaded machine


READY = """path => document.documentElement.dataset.lessonlibReady === path
    && [...document.querySelectorAll('.lstm-walkthrough')].every(w => w.dataset.walkthroughReady)
    && [...document.querySelectorAll('.lessonlib-exploration')].every(e => e.dataset.explorationReady)
    && [...document.querySelectorAll('.char-model')].every(e => e.dataset.charModelReady)"""


class Reader:
    """One browser tab that records console errors and every host it contacts."""

    def __init__(self, browser, viewport=DESKTOP, **context_options) -> None:
        self.context = browser.new_context(viewport=viewport, **context_options)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.hosts: set[str] = set()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.hosts.add(urlparse(r.url).hostname or urlparse(r.url).scheme))

    def open(self, url: str):
        """Go to `url` and wait until the page's scripts have set it up (not merely loaded it)."""
        self.page.goto(url)
        self.wait_ready()
        return self.page

    def wait_ready(self) -> None:
        """The page on view (after instant navigation too) is set up: a11y.js, every
        walkthrough widget and every exploration have marked it."""
        self.page.wait_for_function(READY, arg=urlparse(self.page.url).path)

    def close(self) -> None:
        self.context.close()


# Highlighted code is most of a lesson's elements (5,400 of 8,100 on one), a span per token, and
# axe's contrast check costs per element. Tokens of one class look alike within one kind of box,
# so the contrast of code is checked on one token per class and box; every other rule reads all.
SAMPLE_TOKENS = """() => {
    const longest = new Map();  // axe skips a text too short to judge (one character): sample the longest
    for (const token of document.querySelectorAll('.highlight code span')) {
        const box = token.closest('.admonition, details');
        const key = token.className + '|' + (box ? box.className : '');
        const best = longest.get(key);
        if (!best || token.textContent.trim().length > best.textContent.trim().length) longest.set(key, token);
    }
    longest.forEach(token => { token.dataset.axeSample = ''; });
}"""

# What axe's contrast rule reads: everything but code, and the code's samples. One axe run does every
# rule (a second run for contrast alone cost each view a second walk of the whole page): the contrast
# rule's own selector leaves the rest of the code out. Also left out: the language model's shaded
# characters (one per span), which axe cannot judge - one character is too short a text, and a
# 1.1:1 shading passes it as "incomplete" - tests/test_browser_model.py checks their contrast itself.
CONTRAST_READS = ":not(.highlight, .highlight *, .char-model__shaded [title]), [data-axe-sample]"

AXE_RUN = """async selector => {
    axe.configure({rules: [{id: 'color-contrast', selector}]});
    return (await axe.run(document, {resultTypes: ['violations']})).violations;
}"""


def inject_axe(page) -> None:
    """axe-core into the page on view, once (a new page view needs it again)."""
    from axe_playwright_python.sync_playwright import Axe

    if not page.evaluate("() => typeof axe === 'object'"):
        page.evaluate(Axe().axe_script)


def serious_violations(page) -> list[str]:
    """axe-core's violations of impact serious or critical on the page as it is now, one line each."""
    inject_axe(page)
    page.evaluate(SAMPLE_TOKENS)
    violations = page.evaluate(AXE_RUN, CONTRAST_READS)
    lines = []
    for v in violations:
        if v["impact"] in ("serious", "critical"):
            where = "; ".join(" ".join(n["target"]) for n in v["nodes"][:3])
            summary = v["nodes"][0].get("failureSummary", "").replace("\n", " ")
            lines.append(f"{v['impact']} {v['id']} ({len(v['nodes'])}x): {v['help']} | {where} | {summary}")
    return lines


# The language model's shaded characters (docs/javascripts/char-models.js), one span each, that axe's
# own pass leaves out (CONTRAST_READS): the contrast of each is axe's, read from its data, for one
# letter or digit per background colour the shading uses (one colour on one box reads the same: 38
# colours for 10,000 characters; axe reads no text in a space or a comma alone). axe judges only what is scrolled into its box's view: the box is
# scrolled to each sample not yet judged. Every sample must be judged, or the check says so.
SHADING_CONTRAST = """async () => {
    const last = new Map();  // the box opens at the prompt's end: most colours' last character is on view
    for (const span of document.querySelectorAll('.char-model__shaded [title]'))
        if (/[\\p{L}\\p{N}]/u.test(span.textContent)) last.set(span.style.backgroundColor, span);
    const samples = [...last.values()], judged = new Map();
    axe.reset();  // the rule's own selector again, not serious_violations' (axe.configure)
    for (let next; (next = samples.find(s => !judged.has(s))); ) {
        next.scrollIntoView({block: 'nearest'});
        const result = await axe.run({include: samples.filter(s => !judged.has(s))}, {runOnly: ['color-contrast'],
            resultTypes: ['passes', 'violations', 'incomplete'], elementRef: true});
        for (const node of [...result.passes, ...result.violations, ...result.incomplete].flatMap(rule => rule.nodes))
            for (const check of [...node.any, ...node.all, ...node.none])
                if (check.data && typeof check.data.contrastRatio === 'number') judged.set(node.element, check.data);
        if (!judged.has(next)) return {samples: samples.length, unjudged: next.outerHTML};
    }
    return {samples: samples.length, low: [...judged.values()]
        .filter(d => d.contrastRatio < parseFloat(d.expectedContrastRatio))
        .map(d => `${d.fgColor} on ${d.bgColor}: ${d.contrastRatio}:1, under ${d.expectedContrastRatio}`)};
}"""


def shading_contrast_problems(page) -> list[str]:
    """The shaded characters whose text reads under WCAG AA's contrast on their shading, one line each."""
    inject_axe(page)
    found = page.evaluate(SHADING_CONTRAST)
    assert found["samples"] and "unjudged" not in found, f"a shaded character axe does not judge: {found}"
    return found["low"]


def open_every_details(page) -> None:
    """Open every collapsed <details> and wait until a11y.js has re-checked what now scrolls."""
    checks = int(page.get_attribute("html", "data-lessonlib-checks"))
    opened = page.evaluate("() => [...document.querySelectorAll('article details:not([open])')]"
                           ".map(d => d.open = true).length")
    if opened:
        page.wait_for_function(f"() => +document.documentElement.dataset.lessonlibChecks >= {checks + opened}")
