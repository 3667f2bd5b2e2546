"""The executor on small pages: outputs, figures, inline values, doctests and located errors.
What the build alone decides (how printed text, markup and inline values are rendered, which
links a figure keeps) is tested in process on outputs made here (`shown`), with no page run."""
from __future__ import annotations

import base64
import io
import random
import textwrap
from html.parser import HTMLParser

import markdown
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure as MatplotlibFigure

from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.builder.render import figure_files, fill_html_slots, render
from lessonlib.engine.config import SEED, Settings
from lessonlib.engine.worker.blocks import ParsedPage, parse_page
from lessonlib.engine.worker.errors import LessonError
from lessonlib.engine.worker.outputs import BlockOutput, Figure

PATH = "docs/fixture.md"


def run(text: str, **settings):
    return execute_page(textwrap.dedent(text), PATH, Settings(**settings))


def error_of(text: str, **settings) -> LessonError:
    with pytest.raises(LessonError) as info:
        run(text, **settings)
    return info.value


def shown(text: str, printed: list[str] | None = None, values: dict[str, str] | None = None,
          figures: dict[int, list[Figure]] | None = None) -> tuple[ParsedPage, list[BlockOutput], str]:
    """The page, its blocks' outputs and its Markdown as the build renders them, in process: each
    block printed `printed[i]` (nothing by default) and drew `figures[i]`; the inline values are
    `values`, as a page's process sends them (format(value, spec), so a str stays itself)."""
    page = parse_page(textwrap.dedent(text), PATH)
    printed = printed or [""] * len(page.blocks)
    blocks = [BlockOutput(text=t, figures=(figures or {}).get(i, [])) for i, t in enumerate(printed)]
    return page, blocks, render(page, blocks, values or {})


def svg_drawn(draw) -> str:
    """What a page's process makes of a figure (worker/svg.py's savefig), drawn here: draw(axes)."""
    figure = MatplotlibFigure()
    draw(figure.subplots())
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None})
    return buffer.getvalue()


TWO_BLOCKS = """\
```python exec
import sys
x = 41
print("out")
print("err", file=sys.stderr)
```

```python exec
print(x + 1)
```
"""


def test_blocks_share_one_namespace_and_stdout_and_stderr_are_captured():
    blocks = run(TWO_BLOCKS).outputs.blocks
    assert blocks[0].text == "out\nerr\n"
    assert blocks[1].text == "42\n"


def test_a_blocks_code_and_what_it_printed_are_shown():
    _, _, rendered = shown(TWO_BLOCKS, ["out\nerr\n", "42\n"])
    assert "```python\nimport sys" in rendered and "python exec" not in rendered
    assert "42" in rendered and "out\nerr" in rendered


def test_each_page_starts_from_the_seed_in_random_numpy_and_torch():
    """Drawn here after seeding with SEED: two pages agreeing with each other would not do, since
    every worker comes from one template, whose random state they would share unseeded."""
    draw = "import random\nimport numpy as np\nimport torch\nprint(random.random(), np.random.rand(), torch.rand(2).tolist())"
    printed = run(f"```python exec\n{draw}\n```\n").outputs.blocks[0].text
    with torch.random.fork_rng(devices=[]):
        state = random.getstate(), np.random.get_state()
        random.seed(SEED), np.random.seed(SEED), torch.manual_seed(SEED)
        expected = f"{random.random()} {np.random.rand()} {torch.rand(2).tolist()}\n"
        random.setstate(state[0]), np.random.set_state(state[1])
    assert printed == expected


def test_workers_also_cap_the_processes_an_experiment_may_start():
    """`workers: 1` runs everything one process at a time; more workers than cores give each
    page every core, no more."""
    page = "```python exec\nimport os\nfrom lessonlib.device import cpus\nprint(cpus(), len(os.sched_getaffinity(0)))\n```\n"
    one = run(page, workers=1).outputs.blocks[0].text.split()
    many = run(page, workers=64).outputs.blocks[0].text.split()
    assert one[0] == "1"
    assert many[0] == many[1]


