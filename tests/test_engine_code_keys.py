"""What editing the engine itself re-runs: only what the edit can change.

Build-side modules (engine/builder/) render, export and schedule; no stored result depends on them, so editing one
re-runs nothing. Worker-side modules (engine/worker/) run the pages: each page's manifest lists the ones it ran
with, so editing one re-runs those pages. What a build-side module keeps between builds (parsed
pages, exported notebooks, the HTML memo) is keyed on its own code.

The end-to-end test edits a copy of lessonlib, never the checkout's: other tests run pages
from it meanwhile.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import lessonlib
from lessonlib.engine.builder import cache as cache_module
from lessonlib.engine.builder.cache import parsed_page, path_name
from lessonlib.engine.builder.html_memo import HtmlMemo
from lessonlib.engine.builder.notebook import notebook_text
from lessonlib.engine.worker import store
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs

PACKAGE = Path(lessonlib.__file__).resolve().parent
BUILD_SIDE = sorted(p.relative_to(PACKAGE / "engine") for p in (PACKAGE / "engine" / "builder").glob("*.py"))
PAGE = "# A page\n\n```python exec\nimport lessonlib\nprint(lessonlib.device())\n```\n"


def run_page(project: Path, package_copy: Path) -> str:
    """`python -m lessonlib run` of the page, with the copied lessonlib first on the path: its log."""
    env = {**os.environ, "PYTHONPATH": str(package_copy), "LESSONLIB_CACHE_DIR": str(project / "cache")}
    # a process: its lessonlib is the edited copy, and its modules are imported afresh
    result = subprocess.run([sys.executable, "-m", "lessonlib", "run", "docs/page.md"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stderr


def edit(module: Path) -> None:
    module.write_text(module.read_text() + "\n# an edit that changes no behaviour\n")


def test_editing_a_build_side_module_reruns_nothing_and_a_worker_side_one_reruns_the_page(tmp_path):
    copy = tmp_path / "packages"
    shutil.copytree(PACKAGE, copy / "lessonlib", ignore=shutil.ignore_patterns("__pycache__"))
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "page.md").write_text(PAGE)
    engine = copy / "lessonlib" / "engine"

    assert "ran 1 blocks" in run_page(project, copy)
    for module in BUILD_SIDE:
        edit(engine / module)
    log = run_page(project, copy)
    assert re.search(r"docs/page\.md: from cache", log), log

    edit(engine / "worker" / "svg.py")  # every page's worker draws its figures with it
    log = run_page(project, copy)
    assert "runs again: module" in log and "svg.py changed" in log and "ran 1 blocks" in log, log


ENVIRONMENT = ("import lessonlib.engine.worker.store as s, sys\n"
               "print(s.__file__, s.environment_fingerprint('cpu'), sep='\\n')")


def test_the_environment_holds_no_engine_code(tmp_path):
    """Every key holds the environment: were engine code in it, editing any engine module would
    re-run every page. A process: its engine is an edited copy, however the fingerprint finds it."""
    copy = tmp_path / "packages"
    shutil.copytree(PACKAGE, copy / "lessonlib", ignore=shutil.ignore_patterns("__pycache__"))
    for module in (copy / "lessonlib" / "engine").rglob("*.py"):
        module.write_text(module.read_text() + "\n_EDITED = True\n")  # new bytes and new code
    env = {**os.environ, "PYTHONPATH": str(copy)}
    result = subprocess.run([sys.executable, "-c", ENVIRONMENT], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    where, fingerprint = result.stdout.split()
    assert Path(where).is_relative_to(copy)
    assert fingerprint == store.environment_fingerprint("cpu")


@pytest.fixture
def engine_copy(tmp_path, monkeypatch) -> Path:
    """The engine's sources in a scratch folder, read by source_fingerprint from now on."""
    engine = tmp_path / "engine"
    shutil.copytree(PACKAGE / "engine", engine, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store, "ENGINE", engine)
    cache_module._parser_code.cache_clear()
    yield engine
    cache_module._parser_code.cache_clear()


SOURCE = "# Title\n\n```python exec\nx = 1\n```\n\nProse with `{py} x`.\n"


