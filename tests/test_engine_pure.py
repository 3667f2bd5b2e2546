"""The engine's pure functions, in process and with no page run: parsing a page, rendering it
back to Markdown, the checks appendix, the notebook export, the claims lint and the page key.
Large outputs are snapshots (syrupy, tests/__snapshots__/test_engine_pure.ambr): a change to what
a reader gets shows as a diff to review, and `pytest --snapshot-update` records an intended one."""
from __future__ import annotations

from dataclasses import asdict

from nbformat import v4
from site_support import indexed_text

from lessonlib.engine.builder import claims
from lessonlib.engine.builder.cache import page_key
from lessonlib.engine.builder.notebook import to_notebook
from lessonlib.engine.builder.render import checks_appendix, checks_out_of_search, render
from lessonlib.engine.worker.blocks import parse_page

PATH = "docs/page.md"
PAGE = '''\
# A page

Some prose, and a value: `{py} x + 1`.

```python exec
x = 41
print("forty-one")
```

## Why it holds {#why}

The value, `{py} x + 1`, is larger than forty, since one is added to forty-one.

```python exec check
from lessonlib import claim
assert x + 1 > 40, claim("is larger than forty")
```

```python exec hide-code alt="A line that rises from 0 to 1." caption="A rising line."
import matplotlib.pyplot as plt
plt.plot([0, 1])
```

??? note "Going deeper"

    ```python exec
    y = x * 2
    ```
'''


def test_a_page_parses_into_its_blocks_inlines_and_prose(snapshot):
    assert asdict(parse_page(PAGE, PATH)) == snapshot


def test_a_page_that_has_not_run_shows_its_code_and_its_inline_expressions_as_code(snapshot):
    assert render(parse_page(PAGE, PATH), None, None) == snapshot


def test_the_checks_appendix_quotes_each_claim_with_its_values_above_the_code_that_checks_it(snapshot):
    appendix = checks_appendix(parse_page(PAGE, PATH), {"x + 1": "42"})
    assert "> The value, 42, is larger than forty, since one is added to forty-one." in appendix
    assert appendix == snapshot


def test_search_indexes_the_page_but_not_its_checks_appendix():
    import markdown

    markup = render(parse_page(PAGE, PATH), None, None)
    html = markdown.markdown(markup, extensions=["admonition", "pymdownx.details", "pymdownx.superfences"])
    indexed = indexed_text(checks_out_of_search(html))
    assert "is larger than forty, since one is added to forty-one" in indexed  # the sentence, where it stands
    assert "Each sentence quoted below" not in indexed and "assert x + 1 &gt; 40" not in indexed


def test_the_exported_notebook_is_a_setup_cell_then_the_pages_prose_and_code_in_order(snapshot):
    assert v4.writes(to_notebook(parse_page(PAGE, PATH), None)) == snapshot


def test_the_claims_lint_binds_a_quoted_sentence_and_names_an_unquoted_one():
    text = PAGE + "\nIt is smaller than a hundred.\n\nIt is never odd. <!-- not a claim: a plan -->\n"
    found = claims.binding(parse_page(text, PATH), text)
    assert (found.flagged, found.bound, found.marked) == (3, 1, 1), found
    assert [s.text for s in found.unbound] == ["It is smaller than a hundred."] and not found.wrong


def test_the_key_follows_the_code_the_path_and_the_environment_not_the_prose():
    key = page_key(parse_page(PAGE, PATH), "environment")
    assert page_key(parse_page(PAGE.replace("Some prose", "Other words"), PATH), "environment") == key
    assert page_key(parse_page(PAGE.replace("x = 41", "x = 40"), PATH), "environment") != key
    assert page_key(parse_page(PAGE.replace("x + 1", "x + 2"), PATH), "environment") != key  # an inline value
    assert page_key(parse_page(PAGE, "docs/other/page.md"), "environment") != key  # another working folder
    assert page_key(parse_page(PAGE, PATH), "another environment") != key