def test_hide_code_and_hide_output():
    _, _, rendered = shown(
        """\
        ```python exec hide-code
        print("visible output")
        ```

        ```python exec hide-output
        print("invisible output")
        ```
        """, ["visible output\n", "invisible output\n"]
    )
    assert "visible output" in rendered and 'print("visible output")' not in rendered
    assert 'print("invisible output")' in rendered
    assert "invisible output\n" not in rendered.replace('print("invisible output")', "")


def test_unknown_option_is_an_error_at_the_fence():
    error = error_of("text\n\n```python exec hide-everything\npass\n```\n")
    assert str(error).startswith(f"{PATH}:3: unknown block option 'hide-everything'")


def test_figures_are_captured_as_deterministic_svg_with_alt_text():
    page = """\
    ```python exec alt="A rising line."
    import matplotlib.pyplot as plt
    plt.plot([0, 1], [0, 1])
    ```
    """
    first, second = run(page), run(page)
    figure = first.outputs.blocks[0].figures[0]
    assert figure.alt == "A rising line."
    assert figure.svg.lstrip().startswith("<?xml") and "<svg" in figure.svg
    assert "Date" not in figure.svg
    assert figure.svg == second.outputs.blocks[0].figures[0].svg


def test_a_figure_is_a_file_beside_the_page_shown_with_its_alt_text():
    svg = svg_drawn(lambda axes: axes.plot([0, 1], [0, 1]))
    page, blocks, rendered = shown('```python exec alt="A rising line."\npass\n```\n',
                                   figures={0: [Figure(svg, "A rising line.")]})
    (name, kept), = figure_files(page, blocks).items()
    assert kept == svg and name.startswith("figure-") and name.endswith(".svg")
    assert f'<img src="{name}" alt="A rising line.">' in fill_html_slots(rendered, page, blocks)


@pytest.mark.parametrize("options", ["", ' alt=""', " alt=' '", ' caption="Only a caption."'])
def test_a_figure_without_alt_text_is_an_error(options):
    error = error_of(f"# t\n\n```python exec{options}\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n```\n")
    assert str(error).startswith(f"{PATH}:3: this block makes a figure but has no alt text")


def test_inline_values_with_format_specs():
    result = run(
        """\
        ```python exec
        import math
        cos = math.cos(1.0)
        items = {"a": [1, 2, 3]}
        ```

        cos(1) is `{py} cos:.4f`, plain `{py} cos`, sliced `{py} items["a"][1:]`, big `{py} 1234567:,`.
        Literal syntax stays: `` `{py} cos` ``, and `code` is untouched.
        """
    )
    assert result.outputs.values == FORMATTED


FORMATTED = {"cos:.4f": "0.5403", "cos": "0.5403023058681398", 'items["a"][1:]': "[2, 3]", "1234567:,": "1,234,567"}


def test_inline_values_are_shown_as_text_and_literal_syntax_stays():
    _, _, rendered = shown("""\
        cos(1) is `{py} cos:.4f`, plain `{py} cos`, sliced `{py} items["a"][1:]`, big `{py} 1234567:,`.
        Literal syntax stays: `` `{py} cos` ``, and `code` is untouched.
        """, values=FORMATTED)
    assert "cos(1) is 0.5403, plain 0.5403023058681398, sliced \\[2, 3\\], big 1,234,567." in rendered
    assert "`` `{py} cos` ``" in rendered and "`code`" in rendered


def test_inline_values_are_escaped_text():
    _, _, rendered = shown('```python exec\ns = "<b>*x*</b>"\n```\n\nvalue: `{py} s`\n', values={"s": "<b>*x*</b>"})
    assert "value: &lt;b&gt;\\*x\\*&lt;/b&gt;" in rendered


# The site's Markdown (mkdocs.yml), where a value or an output could become markup.
SITE_MARKDOWN = ["admonition", "attr_list", "md_in_html", "tables", "toc", "pymdownx.details", "pymdownx.superfences"]


