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


def serious_violations(page) -> list[str]:
    """axe-core's violations of impact serious or critical on the page as it is now, one line each."""
    from axe_playwright_python.sync_playwright import Axe

    page.evaluate(SAMPLE_TOKENS)
    runs = [({"include": [["html"]]}, {"rules": {"color-contrast": {"enabled": False}}}),  # every rule but contrast
            # contrast: everything but code, and the code's samples (an include inside an exclude counts)
            ({"include": [["html"], ["[data-axe-sample]"]], "exclude": [[".highlight"]]}, {"runOnly": ["color-contrast"]})]
    axe, violations = Axe(), []
    for context, options in runs:
        violations += axe.run(page, context=context, options={"resultTypes": ["violations"], **options}).response["violations"]
    lines = []
    for v in violations:
        if v["impact"] in ("serious", "critical"):
            where = "; ".join(" ".join(n["target"]) for n in v["nodes"][:3])
            summary = v["nodes"][0].get("failureSummary", "").replace("\n", " ")
            lines.append(f"{v['impact']} {v['id']} ({len(v['nodes'])}x): {v['help']} | {where} | {summary}")
    return lines


def open_every_details(page) -> None:
    """Open every collapsed <details> and wait until a11y.js has re-checked what now scrolls."""
    checks = int(page.get_attribute("html", "data-lessonlib-checks"))
    opened = page.evaluate("() => [...document.querySelectorAll('article details:not([open])')]"
                           ".map(d => d.open = true).length")
    if opened:
        page.wait_for_function(f"() => +document.documentElement.dataset.lessonlibChecks >= {checks + opened}")
