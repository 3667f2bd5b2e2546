"""A reader gets the previous site or the whole new one: whatever fails or stops a build (a bad
option, a failing page, a strict warning after the pages ran, a disk that refuses a file, a page
edited meanwhile, a kill), site/ stays byte for byte as it was; builds side by side both publish; only pages and the files they link are published (mkdocs serve's own folder: test_engine_doors)."""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from fixture_sites import GOOD, MKDOCS_BUILD, MKDOCS_YML, environment, make_site
from site_support import tree, until

from lessonlib.engine.builder.publish import Staging, in_site


def _edit_good(site: Path, extra: str = "") -> None:
    (site / "docs/good.md").write_text(GOOD.replace("hello from", "changed words from") + extra)


def _strict(extra: str) -> Callable[[Path], contextlib.AbstractContextManager]:
    """A page edit that MkDocs warns about after the pages ran: in strict mode, a failure."""
    def breaking(site: Path) -> contextlib.AbstractContextManager:
        _edit_good(site, extra)
        return contextlib.nullcontext()
    return breaking


def _failing_page(site: Path) -> contextlib.AbstractContextManager:
    _edit_good(site)
    (site / "docs/bad.md").write_text("```python exec\nraise RuntimeError('no')\n```\n")
    return contextlib.nullcontext()


def _bad_option(site: Path) -> contextlib.AbstractContextManager:
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", "      timeout: 0\n"))
    return contextlib.nullcontext()


def _disk_refuses_a_site_file(site: Path) -> contextlib.AbstractContextManager:
    _edit_good(site)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return mock.patch("lessonlib.engine.builder.plugin.write_atomically", side_effect=full)  # the figure is first


FAILED_BUILDS = {  # what breaks the next build, and what its output says (the error's own words: test_engine_setup)
    "a broken link": (_strict("\nSee [the missing page](missing.md).\n"), "in strict mode"),
    "raw TeX": (_strict("\nHalf is \\frac{1}{2} here.\n"), "in strict mode"),
    "a failing page": (_failing_page, "docs/bad.md:2: RuntimeError: no"),
    "a bad option": (_bad_option, "mkdocs.yml, lessonlib option timeout: "),
    "a site file the disk refuses": (_disk_refuses_a_site_file,
                                     "cannot write good/figure-"),
}


@pytest.mark.parametrize("failure", FAILED_BUILDS)
def test_a_failed_build_leaves_the_previous_site_as_it_was(tmp_path, failure, build):
    """Whatever fails the build, before its pages run, as they run or after: site/ is byte for
    byte the previous one. (A kill and a page edited meanwhile: below; a full cache: test_engine_setup.)"""
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    assert build(site).returncode == 0
    before = tree(site / "site")
    breaking, says = FAILED_BUILDS[failure]
    with breaking(site):
        result = build(site)
    assert result.returncode != 0 and says in result.stdout + result.stderr, result.stdout + result.stderr
    assert tree(site / "site") == before
    left = [p.name for p in site.glob(".site.*")]
    assert left == [".site.lock"], f"the failed build's staging folder and its lock are removed: {left}"


# Page A, run before MkDocs renders anything, holds until the author has edited page B (a page
# may not write another: pages are independent); MkDocs then finds B changed and runs it again
# while it renders, after it would have cleaned site/.
HOLDS = """\
```python exec
import os, time
open({started!r}, "w").close()
while not os.path.exists({go!r}):
    time.sleep(0.05)
```
"""
SLOW_B = """\
```python exec
import os, time
open({flag!r}, "w").close()
while True:
    time.sleep(0.05)
```
"""