class _Markup(HTMLParser):
    """The tags and attributes a rendered page really has."""

    def __init__(self, page_html: str) -> None:
        super().__init__()
        self.tags, self.attributes = [], []
        self.feed(page_html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]


def site_html(text: str, printed: list[str] | None = None, values: dict[str, str] | None = None) -> str:
    page, blocks, rendered = shown(text, printed, values)
    return fill_html_slots(markdown.markdown(rendered, extensions=SITE_MARKDOWN), page, blocks)


HOSTILE = ["42\n{: onclick=\"alert(1)\" }", "42 {: onmouseover=\"alert(1)\" }", 'x" onmouseover="alert(1)',
           "x' onmouseover='alert(1)", "<script>alert(1)</script>", "\r\n<script>alert(1)</script>",
           "\x02wzxhzdk:0\x03"]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("where", [
    "In a paragraph: `{py} v`\n", "## A heading `{py} v`\n", "- a list item `{py} v`\n",
    "| a | b |\n| --- | --- |\n| `{py} v` | cell |\n", '<span title="`{py} v`">a span</span>\n',
    '!!! note "A note"\n\n    Inside: `{py} v`\n',
])
def test_an_inline_value_is_text_wherever_it_stands(value, where):
    page_html = site_html(f"```python exec\nv = {value!r}\n```\n\n{where}", values={"v": value})
    markup = _Markup(page_html)
    assert "script" not in markup.tags and not [a for a in markup.attributes if a.startswith("on")], page_html


@pytest.mark.parametrize("nest", ['!!! note "A note"\n\n', "- a list item\n\n"])
def test_a_nested_blocks_output_stays_in_its_fence_whatever_line_breaks_it_prints(nest):
    code = 'print("line one\\r<script>alert(1)</script>\\rline three\\r\\n<b>four</b>")'
    page_html = site_html(f"{nest}    ```python exec\n    {code}\n    ```\n",
                          ["line one\r<script>alert(1)</script>\rline three\r\n<b>four</b>\n"])
    markup = _Markup(page_html)
    assert "script" not in markup.tags and "b" not in markup.tags, page_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_html


def test_a_figures_links_keep_web_addresses_and_drop_scripts():
    urls = ["javascript:alert(1)", " JavaScript:alert(1)", "java&#115;cript:alert(1)", "data:text/html,x",
            "https://example.org/", "#a"]

    def bars(axes) -> None:
        for i, url in enumerate(urls):
            axes.bar([i], [1])[0].set_url(url)

    page, blocks, _ = shown('```python exec alt="Six bars." caption="Bars with links."\npass\n```\n',
                            figures={0: [Figure(svg_drawn(bars), "Six bars.", "Bars with links.")]})
    assert "javascript:alert(1)" in blocks[0].figures[0].svg  # drawn with every link
    (svg,) = figure_files(page, blocks).values()
    assert "https://example.org/" in svg and 'href="#a"' in svg
    assert "javascript" not in svg.lower() and "cript:" not in svg and "data:text" not in svg


def test_a_figures_raster_image_is_kept():
    page, blocks, _ = shown('```python exec alt="A heatmap." caption="Two by two."\npass\n```\n',
                            figures={0: [Figure(svg_drawn(lambda axes: axes.imshow([[0, 1], [1, 0]])), "A heatmap.",
                                                "Two by two.")]})
    (svg,) = figure_files(page, blocks).values()
    assert 'xlink:href="data:image/png;base64,' in svg


def test_an_inline_value_that_raises_names_its_own_line():
    error = error_of("```python exec\nx = 1\n```\n\nfine `{py} x`\n\nbroken `{py} y + 1`\n")
    assert str(error).startswith(f"{PATH}:7: inline value `y + 1`: NameError")


