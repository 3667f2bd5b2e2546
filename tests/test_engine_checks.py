"""The checks that keep the promise "every number comes from code": numerals typed in prose,
raw TeX left in the rendered text, literals and timing blocks marked as such."""
from __future__ import annotations

import markdown
import pytest
from fixture_sites import make_site

from lessonlib.engine.builder.mathml import leftover_tex, source_line
from lessonlib.engine.builder.numerals import hand_typed_numerals, hidden_values
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.builder.render import (
    DATA_TITLE,
    TIMING_CLASS,
    figure_files,
    fill_html_slots,
    html_data_table,
    markdown_table,
    render,
)
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.errors import LessonError
from lessonlib.engine.worker.outputs import DataTable
from lessonlib.engine.worker.session import BlockOutput, Figure

PROSE = """\
# Results

The RNN has 64 hidden units and `{py} params:,` parameters; seq2seq in float64.
We trained for 1,600 steps, $H = 32$, and in `{lit} 1997` the LSTM appeared.

```python exec
steps = 600  # numbers in code are code
```

| model | seeds |
|---|---|
| RNN | 3 |

!!! note "Figure 2"
    shown at 0.5 scale
"""


def test_numerals_in_prose_are_found_with_their_lines_and_nothing_else():
    found = [(n.line, n.text) for n in hand_typed_numerals(PROSE)]
    assert found == [(3, "64"), (4, "1,600"), (12, "3"), (14, "2"), (15, "0.5")]


HIDDEN = """\
```python exec hide-code
import math
from lessonlib.experiments import cost
acc = 0.93
def helper():
    inner = 1
[row for row in range(3)]
```

Imported: `{py} math.pi:.2f`, `{py} cost.__name__`; computed out of sight: `{py} acc:.0%`.
Local names are not the block's: `{py} inner if False else row if False else 0`.

```python exec
acc = 0.5
```

Shown now: `{py} acc`.

```python exec hide-code caption="Drawn at {width} and {acc}; {{literal}}"
width = 3
```
"""


def test_a_value_a_hidden_block_computed_is_found_and_imports_and_shown_values_are_not():
    found = [(v.line, v.source, v.name, v.block_line) for v in hidden_values(HIDDEN)]
    assert found == [(10, "acc:.0%", "acc", 1), (19, "width", "width", 19)]
    assert "computed in the hidden block at line 1" in str(hidden_values(HIDDEN)[0])


@pytest.mark.parametrize("option", ["alt", "caption"])
def test_numerals_typed_in_alt_text_or_a_caption_are_found_and_their_fields_are_not(option):
    page = f'```python exec {option}="Falls to {{acc:.0%}} at {{n}} digits, not 90% ({{{{sic}}}} {{\'1997\'}})."\nx = 1\n```\n'
    assert [(n.line, n.text, n.in_caption) for n in hand_typed_numerals(page)] == [(1, "90", True)]


def test_alt_text_and_caption_state_the_values_the_block_computed(tmp_path):
    (tmp_path / "docs").mkdir()
    page = ('```python exec alt="Accuracy falls to {acc:.0%} at {n} digits {{sic}}." caption="Accuracy ({n} digits)."\n'
            'import matplotlib.pyplot as plt\nacc, n = 0.125, 16\nplt.plot([1, 2])\n```\n')
    result = execute_page(page, "docs/p.md", Settings(root=tmp_path))
    figure = result.outputs.blocks[0].figures[0]
    assert (figure.alt, figure.caption) == ("Accuracy falls to 12% at 16 digits {sic}.", "Accuracy (16 digits).")
    for option in ("alt", "caption"):
        with pytest.raises(LessonError, match=rf"^docs/p.md:1: {option}: NameError"):
            execute_page(page.replace("{n}", "{m}"), "docs/p.md", Settings(root=tmp_path))
        page = page.replace("{n} digits {{sic}}", "16 digits {{sic}}")  # the alt text's field fixed, the caption's next


def test_a_figure_shows_its_alt_text_and_its_caption_under_it():
    page = parse_page('```python exec alt="{acc:.0%}" caption="{n}"\npass\n```\n', "docs/p.md")
    outputs = [BlockOutput("", [Figure("<svg/>", "Accuracy falls to 12% at 16 digits {sic}.", "Accuracy (16 digits).")])]
    assert 'alt="Accuracy falls to 12% at 16 digits {sic}."><figcaption>Accuracy (16 digits).</figcaption>' \
        in fill_html_slots(render(page, outputs, {}), page, outputs)


@pytest.mark.parametrize("options, problem", [
    ('caption="Rises."', "has no alt text"),
    ('alt="Rises." caption="Rises."', "the alt text equals the caption"),
    ('alt="{\'x\' * 151}"', "has 151 characters, more than 150"),
])
def test_alt_text_states_the_finding_briefly_and_is_not_the_caption(tmp_path, options, problem):
    (tmp_path / "docs").mkdir()
    page = f"```python exec {options}\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n```\n"
    with pytest.raises(LessonError, match=problem):
        execute_page(page, "docs/p.md", Settings(root=tmp_path))


