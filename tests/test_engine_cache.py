"""The page cache and memo: what runs again, what does not, and what survives damage.

A result may be reused only while everything the page (or the memoized call) really read is
unchanged: its code, the project modules it imported, the files and folders it read, the
environment variables it read, the installed versions. Each test changes one of these. The
cache is the build's: a page may not write into it, and what the build loads from it is what
the engine sealed, never a pickle someone else planted.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import stat
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from lessonlib.engine.builder import cache as cache_module
from lessonlib.engine.builder.page import PACKAGE_ROOT, execute_page, execute_pages
from lessonlib.engine.config import Settings
from lessonlib.engine.worker import inputs, store
from lessonlib.engine.worker.errors import LessonError, WriteError
from lessonlib.engine.worker.inputs import Manifest
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs

PATH = "docs/fixture.md"


def page_with_side_effect(log: Path, prose: str = "Some prose.", extra: str = "") -> str:
    return (
        f"# Title\n\n{prose}\n\n"
        f"```python exec\nwith open({str(log)!r}, 'a') as f:\n    f.write('ran\\n')\nanswer = 42{extra}\n```\n\n"
        "The answer is `{py} answer`.\n"
    )


def runs(log: Path) -> int:
    return log.read_text().count("ran") if log.exists() else 0


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, cache_dir=tmp_path / "cache")


def test_no_change_and_prose_edits_run_nothing_code_edits_run_again(tmp_path, settings):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    first = execute_page(page_with_side_effect(log), PATH, settings)
    assert (runs(log), first.from_cache, first.blocks_run) == (1, False, 1)

    again = execute_page(page_with_side_effect(log), PATH, settings)
    assert (runs(log), again.from_cache, again.blocks_run) == (1, True, 0)
    assert again.markdown == first.markdown

    edited = execute_page(page_with_side_effect(log, prose="Different words, same code."), PATH, settings)
    assert runs(log) == 1 and edited.from_cache
    assert "Different words, same code." in edited.markdown and "The answer is 42." in edited.markdown

    execute_page(page_with_side_effect(log, extra=" + 0"), PATH, settings)
    assert runs(log) == 2


def test_refresh_forces_a_run(tmp_path, settings):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    execute_page(page_with_side_effect(log), PATH, settings)
    execute_page(page_with_side_effect(log), PATH, Settings(root=tmp_path, cache_dir=settings.cache_dir, refresh=True))
    assert runs(log) == 2


def test_a_data_file_the_page_reads_is_an_input(tmp_path, settings):
    (tmp_path / "docs" / "data.txt").write_text("3\n")
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra="\nwith open('data.txt') as f:\n    answer = int(f.read())")
    assert "The answer is 3." in execute_page(page, PATH, settings).markdown
    assert execute_page(page, PATH, settings).from_cache
    (tmp_path / "docs" / "data.txt").write_text("4\n")
    again = execute_page(page, PATH, settings)
    assert runs(log) == 2 and "The answer is 4." in again.markdown


def test_a_folder_the_page_lists_is_an_input(tmp_path, settings):
    (tmp_path / "docs" / "runs").mkdir()
    (tmp_path / "docs" / "runs" / "a.csv").write_text("")
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra="\nimport glob\nanswer = len(glob.glob('runs/*.csv'))")
    assert "The answer is 1." in execute_page(page, PATH, settings).markdown
    (tmp_path / "docs" / "runs" / "b.csv").write_text("")
    assert "The answer is 2." in execute_page(page, PATH, settings).markdown


def test_a_helper_module_next_to_the_page_is_an_input_however_it_is_imported(tmp_path, settings):
    helper = tmp_path / "docs" / "helper.py"
    helper.write_text("def scale(x):\n    return 2 * x\n")
    (tmp_path / "docs" / "unrelated.py").write_text("x = 1\n")
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra="\nimport importlib\nanswer = importlib.import_module('helper').scale(21)")
    assert "The answer is 42." in execute_page(page, PATH, settings).markdown
    (tmp_path / "docs" / "unrelated.py").write_text("x = 2\n")
    assert execute_page(page, PATH, settings).from_cache
    helper.write_text("def scale(x):\n    return 3 * x\n")
    assert "The answer is 63." in execute_page(page, PATH, settings).markdown
    assert runs(log) == 2


def test_an_environment_variable_the_page_reads_is_an_input(tmp_path, settings, monkeypatch):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra="\nimport os\nanswer = os.environ.get('FIXTURE_SCALE', '1')")
    monkeypatch.setenv("FIXTURE_SCALE", "5")
    assert "The answer is 5." in execute_page(page, PATH, settings).markdown
    monkeypatch.setenv("FIXTURE_UNREAD", "anything")
    assert execute_page(page, PATH, settings).from_cache
    monkeypatch.setenv("FIXTURE_SCALE", "6")
    assert "The answer is 6." in execute_page(page, PATH, settings).markdown


def test_a_lessonlib_module_reached_through_an_attribute_is_an_input(tmp_path, settings):
    """`import lessonlib` then `lessonlib.X.f()`: no static import names X, the trace does."""
    name = f"_probe_{uuid.uuid4().hex[:8]}"
    module = PACKAGE_ROOT / f"{name}.py"
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra=f"\nimport lessonlib, importlib\nimportlib.import_module('lessonlib.{name}')"
                                            f"\nanswer = lessonlib.{name}.value()")
    try:
        module.write_text("def value():\n    return 1\n")
        importlib.invalidate_caches()
        assert "The answer is 1." in execute_page(page, PATH, settings).markdown
        assert execute_page(page, PATH, settings).from_cache
        module.write_text("def value():\n    return 2\n")
        assert "The answer is 2." in execute_page(page, PATH, settings).markdown
    finally:
        module.unlink(missing_ok=True)


class FakeSite:
    """A folder outside the project with two installed distributions: fakelib, which pages
    import, and faketool, which nothing imports (like a test tool)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for name in ("fakelib", "faketool"):
            (folder / name).mkdir()
            (folder / name / "__init__.py").write_text("def answer():\n    return 42\n")
            self.install(name, "1.0")

    def install(self, name: str, version: str) -> None:
        for old in self.folder.glob(f"{name}-*.dist-info"):
            shutil.rmtree(old)
        info = self.folder / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "top_level.txt").write_text(f"{name}\n")
        importlib.invalidate_caches()

    def imports(self, module: str) -> str:
        """Page code that imports `module` from this site."""
        return f"import sys\nsys.path.insert(0, {str(self.folder)!r})\nimport {module}\n"