def test_an_inline_value_that_a_later_block_changes_fails_at_its_line_and_a_forward_one_is_fine():
    page = ("```python exec\nfactors = (0.9, 0.5)\n```\n\n"  # lines 1-3
            "first `{py} factors[0]`, later `{py} total`\n\n"  # line 5: `total` is made below
            "```python exec\ntotal = sum(factors)\nfactors = [0.1]\n```\n")
    error = error_of(page)
    assert str(error) == (f"{PATH}:5: inline value `{{py}} factors[0]` is 0.9 here but 0.1 once the page has run: "
                          "a later block changed what it reads; give the later value a name of its own")
    fixed = run(page.replace("factors = [0.1]", "slider = [0.1]"))
    assert "first 0.9, later 1.4" in fixed.markdown


def test_evaluating_an_inline_value_leaves_the_later_blocks_random_draws_as_they_were():
    """Inline values are evaluated where they stand and again at the end (the check above): an
    expression that draws a random number must not shift what the blocks after it draw."""
    draws = "```python exec\nprint(random.random(), np.random.rand(), torch.rand(()).item())\n```\n"
    start = "```python exec\nimport random\nimport numpy as np\nimport torch\n```\n\n"
    inline = "`{py} random.random() < 2`, `{py} np.random.rand() < 2`, `{py} torch.rand(()).item() < 2`\n\n"
    with_inline, without = run(start + inline + draws), run(start + draws)
    assert "True, True, True" in with_inline.markdown
    assert with_inline.outputs.blocks[1].text == without.outputs.blocks[1].text
    # a figure's alt text and caption are evaluated on the page only, not in its notebook
    figure = '```python exec alt="{random.random() < 2}" caption="Drawn: {torch.rand(()).item() < 2}"\n' \
             'import matplotlib.pyplot as plt\nplt.plot([0, 1])\n```\n\n'
    with_alt = run(start + figure + draws)
    assert with_alt.outputs.blocks[1].figures[0].alt == "True"
    assert with_alt.outputs.blocks[2].text == without.outputs.blocks[1].text


def test_block_output_with_html_stays_text():
    _, _, rendered = shown('```python exec\nprint("<script>alert(1)</script> ```")\n```\n',
                           ["<script>alert(1)</script> ```\n"])
    fence_start = rendered.index("````")  # longer than the backticks printed
    assert "<script>alert(1)</script> ```" in rendered[fence_start:]


def test_html_option_inserts_markup_for_widgets():
    page, blocks, rendered = shown('```python exec hide-code html\nprint("<div id=\'w\'>\\n\\n<b>hi</b></div>")\n```\n',
                                   ["<div id='w'>\n\n<b>hi</b></div>\n"])
    assert "```" not in rendered and "<b>hi</b>" not in rendered  # Markdown never parses it
    assert "<div id='w'>\n\n<b>hi</b></div>" in fill_html_slots(markdown.markdown(rendered), page, blocks)


def test_html_markup_in_a_collapsed_block_is_not_wrapped_in_a_paragraph():
    text = '??? note "More"\n\n    ```python exec hide-code html\n    print("<div id=\'w\'><b>*hi*</b></div>")\n    ```\n'
    page, blocks, rendered = shown(text, ["<div id='w'><b>*hi*</b></div>\n"])
    rendered = markdown.markdown(rendered, extensions=["admonition", "pymdownx.details", "pymdownx.superfences"])
    filled = fill_html_slots(rendered, page, blocks)
    assert "\n<div id='w'><b>*hi*</b></div>\n" in filled and "<p><div" not in filled


