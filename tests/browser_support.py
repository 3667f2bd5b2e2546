"""What the browser tests share: Debian's Chromium, the viewports and palettes, a Reader (one tab
that records console errors and the hosts it contacts) and axe-core's serious
violations. The fixtures that make readers (base_url, new_reader, reader) are in conftest.py."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = Path("/usr/bin/chromium")
DESKTOP = {"width": 1280, "height": 900}
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


# Highlighted code, math and Markdown's tables are most of a lesson's elements (a span per code token,
# an element per MathML token: of the 2,600 elements axe's contrast check read on one lesson, 1,600
# were math), and that check costs per element. Its verdict on a text rests on the text's colour, size
# and weight and on the colours painted behind it, so there it reads one element per such look (a
# token in a heading, a link, a subscript or a tinted box looks otherwise); every other rule reads all.
# Nothing there is drawn with opacity, a text shadow or a picture behind, which a look leaves out; nor
# is a widget's table sampled: it may paint behind its text from a sibling, which no ancestor shows.
SAMPLED = ".highlight *, math *, table:not([class]) *"

# axe judges no text of one character, nor one of symbols alone, nor one not drawn (as in a closed
# <details>): the sample is the drawn element whose own text has the most letters and digits.
SAMPLE = """selector => {
    const behind = new Map();  // element -> the colours painted behind its text, translucent layers included
    const background = element => {
        if (!element) return '';
        if (!behind.has(element)) {
            const own = getComputedStyle(element).backgroundColor, under = () => background(element.parentElement);
            behind.set(element, own === 'rgba(0, 0, 0, 0)' ? under() : own.startsWith('rgba(') ? `${own} over ${under()}` : own);
        }
        return behind.get(element);
    };
    const letters = element => [...element.childNodes].filter(n => n.nodeType === Node.TEXT_NODE)
        .reduce((sum, n) => sum + (n.data.match(/[\\p{L}\\p{N}]/gu) || []).length, 0);
    const best = new Map();
    document.querySelectorAll('[data-axe-sample]').forEach(element => { delete element.dataset.axeSample; });  // an earlier run's
    for (const element of document.querySelectorAll(selector)) {
        if (!element.checkVisibility()) continue;
        const style = getComputedStyle(element);
        const look = [style.color, style.fontSize, style.fontWeight, background(element)].join(' ');
        if (!best.has(look) || letters(element) > letters(best.get(look))) best.set(look, element);
    }
    best.forEach(element => { element.dataset.axeSample = ''; });
}"""

# What axe's contrast rule reads: everything but code blocks, math and Markdown's tables, and the
# samples. One axe run does every rule (a second run for contrast alone cost each view a second walk
# of the whole page): the contrast rule's own selector leaves the rest out. Also left out: the
# language model's shaded characters (one per span), which axe cannot judge - one character is too
# short a text, and a 1.1:1 shading passes it as "incomplete" - tests/test_browser_model.py checks
# their contrast itself.
CONTRAST_READS = (":not(.highlight, .highlight *, math, math *, table:not([class]), table:not([class]) *,"
                  " .char-model__shaded [title]), [data-axe-sample]")

# axe gives a violation its rule's impact (finalizeRuleResult), so a rule of minor or moderate impact
# never yields a serious one: those rules are not run (one of them, "region", cost a fifth of a run).
AXE_RUN = """async ([selector, within]) => {
    axe.configure({rules: [{id: 'color-contrast', selector}]});
    const rules = Object.fromEntries(axe._audit.rules.filter(rule => ['minor', 'moderate'].includes(rule.impact))
        .map(rule => [rule.id, {enabled: false}]));
    return (await axe.run(within || document, {resultTypes: ['violations'], rules})).violations;
}"""


def inject_axe(page) -> None:
    """axe-core into the page on view, once (a new page view needs it again)."""
    from axe_playwright_python.sync_playwright import Axe

    if not page.evaluate("() => typeof axe === 'object'"):
        page.evaluate(Axe().axe_script)


def serious_violations(page, within: str | None = None) -> list[str]:
    """axe-core's violations of impact serious or critical on the page as it is now, one line each:
    on the whole page, or on the part `within` selects (a test that changed that part alone)."""
    inject_axe(page)
    page.evaluate(SAMPLE, SAMPLED)
    violations = page.evaluate(AXE_RUN, [CONTRAST_READS, within])
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
