"""Whatever ends a page early fails it, located at its line, in words — through every door.

Each page runs in a worker process; the build watches it from outside, so no lesson code can
turn a failure into a success: not exit(), not a crash, not a swallowed timeout.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_pages import FAULTS, PATH
from fixture_sites import GOOD, cli_process, command, make_site

from lessonlib.engine.builder.page import execute_page, execute_pages
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.errors import LessonError


@pytest.fixture
def settings(tmp_path) -> Settings:
    (tmp_path / "docs").mkdir()
    return Settings(root=tmp_path, output_limit_kb=2)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_fails_the_page_at_its_line_in_words(fault, settings):
    body, line, cause = FAULTS[fault]
    with pytest.raises(LessonError) as info:
        execute_page(body, PATH, settings)
    assert str(info.value).startswith(f"{PATH}:{line}: ") and cause in info.value.message, str(info.value)


def test_a_crash_and_a_timeout_show_the_stack_in_the_page(settings):
    with pytest.raises(LessonError) as info:
        execute_page(FAULTS["long C call"][0], PATH, settings)
    assert f'File "{PATH}", line 3' in info.value.detail


def test_the_memory_limit_ends_the_page_at_its_line(tmp_path):
    (tmp_path / "docs").mkdir()
    page = "```python exec\nimport time\nhog = bytearray(1500 * 2**20)\ntime.sleep(60)\n```\n"
    with pytest.raises(LessonError) as info:
        execute_page(page, PATH, Settings(root=tmp_path, memory_limit_mb=1000))
    # caught while allocating (line 3) or while holding it (line 4), as the 0.2 s polls fall
    assert info.value.line in (3, 4) and info.value.message.startswith("used more than the page's memory limit of 1,000 MB")


def test_a_page_ended_from_outside_leaves_no_temporary_files(settings, tmp_path_factory):
    """What the page and the engine made in the temporary folder (a folder of the page's own, the
    page's scratch, the folder that records what its processes read) goes with the run, however
    the page ended: here by its time limit, in a sleep, where no code of the page runs again."""
    made = tmp_path_factory.mktemp("outside") / "made.txt"  # outside the project: a page may write there
    page = ("```python exec timeout=2\nimport os, tempfile, time\nimport lessonlib\n"
            "reads = os.path.dirname(os.environ['PYTHONPATH'].split(os.pathsep)[0])\n"
            f"open({str(made)!r}, 'w').write(f'{{tempfile.mkdtemp()}} {{lessonlib.scratch()}} {{reads}}')\n"
            "time.sleep(60)\n```\n")
    with pytest.raises(LessonError, match="timed out"):
        execute_page(page, PATH, settings)
    folders = made.read_text().split()
    assert len(folders) == 3 and "lessonlib-reads-" in folders[2], folders
    assert not [folder for folder in folders if Path(folder).exists()], folders


def test_one_failing_page_does_not_stop_the_others_and_each_is_reported(settings):
    results = execute_pages([("```python exec\nimport os\nos._exit(3)\n```\n", "docs/a.md"),
                             ("```python exec\nprint('fine')\n```\n", "docs/b.md")], settings)
    assert isinstance(results[0], LessonError) and results[1].outputs.blocks[0].text == "fine\n"


def test_the_pytest_item_fails_with_the_located_cause(tmp_path):
    site = make_site(tmp_path, {"lessons/bad.md": FAULTS["os._exit(3)"][0]})
    (site / "conftest.py").write_text('pytest_plugins = ["lessonlib.engine.builder.pytest_plugin"]\n')
    result = command([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "docs"], site)  # the pytest door
    assert result.returncode == 1
    assert "docs/lessons/bad.md:1: the page's process exited with status 3 while running this block" in result.stdout


def test_a_page_that_used_a_process_pool_exits_cleanly(tmp_path):
    """The pool's workers (here each made a tqdm lock, a semaphore) are stopped, not killed: no
    leaked-resource warning at the end of a run."""
    page = ("```python exec\nfrom joblib import Parallel, delayed\nfrom tqdm import tqdm\n"
            "def work(i):\n    with tqdm(disable=True):\n        return i\n"
            "print(sum(Parallel(n_jobs=2)(delayed(work)(i) for i in range(4))))\n```\n")
    site = make_site(tmp_path, {"pool.md": page})
    # a process: the warning is printed as the page's processes end, onto the run's fd 2, not sys.stderr
    result = cli_process(site, "run", "docs/pool.md")
    assert result.returncode == 0 and "6\n" in result.stdout, result.stderr
    assert "leaked" not in result.stderr, result.stderr


def test_a_page_that_is_not_utf8_is_one_line_naming_it_in_every_door(tmp_path, build, lessonlib_cli):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    (site / "docs" / "latin.md").write_bytes("# Latin\n\nCaf\xe9 au lait\n".encode("latin-1"))
    where = "docs/latin.md:3: the page is not UTF-8 (byte 0xe9 at offset 12): save it as UTF-8"
    for run in (build(site), lessonlib_cli(site, "run", "docs/latin.md"), lessonlib_cli(site, "check", "docs/latin.md")):
        assert run.returncode != 0
        assert where in run.stderr + run.stdout and "Traceback" not in run.stderr, run.stderr


def test_a_helper_named_like_a_module_the_build_loaded_is_one_line_at_its_import(tmp_path, settings):
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "code.py").write_text("WHO = 'the helper'\n")  # `code` is loaded before any page runs
    (tmp_path / "docs" / "mine.py").write_text("WHO = 'mine'\n")
    page = "# t\n\n```python exec\nimport mine\nprint(mine.WHO)\nimport code\nprint(code.WHO)\n```\n"
    error = str(execute_pages([(page, PATH)], settings)[0])
    assert error.startswith(f"{PATH}:6: the helper code.py beside the page has the name of the module `code`"), error


def test_a_fifo_or_socket_in_docs_is_skipped_with_one_warning_not_waited_on(tmp_path):
    import os
    import socket

    from fixture_sites import build_process

    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    os.mkfifo(site / "docs" / "trap.md")  # reading it would wait for a writer forever
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(site / "docs" / "sock.md"))
    try:
        built = build_process(site)  # the helper's own timeout (300 s) would fail the test on a hang
    finally:
        server.close()
    warned = [line for line in built.stderr.splitlines() if "not a regular file" in line]
    assert len(warned) == 2 and any("skipped docs/trap.md" in line for line in warned), built.stderr
    assert built.returncode == 1  # --strict: a warning fails the build, quickly and in one line each


def test_a_page_with_a_long_name_runs(tmp_path):
    from fixture_sites import build_process

    name = "p" * 240 + ".md"  # a file name near the system's limit of 255 bytes
    site = make_site(tmp_path, {"index.md": "# Home\n", name: GOOD})
    built = build_process(site)
    assert built.returncode == 0, built.stderr[-2000:]


def test_a_docs_folder_that_links_outside_the_project_is_one_line(tmp_path):
    import os

    from fixture_sites import build_process

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "index.md").write_text("# Home\n")
    site = make_site(tmp_path / "site", {})
    os.symlink(outside, site / "docs")
    built = build_process(site)
    assert built.returncode == 1 and "Traceback" not in built.stderr, built.stderr
    assert f"is {outside.resolve()}, outside the project" in built.stderr


def test_a_page_beside_a_notebook_of_the_same_name_is_one_line(tmp_path):
    from fixture_sites import build_process

    site = make_site(tmp_path, {"index.md": "# Home\n", "sub/p.md": GOOD, "sub/p.ipynb": "{}"})
    built = build_process(site)
    assert built.returncode == 1 and "Traceback" not in built.stderr, built.stderr
    assert "docs/sub/p.md and docs/sub/p.ipynb would be the same page" in built.stderr


@pytest.mark.parametrize(("page", "name", "where"), [
    ("index.md", "sitemap.xml", "sitemap.xml"), ("index.md", "assets", "assets"),
    ("index.md", "downloads", "downloads"), ("index.md", "search", "search"),
])
def test_a_page_cannot_publish_over_a_file_the_site_has(tmp_path, page, name, where):
    from fixture_sites import build_process

    code = f'```python exec\nimport lessonlib\nlessonlib.publish({name!r}, "mine")\n```\n'
    site = make_site(tmp_path, {"index.md": "# Home\n", page: "# Publishes\n\n" + code})
    built = build_process(site)
    assert built.returncode == 1, built.stderr
    assert f"docs/{page}:1: lessonlib.publish({name!r}) would write over {where}, which the site has" in built.stderr