@pytest.fixture
def site(tmp_path_factory, monkeypatch) -> FakeSite:
    folder = tmp_path_factory.mktemp("site-packages")
    monkeypatch.syspath_prepend(str(folder))  # where the build looks the versions up again
    return FakeSite(folder)


def test_bumping_a_library_the_page_uses_reruns_it_and_bumping_a_test_tool_reruns_nothing(
        tmp_path, settings, site):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    page = page_with_side_effect(log, extra="\n" + site.imports("fakelib") + "answer = fakelib.answer()")
    first = execute_page(page, PATH, settings)
    assert first.inputs.dists["fakelib"] == "1.0"
    assert not {"faketool", "pytest", "ruff", "lessonlib", "torch"} & set(first.inputs.dists)  # torch: the engine's

    site.install("faketool", "2.0")
    assert execute_page(page, PATH, settings).from_cache and runs(log) == 1

    site.install("fakelib", "2.0")
    reasons = []
    again = execute_pages([(page, PATH)], settings, report=reasons.append)[0]
    assert not again.from_cache and runs(log) == 2
    assert any("installed distribution fakelib changed" in r for r in reasons), reasons


@pytest.mark.parametrize("listed_in", ["top_level.txt", "RECORD"])  # RECORD alone: as hatchling and flit install
def test_a_distribution_is_known_by_the_top_level_packages_it_installs(tmp_path, monkeypatch, listed_in):
    tag = uuid.uuid4().hex[:8]  # names no earlier test of this process fingerprinted
    package, neighbour = f"lib{tag}", f"lib{tag}_extra"  # a name that starts another's is not it
    for dist, version, packages in [(f"dist{tag}", "1.0", [package]), (f"other{tag}", "2.0", [neighbour])]:
        info = tmp_path / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nName: not this\n")
        if listed_in == "top_level.txt":
            (info / "top_level.txt").write_text("\n".join(packages) + "\n")
        else:
            (info / "RECORD").write_text("".join(f"{p}/__init__.py,sha256=x,1\n{p}/data.txt,,\n" for p in packages)
                                         + f"{info.name}/METADATA,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert inputs.distributions({package, "no_such_package"}) == {f"dist{tag}": "1.0"}
    assert inputs.distributions({neighbour}) == {f"other{tag}": "2.0"}


def test_bumping_a_library_reruns_a_memoized_call_that_uses_it_and_nothing_else(tmp_path, settings, site):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there

    def page(version: int) -> str:  # each version of the page runs; its memoized call may not
        return ("```python exec\n" + site.imports("fakelib") + "from lessonlib import memo\n"
                f"def train():\n    with open({str(log)!r}, 'a') as f:\n        f.write('ran\\n')\n"
                f"    return fakelib.answer()\nprint(memo(train)(), {version})\n```\n")

    execute_page(page(1), PATH, settings)
    (entry,) = (settings.cache_dir / "memo").glob("*.json")
    assert json.loads(entry.read_text())["manifest"]["dists"]["fakelib"] == "1.0"

    site.install("faketool", "2.0")
    assert not execute_page(page(2), PATH, settings).from_cache and runs(log) == 1

    site.install("fakelib", "2.0")
    execute_page(page(3), PATH, settings)
    assert runs(log) == 2


def test_pages_do_not_leak_state_into_each_other(tmp_path, settings):
    leaky = ("```python exec\nimport os, sys, torch\ntorch.set_default_dtype(torch.float64)\n"
             "os.environ['LEAK'] = '1'\nsys.path.append('/leak')\nimport lessonlib\nlessonlib.LEAK = 1\n```\n")
    victim = ("```python exec\nimport os, sys, torch, lessonlib\n"
              "print(torch.get_default_dtype(), os.environ.get('LEAK'), '/leak' in sys.path, hasattr(lessonlib, 'LEAK'))\n```\n")
    (tmp_path / "docs" / "a.md").write_text(leaky)
    execute_page(leaky, "docs/a.md", settings)
    result = execute_page(victim, "docs/b.md", settings)
    assert result.outputs.blocks[0].text == "torch.float32 None False False\n"


def test_failed_runs_are_not_cached(tmp_path, settings):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    bad = page_with_side_effect(log) + "\n```python exec\nassert answer == 0\n```\n"
    for _ in range(2):
        with pytest.raises(Exception):
            execute_page(bad, PATH, settings)
    assert runs(log) == 2
    assert not list((settings.cache_dir / "pages").glob("*.json"))


def damage_entry(entry: Path, damage: str) -> None:
    text = entry.read_text()
    if damage in ("a folder", "a pipe"):  # not a regular file: a miss (a pipe must not hang the read)
        entry.unlink()
        entry.mkdir() if damage == "a folder" else os.mkfifo(entry)
    else:
        entry.write_text({"truncate": text[: len(text) // 2], "garble": "\x00not json",
                          "tamper": text.replace("ran", "RAN").replace("42", "41")}[damage])


@pytest.mark.parametrize("damage", ["truncate", "garble", "tamper", "a folder", "a pipe"])
def test_a_damaged_entry_is_a_miss_and_a_stored_one_a_hit(tmp_path, damage):
    """In process, on the cache alone: what the build does with a miss is the test below."""
    pages = cache_module.PageCache(tmp_path / "cache")
    entry = cache_module.Entry(PageOutputs([BlockOutput("ran\n")], {"answer": "42"}),
                               Manifest(files={"docs/data.txt": "abc"}))
    pages.store("key", entry)
    assert pages.load("key") == entry
    damage_entry(pages.root / "key.json", damage)
    assert pages.load("key") is None
    pages.store("key", entry)  # the damaged file is replaced
    assert pages.load("key") == entry


def test_a_damaged_entry_is_detected_and_the_page_rerun(tmp_path, settings):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    first = execute_page(page_with_side_effect(log), PATH, settings)
    (entry,) = (settings.cache_dir / "pages").glob("*.json")
    damage_entry(entry, "tamper")
    again = execute_page(page_with_side_effect(log), PATH, settings)
    assert runs(log) == 2 and not again.from_cache
    assert again.markdown == first.markdown
    assert execute_page(page_with_side_effect(log), PATH, settings).from_cache


# --- memo ----------------------------------------------------------------------------------------

MEMO_PAGE = """\
```python exec
import lessonlib, torch
from experiment import train
SCALE = {scale}

def helper(x):
    return x * {factor}

@lessonlib.memo
def on_page(n):
    return helper(n) * SCALE

torch.manual_seed(1)
result, local = train(10, {log!r}), on_page(2)
after = torch.rand(2).tolist()  # a memo hit and a miss must leave this the same
```

```python exec
{later}
```

`{{py}} result` `{{py}} local` `{{py}} after`
"""
EXPERIMENT = """\
import lessonlib, torch
from helpers import twice

@lessonlib.memo
def train(steps, log):
    with open(log, 'a') as f:
        f.write('ran\\n')
    return twice(steps) + torch.rand(1).item()
"""


def memo_page(log: Path, scale=1, factor=3, later="pass") -> str:
    return MEMO_PAGE.format(scale=scale, factor=factor, log=str(log), later=later)


@pytest.fixture
def experiment(tmp_path, settings) -> Path:
    (tmp_path / "docs" / "experiment.py").write_text(EXPERIMENT)
    (tmp_path / "docs" / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "docs" / "other.py").write_text("x = 1\n")
    return tmp_path / "docs"


def test_memo_skips_the_call_when_only_a_later_block_changes(tmp_path, settings, experiment):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    first = execute_page(memo_page(log), PATH, settings)
    second = execute_page(memo_page(log, later="print('a later block changed')"), PATH, settings)
    assert runs(log) == 1 and not second.from_cache
    assert first.outputs.values == second.outputs.values, "a hit gives the same values and the same later random draws"


def test_the_build_terminal_says_what_each_computed_call_cost_and_nothing_for_a_reused_one(
        tmp_path, settings, experiment, capfd):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    execute_page(memo_page(log), PATH, settings)
    computed = re.findall(r"^(\S+): computed in \d+\.\d s$", capfd.readouterr().err, re.MULTILINE)
    assert sorted(computed) == ["experiment.train", "on_page"]
    execute_page(memo_page(log, later="print('a later block changed')"), PATH, settings)
    assert "computed in" not in capfd.readouterr().err, "a reused result was computed before, not now"


@pytest.mark.parametrize("damage", ["a folder", "a pipe"])
def test_a_memoized_entry_that_is_not_a_regular_file_is_a_miss(tmp_path, settings, experiment, damage):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    execute_page(memo_page(log), PATH, settings)
    for entry in (settings.cache_dir / "memo").glob("*.json"):  # reading a pipe would hang the page
        entry.unlink()
        entry.mkdir() if damage == "a folder" else os.mkfifo(entry)
    execute_page(memo_page(log, later="x = 1"), PATH, settings)
    assert runs(log) == 2
    execute_page(memo_page(log, later="x = 2"), PATH, settings)
    assert runs(log) == 2, "stored again in its place"


def test_memo_reruns_when_a_helper_module_it_calls_changes(tmp_path, settings, experiment):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    execute_page(memo_page(log), PATH, settings)
    (experiment / "other.py").write_text("x = 2\n")
    execute_page(memo_page(log, later="x = 1"), PATH, settings)
    assert runs(log) == 1, "a module the call never reached does not count"
    (experiment / "helpers.py").write_text("def twice(x):\n    return x + x + 0\n")
    execute_page(memo_page(log, later="x = 2"), PATH, settings)
    assert runs(log) == 2


def test_memo_reruns_when_a_page_function_or_global_it_reads_changes(tmp_path, settings, experiment):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    values = lambda result: result.outputs.values["local"]  # noqa: E731
    assert values(execute_page(memo_page(log), PATH, settings)) == "6"
    assert values(execute_page(memo_page(log, factor=4), PATH, settings)) == "8", "the page function it calls"
    assert values(execute_page(memo_page(log, factor=4, scale=10), PATH, settings)) == "80", "the page global it reads"


def test_memo_refresh_reruns_and_a_hit_equals_a_miss(tmp_path, settings, experiment):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    first = execute_page(memo_page(log), PATH, settings)
    forced = execute_page(memo_page(log), PATH, Settings(root=tmp_path, cache_dir=settings.cache_dir, refresh=True))
    assert runs(log) == 2
    assert first.outputs == forced.outputs


NESTED_PAGE = """\
```python exec
import lessonlib
from experiment import train

@lessonlib.memo
def outer(n):
    return train(n, {log!r}) + 1  # train is memoized too
```

`{{py}} outer(10)`
"""


def test_a_memoized_call_inside_another_makes_both_run_again_when_the_inner_ones_code_changes(
        tmp_path, settings, experiment):
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    first = execute_page(NESTED_PAGE.format(log=str(log)), PATH, settings)
    (experiment / "helpers.py").write_text("def twice(x):\n    return 3 * x\n")  # only train reaches it
    second = execute_page(NESTED_PAGE.format(log=str(log)), PATH, settings)
    assert runs(log) == 2
    assert float(second.outputs.values["outer(10)"]) == float(first.outputs.values["outer(10)"]) + 10


def test_a_memoized_call_depends_on_its_own_code_not_on_the_engine_that_watched_it(tmp_path, settings, experiment):
    execute_page(memo_page(tmp_path.parent / f"{tmp_path.name}.log"), PATH, settings)
    entries = [json.loads(p.read_text()) for p in (settings.cache_dir / "memo").glob("*.json")]
    (modules,) = [e["manifest"]["modules"] for e in entries if e["function"] == "experiment.train"]
    assert {"docs/experiment.py", "docs/helpers.py"} <= set(modules)
    assert not [m for m in modules if "lessonlib/engine/" in m], modules


WATCHED = """\
import sys, traceback
import lessonlib

@lessonlib.memo
def train(n):
    print("step 1", file=sys.stderr)  # into the page's captured output, as a log line goes
    traceback.format_stack()  # as a warning or a logger with stack_info does: it reads every frame's file
    return 2 * n
"""


def test_no_engine_file_is_an_input_of_a_memoized_call_even_when_the_call_prints_or_reads_the_stack(
        tmp_path, settings):
    (tmp_path / "docs" / "watched.py").write_text(WATCHED)
    page = "```python exec\nfrom watched import train\nresult = train(3)\n```\n\n`{py} result`\n"
    assert execute_page(page, PATH, settings).outputs.values == {"result": "6"}
    (entry,) = [json.loads(p.read_text()) for p in (settings.cache_dir / "memo").glob("*.json")]
    assert "docs/watched.py" in entry["manifest"]["modules"]
    read = [path for kind in entry["manifest"].values() for path in kind]
    assert not [path for path in read if "lessonlib/engine/" in path], read


PRINTS = """\
import sys, lessonlib

@lessonlib.memo
def train(n, log):
    with open(log, "a") as f:
        f.write("ran\\n")
    print("step 1")
    print("loss 0.5", file=sys.stderr)
    return 2 * n
"""


def test_what_a_memoized_call_printed_on_the_page_is_printed_again_when_its_result_is_reused(tmp_path, settings):
    (tmp_path / "docs" / "prints.py").write_text(PRINTS)
    log = tmp_path.parent / f"{tmp_path.name}.log"  # outside the project: a page may not write there
    block = f"```python exec\nfrom prints import train\nprint('before')\nresult = train(3, {str(log)!r})\nprint('after')\n```\n"
    first = execute_page(block, PATH, settings)
    again = execute_page(block + "\n```python exec\nx = 1\n```\n", PATH, settings)
    assert runs(log) == 1 and not again.from_cache, "the page ran again and reused the call's result"
    assert first.outputs.blocks[0].text == again.outputs.blocks[0].text == "before\nstep 1\nloss 0.5\nafter\n"


SHARED_CALL = """\
```python exec
from lessonlib.engine.worker import capture
from experiment import train
capture._terminal = open({said!r}, "a", buffering=1)  # the engine's lines, where the other page's call reads them
result = train(10, {log!r})
```

`{{py}} result`
"""

HELD_CALL = """\
import time


def twice(x):  # holds the first page's call until the other page has missed it too
    while ("waiting for another page" not in open({said!r}).read()  # it waits for this one's result
           and open({log!r}).read().count("ran") < 2):  # or, with no lock, it runs the call itself
        time.sleep(0.01)
    return 2 * x
"""


@pytest.mark.never_reused  # concurrency: one passing run vouches for no other
def test_pages_side_by_side_compute_a_shared_memoized_call_once(tmp_path, settings, experiment):
    """Both pages miss; the second waits for the first's result instead of computing it again.
    The first holds its call until the second has said it waits, or has run the call too."""
    log, said = (tmp_path.parent / f"{tmp_path.name}.{name}" for name in ("log", "said"))  # outside the project
    said.touch()
    (experiment / "helpers.py").write_text(HELD_CALL.format(said=str(said), log=str(log)))
    pages = [(SHARED_CALL.format(said=str(said), log=str(log)), f"docs/{name}.md") for name in "ab"]
    a, b = execute_pages(pages, Settings(root=tmp_path, cache_dir=settings.cache_dir, workers=2))
    assert runs(log) == 1
    assert a.outputs == b.outputs, "the same values, and nothing about the wait in either page"


def test_the_page_that_took_longest_last_time_starts_first(tmp_path, settings):
    """Never run: the page with the most code first. After a run: the one that took longest first,
    even when its code has changed since (one worker, so the order is visible in the report). The
    durations are written where the build records them, so no page has to be slow."""
    small = "```python exec\nx = 1{}\n```\n"
    big = "```python exec\n" + "".join(f"x{i} = {i}\n" for i in range(40)) + "{}\n```\n"
    one_worker = Settings(root=tmp_path, cache_dir=settings.cache_dir, workers=1)

    def order(edit: str) -> list[str]:
        lines: list[str] = []
        execute_pages([(small.format(edit), "docs/small.md"), (big.format(edit), "docs/big.md")], one_worker,
                      report=lines.append)
        return [line.split()[1].rstrip(":") for line in lines if line.startswith("[")]

    assert order("") == ["docs/big.md", "docs/small.md"]
    durations = cache_module.PageCache(settings.cache_dir)
    assert all(durations.last_seconds(f"docs/{name}.md") is not None for name in ("small", "big"))  # recorded
    durations.note_seconds("docs/small.md", 60.0)  # as if the small page had taken a minute
    durations.note_seconds("docs/big.md", 0.1)
    assert order("\nedited = 1") == ["docs/small.md", "docs/big.md"]


# --- how big the cache grows ------------------------------------------------------------------------

def stored(settings: Settings, folder: str) -> list[str]:
    return sorted(p.name for p in (settings.cache_dir / folder).glob("*.json"))


def test_past_the_limit_the_entries_used_least_recently_go_and_only_run_again(tmp_path, settings, experiment):
    """With no room at all, a run keeps only what it used: hits (of a page or of a memoized
    call) count as use. What was dropped runs again when next needed."""
    tight = replace(settings, cache_limit_mb=0)
    log, other = (tmp_path.parent / f"{tmp_path.name}.{name}" for name in ("log", "other"))  # outside the project
    execute_pages([(memo_page(log), PATH)], tight)
    edited = memo_page(log, later="x = 1")
    execute_pages([(edited, PATH)], tight)  # the page runs again, its memoized call is a hit
    assert runs(log) == 1 and len(stored(settings, "pages")) == 1 and len(stored(settings, "memo")) == 2  # train, on_page

    lines: list[str] = []
    hit, _ = execute_pages([(edited, PATH), (page_with_side_effect(other), "docs/other.md")], tight, lines.append)
    assert hit.from_cache and len(stored(settings, "pages")) == 2
    assert stored(settings, "memo") == [] and not list((settings.cache_dir / "memo").glob("*.pkl"))
    assert "cache: dropped the 2 entries used least recently, to stay under 0 MB" in lines

    assert execute_pages([(edited, PATH)], tight)[0].from_cache, "a page this run hit was kept"
    execute_pages([(memo_page(log, later="x = 2"), PATH)], tight)
    assert runs(log) == 2, "the dropped memoized call ran again"


def test_prune_goes_by_last_use_and_leaves_a_held_lock(tmp_path):
    def entry(name: str, size: int, used: float) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (used, used))
        return path

    entry("pages/old.json", 600, used=100)
    entry("locks/old.lock", 0, used=100)
    entry("memo/mid.json", 10, used=200)
    entry("memo/mid.pkl", 600, used=150)  # a unit's last use is its latest file's
    entry("memo/mid.lock", 0, used=200)
    entry("pages/new.json", 600, used=300)
    assert cache_module.prune(tmp_path, limit_mb=1300 / 2**20, since=1000) == 1
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.*")) == [
        "memo/mid.json", "memo/mid.lock", "memo/mid.pkl", "pages/new.json"]

    held = store.file_lock(tmp_path / "memo/mid.lock")  # a build computing that call again
    assert cache_module.prune(tmp_path, limit_mb=0, since=250) == 1, "never what this run used"
    held.release()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.*")) == [
        "memo/mid.lock", "pages/new.json"]


