"""Nothing stale: an input is fingerprinted when the page reads it and checked again when the
page ends; symlink targets, stat probes, sqlite files, names looked for and absent, the
environment however it is read, and what the page's Python processes read are inputs; a page
that starts a process the engine cannot trace is not cached, and says why in one line; editor
and version-control files are not inputs; a folder's listing counts only when page code read
it; an entry means the same in a copy of the checkout, or from a shared cache."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from site_support import until

from lessonlib.engine.builder.page import execute_page, execute_pages
from lessonlib.engine.builder.pool import start_template
from lessonlib.engine.config import Settings
from lessonlib.engine.worker import inputs
from lessonlib.engine.worker.errors import LessonError

PATH = "docs/fixture.md"


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, cache_dir=tmp_path / "cache")


def printed(page: str, settings: Settings) -> tuple[str, bool]:
    result = execute_page(page, PATH, settings)
    return result.outputs.blocks[0].text, result.from_cache


def built(page: str, settings: Settings) -> tuple[str, bool, list[str]]:
    """What the page's first block printed, whether it came from the cache, and the build's lines."""
    lines: list[str] = []
    (result,) = execute_pages([(page, PATH)], settings, lines.append)
    if isinstance(result, LessonError):
        raise result
    return result.outputs.blocks[0].text, result.from_cache, lines


@pytest.mark.never_reused  # concurrency: one passing run vouches for no other
def test_an_input_edited_while_its_page_runs_runs_the_page_again(tmp_path, tmp_path_factory, settings):
    barrier = tmp_path_factory.mktemp("barrier")  # outside the project: not an input
    data = tmp_path / "docs/data.txt"
    data.write_text("first\n")
    page = (f"```python exec\nimport os, time\nvalue = open('data.txt').read().strip()\n"
            f"open({str(barrier / 'read')!r}, 'w').close()\n"
            f"while not os.path.exists({str(barrier / 'go')!r}):\n    time.sleep(0.05)\nprint(value)\n```\n")
    lines: list[str] = []
    done: list = []
    start_template()  # from this thread: the template ends with the thread that started it
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


def test_the_recorder_reads_only_the_events_it_records(tmp_path):
    """Under memo's tracer every Python call reads frame.f_code, and each read raises an audit
    event: the audit hook hands on only the events it records. In a fresh process: the hooks,
    once installed, stay as long as the process."""
    probe = f"""
import sys
from pathlib import Path
from lessonlib.engine.worker import inputs
read = []
inputs._RECORDERS = {{e: lambda args, e=e: read.append(e) for e in inputs._RECORDERS}}
with inputs.Recorder(Path({str(tmp_path)!r}), [Path({str(tmp_path)!r})], [], code_files=set()).recording():
    sys._getframe().f_code  # raises "object.__getattr__"
    sys.audit("builtins.id", 0)
    sys.audit("open", {str(tmp_path / "data.txt")!r}, "r", 0)
