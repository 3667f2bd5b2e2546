from __future__ import annotations

import functools
import http.server
import itertools
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fixture_sites
import psutil
import pytest
import reused_passes
import torch
from browser_support import Reader
from site_support import remove_when_unused

from lessonlib.engine.worker import lifetime

# One CPU thread per test process: the suite runs one process per core (scripts/test), so a second
# thread only waits for a busy core, and a tiny op's thread barrier under load cost seconds per test.
torch.set_num_threads(1)

# Every device test runs on CPU, and on CUDA where there is one; without one it is
# skipped with a reason, never silently dropped.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
    ),
]


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def page_template() -> None:
    """The pages tests run fork from a template that has imported what this course's pages
    import (mkdocs.yml's preload), as in the course's own build: a test page that imports torch
    starts in a fraction of a second instead of importing it. What a template imports, and a site
    without torch, are tested in fresh processes (test_engine_standalone, test_second_course)."""
    from lessonlib.engine.builder.pool import start_template
    from lessonlib.engine.config import load_settings

    start_template(load_settings(ROOT / "mkdocs.yml").preload or ())


@dataclass(frozen=True)
class Site:
    path: Path  # the built site
    url: str  # where it is served


@pytest.fixture
def exercise_memo(monkeypatch) -> Path:
    """The memo folder of the suite's cache, named to the kernels a test starts: an exercise's
    trainings (lessonlib.exercises, memoized) then run once per change of the reader's code or
    of lessonlib's, as a lesson's experiments do, and a warm suite reuses them."""
    from lessonlib.engine.config import load_settings

    cache = load_settings(ROOT / "mkdocs.yml").cache_dir
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(cache))
    return cache / "memo"


@pytest.fixture
def no_memo(monkeypatch) -> None:
    """No memo store: a memoized exercise training runs, so a spy in it sees the calls."""
    monkeypatch.delenv("LESSONLIB_CACHE_DIR", raising=False)


PREBUILT_SITE = "PREBUILT_SITE"


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    """The site, built once per test process (a page the suite is running meanwhile is waited for
    and read from the cache, not run twice: the engine locks each page) and served on a free port
    of 127.0.0.1; the build is told that address, since Material's instant navigation only follows
    links under site_url, and the notebooks install lessonlib from there.

    PREBUILT_SITE names a site built already, served as it is instead (to rerun browser tests
    after a change to a stylesheet or a script copied into it): the tests that follow instant
    navigation or install a notebook's lessonlib need it built with SITE_URL set to the address
    it is served at. (Not LESSONLIB_*: the engine refuses a variable of that name it lacks.)"""
    prebuilt = os.environ.get(PREBUILT_SITE)
    path = Path(prebuilt) if prebuilt else tmp_path_factory.mktemp("site")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(path)))
    url = f"http://127.0.0.1:{server.server_port}/"
    if not prebuilt:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": url}
        build = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(path)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
        )
        assert build.returncode == 0, build.stderr
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Site(path, url)
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, driven by Playwright, one per test process: every browser test module
    shares it (a second sync Playwright in the same process cannot start while one runs)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def base_url(site) -> str:
    return site.url


@pytest.fixture
def new_reader(browser):
    """Make readers with other options (viewport, palette, no JavaScript); all closed afterwards."""
    readers = []

    def make(**options) -> Reader:
        readers.append(Reader(browser, **options))
        return readers[-1]

    yield make
    for reader in readers:
        reader.close()


@pytest.fixture
def reader(new_reader) -> Reader:
    return new_reader()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def build():
    """`mkdocs build --strict` of a fixture site, in this process: build(site, **variables)."""
    yield fixture_sites.build_here
    _no_page_process_left()


@pytest.fixture
def lessonlib_cli():
    """`python -m lessonlib ARGS` in a fixture site, in this process: lessonlib_cli(site, *args, **variables)."""
    yield fixture_sites.cli_here
    _no_page_process_left()


@pytest.fixture
def killed_build_temp() -> Iterator[Path]:
    """The TMPDIR of a build the test kills or stops, removed afterwards with what that build
    could not remove (multiprocessing's pymp-* folder, which only the process that made it
    removes), once the build's last process has ended. Short: the forkserver's socket is made in it."""
    temp = Path(tempfile.mkdtemp(prefix="killed-"))
    yield temp
    remove_when_unused(temp)


def _no_page_process_left() -> None:
    """Every page's process ends with its build: a test whose build left one fails, and the
    process is ended, so that the next test starts clean. The forkserver the pages fork from
    stays, as it does under mkdocs serve: it holds nothing of any page, and starting it again
    (importing torch) would cost each test seconds."""
    pid = lifetime.forkserver_pid()
    if pid not in {child.pid for child in psutil.Process().children()}:  # none started, or it was ended
        return
    left = [process.pid for process in lifetime.running_descendants(pid)]
    lifetime.end_processes(pid, include_root=False)
    assert not left, f"processes of a page left running after the test: {left}"


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(reused_passes, "reused_passes")
    config.addinivalue_line("markers", "never_reused: always runs; a pass one run saw vouches for no other "
                                       "(concurrency, load, timing)")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fresh-notebooks", action="store_true",
                     help="also run every downloadable notebook in a fresh venv (tests/test_downloaded_notebooks.py; "
                          "about 20 minutes on 2 cores: scripts/check_notebooks)")
    parser.addoption("--course-on-cluster", action="store_true",
                     help="also build the whole course on a real Dask cluster (tests/test_course_on_cluster.py, "
                          "the slow tier: scripts/check_cluster, which CI runs after the suite)")
    parser.addoption("--screenshots", action="store_true",
                     help="save a full-page screenshot of every page in each browser view, to look at "
                          "(test-artifacts/screenshots)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lesson pages (the slowest items) first, each followed by one quick test; the tests that read
    the lessons' results (the built site, a lesson's notebook) last.

    Under scripts/test (`--dist load --maxschedchunk 1`) each worker holds the item it runs and
    the next one, handed out in this order: every worker starts on a page, and a worker that
    finishes its page takes the next one while no two pages queue on one worker. A test that
    reads a page's result waits while another worker runs that page: placed last, it finds the
    result in the cache instead of holding its worker idle.
    """
    docs = Path(config.rootpath) / "docs"
    pages = [item for item in items if docs in item.path.parents]
    readers = [item for item in items if item not in pages and _reads_lessons(item)]
    others = [item for item in items if item not in pages and item not in readers]
    fillers = others[: len(pages)]
    ordered = []
    for page, filler in itertools.zip_longest(pages, fillers):
        ordered += [item for item in (page, filler) if item is not None]
    items[:] = ordered + others[len(fillers):] + readers
    if not config.getoption("course_on_cluster"):  # skipped before its fixtures (the site) are set up
        slow = pytest.mark.skip(reason="the course built on a cluster is the slow tier, outside the suite's "
                                       "budget: scripts/check_cluster (pytest --course-on-cluster) runs it, and CI runs that")
        for item in items:
            if item.get_closest_marker("course_on_cluster"):
                item.add_marker(slow)
    if os.environ.get(PREBUILT_SITE):  # its files are no test's inputs: a pass on it vouches for no other run
        for item in readers:
            item.add_marker("never_reused")


def _reads_lessons(item: pytest.Item) -> bool:
    return "site" in getattr(item, "fixturenames", ()) or item.get_closest_marker("lesson_results") is not None


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    screenshots = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
    if config.getoption("screenshots") and screenshots.is_dir():
        terminalreporter.write_line(f"browser screenshots (a dark desktop and a light 360-px phone): {screenshots}")
