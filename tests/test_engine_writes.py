"""Pages are independent: a page writes nothing under the project (another page could read it,
and that page's cached result would go stale), whatever way it takes there (a link, a change of
a file's mode or times, a FIFO or a socket, an alias of a path), only into its scratch folder,
and it publishes files beside itself through lessonlib.publish, which the cache keeps with its
result; under mkdocs serve, a page that writes its own input stops rebuilding."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixture_sites import environment, make_site
from site_support import until

import lessonlib
from lessonlib.engine.builder import plugin
from lessonlib.engine.builder.page import execute_page, execute_pages
from lessonlib.engine.config import Settings
from lessonlib.engine.worker import inputs
from lessonlib.engine.worker.errors import LessonError, WriteError


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, cache_dir=tmp_path / "cache")


def writer(value: str) -> str:
    return f"# A\n\n```python exec\nx = 1\nopen('shared.txt', 'w').write({value!r})\n```\n"


READER = "# B\n\n```python exec\nprint(open('shared.txt').read())\n```\n"


def test_a_page_that_writes_a_file_another_page_reads_fails_naming_both_and_the_file(tmp_path, settings):
    """The issue's case: A writes shared.txt, B reads it; after an edit to A, B came from the cache
    with A's old content. Now A fails, in one line, whether B ran or came from the cache."""
    shared = tmp_path / "docs/shared.txt"
    shared.write_text("seed")
    for value in ("v1", "v2"):  # the second build follows an edit to A
        a, b = execute_pages([(writer(value), "docs/a.md"), (READER, "docs/b.md")], settings)
        assert isinstance(a, WriteError), a
        assert str(a) == ("docs/a.md:5: this block writes docs/shared.txt, which docs/b.md reads: pages are "
                          "independent, so a page writes only into its scratch folder (lessonlib.scratch()) or "
                          "publishes beside its page (lessonlib.publish(name, data))")
        assert b.outputs.blocks[0].text == "seed\n" and shared.read_text() == "seed", "the write never happened"
    alone = execute_pages([(writer("v3"), "docs/a.md")], settings)[0]
    assert isinstance(alone, WriteError) and "docs/shared.txt, a file under the project" in str(alone)


WRITES = {
    "append": "open('log.txt', 'a')",
    "update": "open('data.txt', 'r+')",
    "Path.write_text": "from pathlib import Path\nPath('new.txt').write_text('x')",
    "os.open": "import os\nos.open('new.txt', os.O_WRONLY | os.O_CREAT)",
    "os.replace": "import os\nos.replace('data.txt', 'moved.txt')",
    "os.remove": "import os\nos.remove('data.txt')",
    "os.mkdir": "import os\nos.mkdir('made')",
    "shutil.copyfile": "import shutil\nshutil.copyfile('data.txt', 'copy.txt')",
    "caught": "try:\n    open('log.txt', 'w')\nexcept OSError:\n    pass\nprint('went on')",
    "in a helper": "import writes_helper\nwrites_helper.write()",
    "subprocess": "import subprocess\nsubprocess.run(['sh', '-c', 'echo x > made.txt'], check=True)",
    "subprocess cp": "import subprocess\nsubprocess.run(['cp', 'data.txt', 'data.txt.bak'], check=True)",
}


def test_every_kind_of_write_under_the_project_fails_at_the_line_that_made_it(tmp_path, settings):
    docs = tmp_path / "docs"
    (docs / "data.txt").write_text("data")
    (docs / "writes_helper.py").write_text("def write():\n    open('helper.txt', 'w')\n")
    pages = [(f"# {kind}\n\n```python exec\n{code}\n```\n", f"docs/w{n}.md") for n, (kind, code) in enumerate(WRITES.items())]
    results = execute_pages(pages, Settings(root=tmp_path, cache_dir=settings.cache_dir, workers=2))
    for kind, (text, _), result in zip(WRITES, pages, results):
        assert isinstance(result, WriteError), (kind, result)
        line = 1 + next(n for n, code in enumerate(text.splitlines()) if n > 2 and any(
            call in code for call in ("open(", "os.", "shutil.", ".write", "subprocess.run")))
        assert result.line == line and "\n" not in str(result), (kind, str(result))
        assert result.by_process == kind.startswith("subprocess"), kind
    assert {p.name for p in docs.iterdir()} - {"__pycache__"} == {"data.txt", "writes_helper.py", "data.txt.bak",
                                                                  "made.txt"}, "only the subprocesses' (seen after)"


