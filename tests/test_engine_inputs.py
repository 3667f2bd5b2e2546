"""Nothing stale: an input is fingerprinted when the page reads it and checked again when the
page ends; symlink targets, stat probes, sqlite files and files named to a subprocess are
inputs; editor and version-control files are not; a folder's listing counts only when page
code read it; an entry means the same in a copy of the checkout, or from a shared cache."""
from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from site_support import until

from lessonlib.engine.build.page import execute_page, execute_pages
from lessonlib.engine.config import Settings
from lessonlib.engine.worker import inputs

PATH = "docs/fixture.md"


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, cache_dir=tmp_path / "cache")


def printed(page: str, settings: Settings) -> tuple[str, bool]:
    result = execute_page(page, PATH, settings)
    return result.outputs.blocks[0].text, result.from_cache


def test_an_input_edited_while_its_page_runs_runs_the_page_again(tmp_path, tmp_path_factory, settings):
    barrier = tmp_path_factory.mktemp("barrier")  # outside the project: not an input
    data = tmp_path / "docs/data.txt"
    data.write_text("first\n")
    page = (f"```python exec\nimport os, time\nvalue = open('data.txt').read().strip()\n"
            f"open({str(barrier / 'read')!r}, 'w').close()\n"
            f"while not os.path.exists({str(barrier / 'go')!r}):\n    time.sleep(0.05)\nprint(value)\n```\n")
    lines: list[str] = []
    done: list = []
    run = threading.Thread(target=lambda: done.append(execute_pages([(page, PATH)], settings, lines.append)[0]))
    run.start()
    until((barrier / "read").exists, "the page to read its input")
    data.write_text("second\n")
    (barrier / "go").write_text("")
    run.join()
    assert done[0].outputs.blocks[0].text == "second\n", lines
    assert any("runs again: file docs/data.txt changed while it ran" in line for line in lines), lines
    assert printed(page, settings) == ("second\n", True)


def test_re_pointing_a_symlink_runs_the_page_again(tmp_path, settings):
    docs = tmp_path / "docs"
    (docs / "a.txt").write_text("A")
    (docs / "b.txt").write_text("B")
    (docs / "data.txt").symlink_to("a.txt")
    page = "```python exec\nprint(open('data.txt').read())\n```\n"
    assert printed(page, settings) == ("A\n", False)
    (docs / "data.txt").unlink()
    (docs / "data.txt").symlink_to("b.txt")
    assert printed(page, settings) == ("B\n", False)