def test_the_svg_images_an_html_block_prints_inline_are_linked_as_files_beside_the_page():
    """An exploration prints its frames as data URIs (whole in a notebook); the site links each
    as a figure file, and leaves alone what is not base64 SVG text."""
    page = """\
    ```python exec hide-code html
    from lessonlib.exploration import Frame, exploration_html

    frames = [Frame(label, f'<svg xmlns="http://www.w3.org/2000/svg"><text>{label}</text></svg>', f"Frame {label}.")
              for label in ("a", "b")]
    print(exploration_html(frames, control="Letter", caption="One letter per frame."))
    print('<img src="data:image/svg+xml;base64,bm90!" alt="not base64">')
    ```
    """
    from lessonlib.exploration import Frame, exploration_html  # what the block prints, made here

    frames = [Frame(label, f'<svg xmlns="http://www.w3.org/2000/svg"><text>{label}</text></svg>', f"Frame {label}.")
              for label in ("a", "b")]
    printed = (exploration_html(frames, control="Letter", caption="One letter per frame.") + "\n"
               + '<img src="data:image/svg+xml;base64,bm90!" alt="not base64">\n')
    page, blocks, rendered = shown(page, [printed])
    files = figure_files(page, blocks)
    assert sorted(files.values()) == [f'<svg xmlns="http://www.w3.org/2000/svg"><text>{x}</text></svg>' for x in "ab"]
    filled = fill_html_slots(markdown.markdown(rendered), page, blocks)
    for name in files:
        assert name.startswith("figure-") and f'<img src="{name}" alt="Frame ' in filled
    assert filled.count("data:image/svg+xml;base64,") == 1 and "base64,bm90!" in filled  # left as printed
    assert blocks[0].text == printed  # the notebook's copy stays whole


def test_the_svg_images_a_timing_html_block_prints_are_named_as_measured_figures():
    """Set aside, like a timing block's own figures, when two builds are compared."""
    page = """\
    ```python exec hide-code html timing
    import base64

    svg = '<svg xmlns="http://www.w3.org/2000/svg"><text>0.3 s</text></svg>'
    print(f'<img src="data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}" alt="0.3 s">')
    ```
    """
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><text>0.3 s</text></svg>'
    page, blocks, rendered = shown(page, [f'<img src="data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}" '
                                          'alt="0.3 s">\n'])
    (name,) = figure_files(page, blocks)
    filled = fill_html_slots(markdown.markdown(rendered), page, blocks)
    assert name.startswith("timing-figure-") and f'<img src="{name}" alt="0.3 s">' in filled


def test_pycon_match_with_ellipsis_and_whitespace():
    run(
        """\
        ```pycon
        >>> list(range(20))
        [0, 1, ..., 19]
        >>> print("a   b")
        a b
        ```
        """
    )


def test_pycon_shares_the_page_namespace_both_ways():
    result = run("```python exec\na = 2\n```\n\n```pycon\n>>> b = a * 21\n>>> b\n42\n```\n\nb is `{py} b`\n")
    assert "b is 42" in result.markdown


def test_pycon_mismatch_names_the_example_line_with_a_diff():
    error = error_of("# t\n\n```pycon\n>>> 1 + 1\n2\n>>> 2 + 2\n5\n```\n")
    assert str(error).startswith(f"{PATH}:6: pycon output differs for >>> 2 + 2")
    assert "Expected:\n    5\nGot:\n    4" in error.detail


def test_pycon_exception_names_the_example_line():
    error = error_of("```pycon\n>>> 1\n1\n>>> undefined_name\n```\n")
    assert str(error).startswith(f"{PATH}:4: NameError")


NESTED = {
    "top level": ("```python exec\nx = 1\nraise ValueError('boom')\n```\n", 3),
    "admonition": ('!!! note "n"\n\n    ```python exec\n    x = 1\n    raise ValueError("boom")\n    ```\n', 5),
    "tab": ('=== "A"\n\n    text\n\n    ```python exec\n    raise ValueError("boom")\n    ```\n', 6),
    "list": ("- item\n\n    ```python exec\n    x = 1\n\n    raise ValueError('boom')\n    ```\n", 6),
}


@pytest.mark.parametrize("where", NESTED)
def test_errors_name_the_markdown_line_of_the_failing_statement(where):
    text, line = NESTED[where]
    error = error_of("# Title\n\n" + text)
    assert str(error).startswith(f"{PATH}:{line + 2}: ValueError: boom")
    assert 'File "docs/fixture.md"' in error.detail and "session.py" not in error.detail