def test_the_scratch_folder_is_private_empty_outside_the_project_not_an_input_and_removed(tmp_path, settings):
    page = ("```python exec\nimport lessonlib, os\nfolder = lessonlib.scratch()\nprint(os.listdir(folder))\n"
            "(folder / 'x.txt').write_text('made')\nprint((folder / 'x.txt').read_text(), folder)\n```\n")
    first = execute_page(page, "docs/fixture.md", settings)
    listing, made = first.outputs.blocks[0].text.splitlines()
    folder = Path(made.split(" ", 1)[1])
    assert listing == "[]" and made.startswith("made ") and not folder.exists()
    assert tmp_path not in folder.parents
    assert not any("scratch" in name for name in json.dumps(first.inputs.to_json()).split('"'))
    assert execute_page(page, "docs/fixture.md", settings).from_cache
    again = execute_page(page, "docs/fixture.md", Settings(root=tmp_path, cache_dir=settings.cache_dir, refresh=True))
    assert again.outputs.blocks[0].text.splitlines()[0] == "[]", "empty again on the next run"


PUBLISHES = "```python exec\nimport lessonlib\nlessonlib.publish('weights.bin', bytes(range(256)) * 4)\n```\n"


def test_a_published_file_is_part_of_the_result_and_of_the_cached_one(tmp_path, settings):
    ran = execute_page(PUBLISHES, "docs/fixture.md", settings)
    cached = execute_page(PUBLISHES, "docs/fixture.md", settings)
    assert cached.from_cache and ran.outputs.published == cached.outputs.published == {
        "weights.bin": bytes(range(256)) * 4}
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == [], "written by the build, into the site"


@pytest.mark.parametrize(("call", "message"), [
    ("'../up.bin', b'x'", "a published file's name is a plain file name"),
    ("'sub/w.bin', b'x'", "a published file's name is a plain file name"),
    ("'index.html', b'x'", "the build writes the page's own html files"),
    ("'w.bin', b'x' * 2048", "the page's published files would take 0.0 MB, more than the limit of 0.0 MB"),
    ("'w.bin', b'x'); lessonlib.publish('w.bin', b'y'", "this page already published a file of that name"),
    ("type('Name', (str,), {'lower': lambda s: 'x'})('index.html'), b'x'", "a published file's name is a plain"),
])
def test_a_bad_name_or_too_much_to_publish_fails_in_one_line_at_the_call(tmp_path, settings, call, message):
    page = f"```python exec\nimport lessonlib\ntry:\n    lessonlib.publish({call})\nexcept ValueError:\n    pass\n```\n"
    small = Settings(root=tmp_path, cache_dir=settings.cache_dir, publish_limit_mb=0.001)
    with pytest.raises(LessonError) as failed:
        execute_page(page, "docs/fixture.md", small)
    assert "\n" not in str(failed.value) and message in str(failed.value), str(failed.value)
    assert failed.value.line == 4, "the call's line, though the page caught the error"


def test_a_cache_entry_with_damaged_published_files_is_a_miss(tmp_path):
    """On the cache alone, in process (a miss runs the page again: test_engine_cache)."""
    from lessonlib.engine.builder.cache import Entry, PageCache, _canonical
    from lessonlib.engine.worker.inputs import Manifest
    from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs
    from lessonlib.engine.worker.store import seal

    pages = PageCache(tmp_path / "cache")
    entry = Entry(PageOutputs([BlockOutput("")], {}, {"weights.bin": bytes(range(256)) * 4}), Manifest())
    pages.store("key", entry)
    assert pages.load("key") == entry
    stored = pages.root / "key.json"
    data = json.loads(stored.read_text())
    data["payload"]["published"]["weights.bin"] = "not base64!"
    data["seal"] = seal(stored.parent, _canonical(data["payload"]))  # damaged, yet sealed: as the build wrote it
    stored.write_text(json.dumps(data))
    assert pages.load("key") is None


