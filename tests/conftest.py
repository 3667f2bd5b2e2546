from __future__ import annotations

import itertools
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lesson pages (the slowest items) first, each followed by one quick test.

    Under scripts/test (`--dist load --maxschedchunk 1`) each worker holds the item it runs and
    the next one, handed out in this order: every worker starts on a page, and a worker that
    finishes its page takes the next one while no two pages queue on one worker. The quick test
    must not need the built site, whose build would otherwise start beside the pages.
    """
    docs = Path(config.rootpath) / "docs"
    pages = [item for item in items if docs in item.path.parents]
    others = [item for item in items if docs not in item.path.parents]
    fillers = [item for item in others if "site" not in getattr(item, "fixturenames", ())][: len(pages)]
    ordered = []
    for page, filler in itertools.zip_longest(pages, fillers):
        ordered += [item for item in (page, filler) if item is not None]
    items[:] = ordered + [item for item in others if item not in fillers]


def pytest_terminal_summary(terminalreporter) -> None:
    screenshots = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
    if screenshots.is_dir():
        terminalreporter.write_line(f"browser screenshots (desktop and 390-px phone): {screenshots}")
