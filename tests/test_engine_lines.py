"""The page lines a page shows stay true when its prose moves its blocks: the cache keys on the
page's code, not its prose, so a page served from it has its outputs' page lines (a traceback's
frames, a warning's location) moved with their blocks (lessonlib.engine.builder.render.relocated)."""
from __future__ import annotations

import textwrap

from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.builder.render import relocated
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs

PATH = "docs/lines.md"
PAGE = """\
# Errors, shown

```python exec
import traceback, warnings

def fail():
    raise ValueError("no")
```

Calling it:

```python exec
try:
    fail()
except ValueError:
    traceback.print_exc()
warnings.warn("careful")
```
"""
# Prose added above the first block (3 lines) and between the blocks (2 more).
MOVED = PAGE.replace("# Errors, shown\n", "# Errors, shown\n\nA new paragraph,\non two lines.\n").replace(
    "Calling it:\n", "Calling it,\nwhich raises:\n\nHere.\n")


def test_a_cached_pages_tracebacks_and_warnings_name_the_lines_its_blocks_stand_at_now(tmp_path):
    (tmp_path / "docs").mkdir()
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")
    first = execute_page(PAGE, PATH, settings).outputs.blocks[1].text
    assert f'File "{PATH}", line 14, in <module>' in first and f'File "{PATH}", line 7, in fail' in first
    assert f"{PATH}:17: UserWarning: careful" in first

    moved = execute_page(MOVED, PATH, settings)
    assert moved.from_cache
    shown = moved.outputs.blocks[1].text
    assert f'File "{PATH}", line 20, in <module>' in shown and f'File "{PATH}", line 10, in fail' in shown
    assert f"{PATH}:23: UserWarning: careful" in shown
    assert f'File "{PATH}", line 20, in <module>' in moved.markdown and "line 14" not in moved.markdown

    back = execute_page(PAGE, PATH, settings)  # the entry keeps the lines it was made at: moved back, as first
    assert back.from_cache and back.outputs.blocks[1].text == first


def test_relocated_moves_each_page_line_with_its_block_and_nothing_else():
    old, new = parse_page(PAGE, PATH), parse_page(MOVED, PATH)
    text = (f'  File "{PATH}", line 14, in <module>\n  File "{PATH}", line 7, in fail\n{PATH}:17: UserWarning\n'
            f'  File "docs/other.md", line 14\nother{PATH}:7: not this page\n{PATH}:2: a line of prose\n'
            "line 14, and 7 and 17, as words\n")
    outputs = PageOutputs([BlockOutput(""), BlockOutput(text)], {"err": text}, fences=[b.start for b in old.blocks])

    moved = relocated(outputs, new)
    assert moved.blocks[1].text == moved.values["err"] == text.replace("line 14, in", "line 20, in") \
        .replace("line 7, in", "line 10, in").replace(f"{PATH}:17:", f"{PATH}:23:")
    assert moved.fences == [b.start for b in new.blocks]
    assert relocated(moved, new) is moved, "made where the blocks stand: nothing to move"
    fresh = PageOutputs([BlockOutput(""), BlockOutput(text)], {})  # a run's own outputs: made as the page stands
    assert relocated(fresh, new) is fresh


def test_a_block_nested_in_an_admonition_moves_too():
    """relocated, in process, on a nested block's warning line (a nested block's lines as a run
    names them: test_engine_run's errors at the Markdown line, admonition)."""
    page = textwrap.dedent("""\
        !!! note

            ```python exec
            import warnings
            warnings.warn("nested")
            ```
        """)
    old, new = parse_page(page, PATH), parse_page("Above.\n\n" + page, PATH)
    printed = f"{PATH}:5: UserWarning: nested\n  warnings.warn(\"nested\")\n"
    outputs = PageOutputs([BlockOutput(printed)], {}, fences=[b.start for b in old.blocks])
    assert relocated(outputs, new).blocks[0].text == printed.replace(f"{PATH}:5:", f"{PATH}:7:")
