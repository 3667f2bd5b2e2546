"""The machinery in view: a source block shows a library object's code as the page runs it, and a
block's memo="..." option memoizes the calls it names without a wrapper in its code."""
from __future__ import annotations

from pathlib import Path

import pytest
from fixture_sites import make_site
from notebook_cells import execute, printed

from lessonlib.engine.builder.claims import binding
from lessonlib.engine.builder.notebook import to_notebook
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.errors import LessonError
from lessonlib.engine.worker.shown import NotFound, source_of

PATH = "docs/page.md"
SHOWN = '# Shown\n\nThe code:\n\n```python source="shownmod:twice"\n```\n\nAfter.\n'


def shown_module(x: str = "2 * x") -> str:
    return f'"""A helper the page shows."""\n\n\ndef twice(x):\n    """Doubles."""\n    return {x}\n'


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, cache_dir=tmp_path / "cache")


def test_a_source_block_shows_the_objects_code_under_its_file_and_line_and_an_edit_shows_again(tmp_path, settings):
    (tmp_path / "docs" / "shownmod.py").write_text(shown_module())
    first = execute_page(SHOWN, PATH, settings)
    assert ('```python title="shownmod.py, line 4"\ndef twice(x):\n    """Doubles."""\n    return 2 * x\n```\n'
            in first.markdown)
    assert "The code:" in first.markdown and "After." in first.markdown
    assert execute_page(SHOWN, PATH, settings).from_cache

    (tmp_path / "docs" / "shownmod.py").write_text(shown_module("x + x"))
    edited = execute_page(SHOWN, PATH, settings)
    assert not edited.from_cache and "    return x + x\n```" in edited.markdown


def test_a_library_method_is_shown_dedented_from_its_package_file():
    """source_of, in process, as a source block's process calls it (the block: the test above)."""
    shown = source_of("lessonlib.engine.worker.errors:LessonError.__str__")
    assert shown.file == "lessonlib/engine/worker/errors.py" and shown.code.startswith("def __str__(self) -> str:\n")


@pytest.mark.parametrize(("target", "message"), [
    ("no_such_module:f", "no module 'no_such_module'"),
    ("lessonlib.engine.worker.shown:thrice", "lessonlib.engine.worker.shown has no attribute 'thrice'"),
    ("lessonlib.engine.worker.shown:__doc__", "no source to show"),
])
def test_a_target_that_names_no_code_is_said_in_one_line(target, message):
    """source_of, in process: what a source block's process says, at the fence (the test below)."""
    with pytest.raises(NotFound) as failed:
        source_of(target)
    assert str(failed.value).startswith(message) and "\n" not in str(failed.value)


@pytest.mark.parametrize("fence, message", [
    ('python source="shownmod.twice"', "a source block takes one option, "),
    ('python source="shownmod:twice" alt="x"', "a source block takes one option, "),
    ('python source="no_such_module:f"', "source='no_such_module:f': no module 'no_such_module'"),
])
def test_a_bad_source_target_is_one_line_at_its_fence(tmp_path, settings, fence, message):
    (tmp_path / "docs" / "shownmod.py").write_text(shown_module())
    with pytest.raises(LessonError) as failed:
        execute_page(f"# T\n\n```{fence}\n```\n", PATH, settings)
    assert (failed.value.path, failed.value.line, failed.value.detail) == (PATH, 3, "")
    assert message in failed.value.message and "\n" not in str(failed.value)


def test_a_source_block_must_be_empty(settings):
    with pytest.raises(LessonError, match=r"docs/page.md:1: a source block shows the code of the object it names"):
        execute_page('```python source="shownmod:twice"\nprint(1)\n```\n', PATH, settings)


def test_check_and_the_claims_binding_read_past_a_source_block(tmp_path, lessonlib_cli):
    page = ('# T\n\nThis helper is never slower than two calls.\n\n```python source="lessonlib.engine.worker.errors:SetupError"\n'
            '```\n\n```python exec check\nfrom lessonlib import claim\nassert 1, claim("never slower than")\n```\n')
    site = make_site(tmp_path / "site", {"page.md": page})
    found = binding(parse_page(page, PATH), page)
    assert found.problems() == []
    run = lessonlib_cli(site, "check", "docs/page.md")
    assert run.returncode == 0, run.stdout + run.stderr


MEMO_MODULE = '''\
def slow(x):
    with open(__import__("pathlib").Path.cwd().parent.with_suffix(".log"), "a") as f:
        f.write("ran\\n")
    return 2 * x


def outer(x):
    return slow(x) + 1
'''


