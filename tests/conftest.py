from __future__ import annotations

import hashlib
import itertools
import time
from pathlib import Path

import pytest
import torch

# Every device test runs on CPU, and on CUDA where there is one; without one it is
# skipped with a reason, never silently dropped.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


class LessonPages:
    """Which lesson pages this run executes, and which of them have finished, across xdist workers.

    Each page runs as one test item (it stores its result in the page cache). The browser tests
    build the whole site; a build that started while another worker is still running a page
    would run that page a second time, so the site fixture first waits for every page of the run
    (`wait`). A finished page leaves a marker file in a folder that all workers of the run share.
    Registered as a plugin, not written as conftest hooks, because those would only see the
    items under tests/ and the pages are under docs/.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pages: list[str] = []

    def is_page(self, item: pytest.Item) -> bool:
        return Path(self.config.rootpath) / "docs" in item.path.parents

    @pytest.hookimpl(trylast=True)  # after -k and -m have deselected
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # Pages first, each followed by one quick item that does not need the site. Under
        # `--dist load --maxschedchunk 1` (scripts/test) a worker holds the item it runs and the
        # next one: two pages never queue on one worker while another is free, and no worker
        # holds a browser test ahead of a page it would wait for.
        pages = [item for item in items if self.is_page(item)]
        others = [item for item in items if not self.is_page(item)]
        fillers = [item for item in others if "site" not in getattr(item, "fixturenames", ())][: len(pages)]
        ordered = []
        for page, filler in itertools.zip_longest(pages, fillers):
            ordered += [item for item in (page, filler) if item is not None]
        items[:] = ordered + [item for item in others if item not in fillers]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.pages = [item.nodeid for item in session.items if self.is_page(item)]

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid in self.pages and self.shared:
            self.shared.mkdir(parents=True, exist_ok=True)
            (self.shared / self._marker(nodeid)).touch()

    @property
    def shared(self) -> Path | None:
        """The folder every worker of this run sees (their base temp folders' parent); None
        without xdist, where pages and tests take turns in one process."""
        if not hasattr(self.config, "workerinput"):
            return None
        return self.config._tmp_path_factory.getbasetemp().parent / "lesson-pages-done"

    def wait(self, timeout: float) -> list[str]:
        """Block until every page of this run has finished (passed or not); the pages still
        unfinished after `timeout` seconds, which the site build will then run itself."""
        deadline = time.monotonic() + timeout
        while True:
            pending = [p for p in self.pages if self.shared and not (self.shared / self._marker(p)).exists()]
            if not pending or time.monotonic() > deadline:
                return pending
            time.sleep(0.5)

    @staticmethod
    def _marker(nodeid: str) -> str:
        return hashlib.sha256(nodeid.encode()).hexdigest()[:16]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LessonPages(config), "lessonlib-lesson-pages")


@pytest.fixture(scope="session")
def lesson_pages(pytestconfig) -> LessonPages:
    return pytestconfig.pluginmanager.get_plugin("lessonlib-lesson-pages")


def pytest_terminal_summary(terminalreporter) -> None:
    screenshots = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
    if screenshots.is_dir():
        terminalreporter.write_line(f"browser screenshots (desktop and 390-px phone): {screenshots}")
