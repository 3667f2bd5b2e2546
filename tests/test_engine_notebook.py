"""The notebook door: an exported lesson, run top to bottom in a fresh Jupyter kernel, prints
what the page printed, block by block (timings apart), and shows as many figures."""
from __future__ import annotations

import ast
import doctest
import io
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from fixture_sites import make_site
from nbclient.exceptions import CellExecutionError
from notebook_cells import execute, printed

from lessonlib.engine.builder import plugin
from lessonlib.engine.builder.notebook import Install, colab_url, notebook_text, published_exercise, to_notebook
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.builder.stylesheets import LARGE, shared_stylesheets
from lessonlib.engine.builder.wheel import read_project, wheel_bytes
from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.worker.blocks import ParsedPage, parse_page
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs
from lessonlib.engine.worker.session import DOCTEST_FLAGS
from lessonlib.engine.worker.store import KEY

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "docs" / "lessons").glob("*.md"))

SMALL = """\
# Small

```python exec alt="A line."
s = "<b>*x*</b>"
import matplotlib.pyplot as plt
plt.plot([1, 2])
```

```python exec timing
print("took 3 ms")
```

Value: `{py} s`.

```pycon
>>> 1 + 1
2
>>> print("a")
a
```
"""


def ran(text: str, path: str = "docs/small.md", values: dict[str, str] | None = None) -> tuple[ParsedPage, PageOutputs]:
    """A page and outputs as its process would send them (nothing printed): the export reads the
    page's code and prose and the inline values, and runs nothing."""
    page = parse_page(text, path)
    return page, PageOutputs([BlockOutput() for _ in page.blocks], values or {})


def test_export_starts_where_pages_start_splits_examples_and_shows_values_as_text():
    page, outputs = ran(SMALL.replace("plt.plot([1, 2])", "plt.plot([1, 2])  # a line"), values={"s": "<b>*x*</b>"})
    cells = to_notebook(page, outputs).cells
    assert cells[0].metadata.tags == ["setup"] and "start_page()" in cells[0].source
    assert cells[2].source.endswith("plt.plot([1, 2]);  # a line"), "a page does not show a last line's value"
    assert cells[3].metadata.tags == ["timing"]
    assert "Value: &lt;b&gt;\\*x\\*&lt;/b&gt;." in cells[4].source, "as on the page: text, not markup"
    assert [(c.source, c.outputs[0].data["text/plain"]) for c in cells[5:]] == [("1 + 1", "2"), ('print("a")', "a")]


def test_a_published_notebook_installs_lessonlib_from_its_site_first(tmp_path):
    page, outputs = ran("```python exec\nx = 1\n```\n")
    here, there = (Install(f"http://{host}/downloads/", "lessonlib-0.1.0-py3-none-any.whl") for host in ("a", "b"))
    install, setup = to_notebook(page, outputs, here).cells[:2]
    assert install.metadata.tags == ["install"] and setup.metadata.tags == ["setup"]
    assert 'DOWNLOADS = "http://a/downloads/"' in install.source and "lessonlib-0.1.0-py3-none-any.whl" in install.source
    store = tmp_path / "store"
    texts = [notebook_text(page, outputs, "key", store, site) for site in (here, there, here)]
    assert texts[0] != texts[1] and texts[0] == texts[2], "a notebook kept for one site must not be offered by another"
    exercise = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    cells = nbformat.reads(published_exercise(nbformat.writes(exercise), here, "lessons/ex.ipynb"), as_version=4).cells
    assert [c.metadata.get("tags") for c in cells] == [["install"], None] and cells[0].source == install.source


LINKS = "See [the LSTM](gates-and-attention.md#lstm), [home](../index.md), [above](#top), [a figure](fig.svg) and [PyTorch](https://pytorch.org/)."


def test_a_published_notebooks_links_lead_to_the_sites_pages():
    page, outputs = ran(f"{LINKS}\n\n```python exec\nx = 1\n```\n", "docs/lessons/rnn.md")
    site = Install("http://a/course/downloads/", "lessonlib-0.1.0-py3-none-any.whl")
    expected = ("See [the LSTM](http://a/course/lessons/gates-and-attention/#lstm), [home](http://a/course/), "
                "[above](http://a/course/lessons/rnn/#top), [a figure](http://a/course/lessons/rnn/fig.svg) and "
                "[PyTorch](https://pytorch.org/).")
    assert to_notebook(page, outputs, site).cells[2].source == expected
    assert to_notebook(page, outputs).cells[1].source == LINKS, "in the repository, links stay as written"
    exercise = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("[the lesson](../rnn/#memory-task)")])
    cells = nbformat.reads(published_exercise(nbformat.writes(exercise), site, "lessons/ex.ipynb"), as_version=4).cells
    assert cells[1].source == "[the lesson](http://a/course/lessons/rnn/#memory-task)"