def memo_page(extra: str = "") -> str:
    return ("# M\n\n```python exec\nimport work\n```\n\n"
            f'```python exec memo="work.slow"\nprint(work.slow(21)){extra}\n```\n\n'
            "```python exec\nprint(type(work).__name__, work.slow.__module__)\n```\n")


def runs(folder: Path) -> int:
    log = folder.parent.with_suffix(".log")  # outside the project (tmp_path.log): a page may not write in it
    return log.read_text().count("ran") if log.exists() else 0


def test_memo_option_calls_come_from_the_cache_as_memo_f_would_and_the_page_after_sees_the_originals(
        tmp_path, settings):
    docs = tmp_path / "docs"
    (docs / "work.py").write_text(MEMO_MODULE)
    first = execute_page(memo_page(), PATH, settings)
    assert [b.text for b in first.outputs.blocks] == ["", "42\n", "module work\n"] and runs(docs) == 1
    assert "print(work.slow(21))" in first.markdown and "memo" not in first.markdown.split("```python")[2]

    execute_page(memo_page(extra="  # an edit that runs the page again"), PATH, settings)
    assert runs(docs) == 1  # the call came from the cache
    explicit = "```python exec\nimport work\nfrom lessonlib import memo\nprint(memo(work.slow)(21))\n```\n"
    assert execute_page(explicit, "docs/explicit.md", settings).outputs.blocks[0].text == "42\n"
    assert runs(docs) == 1  # under the same key as memo(work.slow)(21)


def test_memo_option_memoizes_the_calls_the_block_makes_not_those_made_inside_the_library(tmp_path, settings):
    docs = tmp_path / "docs"
    (docs / "work.py").write_text(MEMO_MODULE)
    page = '```python exec\nimport work\n```\n\n```python exec memo="work.slow"\nprint(work.slow(1), work.outer(1))\n```\n'
    execute_page(page, PATH, settings)
    assert runs(docs) == 2  # work.slow(1) once, memoized, and once more inside work.outer, which calls it plainly
    execute_page(page + "\n```python exec\n```\n", PATH, settings)
    assert runs(docs) == 3  # the block's call came from the cache


@pytest.mark.parametrize("option, message", [
    ("work.nope", "memo='work.nope': work has no attribute 'nope'"),
    ("work.slow nowork.slow", "memo='work.slow nowork.slow': no name 'nowork' in the page when this block starts"),
    ("work.__doc__", "memo='work.__doc__': work.__doc__ is not a function or class, so it cannot be memoized"),
    ("work.slow.__call__", "memo='work.slow.__call__': work.slow is not a module (or is memoized itself): "
                           "memoize a function, a class, or one of a module's"),
])
def test_a_bad_memo_name_is_one_line_at_its_fence(tmp_path, settings, option, message):
    (tmp_path / "docs" / "work.py").write_text(MEMO_MODULE)
    page = f'```python exec\nimport work\n```\n\n```python exec memo="{option}"\nwork.slow(1)\n```\n'
    with pytest.raises(LessonError) as failed:
        execute_page(page, PATH, settings)
    assert str(failed.value) == f"{PATH}:5: {message}"


def test_memo_option_must_name_callables(settings):
    with pytest.raises(LessonError, match=r"docs/page.md:1: memo='work\.slow\(\)' must name the callables"):
        execute_page('```python exec memo="work.slow()"\n```\n', PATH, settings)


def test_the_notebook_shows_the_source_and_runs_the_memoized_block_from_the_cache(tmp_path, settings, monkeypatch):
    docs = tmp_path / "docs"
    (docs / "shownmod.py").write_text(shown_module())
    text = SHOWN + ('\n```python exec\ndef double(x):\n'
                    '    with open(__import__("pathlib").Path.cwd().parent.with_suffix(".log"), "a") as f:\n'
                    '        f.write("ran\\n")\n'
                    '    return 2 * x\n```\n\n```python exec memo="double"\n'
                    'text = f"""{double(21)}\n    two\n      lines"""\nprint(text)\n```\n')
    result = execute_page(text, PATH, settings)
    notebook = to_notebook(result.page, result.outputs)
    prose = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert '*shownmod.py, line 4*\n\n```python\ndef twice(x):\n    """Doubles."""\n    return 2 * x\n```\n\nAfter.' in prose
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(settings.cache_dir))
    execute(notebook, docs)
    code = [c for c in notebook.cells if c.cell_type == "code"][1:]
    assert code[1].source.startswith('with lessonlib.memoized(globals(), "double"):\n    text = f"""{double(21)}\n    two')
    assert [printed(c) for c in code] == [b.text for b in result.outputs.blocks[1:]] == ["", "42\n    two\n      lines\n"]
    assert runs(docs) == 1  # the kernel took double(21) from the page's cache