def test_a_parsed_page_is_kept_until_its_text_or_the_parser_changes(tmp_path, engine_copy):
    store = tmp_path / "parsed"
    assert parsed_page(SOURCE, "docs/a.md", store) == parse_page(SOURCE, "docs/a.md")
    kept = store / f"{path_name('docs/a.md')}.json"
    first = kept.read_bytes()
    assert parsed_page(SOURCE, "docs/a.md", store) == parse_page(SOURCE, "docs/a.md")
    assert kept.read_bytes() == first  # taken from the store, not written again

    edited = SOURCE.replace("x = 1", "x = 2")
    assert parsed_page(edited, "docs/a.md", store) == parse_page(edited, "docs/a.md")
    assert parsed_page(SOURCE, "docs/a.md", store).blocks[0].code == "x = 1\n"

    written = kept.read_bytes()
    edit(engine_copy / "worker" / "blocks.py")
    cache_module._parser_code.cache_clear()
    parsed_page(SOURCE, "docs/a.md", store)
    assert kept.read_bytes() != written  # parsed again by the edited parser


@pytest.mark.parametrize("damage", [b"", b"garbage", b"x" * 64 + b"\n\x80\x04truncated"])
def test_a_damaged_parsed_page_is_parsed_again(tmp_path, damage):
    store = tmp_path / "parsed"
    parsed_page(SOURCE, "docs/a.md", store)
    kept = store / f"{path_name('docs/a.md')}.json"
    head = kept.read_bytes().split(b"\n", 1)[0]
    kept.write_bytes(head + b"\n" + damage)
    assert parsed_page(SOURCE, "docs/a.md", store) == parse_page(SOURCE, "docs/a.md")


def test_an_exported_notebook_is_made_again_when_the_exporting_code_changes(tmp_path, engine_copy):
    store = tmp_path / "notebooks"
    page = parse_page(SOURCE, "docs/a.md")
    outputs = PageOutputs([BlockOutput("")], {"x": "1"})
    text = notebook_text(page, outputs, "key", store)
    kept = store / f"{path_name('docs/a.md')}.ipynb"
    version = kept.read_text().split(" ", 1)[0]
    assert notebook_text(page, outputs, "key", store) == text and kept.read_text().split(" ", 1)[0] == version
    edit(engine_copy / "builder" / "notebook.py")
    assert notebook_text(page, outputs, "key", store) == text
    assert kept.read_text().split(" ", 1)[0] != version


@pytest.mark.parametrize("damage", ["cut short", "one character changed"])
def test_a_damaged_notebook_in_the_store_is_made_again(tmp_path, damage):
    store = tmp_path / "notebooks"
    page, outputs = parse_page(SOURCE, "docs/a.md"), PageOutputs([BlockOutput("")], {"x": "1"})
    text = notebook_text(page, outputs, "key", store)
    kept = store / f"{path_name('docs/a.md')}.ipynb"
    stored = kept.read_text()
    damaged = stored[:235] if damage == "cut short" else stored.replace('"x = 1', '"x = 2')
    assert damaged != stored
    kept.write_text(damaged)
    assert notebook_text(page, outputs, "key", store) == text
    nbformat.validate(nbformat.reads(text, as_version=4))


def test_the_html_memo_renders_again_when_the_code_that_fills_it_changes(tmp_path, engine_copy):
    path, renders = tmp_path / "html.json", []

    def render() -> str:
        renders.append(1)
        return "<b>x</b>"

    memo = HtmlMemo(path)
    memo.get("highlight", "x", render)
    memo.save()
    HtmlMemo(path).get("highlight", "x", render)
    assert len(renders) == 1
    edit(engine_copy / "builder" / "mathml.py")
    HtmlMemo(path).get("highlight", "x", render)
    assert len(renders) == 2


def test_a_parsed_page_in_the_cache_is_data_a_page_cannot_make_run(tmp_path):
    """A page can write anything into the cache folder; the build loads parsed pages as JSON."""
    import pickle

    store = tmp_path / "parsed"
    parsed_page(SOURCE, "docs/a.md", store)
    kept = store / f"{path_name('docs/a.md')}.json"
    head = kept.read_bytes().split(b"\n", 1)[0]
    planted = tmp_path / "planted"

    class Payload:
        def __reduce__(self):
            return (planted.write_text, ("ran",))

    for suffix in (".json", ".pkl"):  # the stored file, or the name older builds read
        body = pickle.dumps(Payload())
        (store / f"{path_name('docs/a.md')}{suffix}").write_bytes(head + b"\n" + body)
        assert parsed_page(SOURCE, "docs/a.md", store) == parse_page(SOURCE, "docs/a.md")
    assert not planted.exists()