def test_a_page_may_still_write_outside_the_project(tmp_path_factory, settings):
    outside = tmp_path_factory.mktemp("outside") / "log"
    page = f"```python exec\nopen({str(outside)!r}, 'w').write('ran')\n```\n"
    execute_page(page, "docs/fixture.md", settings)
    assert outside.read_text() == "ran" and os.path.exists(outside)


def test_outside_a_build_publish_leaves_the_working_folder_as_it_was(tmp_path, monkeypatch):
    """A notebook that runs a page's code (a lesson's, re-run in a kernel beside the page) has no
    site to publish into: the file goes to the scratch folder, never beside the notebook."""
    monkeypatch.chdir(tmp_path)
    lessonlib.publish("weights-abc.json", b"{}")
    assert list(tmp_path.iterdir()) == []
    assert (lessonlib.scratch() / "weights-abc.json").read_bytes() == b"{}"


# --- links, metadata, special files and aliases: each refused at its line (issue 67, class 6) ------

MARK = "  # refused here"
SNEAKY = {
    # a link made in scratch() that points into the project: a later write through it would land there
    "symlink to the docs folder": "import os, lessonlib\nos.symlink(os.getcwd(), lessonlib.scratch() / 'd')" + MARK,
    "symlink to a file": "import os, lessonlib\nos.symlink(os.path.abspath('data.txt'), lessonlib.scratch() / 'f')" + MARK,
    "relative symlink": "import os, lessonlib\nos.chdir(lessonlib.scratch())\nos.symlink(os.path.relpath({docs!r}), 'd')" + MARK,
    "hard link": "import os, lessonlib\nos.link('data.txt', lessonlib.scratch() / 'h')" + MARK,
    "through a link a process made": (
        "import os, subprocess, lessonlib\nlink = lessonlib.scratch() / 'd'\n"
        "subprocess.run(['ln', '-s', os.getcwd(), str(link)], check=True)\nopen(link / 'planted.md', 'w')" + MARK),
    # a file's metadata: mode, owner, times, extended attributes
    "chmod": "import os\nos.chmod('../scripts/build', 0o600)" + MARK,
    "Path.chmod": "from pathlib import Path\nPath('data.txt').chmod(0o600)" + MARK,
    "fchmod": "import os\nfd = os.open('data.txt', os.O_RDONLY)\nos.fchmod(fd, 0o600)" + MARK,
    "chown": "import os\nos.chown('data.txt', os.getuid(), os.getgid())" + MARK,
    "utime": "import os\nos.utime('data.txt', (0, 0))" + MARK,
    "touch": "from pathlib import Path\nPath('data.txt').touch()" + MARK,
    "copystat": ("import shutil, lessonlib\n(lessonlib.scratch() / 'x').write_text('x')\n"
                 "shutil.copystat(lessonlib.scratch() / 'x', 'data.txt')" + MARK),
    "setxattr": "import os\nos.setxattr('data.txt', 'user.lessonlib', b'1')" + MARK,
    # special files, which would make a later build wait on them
    "mkfifo": "import os\nos.mkfifo('trap.md')" + MARK,
    "mknod": "import os, stat\nos.mknod('node', 0o600 | stat.S_IFIFO)" + MARK,
    "unix socket": "import socket\nsocket.socket(socket.AF_UNIX).bind('page.sock')" + MARK,
    # another way to spell a path in the project
    "/proc/self/cwd": "open('/proc/self/cwd/new.txt', 'w')" + MARK,
    "//": "import os\nopen('/' + os.path.abspath('new.txt'), 'w')" + MARK,
    "..": "import lessonlib\nup = '/..' * len(lessonlib.scratch().parts)  # to /\nopen(f'{{lessonlib.scratch()}}{{up}}{docs}/new.txt', 'w')" + MARK,
    "dir_fd": ("import os, lessonlib\nfd = os.open('.', os.O_RDONLY)\nos.chdir(lessonlib.scratch())\n"
               "os.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd)" + MARK),
    "rename with dir_fds": (
        "import os, lessonlib\ndocs, mine = os.open('.', os.O_RDONLY), os.open(lessonlib.scratch(), os.O_RDONLY)\n"
        "(lessonlib.scratch() / 'page.md').write_text('# Planted')\n"
        "os.rename('page.md', 'planted.md', src_dir_fd=mine, dst_dir_fd=docs)" + MARK),
}