print(read)
"""
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert ran.stdout == "['open']\n", ran.stderr


# --- reads the engine did not see ----------------------------------------------------------------

LOOKUPS = {
    # the page's code (it prints whether it found `helper` or `pkg.extra`), and what makes it found
    "import": ("try:\n    import helper\nexcept ImportError:\n    helper = None\nprint(helper is not None)",
               lambda d: (d / "helper.py").write_text("")),
    "a package": ("try:\n    import helper\nexcept ImportError:\n    helper = None\nprint(helper is not None)",
                  lambda d: ((d / "helper").mkdir(), (d / "helper/__init__.py").write_text(""))),
    "a submodule": ("try:\n    from pkg import extra\nexcept ImportError:\n    extra = None\nprint(extra is not None)",
                    lambda d: (d / "pkg/extra.py").write_text("")),
    "find_spec": ("import importlib.util\nprint(importlib.util.find_spec('helper') is not None)",
                  lambda d: (d / "helper.py").write_text("")),
    "os.access": ("import os\nprint(os.access('helper.py', os.F_OK))", lambda d: (d / "helper.py").write_text("")),
    "open": ("try:\n    open('helper.py').close()\nexcept FileNotFoundError:\n    print(False)\nelse:\n    print(True)",
             lambda d: (d / "helper.py").write_text("")),
}


@pytest.mark.parametrize("lookup", LOOKUPS)
def test_a_name_looked_for_and_absent_is_an_input(tmp_path, settings, lookup):
    code, appear = LOOKUPS[lookup]
    docs = tmp_path / "docs"
    (docs / "pkg").mkdir()
    (docs / "pkg/__init__.py").write_text("")
    page = f"```python exec\n{code}\n```\n"
    assert printed(page, settings) == ("False\n", False)
    assert printed(page, settings) == ("False\n", True)
    appear(docs)
    assert printed(page, settings) == ("True\n", False)


VARIABLES = {
    # the page's code, the variables it first runs with, and those it runs with next
    "os.environb[...]": ("print(os.environb[b'GREETING'])", {"GREETING": "hello"}, {"GREETING": "bye"}),
    "os.environb.get": ("print(os.environb.get(b'GREETING'))", {}, {"GREETING": "bye"}),
    "for k in os.environ": ("print([k for k in os.environ if k.startswith('GREETING')])", {"GREETING": "hello"},
                            {"GREETING": "hello", "GREETING_TOO": "x"}),
    "list(os.environ)": ("print(sorted(k for k in list(os.environ) if k.startswith('GREETING')))", {},
                         {"GREETING_TOO": "x"}),
    "len(os.environ)": ("print(len(os.environ))", {}, {"GREETING": "hello"}),
    "dict(os.environ)": ("print(dict(os.environ).get('GREETING'))", {"GREETING": "hello"}, {"GREETING": "bye"}),
    "os.environ.copy()": ("print(os.environ.copy().get('GREETING'))", {"GREETING": "hello"}, {"GREETING": "bye"}),
    "repr(os.environ)": ("print('GREETING' in repr(os.environ))", {}, {"GREETING": "hello"}),
    "in os.environ": ("print('GREETING' in os.environ)", {}, {"GREETING": "hello"}),
    "os.environ.get": ("print(os.environ.get('GREETING'))", {"GREETING": "hello"}, {"GREETING": "bye"}),
}


def _environment(monkeypatch, variables: dict[str, str]) -> None:
    for name in ("GREETING", "GREETING_TOO"):
        if name in variables:
            monkeypatch.setenv(name, variables[name])
        else:
            monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("read", VARIABLES)
def test_the_environment_however_it_is_read_is_an_input(settings, monkeypatch, read):
    code, first, then = VARIABLES[read]
    page = f"```python exec\nimport os\n{code}\n```\n"
    _environment(monkeypatch, first)
    text, cached, lines = built(page, settings)
    assert not cached and not any("runs again" in line for line in lines), lines
    assert built(page, settings)[:2] == (text, True)
    _environment(monkeypatch, then)
    again, cached, _ = built(page, settings)
    assert again != text and not cached


@pytest.mark.parametrize("code", ["print(os.environ['PYTHONHASHSEED'])", "print(len(dict(os.environ)) > 1)"])
def test_a_variable_the_engine_sets_for_the_page_keeps_it_cached(settings, code):
    """The engine sets PYTHONHASHSEED in the page's process: what the page reads of it is the
    same on every build, and is no change."""
    page = f"```python exec\nimport os\n{code}\n```\n"
    text, cached, lines = built(page, settings)
    assert not cached and not any("runs again" in line for line in lines), lines
    assert built(page, settings)[:2] == (text, True)


UNTRACED = {
    # a process that reads GREETING, and the page line and the program that start it
    "sh": ("import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $GREETING'], capture_output=True, text=True).stdout)",
           3, "sh"),
    "os.system": ("import os\nos.system('echo $GREETING')", 3, "sh"),
    "python -I": ("import subprocess, sys\nprint(subprocess.run([sys.executable, '-I', '-c', "
                  "'import os; print(os.environ[\"GREETING\"])'], capture_output=True, text=True).stdout)", 3, "python"),
    "python, an environment of its own": (
        "import os, subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'import os; "
        "print(os.environ[\"GREETING\"])'], env={'GREETING': os.environ['GREETING']}, capture_output=True, "
        "text=True).stdout)", 3, "python"),
    "sh, in a memoized call": ("import lessonlib, subprocess\n@lessonlib.memo\ndef greeting():\n"
                               "    return subprocess.run(['sh', '-c', 'echo $GREETING'], capture_output=True, text=True).stdout\n"
                               "print(greeting())", 5, "sh"),
}


@pytest.mark.parametrize("process", UNTRACED)
def test_a_page_that_starts_a_process_the_engine_cannot_trace_is_not_cached_and_says_why(settings, monkeypatch,
                                                                                        process):
    code, line, program = UNTRACED[process]
    page = f"```python exec\n{code}\n```\n"
    monkeypatch.setenv("GREETING", "hello")
    text, cached, lines = built(page, settings)
    assert "hello" in text and not cached
    said = [line for line in lines if "not cached" in line]
    assert len(said) == 1 and f"{PATH}: ran 1 blocks" in said[0], lines
    assert said[0].endswith(f"(not cached: line {line} starts {program}, a process whose reads the engine cannot see)"), said
    assert not any("runs again" in line for line in lines), "it ran once"
    monkeypatch.setenv("GREETING", "bye")
    text, cached, _ = built(page, settings)
    assert "bye" in text and not cached


READ_BY_A_FUNCTION = "def read(n):\n    return open('data.txt').read()\n"
CHILDREN = {
    # the page's code: a process it starts reads data.txt or GREETING, each "hello" and then "bye"
    "python -c, a file": ("import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
                          "'print(open(\"data.txt\").read())'], capture_output=True, text=True).stdout)"),
    "python -c, a variable": ("import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
                              "'import os; print(os.environ[\"GREETING\"])'], capture_output=True, text=True).stdout)"),
    "joblib's loky workers": (f"from joblib import Parallel, delayed\n{READ_BY_A_FUNCTION}"
                              "print(set(Parallel(n_jobs=2)(delayed(read)(n) for n in range(4))))"),
    "a memoized call's loky workers": (
        f"import lessonlib\nfrom joblib import Parallel, delayed\n{READ_BY_A_FUNCTION}"
        "@lessonlib.memo\ndef experiment():\n    return set(Parallel(n_jobs=2)(delayed(read)(n) for n in range(2)))\n"
        "print(experiment())"),
    "a forked process": ("import multiprocessing\nfork = multiprocessing.get_context('fork')\nqueue = fork.SimpleQueue()\n"
                         "child = fork.Process(target=lambda: queue.put(open('data.txt').read()))\n"
                         "child.start()\nprint(queue.get())\nchild.join()"),
}


@pytest.mark.parametrize("child", CHILDREN)
def test_what_the_pages_python_processes_read_is_an_input(tmp_path, settings, monkeypatch, child):
    page = f"```python exec timeout=60\n{CHILDREN[child]}\n```\n"
    (tmp_path / "docs/data.txt").write_text("hello")
    monkeypatch.setenv("GREETING", "hello")
    text, cached, lines = built(page, settings)
    assert "hello" in text and not cached, (text, lines)
    assert built(page, settings)[:2] == (text, True), "the page stays cached while they stay the same"
    (tmp_path / "docs/data.txt").write_text("bye")
    monkeypatch.setenv("GREETING", "bye")
    text, cached, _ = built(page, settings)
    assert "bye" in text and not cached


def _outside_link(docs: Path, outside: Path) -> str:
    (outside / "link").symlink_to(docs / "sub")
    return str(outside / "link")


THROUGH = {
    # the page's code, given a link from outside the project to docs/sub; it reads docs/sub/data.txt
    "open with dir_fd": lambda link: ("fd = os.open('sub', os.O_RDONLY)\n"
                                      "print(open('data.txt', opener=lambda name, flags: os.open(name, flags, "
                                      "dir_fd=fd)).read())"),
    "os.stat with dir_fd": lambda link: "fd = os.open('sub', os.O_RDONLY)\nprint(os.stat('data.txt', dir_fd=fd).st_size)",
    "os.listdir of a descriptor": lambda link: "fd = os.open('sub', os.O_RDONLY)\nprint(sorted(os.listdir(fd)))",
    "os.fwalk": lambda link: "print([sorted(files) for _, _, files, _ in os.fwalk('sub')])",
    "//": lambda link: "print(open('/' + os.path.abspath('sub/data.txt')).read())",
    "/proc/self/cwd": lambda link: "print(open('/proc/self/cwd/sub/data.txt').read())",
    "a link from outside": lambda link: f"print(open({link + '/data.txt'!r}).read())",
}


@pytest.mark.parametrize("path", THROUGH)
def test_a_file_read_through_a_descriptor_or_another_name_of_its_path_is_an_input(tmp_path, tmp_path_factory,
                                                                                 settings, path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir()
    (docs / "sub/data.txt").write_text("hello")
    page = f"```python exec\nimport os\n{THROUGH[path](_outside_link(docs, tmp_path_factory.mktemp('outside')))}\n```\n"
    text, cached = printed(page, settings)
    assert not cached
    assert printed(page, settings) == (text, True)
    (docs / "sub/data.txt").write_text("bye!")
    (docs / "sub/more.txt").write_text("")
    again, cached = printed(page, settings)
    assert again != text and not cached


CLONES = {
    # the page's code, and how clone b differs from clone a (each has docs/data.txt and docs/sub/data.txt)
    "an optional helper": (LOOKUPS["import"][0], lambda d: (d / "helper.py").write_text("")),
    "a file read through dir_fd": (THROUGH["open with dir_fd"](""), lambda d: (d / "sub/data.txt").write_text("b")),
    "a file read in joblib's workers": (CHILDREN["joblib's loky workers"], lambda d: (d / "data.txt").write_text("b")),
}


@pytest.mark.parametrize("difference", CLONES)
def test_a_clone_never_gets_the_result_of_a_clone_that_differs_in_what_the_page_read(tmp_path, difference):
    code, differ = CLONES[difference]
    page = f"```python exec timeout=60\nimport os\n{code}\n```\n"
    cache = tmp_path / "shared"
    clones = {name: tmp_path / name for name in ("a", "b")}
    for root in clones.values():
        (root / "docs/sub").mkdir(parents=True)
        (root / "docs/data.txt").write_text("a")
        (root / "docs/sub/data.txt").write_text("a")
    differ(clones["b"] / "docs")
    a, _ = printed(page, Settings(root=clones["a"], cache_dir=cache))
    b, cached = printed(page, Settings(root=clones["b"], cache_dir=cache))
    assert b != a and not cached


@pytest.mark.parametrize(("argv", "ignores"), [
    (["python", "script.py", "-I"], False), (["python", "-c", "-I"], False), (["python", "-m", "x", "-S"], False),
    (["python", "-u", "-W", "ignore", "x.py"], False), (["python", "-Wignore", "-X", "dev", "-q"], False),
    (["python", "-I", "-c", "1"], True), (["python", "-E", "x.py"], True), (["python", "-S"], True),
    (["python", "-uIS", "x.py"], True), (["python", "-W", "ignore", "-E"], True), (["python", "-bE"], True),
])
def test_the_python_options_that_start_a_process_without_the_hooks(argv, ignores):
    assert inputs.ignores_pythonpath(argv) is ignores


def test_a_run_whose_reads_were_not_all_seen_is_never_unchanged(tmp_path):
    cause = "line 3 starts sh, a process whose reads the engine cannot see"
    manifest = inputs.Manifest.from_json(inputs.Manifest(unseen=cause).to_json())
    assert manifest.changed(tmp_path) == cause and inputs.Manifest().changed(tmp_path) is None


def test_the_names_of_the_variables_are_one_input(tmp_path, monkeypatch):
    monkeypatch.setenv("GREETING", "hello")
    names = inputs.Manifest(env={inputs.NAMES: inputs.env_fingerprint(inputs.NAMES, "")})
    assert names.changed(tmp_path) is None
    monkeypatch.setenv("GREETING", "bye")
    assert names.changed(tmp_path) is None, "a value is not a name"
    monkeypatch.setenv("GREETING_TOO", "x")
    assert names.changed(tmp_path) == "the environment's variable names changed"
    given = inputs.env_fingerprint("GREETING", "", {"GREETING": "hello"})
    assert given != inputs.env_fingerprint("GREETING", "") and inputs.env_fingerprint("ABSENT", "", {}) is None