EXERCISES = sorted((ROOT / "docs" / "lessons").glob("exercise-*.ipynb"))


@pytest.mark.parametrize("notebook", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_an_exercise_states_its_one_set_up_path_in_its_first_cell(notebook):
    cells = nbformat.read(notebook, as_version=4).cells
    assert cells[0].cell_type == "markdown" and "**Set-up:**" in cells[0].source
    assert "first cell installs" in cells[0].source and "./scripts/build" in cells[0].source
    text = "".join(c.source for c in cells)
    assert text.count("**Set-up:**") == 1 and "pip install -e" not in text, "one set-up path, stated once"


def test_the_install_cell_says_in_one_line_that_the_site_cannot_be_reached(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/downloads/"
    (tmp_path / "docs").mkdir()
    result = execute_page("```python exec\nx = 1\n```\n", "docs/small.md", Settings(root=tmp_path))
    notebook = to_notebook(result.page, result.outputs, Install(url, "lessonlib-0.1.0-py3-none-any.whl"))
    with pytest.raises(CellExecutionError) as info:
        execute(notebook, tmp_path)
    (error,) = [o for o in notebook.cells[0].outputs if o.output_type == "error"]
    assert error.ename == "SetupFailed" and len(error.traceback) == 1, error.traceback
    assert error.traceback[0].startswith(f"Cannot reach the course site at {url} ("), info.value


def test_the_wheel_holds_every_module_and_the_package_data():
    project = read_project()
    wheel = zipfile.ZipFile(io.BytesIO(wheel_bytes(project)))
    names = set(wheel.namelist())
    modules = {p.relative_to(project.root).as_posix() for p in (project.root / "lessonlib").rglob("*.py")}
    assert modules <= names and "lessonlib/data/shakespeare/hamlet.txt" in names
    metadata = wheel.read(f"lessonlib-{project.version}.dist-info/METADATA").decode()
    assert f"Version: {project.version}\n" in metadata and project.wheel_name == f"lessonlib-{project.version}-py3-none-any.whl"
    assert 'Requires-Dist: torch; extra == "course"' in metadata and "Requires-Dist: mkdocs\n" in metadata  # the engine's own
    assert wheel_bytes(project) == wheel_bytes(read_project()), "the same sources must give the same wheel"


def copy_of_the_project(folder: Path) -> Path:
    shutil.copytree(ROOT / "lessonlib", folder / "lessonlib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, folder)
    return folder


def test_a_kept_wheel_is_reused_until_a_file_in_it_changes(tmp_path):
    root, store = copy_of_the_project(tmp_path / "project"), tmp_path / "wheel"
    project = read_project(root)
    made = wheel_bytes(project, store)
    assert made == wheel_bytes(project)  # kept, it is the wheel itself
    (kept,) = wheels(store)
    written = kept.stat().st_ino
    assert wheel_bytes(project, store) == made and kept.stat().st_ino == written  # reused, not written again
    kept.write_bytes(kept.read_bytes()[:-100])  # cut short: made again
    assert wheel_bytes(project, store) == made and kept.stat().st_ino != written
    (root / "lessonlib" / "device.py").write_text("# edited\n")
    edited = zipfile.ZipFile(io.BytesIO(wheel_bytes(read_project(root), store)))
    assert edited.read("lessonlib/device.py") == b"# edited\n"
    assert [p.name for p in wheels(store)] == [kept.name], "one kept wheel, not one per version"


def wheels(store: Path) -> list[Path]:
    return [p for p in store.iterdir() if p.name != KEY]  # beside them, the key that seals them


def test_a_rebuilt_site_offers_the_new_wheel_alone_and_its_notebooks_install_it(tmp_path, build, monkeypatch):
    root = copy_of_the_project(tmp_path / "project")
    monkeypatch.setattr(plugin, "read_project", lambda _: read_project(root))  # the site's project is the copy
    site = make_site(tmp_path / "site", {"index.md": "# Home\n\n```python exec\nprint(1)\n```\n"})
    (site / "mkdocs.yml").write_text((site / "mkdocs.yml").read_text().replace(
        "cache_dir: .cache\n", "cache_dir: .cache\n      publish_package: true\n"))
    offered = []
    for edit in ("", "# edited\n"):
        (root / "lessonlib" / "device.py").write_text((ROOT / "lessonlib" / "device.py").read_text() + edit)
        assert build(site, LESSONLIB_CACHE_DIR=str(tmp_path / "cache")).returncode == 0
        (wheel,) = (p.name for p in (site / "site" / "downloads").glob("*.whl"))
        assert wheel in (site / "site" / "index.ipynb").read_text(), "the notebook installs the wheel beside it"
        offered.append(wheel)
    assert offered[0] != offered[1], "an edit to lessonlib is a new version"


def test_pip_replaces_the_lessonlib_of_an_older_site(tmp_path):
    """pip keeps an installed version rather than reinstall the same one: an edit to lessonlib
    must change the wheel's version, or a reader's notebook keeps the older site's lessonlib."""
    root = copy_of_the_project(tmp_path / "project")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "reader"], check=True)
    reader = tmp_path / "reader" / "bin" / "python"

    def publish_and_install() -> str:
        project = read_project(root)
        wheel = tmp_path / project.wheel_name
        wheel.write_bytes(wheel_bytes(project))
        subprocess.run([sys.executable, "-m", "pip", "--python", reader, "install", "--quiet", "--no-deps",
                        "--no-index", wheel], check=True, capture_output=True)
        found = subprocess.run([reader, "-c", "import lessonlib.device as d, pathlib; print(pathlib.Path(d.__file__).read_text())"],
                               check=True, capture_output=True, text=True, cwd=tmp_path)
        return found.stdout

    first = publish_and_install()
    (root / "lessonlib" / "device.py").write_text(first + "# edited on the course site\n")
    assert publish_and_install().endswith("# edited on the course site\n\n"), "the reader still runs the older lessonlib"


@pytest.mark.parametrize("site, repo, url", [
    ("https://me.github.io/course/", "https://github.com/me/course.git",
     "https://colab.research.google.com/github/me/course/blob/gh-pages/lessons/a/a.ipynb"),
    ("http://127.0.0.1:8000/", "https://github.com/me/course", None),
    ("http://localhost:8000/", "https://github.com/me/course", None),
    ("http://10.0.0.5/", "https://github.com/me/course", None),
    ("https://me.github.io/course/", "https://gitlab.com/me/course", None),
    ("https://me.github.io/course/", "", None),
])
def test_colab_is_offered_only_for_a_published_site_with_its_sources_on_github(site, repo, url):
    assert colab_url(site, repo, "gh-pages", "lessons/a/a.ipynb") == url


def test_a_notebook_page_links_its_large_stylesheets_in_place_and_small_ones_stay():
    big = '@charset "UTF-8";.jupyter-wrapper{--x: 1}' + ".a{}" * (LARGE // 4)
    page = (f'<p>a</p><style type="text/css">\n{big}\n</style><p>b</p>'
            '<style type="text/css">.small{}</style><style type="text/css">\n' + big + "</style>")
    html, files = shared_stylesheets(page, "lessons/exercise-a/")
    (name,) = files  # the same stylesheet twice: one file
    assert name.startswith("assets/lessonlib/notebook-") and files[name] == big.strip() + "\n"
    link = f'<link rel="stylesheet" href="../../{name}">'
    assert html == f'<p>a</p>{link}<p>b</p><style type="text/css">.small{{}}</style>{link}'
    assert shared_stylesheets(page.replace("--x: 1", "--x: 2"), "e/")[1].keys() != files.keys()  # named by content


def test_a_check_block_is_a_cell_tagged_check_with_its_source_folded():
    page, outputs = ran("```python exec\nx = 1\n```\n\n```python exec check\nassert x == 1\n```\n")
    plain, check = to_notebook(page, outputs).cells[1:]
    assert "tags" not in plain.metadata and "jupyter" not in plain.metadata
    assert check.source == "assert x == 1" and check.metadata.tags == ["check"]
    assert check.metadata.jupyter == {"source_hidden": True}
    nbformat.validate(to_notebook(page, outputs))


def _exec_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in notebook.cells if c.cell_type == "code" and not set(c.metadata.get("tags", [])) & {"setup", "pycon"}]


@pytest.mark.lesson_results
@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_the_exported_lesson_reproduces_the_page_in_a_fresh_kernel(lesson, monkeypatch, tmp_path):
    settings = load_settings(ROOT / "mkdocs.yml")
    rel = lesson.relative_to(ROOT).as_posix()
    # The page's outputs: from the cache its own item (run before this test) filled, a lookup of
    # a tenth of a second; a page whose inputs changed since is run again, as the build would.
    result = execute_page(lesson.read_text(encoding="utf-8"), rel, settings)
    notebook = to_notebook(result.page, result.outputs)
    examples = [(c, c.outputs[0].data["text/plain"] if c.outputs else "") for c in notebook.cells
                if c.metadata.get("tags") == ["pycon"]]
    # The kernel reuses the page's memoized training instead of redoing it. It reads a copy of
    # the store: pages running beside this test may add entries to the build's own.
    memo = tmp_path / "cache" / "memo"
    shutil.copytree(settings.cache_dir / "memo", memo, ignore=shutil.ignore_patterns("*.lock", "*.tmp"))
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(memo.parent))
    memo_entries = sorted(memo.glob("*.json"))
    execute(notebook, lesson.parent, timeout=600)
    assert sorted(memo.glob("*.json")) == memo_entries, "the kernel ran memoized calls again instead of reusing the page's results"

    blocks = [(b, out) for b, out in zip(result.page.blocks, result.outputs.blocks) if b.kind == "exec"]
    cells = _exec_cells(notebook)
    assert len(cells) == len(blocks)
    for (block, output), cell in zip(blocks, cells):
        if "timing" in block.options:
            continue
        assert printed(cell) == output.text, f"{rel}:{block.start + 1}: the notebook printed something else"
        images = [o for o in cell.outputs if o.output_type == "display_data" and any(k.startswith("image/") for k in o.data)]
        assert len(images) == len(output.figures), f"{rel}:{block.start + 1}: figures differ"
    for cell, want in examples:
        got = printed(cell) + "".join(o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result")
        assert doctest.OutputChecker().check_output(want + "\n", got + "\n", DOCTEST_FLAGS), (cell.source, want, got)


def test_a_block_that_differs_in_the_kernel_is_caught(tmp_path):
    """The comparison above can fail: a block whose output depends on where it runs."""
    (tmp_path / "docs").mkdir()
    page = "```python exec\nimport os\nprint(os.getpid())\n```\n"
    result = execute_page(page, "docs/p.md", Settings(root=tmp_path))
    notebook = to_notebook(parse_page(page, "docs/p.md"), result.outputs)
    execute(notebook, tmp_path / "docs")
    (cell,) = _exec_cells(notebook)
    assert printed(cell) != result.outputs.blocks[0].text


# Code whose text IPython changes before Python reads it, inside strings too: a notebook cell
# must read as the page's block does. The pycon and memo cases reach the cell by other paths.
IPYTHON_READS_OTHERWISE = {
    "a prompt in a string": 's = """\n>>> 1 + 1\n2\n"""\nprint(s)',
    "a prompt further down": 'x = 1\ny = 2\ns = """\n>>> 1 + 1\n"""',
    "a raw string": 's = r"""\n>>> \\d\n... y\n"""',
    "an f-string": 'x = 1\ns = f"""\n>>> {x}\n"""',
    "a backslash-continued string": 's = "a\\\n>>> b"',
    "an IPython prompt": 's = """\nIn [1]: x\n"""',
    "dots on the second line": 's = """\n... and so on\n"""',
    "a line of spaces in a string": 's = """a\n    \nb"""',
    "a line of tabs": 's = """a\n\t\nb"""',
    "an indented first comment": '    # a note\ns = """\n    a\n"""',
    "a docstring's example": 'def f():\n    """One.\n\n    >>> f()\n    1\n    """\n    return 1',
    "unicode": 's = """\n>>> é\n"""\nprint(s)',
    "magics in a string": 's = """\n%d items\n!important\n%%time\nwhy?\n"""',
    "a comment that asks": 'x = 1  # why?\nprint(x)',
}


def _read_by_ipython_8(cell: str) -> str:
    """What IPython 7 and 8 (Colab's kernel has one) make of a cell before Python reads it: their
    cleanup transforms, which the installed IPython no longer has."""
    lines = cell.splitlines(keepends=True)
    while lines and lines[0].isspace():
        lines.pop(0)
    indent = re.match(r"[ \t]+", lines[0]) if lines else None
    if indent:
        lines = [line[indent.end():] if line.startswith(indent.group()) else line for line in lines]
    for first, prompt in ((r">>>( |$)", r"(>>>|\.\.\.)( |$)"), (r"In \[\d+\]: ", r"In \[\d+\]: |\s*\.{3,}: ?")):
        if lines and (re.match(first, lines[0]) or (len(lines) > 1 and re.match(prompt, lines[1]))):
            lines = [re.sub(f"^(?:{prompt})", "", line, count=1) for line in lines]
    return "".join(lines)


def _program(code: str) -> str:
    return ast.dump(ast.parse(code))


@pytest.mark.parametrize("code", IPYTHON_READS_OTHERWISE.values(), ids=IPYTHON_READS_OTHERWISE.keys())
def test_ipython_reads_each_cell_as_the_page_reads_its_block(code):
    from IPython.core.inputtransformer2 import TransformerManager

    pycon = "\n".join(f"{'>>>' if n == 0 else '...'} {line}" for n, line in enumerate(code.split("\n")))
    page = parse_page(f"```python exec\n{code}\n```\n\n```python exec memo=\"f\"\n{code}\n```\n\n"
                      f"```pycon\n{pycon}\n```\n", "docs/p.md")
    plain, memo, example = to_notebook(page, None).cells[1:]
    (parsed,) = doctest.DocTestParser().get_examples(pycon)  # as the page runs it: tabs expanded
    for cell, body in ((plain, code), (example, parsed.source)):
        for read in (TransformerManager().transform_cell, _read_by_ipython_8):
            assert _program(read(cell.source)) == _program(body), (read, cell.source)
    for read in (TransformerManager().transform_cell, _read_by_ipython_8):
        (block,) = ast.parse(read(memo.source)).body
        assert ast.dump(ast.Module(block.body, [])) == _program(code), (read, memo.source)


def test_a_page_runs_as_main_as_its_notebook_does(tmp_path):
    (tmp_path / "docs").mkdir()
    page = "```python exec\nclass Point:\n    pass\nprint(__name__, Point)\nif __name__ == '__main__':\n    print('ran')\n```\n"
    result = execute_page(page, "docs/p.md", Settings(root=tmp_path))
    assert result.outputs.blocks[0].text == "__main__ <class '__main__.Point'>\nran\n"


PRINTS_THE_SAME = '''\
```python exec
class Point:
    pass
print(__name__, Point)
```

```python exec
def train(n):
    print("training", n)
    return 2 * n
```

```python exec memo="train"
doc = """
>>> 1 + 1
3
\x20\x20\x20\x20
In [1]: x
"""
print(repr(doc), train(2))
```

```python exec
import time
time.sleep(1)  # what the cell above printed late shows here
```

```python exec
    # an indented note
raw = r"""
... \\d
>>> x
"""
print(repr(raw))
```

```pycon
>>> s = """
... >>> x
... """
>>> s
'\\n>>> x\\n'
```
'''


def test_the_notebook_prints_what_the_page_printed(tmp_path, monkeypatch):
    """One kernel for the ways a notebook used to print something else: the name of the page's
    module, prompts and blank lines in strings (IPython strips them), the memo's timing line."""
    (tmp_path / "docs").mkdir()
    result = execute_page(PRINTS_THE_SAME, "docs/p.md", Settings(root=tmp_path, cache_dir=tmp_path / "cache"))
    notebook = to_notebook(result.page, result.outputs)
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(tmp_path / "kernel-cache"))  # a miss: the call runs and is timed
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # with it, ipykernel does not show what reaches descriptor 2, as Jupyter does
    execute(notebook, tmp_path / "docs")
    page = [out.text for block, out in zip(result.page.blocks, result.outputs.blocks) if block.kind == "exec"]
    assert [printed(cell) for cell in _exec_cells(notebook)] == page
    (_, example) = [c for c in notebook.cells if c.metadata.get("tags") == ["pycon"]]
    assert [o.data["text/plain"] for o in example.outputs if o.output_type == "execute_result"] == ["'\\n>>> x\\n'"]


def test_hidden_code_and_output_are_folded_in_the_notebook_as_on_the_page():
    page = parse_page("```python exec hide-code\nx = 1\n```\n\n```python exec hide-output\nprint(x)\n```\n", "docs/p.md")
    hidden_code, hidden_output = to_notebook(page, None).cells[1:]
    assert hidden_code.metadata.jupyter == {"source_hidden": True}
    assert hidden_output.metadata.jupyter == {"outputs_hidden": True}
    nbformat.validate(to_notebook(page, None))


def test_a_value_is_text_in_a_published_notebook_too():
    """Jupyter renders a Markdown cell's HTML and links: a value shows as the page shows it."""
    page = parse_page("# P\n\n`{py} v` and [a link](b.md).\n", "docs/lessons/p.md")
    outputs = PageOutputs([], {"v": '<img src="x.png">[a](b.md)'})
    site = Install("http://a/downloads/", "lessonlib-0.1.0-py3-none-any.whl")
    (_, _, prose) = to_notebook(page, outputs, site).cells
    assert prose.source == ('# P\n\n&lt;img src=&quot;x.png&quot;&gt;\\[a\\](b.md) and '
                            '[a link](http://a/lessons/b/).')