def test_figure_data_is_offered_as_a_collapsed_table_under_the_figure(tmp_path):
    (tmp_path / "docs").mkdir()
    page = ('```python exec alt="The line rises."\nimport matplotlib.pyplot as plt\nimport torch\nimport lessonlib\n'
            'xs, ys = [1, 2, 3], torch.tensor([0.5, 1 / 3, 2e-9])\nplt.plot(xs, ys)\n'
            'lessonlib.figure_data({"x": xs, "y|value": ys})\n```\n')
    result = execute_page(page, "docs/p.md", Settings(root=tmp_path))
    (table,) = result.outputs.blocks[0].tables
    assert table.columns == ["x", "y|value"] and table.rows == [["1", "0.5"], ["2", "0.333"], ["3", "2e-09"]]
    counted = page.replace('{"x": xs, "y|value": ys}', '{"x": [1000, 2, 3], "y": ys}, fmt=",.2f"')
    (table,) = execute_page(counted, "docs/p.md", Settings(root=tmp_path)).outputs.blocks[0].tables
    assert table.rows == [["1,000", "0.50"], ["2", "0.33"], ["3", "0.00"]], "whole numbers stay whole"
    with pytest.raises(LessonError, match="call it in the block that draws the figure"):
        execute_page("```python exec\nimport lessonlib\nlessonlib.figure_data({'x': [1]})\n```\n", "docs/p.md",
                     Settings(root=tmp_path))
    with pytest.raises(LessonError, match="every column needs as many values"):
        execute_page(page.replace('"x": xs', '"x": xs[:2]'), "docs/p.md", Settings(root=tmp_path))


def test_a_figures_data_is_a_collapsed_table_under_it():
    page = parse_page('```python exec alt="The line rises."\npass\n```\n', "docs/p.md")
    table = DataTable(["x", "y|value"], [["1", "0.5"], ["2", "0.333"], ["3", "2e-09"]])
    outputs = [BlockOutput("", [Figure("<svg/>", "The line rises.")], [table])]
    assert ('<details class="note">\n<summary>The data in this figure</summary>\n<table>\n<thead>\n<tr>\n<th>x</th>\n'
            '<th>y|value</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n<td>0.5</td>\n</tr>\n') \
        in fill_html_slots(render(page, outputs, {}), page, outputs)


def test_check_command_lists_numerals_and_fails_only_when_there_are_some(tmp_path, lessonlib_cli):
    page = tmp_path / "page.md"
    page.write_text(PROSE)
    result = lessonlib_cli(tmp_path, "check", str(page))
    assert result.returncode == 1
    assert f"{page.as_posix()}:3: numeral '64' typed in prose" in result.stdout
    clean = tmp_path / "clean.md"
    clean.write_text("Every number is `{py} n` or `{lit} 1997`.\n")
    result = lessonlib_cli(tmp_path, "check", str(clean))
    assert result.returncode == 0 and result.stdout == ""


def test_a_literal_renders_as_plain_text_with_or_without_execution():
    page = parse_page("Since `{lit} 1997*`, n = `{py} n`.\n", "docs/p.md")
    assert render(page, None, None) == "Since 1997\\*, n = `n`.\n"
    assert render(page, [], {"n": "5"}) == "Since 1997\\*, n = 5.\n"


def test_a_data_table_is_the_html_markdown_makes_of_it():
    # written as HTML, not parsed from Markdown on every build: it must come out as Markdown would have made it
    table = DataTable(["x < y", "a|b", "*c*"], [["1 & 2", "`3`", "\"4_5_\""], ["<b>", "\\", "[6]"]])
    collapsed = f'??? note "{DATA_TITLE}"\n\n' + "".join(f"    {row}\n" for row in markdown_table(table).split("\n"))
    assert html_data_table(table) == markdown.markdown(collapsed, extensions=["pymdownx.details", "tables"])


def test_timing_block_outputs_are_marked_for_readers_and_for_comparisons():
    page = parse_page('```python exec timing alt="Time per step."\nt = 1\n```\n', "docs/p.md")
    outputs = [BlockOutput("0.12 ms\n", [Figure("<svg/>", "Time per step.")])]
    markdown = fill_html_slots(render(page, outputs, {}), page, outputs)
    assert f".{TIMING_CLASS}" in markdown and "vary from run to run" in markdown
    assert f'class="lessonlib-figure {TIMING_CLASS}"' in markdown
    (name,) = figure_files(page, [BlockOutput("", [Figure("<svg/>", "Time per step.")])])
    assert name.startswith("timing-figure-") and f'src="{name}"' in markdown  # set aside when builds are compared


def test_leftover_tex_is_found_in_text_and_unknown_commands_in_rendered_math():
    html = (
        '<p>beyond $n = $ 768 tokens, <code>$x$</code>, <span class="arithmatex"><math><mi>x</mi><mo>$</mo></math>'
        "</span><br> \\frac{a}{b} and \\( x \\)</p><pre>\\alpha $y$</pre><p>costs $5</p>"
        "<p><math><mi>\\qqquadout</mi></math></p>"
    )
    assert leftover_tex(html) == ["$n = $", "\\frac", "\\(", "\\)", "\\qqquadout"]
    assert source_line("$n = $", ["# T", "", "beyond $n = $ `{py} n` tokens"]) == 3
    assert source_line("\\qqquadout", ["# T", "$$x \\qquad \\text{out}$$"]) == 2


def test_strict_build_fails_on_raw_tex_naming_the_markdown_line(tmp_path, build):
    page = "# Tokens\n\n```python exec\nn = 768\n```\n\nBeyond $n = $ `{py} n` tokens the cost grows.\n"
    site = make_site(tmp_path, {"index.md": "# Home\n", "tex.md": page})
    config = site / "mkdocs.yml"
    config.write_text(config.read_text().replace("attr_list]", "attr_list, {pymdownx.arithmatex: {generic: true}}]"))
    result = build(site)
    assert result.returncode != 0
    assert "docs/tex.md:7: raw TeX in the page's text: '$n = $'" in result.stderr

    (site / "docs" / "tex.md").write_text(page.replace("$n = $ `{py} n`", "$n =$ `{py} n`"))
    fixed = build(site)
    assert fixed.returncode == 0, fixed.stderr