# --- the cache belongs to the build (issue 67, class 5) -------------------------------------------

ADDS = "# Sums\n\n```python exec\nprint('2 + 2 =', 2 + 2)\n```\n"
FORGE = """\
import hashlib, json
payload = {"blocks": [{"text": "2 + 2 = 5\\n", "figures": [], "tables": [], "source": None}], "inline": {},
           "manifest": {kind: {} for kind in ("modules", "files", "dirs", "probes", "env", "dists")}}
checksum = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
forged = json.dumps({"checksum": checksum, "payload": payload})
"""


def entry_of(settings: Settings) -> Path:
    (entry,) = (settings.cache_dir / "pages").glob("*.json")
    return entry


def test_a_page_cannot_rewrite_another_pages_entry(tmp_path, settings):
    """The issue's case: a page rewrote another's entry, and the site showed "2 + 2 = 5". The
    write is refused at its line; and an entry forged elsewhere (a process, another program) is
    not the build's, so the page runs again and shows what it computes."""
    assert execute_page(ADDS, "docs/adds.md", settings).outputs.blocks[0].text == "2 + 2 = 4\n"
    entry = entry_of(settings)
    rewrites = f"```python exec\n{FORGE}open({str(entry)!r}, 'w').write(forged)\n```\n"
    with pytest.raises(LessonError) as refused:
        execute_page(rewrites, "docs/rewrites.md", settings)
    assert refused.value.line == 7 and "\n" not in str(refused.value), str(refused.value)
    assert f"writes {entry}, in the build's cache, which only the build writes" in str(refused.value)
    again = execute_page(ADDS, "docs/adds.md", settings)
    assert again.from_cache and again.outputs.blocks[0].text == "2 + 2 = 4\n"

    namespace: dict = {}
    exec(FORGE, namespace)  # as a page's subprocess or another program would write it
    entry.write_text(namespace["forged"])
    forged = execute_page(ADDS, "docs/adds.md", settings)
    assert not forged.from_cache and forged.outputs.blocks[0].text == "2 + 2 = 4\n"