def test_every_sneaky_write_into_the_project_is_refused_at_its_line_and_nothing_changes(tmp_path, settings):
    """The issue's cases (a link in scratch() through which a page was planted and published,
    scripts/build made 0600, a FIFO, a socket, /proc/self/cwd and // paths) and their kin: each
    fails its page in one line at the line that made it, even where the page catches the error."""
    docs, scripts = tmp_path / "docs", tmp_path / "scripts"
    (docs / "data.txt").write_text("data")
    scripts.mkdir()
    (scripts / "build").write_text("#!/bin/sh\n")
    (scripts / "build").chmod(0o755)
    before = {p: (p.stat().st_mode, p.stat().st_mtime_ns) for p in [docs / "data.txt", scripts / "build"]}
    pages = []
    for n, code in enumerate(SNEAKY.values()):
        code = code.format(docs=str(docs)).replace(MARK, "")
        line = 3 + code.count("\n")  # the fence is line 1; the last line is the refused one
        caught = "try:\n" + "".join(f"    {c}\n" for c in code.splitlines()) + "except OSError:\n    pass\n"
        pages.append((f"# Sneaky\n```python exec\n{caught}print('went on')\n```\n", f"docs/s{n}.md", line + 1))
    results = execute_pages([(text, path) for text, path, _ in pages], replace_workers(settings, 2))
    wrong = {kind: getattr(result, "message", "ran") for kind, (_, _, line), result in zip(SNEAKY, pages, results)
             if not (isinstance(result, WriteError) and result.line == line and "\n" not in str(result))}
    assert wrong == {}
    assert [p.name for p in docs.iterdir()] == ["data.txt"], "nothing made, linked or planted"
    assert {p: (p.stat().st_mode, p.stat().st_mtime_ns) for p in before} == before, "modes and times as they were"


def replace_workers(settings: Settings, workers: int) -> Settings:
    return Settings(root=settings.root, cache_dir=settings.cache_dir, workers=workers)


ALLOWED = """\
```python exec
import os, socket, lessonlib
mine = lessonlib.scratch()
fd = os.open(mine, os.O_RDONLY)
os.close(os.open('out.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd))  # in scratch, though the page's folder has no such file
os.symlink(mine / 'out.txt', mine / 'link')
open(mine / 'link', 'w').write('through a link within scratch')
os.chmod(mine / 'out.txt', 0o600)
os.utime(mine / 'out.txt')
os.mkfifo(mine / 'fifo')
socket.socket(socket.AF_UNIX).bind(str(mine / 's'))
os.remove(mine / 'link')
print((mine / 'out.txt').read_text())
```
"""


def test_the_same_calls_into_the_scratch_folder_are_not_refused(tmp_path, settings):
    result = execute_page(ALLOWED, "docs/fixture.md", settings)
    assert result.outputs.blocks[0].text == "through a link within scratch\n"


@pytest.mark.parametrize(("path", "dir_fd", "follow", "expected"), [
    ("/proc/self/cwd/x.txt", None, True, "{cwd}/x.txt"),
    ("/{cwd}/x.txt", None, False, "{cwd}/x.txt"),  # "//tmp/...": POSIX keeps two slashes as they are
    ("{cwd}/sub/../x.txt", None, False, "{cwd}/x.txt"),
    ("x.txt", "cwd", False, "{cwd}/x.txt"),
    ("link", None, True, "{cwd}/target"),
    ("link", None, False, "{cwd}/link"),
])
def test_a_written_path_is_resolved_as_the_call_resolves_it(tmp_path, monkeypatch, path, dir_fd, follow, expected):
    monkeypatch.chdir(tmp_path)
    cwd = str(tmp_path.resolve())
    (tmp_path / "link").symlink_to(tmp_path / "target")
    fd = os.open(tmp_path, os.O_RDONLY) if dir_fd else None
    try:
        assert inputs._resolved(path.format(cwd=cwd), fd, follow) == expected.format(cwd=cwd)
    finally:
        if fd is not None:
            os.close(fd)


