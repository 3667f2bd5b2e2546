"""Pages are independent: a page writes nothing under the project (another page could read it,
and that page's cached result would go stale), only into its scratch folder, and it publishes
files beside itself through lessonlib.publish, which the cache keeps with its result."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import lessonlib
from lessonlib.engine.build.page import execute_page, execute_pages
from lessonlib.engine.config import Settings
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
])
def test_a_bad_name_or_too_much_to_publish_fails_in_one_line_at_the_call(tmp_path, settings, call, message):
    page = f"```python exec\nimport lessonlib\ntry:\n    lessonlib.publish({call})\nexcept ValueError:\n    pass\n```\n"
    small = Settings(root=tmp_path, cache_dir=settings.cache_dir, publish_limit_mb=0.001)
    with pytest.raises(LessonError) as failed:
        execute_page(page, "docs/fixture.md", small)
    assert "\n" not in str(failed.value) and message in str(failed.value), str(failed.value)
    assert failed.value.line == 4, "the call's line, though the page caught the error"


def test_a_cache_entry_with_damaged_published_files_is_a_miss(tmp_path, settings):
    execute_page(PUBLISHES, "docs/fixture.md", settings)
    (entry,) = (settings.cache_dir / "pages").glob("*.json")
    data = json.loads(entry.read_text())
    data["payload"]["published"]["weights.bin"] = "not base64!"
    from lessonlib.engine.build.cache import _checksum
    data["checksum"] = _checksum(data["payload"])
    entry.write_text(json.dumps(data))
    again = execute_page(PUBLISHES, "docs/fixture.md", settings)
    assert not again.from_cache and again.outputs.published["weights.bin"][:3] == bytes([0, 1, 2])


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