CACHE_WRITES = {
    "remove an entry": "import os\nos.remove({entry!r})",
    "remove the cache": "import shutil\nshutil.rmtree({cache!r})",
    "touch an entry": "import os\nos.utime({entry!r})",
    "a new file": "import os\nopen(os.path.join({cache!r}, 'memo', 'planted.pkl'), 'wb')",
    "a link to an entry": "import os, lessonlib\nos.symlink({entry!r}, lessonlib.scratch() / 'entry')",
    "inside a memoized call": "import lessonlib\nlessonlib.memo(lambda: open({cache!r} + '/memo/x.pkl', 'wb'))()",
    "by a process": "import subprocess\nsubprocess.run(['cp', '/dev/null', {entry!r}], check=True)",
}


def test_every_write_into_the_cache_from_a_page_is_refused_at_its_line(tmp_path, settings):
    execute_page(ADDS, "docs/adds.md", settings)
    entry = entry_of(settings)
    before = entry.read_bytes()
    pages = [(f"# W\n\n```python exec\n{code.format(entry=str(entry), cache=str(settings.cache_dir))}\n```\n",
              f"docs/w{n}.md") for n, code in enumerate(CACHE_WRITES.values())]
    results = execute_pages(pages, Settings(root=tmp_path, cache_dir=settings.cache_dir, workers=2))
    wrong = {kind: getattr(result, "message", "ran") for kind, result in zip(CACHE_WRITES, results)
             if not (isinstance(result, WriteError) and result.line == 5 and "\n" not in str(result)
                     and "in the build's cache" in str(result) and result.by_process == (kind == "by a process"))}
    assert wrong == {}
    assert not (settings.cache_dir / "memo/planted.pkl").exists()
    assert not (settings.cache_dir / "memo/x.pkl").exists()
    assert entry.read_bytes() == b"" or entry.read_bytes() == before  # the process's copy, seen after the fact
    assert execute_page(ADDS, "docs/adds.md", settings).outputs.blocks[0].text == "2 + 2 = 4\n"


