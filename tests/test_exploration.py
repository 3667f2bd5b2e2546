"""Explorations' markup (lessonlib/engine/worker/exploration.py, public as lessonlib.exploration),
read as a browser would, without one: one alt text per frame, the frames as a sequence for readers
without JavaScript, a labelled control, a live region, and every text escaped. And the script and
stylesheet that drive it, which the plugin adds to every site (lessonlib/engine/assets/)."""
import base64
from html.parser import HTMLParser

import fresh_process
import matplotlib
from fixture_sites import make_site

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from lessonlib.engine.builder.plugin import ASSETS
from lessonlib.engine.builder.stylesheets import FOLDER
from lessonlib.engine.worker import svg
from lessonlib.engine.worker.session import ALT_LIMIT
from lessonlib.exploration import Frame, Table, exploration_html, frame_svg


@pytest.fixture(autouse=True)
def house_style():
    svg.reset()  # as every page starts: fixed SVG ids, so the same figure gives the same bytes
    yield
    svg.reset()


class Markup(HTMLParser):
    """Every element with its attributes, and the text inside each element by tag."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag not in ("img", "input", "option"):
            self._open.append(tag)

    def handle_endtag(self, tag):
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data):
        for tag in set(self._open):
            self.text.setdefault(tag, []).append(data)

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.elements if t == name]

    def with_class(self, name: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if name in (a.get("class") or "").split()]


def svg_of_line(slope: float) -> str:
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, slope])
    return frame_svg(fig)


def frames(n: int = 3, table: bool = False) -> list[Frame]:
    return [Frame(f"{s:.1f}", svg_of_line(s), f"The line rises by {s:.1f}.",
                  Table(["x", "y"], [["0", "0"], ["1", f"{s:.1f}"]]) if table else None)
            for s in (0.5 * k for k in range(1, n + 1))]


def test_frame_svg_is_deterministic_and_closes_the_figure():
    script = "import test_exploration as t\nt.svg.reset()\nprint(t.svg_of_line(1.0), end='')"
    assert svg_of_line(1.0) == fresh_process.output_of(script)
    assert plt.get_fignums() == []  # nothing left for the engine to publish as the block's figure


@pytest.mark.parametrize("kind", ["range", "radio"])
def test_one_image_per_frame_each_with_its_alt_and_label(kind):
    shown = frames(3)
    markup = exploration_html(shown, control="Slope", caption="A line from (0, 0).", kind=kind)
    assert all(line.strip() for line in markup.splitlines())  # one HTML block for Markdown
    page = Markup(markup)
    images = page.tags("img")
    assert [i["alt"] for i in images] == [f.alt for f in shown]
    for image, frame in zip(images, shown):  # the frame's own figure, whole in the markup (a notebook shows it)
        prefix = "data:image/svg+xml;base64,"
        assert image["src"].startswith(prefix) and base64.b64decode(image["src"][len(prefix):]).decode() == frame.svg
    items = page.with_class("lessonlib-exploration__frame")
    assert [i["data-label"] for i in items] == [f.label for f in shown]
    # no JavaScript: every frame in order, each labelled with its state
    assert page.text["ol"] and [f"Slope: {f.label}" in "".join(page.text["ol"]) for f in shown] == [True] * 3
    assert "hidden" in page.with_class("lessonlib-exploration__controls")[0]  # no dead control without JS
    assert [a.get("aria-live") for _, a in page.elements if "aria-live" in a] == ["polite"]
    assert "".join(page.text["figcaption"]) == "A line from (0, 0)."


def test_range_control_is_labelled_and_speaks_the_label():
    markup = exploration_html(frames(3), control="Slope", caption="c", start=1)
    page = Markup(markup)
    (slider,) = page.tags("input")
    assert slider["type"] == "range" and (slider["min"], slider["max"], slider["value"]) == ("0", "2", "1")
    (label,) = page.tags("label")
    assert label["for"] == slider["id"] and "".join(page.text["label"]) == "Slope"
    assert slider["aria-valuetext"] == "1.0"  # a screen reader says the state, not the index
    assert [o["label"] for o in page.tags("option")] == ["0.5", "1.0", "1.5"]


def test_radio_control_is_a_labelled_group():
    markup = exploration_html(frames(2), control="Slope", caption="c", kind="radio", start=1)
    page = Markup(markup)
    radios = page.tags("input")
    assert [r["type"] for r in radios] == ["radio", "radio"]
    assert len({r["name"] for r in radios}) == 1 and [("checked" in r) for r in radios] == [False, True]
    assert "".join(page.text["legend"]) == "Slope" and page.tags("fieldset")
    assert "".join(page.text["label"]).split() == ["0.5", "1.0"]  # each option inside its label


def test_numbers_on_demand_in_a_collapsed_table():
    page = Markup(exploration_html(frames(2, table=True), control="Slope", caption="c"))
    assert len(page.tags("details")) == 2 and all("open" not in d for d in page.tags("details"))
    assert [a["scope"] for a in page.tags("th")] == ["col"] * 4
    assert "1.0" in page.text["td"]


def test_two_explorations_have_their_own_ids():
    a = Markup(exploration_html(frames(2), control="Slope", caption="one"))
    b = Markup(exploration_html(frames(2), control="Slope", caption="two"))
    ids = [x["id"] for m in (a, b) for _, x in m.elements if "id" in x]
    assert len(ids) == len(set(ids))


def test_markup_escapes_text():
    sneaky = '<script>alert("x")</script> & \'co\''
    shown = [Frame(sneaky, "<svg/>", sneaky, Table([sneaky], [[sneaky]])), Frame("b", "<svg/>", "a < b")]
    markup = exploration_html(shown, control=sneaky, caption=f"{sneaky}!", kind="radio")
    assert "<script" not in markup and "a < b" not in markup
    page = Markup(markup)
    assert page.tags("img")[0]["alt"] == sneaky and page.tags("img")[1]["alt"] == "a < b"
    assert page.with_class("lessonlib-exploration__frame")[0]["data-label"] == sneaky
    assert "".join(page.text["legend"]) == sneaky and "".join(page.text["td"]) == sneaky


@pytest.mark.parametrize("bad, message", [
    (dict(frames=frames(1)), "at least two"),
    (dict(kind="select"), "kind"),
    (dict(start=3), "start"),
    (dict(caption=" "), "caption"),
    (dict(frames=[Frame("a", "", "x"), Frame("a", "", "y")]), "own label"),
    (dict(frames=[Frame("a", "", "x" * (ALT_LIMIT + 1)), Frame("b", "", "y")]), "alt text"),
    (dict(frames=[Frame("a", "", ""), Frame("b", "", "y")]), "alt text"),
    (dict(frames=[Frame("a", "", "The caption."), Frame("b", "", "y")], caption="The caption."), "not the caption"),
])
def test_refuses_what_readers_could_not_use(bad, message):
    arguments = dict(frames=frames(3), control="Slope", caption="c", kind="range", start=0) | bad
    with pytest.raises(ValueError, match=message):
        exploration_html(arguments.pop("frames"), **arguments)


EXPLORING = """\
# Exploring