def test_error_inside_a_called_function_names_the_page_line_and_keeps_the_callee():
    error = error_of("```python exec\ndef f():\n    return 1 / 0\n\nf()\n```\n")
    assert str(error).startswith(f"{PATH}:3: ZeroDivisionError")


STOPS = {  # exceptions that are not Exception: the page's fault all the same
    "a BaseException subclass": "class Stop(BaseException):\n    pass\n\nraise Stop('halt')\n",
    "KeyboardInterrupt": "x = 1\ny = 2\n\nraise KeyboardInterrupt('halt')\n",
}


@pytest.mark.parametrize("raising", STOPS)
def test_a_block_that_raises_a_base_exception_names_its_line(raising):
    error = error_of(f"# t\n\n```python exec\n{STOPS[raising]}```\n")
    assert str(error).startswith(f"{PATH}:7: ") and "halt" in str(error)


def test_an_inline_value_that_raises_a_base_exception_names_its_own_line():
    page = "```python exec\ndef f():\n    raise KeyboardInterrupt('halt')\n```\n\nvalue `{py} f()`\n"
    assert str(error_of(page)).startswith(f"{PATH}:6: inline value `f()`: KeyboardInterrupt: halt")


def test_an_exception_that_cannot_say_what_it_is_still_names_its_line():
    weird = "class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n\n"
    error = error_of(f"```python exec\n{weird}raise Weird()\n```\n")
    assert str(error).startswith(f"{PATH}:6: Weird: <its message could not be made: RuntimeError in __str__>")
    error = error_of(f"```python exec\n{weird}```\n\nvalue `{{py}} (_ for _ in ()).throw(Weird())`\n")
    assert str(error).startswith(f"{PATH}:8: inline value")
    assert "Weird: <its message could not be made" in str(error)


def test_failed_assert_shows_the_statement():
    error = error_of("```python exec\nx = 2\nassert x == 3\n```\n")
    assert str(error).startswith(f"{PATH}:3: assertion failed: assert x == 3")
    assert str(error_of("```python exec\nassert False, 'why'\n```\n")).startswith(f"{PATH}:2: AssertionError: why")


def test_syntax_error_is_located():
    error = error_of("# t\n\n```python exec\nx = 1\nx = = 2\n```\n")
    assert str(error).startswith(f"{PATH}:5: SyntaxError")


def test_a_hung_block_times_out_at_its_line():
    text = "```python exec timeout=0.3\nimport time\nwhile True:\n    time.sleep(0.01)\n```\n"
    error = error_of(text, timeout=60)
    assert str(error).startswith(f"{PATH}:4: block timed out after 0.3 s")
    error = error_of("```python exec\nwhile True:\n    pass\n```\n", timeout=0.3)
    assert "timed out after 0.3 s" in str(error)


def test_execution_off_shows_code_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    result = run(f"```python exec\nopen({str(marker)!r}, 'w')\n```\n\nvalue `{{py}} 1 + 1`\n", execute=False)
    assert not marker.exists() and result.outputs is None
    assert "```python\nopen(" in result.markdown and "value `1 + 1`" in result.markdown


def test_splitting_finds_nested_fences_and_ignores_other_fences():
    page = parse_page(
        "```markdown\n`{py} not_evaluated`\n```python exec\n```\n\n~~~pycon\n>>> 1\n1\n~~~\n\n- item\n\n    ```python exec\n    y\n    ```\n",
        PATH,
    )
    assert [b.kind for b in page.blocks] == ["pycon", "exec"]
    assert page.blocks[1].first_line == 14 and page.blocks[1].indent == "    "
    assert page.inlines == []


def test_keep_going_runs_past_failed_asserts_and_names_every_one():
    page = """\
    ```python exec
    x = 1
    assert x == 2, f"x is {x}"
    y = 2
    ```

    ```python exec
    def check(v):
        assert v > 5
    check(y)
    print("ran on")
    ```

    ```python exec
    assert x + y == 3, "this one holds"
    ```
    """
    assert error_of(page).line == 3  # without keep_going the first failure stops the page
    error = error_of(page, keep_going=True)
    assert error.line == 3 and error.message == "2 asserts failed"
    assert error.detail.splitlines() == [f"{PATH}:3: x is 1", f"{PATH}:9: assertion failed: assert v > 5"]