PLANTED = """\
import os


class Planted:
    def __reduce__(self):
        return os.makedirs, ({marker!r}, 0o777, True)
"""


def planted_pickle(tmp_path: Path, marker: Path) -> bytes:
    """A pickle that, unpickled, makes the folder `marker`: proof that it ran."""
    import pickle

    namespace: dict = {}
    exec(PLANTED.format(marker=str(marker)), namespace)
    return pickle.dumps(namespace["Planted"]())


def test_a_planted_memo_result_is_never_unpickled(tmp_path, settings, experiment):
    """A result file replaced, and its entry's digest made to match: the entry is not sealed by
    the engine, so the call runs again; the pickle never runs."""
    log, marker = tmp_path.parent / f"{tmp_path.name}.log", tmp_path.parent / f"{tmp_path.name}.ran"
    first = execute_page(memo_page(log), PATH, settings)
    for entry_path in (settings.cache_dir / "memo").glob("*.json"):
        planted = planted_pickle(tmp_path, marker)
        entry_path.with_suffix(".pkl").write_bytes(planted)
        entry = json.loads(entry_path.read_text())
        entry["result_sha256"] = hashlib.sha256(planted).hexdigest()
        entry_path.write_text(json.dumps(entry))
    again = execute_page(memo_page(log, later="x = 1"), PATH, settings)
    assert not marker.exists(), "the planted pickle ran"
    assert runs(log) == 2 and again.outputs.values == first.outputs.values