def test_a_descriptor_is_resolved_to_the_file_it_is_open_on(tmp_path):
    (tmp_path / "data.txt").write_text("x")
    fd = os.open(tmp_path / "data.txt", os.O_RDONLY)
    try:
        assert inputs._resolved(fd) == str((tmp_path / "data.txt").resolve())
    finally:
        os.close(fd)


INTERNALS = ("```python exec\nfrom lessonlib.engine.worker import page_files\n"
             "page_files._Run.published[{name!r}] = b'escaped'\n```\n")


@pytest.mark.parametrize("where", ["../../escaped.txt", "absolute"])
def test_a_published_name_set_through_internals_fails_the_page_and_nothing_leaves_the_site(tmp_path, where, build):
    """lessonlib.publish checks its names; one put past it (into the engine's own table) is
    checked again as the worker hands it over, and the build writes nothing outside its site."""
    outside = tmp_path / "escaped.txt"
    name = str(outside) if where == "absolute" else where
    site = make_site(tmp_path / "s", {"index.md": "# Home\n", "bad.md": INTERNALS.format(name=name)})
    result = build(site)
    assert result.returncode != 0 and not outside.exists() and not (tmp_path / "s/escaped.txt").exists()
    said = result.stdout + result.stderr
    assert "docs/bad.md:1: lessonlib.publish(" in said and "a published file's name is a plain file name" in said, said


# --- under mkdocs serve ---------------------------------------------------------------------------

def test_serve_builds_again_unless_only_the_last_build_changed_files():
    start, end = {"a": (1,), "b": (1,)}, {"a": (2,), "b": (1,)}
    assert plugin._only_changed_during(start, end, end) == ["a"], "its own write: stop"
    assert plugin._only_changed_during(start, end, {"a": (2,), "b": (2,)}) == [], "changed since: build"
    assert plugin._only_changed_during(start, end, {**end, "c": (1,)}) == [], "a file made since: build"
    assert plugin._only_changed_during(end, end, end) == [], "nothing changed at all (asked for by hand)"
    assert plugin._only_changed_during({}, {}, end) == [], "the first build"


# Reads its input, then a process changes it under a name the engine was not given: the page
# runs twice (its input changed while it ran) and is not cached, and its build changes the file.
WRITES_ITS_INPUT = """\
```python exec
import subprocess
print(open('data.txt').read().count('x'))
subprocess.run(['sh', '-c', 'cd .. && echo x >> docs/data.txt'], check=True)
```
"""


def test_under_serve_a_page_that_writes_its_own_input_stops_rebuilding_after_one(tmp_path, killed_build_temp):
    """The issue's case rebuilt 48 times in a minute. After the author's edit, one build runs
    (and changes the file), the rebuild its change asks for stops in one line, and no other
    follows until the author changes a file again."""
    site = make_site(tmp_path / "s", {"index.md": "# Home\n", "loop.md": WRITES_ITS_INPUT})
    (site / "docs/data.txt").write_text("x\n")
    log = tmp_path / "serve.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def served() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/loop/", timeout=5):
                return True
        except OSError:
            return False

    def builds() -> int:
        return log.read_text().count("Detected file changes")

    with log.open("w") as err:  # a process: serve runs until it is stopped, rebuilding meanwhile
        server = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "-a", f"127.0.0.1:{port}"], cwd=site,
                                  env=environment(TMPDIR=str(killed_build_temp)), stdout=subprocess.DEVNULL,
                                  stderr=err)
    try:
        until(served, "the first build")
        with (site / "docs/data.txt").open("a") as f:
            f.write("x\n")  # the author's edit
        until(lambda: "not rebuilt: docs/data.txt changed while the last build ran" in log.read_text() or builds() > 3,
              "the rebuild the page's own write asked for to stop", bound_s=120)
        time.sleep(5)  # time for another rebuild, if one were coming
        assert builds() == 2, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        server.terminate()
        server.wait()
