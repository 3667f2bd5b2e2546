"""The course itself, built on a real multi-process Dask cluster started as the README says
(`dask scheduler`, then `dask worker ADDRESS --nworkers 2 --nthreads 1`, non-daemonic): the same
site as the build here.

It runs after the lesson pages (lesson_results), in a cache folder of its own that holds a copy
of the suite's memoized experiments: every page runs on the cluster, and its experiments come
from the memo, so it costs about what the pages' own code costs. The experiments' joblib calls
crossing a process cluster are test_engine_cluster's (on tiny protocols), where nothing is memoized.
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client
from fixture_sites import environment
from site_support import DATED, differences, kill_quietly, until

from lessonlib.engine.config import CACHE_DIR, SCHEDULER, load_settings
from lessonlib.engine.worker.blocks import parse_page

# Reused locally like any test whose inputs are unchanged (CI runs it every time): what it checks,
# the course's pages giving the same site on a cluster, follows from the checkout. The cluster's
# timing-dependent behaviour (its window, a lost scheduler, a stopped build) is test_engine_cluster's,
# which never reuses a pass.
pytestmark = pytest.mark.lesson_results
ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 1800  # stops a build that would otherwise hang; never a measure of speed


@pytest.fixture
def dask_cluster(tmp_path) -> Iterator[str]:
    """A `dask scheduler` process and a `dask worker` process with two single-threaded,
    non-daemonic worker processes, as the README starts them; the scheduler's address."""
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    dask = [sys.executable, "-m", "dask"]
    file, log = tmp_path / "scheduler.json", (tmp_path / "cluster.log").open("w")
    processes = [subprocess.Popen([*dask, "scheduler", "--scheduler-file", str(file), "--host", "127.0.0.1",
                                   "--port", "0", "--dashboard-address", ":0"], env=env, stdout=log, stderr=log)]
    try:
        until(lambda: file.exists() and file.read_text().endswith("}"), "the scheduler to start", 120)
        address = json.loads(file.read_text())["address"]
        processes.append(subprocess.Popen([*dask, "worker", address, "--nworkers", "2", "--nthreads", "1",
                                           "--memory-limit", "0"], env=env, stdout=log, stderr=log))
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_quietly([process.pid])
        log.close()


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