def test_keep_going_names_the_failed_asserts_before_an_error_that_stops_the_page():
    error = error_of("```python exec\nassert 1 == 2, 'first'\nraise ValueError('then this')\n```\n",
                     keep_going=True)
    assert error.line == 3 and error.message == "ValueError: then this"
    assert error.detail.startswith(f"{PATH}:2: earlier, first\n")


def test_keep_going_gives_a_passing_page_the_same_outputs():
    page = "```python exec\nimport torch\nassert True\nprint(torch.rand(2).tolist())\n```\n"
    assert run(page, keep_going=True).outputs == run(page).outputs


def test_every_page_flushes_subnormals_to_zero():
    page = "```python exec\nimport torch\nprint((torch.tensor([1e-30]) * 1e-15).item())\n```\n"
    assert run(page).outputs.blocks[0].text == "0.0\n"


CHECKED = textwrap.dedent("""\
    # Title

    ```python exec
    x = 2
    ```

    ## Squares {#squares}

    Two squared is `{py} x * x`.

    ```python exec check
    assert x * x == 4, "the square"
    ```

    ```python exec
    y = 3
    print("y is", y)
    ```
    """)


def test_check_blocks_run_in_place():
    page = CHECKED
    assert "y is 3" in run(page).outputs.blocks[2].text  # the blocks after it run on
    failing = error_of(page.replace("== 4", "== 5"))
    assert failing.line == 12 and failing.message == "AssertionError: the square"


def test_a_check_block_is_shown_only_at_the_end_under_its_section():
    """As the build renders a run page, in process."""
    _, _, rendered = shown(CHECKED, ["", "", "y is 3\n"], {"x * x": "4"})
    before, appendix = rendered.split('??? info "How this page checks its claims"')
    assert 'assert x * x == 4' not in before and "Two squared is 4." in before
    assert "y is 3" in before
    assert "In *Squares*:" in appendix and '    assert x * x == 4, "the square"' in appendix


def test_a_check_block_that_prints_or_draws_is_an_error():
    assert "must not print or draw" in error_of("```python exec check\nprint(1)\n```\n").message
    drawing = "```python exec check\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n```\n"
    assert "must not print or draw" in error_of(drawing).message


def test_a_page_without_check_blocks_has_no_list_of_checks():
    assert "How this page checks" not in shown("```python exec\nassert True\n```\n")[2]


def test_an_unclosed_fence_is_located_at_its_opening_line():
    page = "# t\n\nIntro.\n\n```python exec\nx = 1\n\nProse the block swallowed: it is not code.\n"
    assert str(error_of(page)).startswith(f"{PATH}:5: this block's fence is never closed")


def test_the_output_limit_covers_inline_values_and_error_messages():
    big = "```python exec\nbig = 'x' * 5000\n```\n\nvalue `{py} len(big)`, then `{py} big`\n"
    assert str(error_of(big, output_limit_kb=1)).startswith(f"{PATH}:5: inline value `big` has 5,000 characters, "
                                                           "more than the output limit of 1 KB")
    error = str(error_of("```python exec\nraise ValueError('y' * 50_000)\n```\n", output_limit_kb=1))
    assert error.startswith(f"{PATH}:2: ValueError: yyy") and len(error) < 2_000
    assert "cut: 50,000 characters" in error


def test_an_inline_value_that_hangs_times_out_at_its_own_line():
    page = ("```python exec\nclass Loop:\n    def __format__(self, spec):\n        while True:\n            pass\n\n"
            "x = Loop()\n```\n\nThe value `{py} x` never comes.\n")
    assert str(error_of(page, timeout=0.5)).startswith(f"{PATH}:10: ")