def test_a_planted_parsed_page_is_never_loaded(tmp_path):
    """The issue's parsed/*.pkl is never read (parsed pages are JSON); a parsed page forged in
    JSON, with the digest the store once checked, is not the engine's: the page is parsed again."""
    store, marker = tmp_path / "parsed", tmp_path / "ran"
    text = "```python exec\nprint(2 + 2)\n```\n"
    cache_module.parsed_page(text, PATH, store)
    kept = store / f"{cache_module.path_name(PATH)}.json"
    kept.with_suffix(".pkl").write_bytes(planted_pickle(tmp_path, marker))
    forged = json.loads(kept.read_bytes().split(b"\n", 1)[1])
    forged["blocks"][0]["code"] = "print(5)\n"
    body = json.dumps(forged).encode()
    version = hashlib.sha256(json.dumps([PATH, text, cache_module._parser_code()]).encode()).hexdigest()
    kept.write_bytes(f"{version} {hashlib.sha256(body).hexdigest()}".encode() + b"\n" + body)
    assert cache_module.parsed_page(text, PATH, store).blocks[0].code == "print(2 + 2)\n"
    assert not marker.exists()


def test_a_kept_file_that_the_engine_did_not_seal_is_made_again(tmp_path):
    """Parsed pages, notebooks and the wheel are kept with store.kept: the same holds for each."""
    file = tmp_path / "notebooks" / "page.ipynb"
    assert store.kept(file, "v1", lambda: b"made") == b"made"
    file.write_bytes(b"v1 " + hashlib.sha256(b"forged").hexdigest().encode() + b"\nforged")
    assert store.kept(file, "v1", lambda: b"made again") == b"made again"
    assert store.kept(file, "v1", lambda: b"not made") == b"made again", "sealed: kept"


def test_a_folders_key_is_made_once_and_only_its_owner_reads_it(tmp_path):
    seal = store.seal(tmp_path / "memo", b"entry")
    assert store.seal(tmp_path / "memo", b"entry") == seal != store.seal(tmp_path / "other", b"entry")
    assert store.seal(tmp_path / "memo", b"ent", b"ry") != seal, "the parts are framed"
    assert stat.S_IMODE((tmp_path / "memo" / store.KEY).stat().st_mode) == 0o600
    assert store.sealed(tmp_path / "memo", seal, b"entry") and not store.sealed(tmp_path / "memo", seal, b"other")


@pytest.mark.timeout(60)  # reading a pipe would wait forever
def test_a_pipe_in_place_of_a_key_or_a_kept_file_is_replaced_not_read(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    os.mkfifo(folder / store.KEY)
    os.mkfifo(folder / "page.ipynb")
    assert store.kept(folder / "page.ipynb", "v1", lambda: b"made") == b"made"
    assert (folder / store.KEY).is_file() and store.kept(folder / "page.ipynb", "v1", lambda: b"not made") == b"made"
