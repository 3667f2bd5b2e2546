"""The course itself, built on a real multi-process Dask cluster started as the README says
(tests/cluster_support.py): the same site as the build here.

The slow tier, outside the suite's budget: `./scripts/check_cluster` (pytest --course-on-cluster)
runs it, and CI runs that after the suite. Every page's code runs again on the cluster; the
engine's side of it, a site built on a real cluster byte for byte, is in the suite on a fixture
site (test_engine_doors.py). It runs after the lesson pages, in a cache
folder of its own that holds a copy of the suite's memoized experiments, so it costs about what
the pages' own code costs. The experiments' joblib calls crossing a process cluster are
test_engine_cluster's (on tiny protocols), where nothing is memoized.
"""
from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import dask_cluster as started_cluster
from fixture_sites import environment
from site_support import DATED, differences

from lessonlib.engine.config import CACHE_DIR, SCHEDULER, load_settings
from lessonlib.engine.worker.blocks import parse_page

pytestmark = [pytest.mark.lesson_results, pytest.mark.course_on_cluster]
ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 1800  # stops a build that would otherwise hang; never a measure of speed


@pytest.fixture
def dask_cluster(tmp_path) -> Iterator[str]:
    with started_cluster(tmp_path) as address:
        yield address


def test_the_course_built_on_a_multi_process_cluster_is_the_site_built_here(tmp_path, site, dask_cluster):
    cache = tmp_path / "cache"  # the site fixture has waited for every page: the memo is complete
    shutil.copytree(load_settings(ROOT / "mkdocs.yml").cache_dir / "memo", cache / "memo")
    built = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(built)], cwd=ROOT,
                         env=environment(SITE_URL=site.url, **{SCHEDULER: dask_cluster, CACHE_DIR: str(cache)}),
                         capture_output=True, text=True, timeout=BOUND_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-10000:]
    lessons = [f"docs/lessons/{page.name}" for page in sorted((ROOT / "docs" / "lessons").glob("*.md"))]
    assert not [page for page in lessons if f"{page}: from cache" in run.stderr], run.stderr  # all ran there
    differing = set(differences(filecmp.dircmp(site.path, built)))
    timed = _timed_pages()  # their wall-clock timings differ from build to build: present, not compared
    assert all((built / page / "index.html").is_file() for page in timed)
    compared = {name for name in differing if name != "search/search_index.json"
                and not any(name.startswith(page + "/") for page in timed)}
    assert compared <= DATED, sorted(compared - DATED)


def _timed_pages() -> list[str]:
    """The site folders of the pages with a `timing` block."""
    pages = []
    for source in (ROOT / "docs").rglob("*.md"):
        if any("timing" in block.options for block in parse_page(source.read_text(encoding="utf-8"), "p").blocks):
            rel = source.relative_to(ROOT / "docs").with_suffix("")
            pages.append(rel.as_posix() if rel.name != "index" else "")
    return pages