def _sqlite(path: Path, value: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table if not exists t (v text)")
        db.execute("delete from t")
        db.execute("insert into t values (?)", (value,))


PROBES = {
    # the page's code, set-up (before the first run), change (before the second), output before and after
    "exists": ("import os\nprint(os.path.exists('sub/flag'))", lambda d: (d / "sub").mkdir(),
               lambda d: (d / "sub/flag").write_text(""), "False\n", "True\n"),
    "getsize": ("import os\nprint(os.path.getsize('data.bin'))", lambda d: (d / "data.bin").write_bytes(b"12"),
                lambda d: (d / "data.bin").write_bytes(b"123"), "2\n", "3\n"),
    "Path.is_file": ("from pathlib import Path\nprint(Path('maybe').is_file())", lambda d: (d / "maybe").mkdir(),
                     lambda d: ((d / "maybe").rmdir(), (d / "maybe").write_text("")), "False\n", "True\n"),
    "sqlite": ("import sqlite3\nprint(sqlite3.connect('data.db').execute('select v from t').fetchone()[0])",
               lambda d: _sqlite(d / "data.db", "one"), lambda d: _sqlite(d / "data.db", "two"), "one\n", "two\n"),
    "subprocess": ("import subprocess\nprint(subprocess.run(['cat', 'data.txt'], capture_output=True, text=True).stdout)",
                   lambda d: (d / "data.txt").write_text("one"), lambda d: (d / "data.txt").write_text("two"),
                   "one\n", "two\n"),
}


@pytest.mark.parametrize("probe", PROBES)
def test_what_a_page_learns_about_a_file_without_opening_it_is_an_input(tmp_path, settings, probe):
    code, set_up, change, before, after = PROBES[probe]
    docs = tmp_path / "docs"
    set_up(docs)
    page = f"```python exec\n{code}\n```\n"
    assert printed(page, settings) == (before, False)
    assert printed(page, settings) == (before, True)
    change(docs)
    assert printed(page, settings) == (after, False)


def test_editor_files_version_control_and_caches_never_run_a_page_again(tmp_path, settings):
    """The page imports a helper from its folder and lists runs/; neither an editor saving a
    file nor git nor a cache beside it changes what it read."""
    docs = tmp_path / "docs"
    (docs / "helper.py").write_text("VALUE = 3\n")
    (docs / "runs").mkdir()
    (docs / "runs/a.csv").write_text("")
    page = "```python exec\nimport glob, helper\nprint(helper.VALUE, sorted(glob.glob('runs/*.csv')))\n```\n"
    assert printed(page, settings) == ("3 ['runs/a.csv']\n", False)
    for name in [".fixture.md.swp", "4913", "fixture.md~", "#fixture.md#", ".#fixture.md", "notes.md",
                 "runs/.a.csv.swp", "runs/a.csv~", ".git/index", "__pycache__/helper.cpython-311.pyc"]:
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text("x")
    assert printed(page, settings)[1], "still from the cache"
    (docs / "runs/b.csv").write_text("")
    assert printed(page, settings) == ("3 ['runs/a.csv', 'runs/b.csv']\n", False), "a real file in a listed folder"


READS = "```python exec\nprint(open('data.txt').read())\n```\n"


def test_a_copy_of_the_checkout_uses_the_entries_for_what_it_holds_itself(tmp_path):
    original = tmp_path / "original"
    (original / "docs").mkdir(parents=True)
    (original / "docs/data.txt").write_text("original")
    assert printed(READS, Settings(root=original, cache_dir=original / "cache")) == ("original\n", False)

    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    in_copy = Settings(root=copy, cache_dir=copy / "cache")
    assert printed(READS, in_copy) == ("original\n", True), "the same files: the copied entry holds"
    (copy / "docs/data.txt").write_text("copy")
    assert printed(READS, in_copy) == ("copy\n", False)


def test_checkouts_sharing_one_cache_each_get_their_own_results(tmp_path):
    cache = tmp_path / "shared"
    checkouts = {name: tmp_path / name for name in ("a", "b")}
    for name, root in checkouts.items():
        (root / "docs").mkdir(parents=True)
        (root / "docs/data.txt").write_text(name)
    for _ in range(2):
        for name, root in checkouts.items():
            assert printed(READS, Settings(root=root, cache_dir=cache))[0] == f"{name}\n"


def test_a_file_a_page_writes_into_its_scratch_folder_and_reads_back_does_not_run_it_again(tmp_path, settings):
    page = ("```python exec\nimport lessonlib\nmade = lessonlib.scratch() / 'made.txt'\nmade.write_text('made')\n"
            "print(made.read_text())\n```\n")
    assert printed(page, settings) == ("made\n", False)
    assert printed(page, settings) == ("made\n", True)
    assert not os.path.exists(tmp_path / "docs/made.txt")


def test_the_recorder_reads_only_the_events_it_records(tmp_path, monkeypatch):
    """Under memo's tracer every Python call reads frame.f_code, and each read raises an audit
    event: those must return before any of the recorder's work, or a memoized call that makes
    many Python calls runs several times slower."""
    read = []
    monkeypatch.setattr(inputs, "_RECORDERS", {e: lambda args, e=e: read.append(e) for e in inputs._RECORDERS})
    recorder = inputs.Recorder(tmp_path, [tmp_path], [], code_files=set())
    with recorder.recording():
        sys._getframe().f_code  # raises "object.__getattr__"
        sys.audit("builtins.id", 0)
        sys.audit("open", str(tmp_path / "data.txt"), "r", 0)
    assert read == ["open"]