def build_editing_b(tmp_path: Path, site: Path, new_b: str, **variables: str) -> subprocess.Popen:
    """A build whose page A holds until B reads `new_b`: an edit made while the build runs."""
    started, go = tmp_path / "a-started", tmp_path / "go"
    (site / "docs/a.md").write_text(HOLDS.format(started=str(started), go=str(go)))
    build = subprocess.Popen(MKDOCS_BUILD, cwd=site, env=environment(**variables), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    until(started.exists, "page a to run")
    (site / "docs/b.md").write_text(new_b)
    go.touch()
    return build


def test_a_page_edited_during_the_build_that_fails_leaves_the_site_as_it_was(tmp_path, build):
    site = make_site(tmp_path / "s", {"index.md": "# Home\n", "b.md": "```python exec\nx = 1\n```\n"})
    assert build(site).returncode == 0
    before = tree(site / "site")

    build = build_editing_b(tmp_path, site, "```python exec\nraise ValueError('edited')\n```\n")
    _, stderr = build.communicate()
    assert build.returncode != 0 and "docs/b.md:2: ValueError: edited" in stderr, stderr
    assert tree(site / "site") == before


def test_a_build_killed_while_it_renders_leaves_the_site_as_it_was_and_the_next_cleans_up(tmp_path, build,
                                                                                          killed_build_temp):
    flag = tmp_path / "rendering"
    site = make_site(tmp_path / "s", {"index.md": "# Home\n", "good.md": GOOD, "b.md": "```python exec\nx = 1\n```\n"})
    assert build(site).returncode == 0
    before = tree(site / "site")

    # a process: it is killed
    victim = build_editing_b(tmp_path, site, SLOW_B.format(flag=str(flag)), TMPDIR=str(killed_build_temp))
    until(flag.exists, "page b to run while the site renders")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert tree(site / "site") == before
    assert list(site.glob(".site.building-*")), "the killed build's staging folder is still there"

    (site / "docs/a.md").unlink()
    (site / "docs/b.md").write_text("```python exec\nx = 2\n```\n")
    assert build(site).returncode == 0
    assert not list(site.glob(".site.building-*")), "the next build removed it"
    assert (site / "site/b/index.html").exists() and not (site / "site/a").exists()


def test_the_old_sites_dot_files_stay_as_mkdocs_cleaning_keeps_them(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n"})
    (site / "site").mkdir()
    (site / "site/.keep").write_text("mine")
    (site / "site/stale.html").write_text("old")
    assert build(site).returncode == 0
    assert (site / "site/.keep").read_text() == "mine" and not (site / "site/stale.html").exists()


def test_helper_modules_and_data_files_are_published_only_when_a_page_links_them(tmp_path, build):
    page = GOOD + "\nDownload [the data](data/linked.csv).\n\n![A dot.](dot.png)\n"
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": page, "helper.py": "x = 1\n",
                                "data/private.csv": "a\n", "data/linked.csv": "b\n", "dot.png": "png"})
    result = build(site)
    assert result.returncode == 0, result.stderr
    published = set(tree(site / "site"))
    assert {"data/linked.csv", "dot.png"} <= published
    assert not {"helper.py", "data/private.csv"} & published


@pytest.mark.never_reused  # concurrency: one passing run vouches for no other
def test_builds_at_once_in_one_checkout_and_in_a_clone_run_each_page_once_and_all_publish(tmp_path, lessonlib_cli):
    """Build A runs the page, which holds until told; build B (same checkout) and build C (a clone
    of it elsewhere) start meanwhile, all three on one cache folder, as every clone shares the
    user's. B and C wait for A's result instead of running the page again (or failing). All
    publish, and the result they share is in the cache for the next run."""
    log, go, cache = tmp_path / "runs.log", tmp_path / "go", tmp_path / "shared-cache"
    page = (f"```python exec\nimport os, time\nwith open({str(log)!r}, 'a') as f:\n    f.write('ran\\n')\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\nprint('slow page done')\n```\n")
    pages = {"index.md": "# Home\n", "slow.md": page, "good.md": GOOD}
    site, clone = make_site(tmp_path / "site", pages), make_site(tmp_path / "clone", pages)
    shared = {"LESSONLIB_CACHE_DIR": str(cache)}

    def start(name: str, folder: Path) -> tuple[subprocess.Popen, Path]:
        err = tmp_path / f"{name}.err"
        with err.open("w") as handle:
            return subprocess.Popen(MKDOCS_BUILD, cwd=folder, env=environment(**shared), stdout=subprocess.DEVNULL,
                                    stderr=handle), err

    assert lessonlib_cli(site, "run", "docs/good.md", **shared).returncode == 0  # cached
    a, a_err = start("a", site)  # processes: three builds at once
    until(log.exists, "build A to run the page")
    (b, b_err), (c, c_err) = start("b", site), start("c", clone)
    for err in (b_err, c_err):  # they overlap
        until(lambda err=err: "waiting for another build" in err.read_text(), f"{err.stem} to wait for A")
    go.write_text("")
    assert [p.wait(timeout=300) for p in (a, b, c)] == [0, 0, 0], [e.read_text() for e in (a_err, b_err, c_err)]
    assert log.read_text() == "ran\n"
    assert "2 pages: 1 ran, 1 from cache, in" in a_err.read_text()
    assert all("2 pages: 0 ran, 2 from cache, in" in e.read_text() for e in (b_err, c_err))
    for folder in (site, clone):
        assert "slow page done" in (folder / "site/slow/index.html").read_text()
        assert not list(folder.glob(".site.building-*"))
    assert "docs/slow.md: from cache" in lessonlib_cli(clone, "run", "docs/slow.md", **shared).stderr


def test_the_published_site_folder_has_the_usual_permissions(tmp_path):
    """mkdtemp makes owner-only folders; a web server running as another user must read the site."""
    previous = os.umask(0o022)
    try:
        staging = Staging(tmp_path / "site")
        (staging.path / "index.html").write_text("<p>hi</p>")
        staging.publish()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "site").stat().st_mode) == 0o755


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/x", "out/x"])
def test_the_build_writes_nothing_outside_its_site_whatever_a_name_says(tmp_path, name):
    """Every file the build writes into the site (figures, published files, notebooks) goes
    through in_site: a name from a page, the cache or a cluster never leads out of it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "out").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="leads out of the site"):
        in_site(site, name)
    assert in_site(site, "page/figure.svg") == site.resolve() / "page/figure.svg"