```python exec hide-code html
import matplotlib.pyplot as plt
from lessonlib.exploration import Frame, exploration_html, frame_svg


def line(slope):
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, slope])
    return Frame(str(slope), frame_svg(fig), f"The line rises by {slope}.")


print(exploration_html([line(1), line(2)], control="Slope", caption="A line from (0, 0)."))
```
"""


def test_any_site_gets_the_engines_exploration_script_and_stylesheet_without_listing_them(tmp_path, build):
    """A site that is not this course, whose mkdocs.yml lists only a script of its own: the
    engine's stylesheets come before the site's, its page-view.js before exploration.js (which
    calls it) and both before the site's own script (which may call it too)."""
    site = make_site(tmp_path, {"index.md": "# Home\n", "exploring.md": EXPLORING})
    (site / "docs" / "own.js").write_text("lessonlibOnPageView(() => {});\n")
    assert "extra_" not in (site / "mkdocs.yml").read_text()
    (site / "mkdocs.yml").write_text((site / "mkdocs.yml").read_text() + "extra_javascript: [own.js]\n")
    result = build(site)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("lessonlib.css", "exploration.css", "page-view.js", "exploration.js"):
        assert (site / "site" / FOLDER / name).read_bytes() == (ASSETS / name).read_bytes(), name
    page = Markup((site / "site/exploring/index.html").read_text())
    assert page.with_class("lessonlib-exploration")  # the page has one for the script to drive
    styles = [a["href"] for a in page.tags("link") if a.get("rel") == "stylesheet"]
    scripts = [a["src"] for a in page.tags("script") if a.get("src")]
    engine = [f"../{FOLDER}/{name}" for name in ("lessonlib.css", "exploration.css", "page-view.js", "exploration.js")]
    assert engine[:2] == [href for href in styles if href in engine], styles
    assert [*engine[2:], "../own.js"] == [src for src in scripts if src in [*engine, "../own.js"]], scripts
