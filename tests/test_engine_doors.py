"""The three doors over one executor: the MkDocs build, the CLI, and notebook export,
on small fixture sites built in a temporary folder."""
from __future__ import annotations

import contextlib
import filecmp
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest
from cluster_support import dask_cluster, pages_run_on
from fixture_sites import GOOD, LESSONLIB, build_process, cli_process, command, environment, make_site
from site_support import DATED, differences, gone, tree, until

from lessonlib.engine.config import SCHEDULER


def test_build_runs_pages_and_writes_their_notebooks(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    result = build_process(site)  # the MkDocs door itself: `mkdocs build` in a process
    assert result.returncode == 0, result.stderr
    assert "docs/good.md: ran 1 blocks" in result.stderr
    html = (site / "site/good/index.html").read_text()
    assert "hello from the good page" in html and "The value is 42." in html
    (figure,) = re.findall(r'<img src="(figure-[0-9a-f]+\.svg)" alt="A line that rises from 0 to 1.">', html)
    assert (site / "site/good" / figure).read_text().lstrip().startswith("<?xml")  # published beside the page
    mode = (site / "site/good/index.html").stat().st_mode  # as MkDocs writes, so a web server can read them
    assert {(site / "site/good" / name).stat().st_mode for name in (figure, "good.ipynb")} == {mode}
    notebook = nbformat.read(site / "site/good/good.ipynb", as_version=4)
    nbformat.validate(notebook)
    assert [c.cell_type for c in notebook.cells] == ["code", "markdown", "code", "markdown"]
    assert notebook.cells[0].metadata.get("tags") == ["setup"]  # no install cell: publish_package is off
    assert "The value is 42." in notebook.cells[3].source

    again = build(site)
    assert "docs/good.md: from cache" in again.stderr
    assert nbformat.read(site / "site/good/good.ipynb", as_version=4) == notebook  # the stored text, reused

    (site / "docs/good.md").write_text(GOOD.replace("The value is", "Its value is"))  # prose only
    edited = build(site)
    assert "docs/good.md: from cache" in edited.stderr  # the outputs are; the notebook is made again
    assert "Its value is 42." in nbformat.read(site / "site/good/good.ipynb", as_version=4).cells[3].source


def test_a_notebook_shows_the_outputs_of_its_pages_latest_run(tmp_path, build):
    """Same code, same prose, new outputs (a data file changed): the stored notebook is not reused."""
    page = "# Reads\n\n```python exec\nprint(open('value.txt').read().strip())\n```\n"
    site = make_site(tmp_path, {"index.md": "# Home\n", "reads.md": page})
    outputs = []
    for value in ("first", "second"):
        (site / "docs/value.txt").write_text(f"{value}\n")
        assert build(site).returncode == 0
        cells = nbformat.read(site / "site/reads/reads.ipynb", as_version=4).cells
        outputs.append("".join(o.get("text", "") for c in cells if c.cell_type == "code" for o in c.outputs))
    assert outputs == ["first\n", "second\n"]


FAILING = "---\ntitle: Bad\n---\n\n```python exec\nx = 1\nraise RuntimeError('no')\n```\n"


def test_a_failing_page_stops_build_and_cli_at_its_line_and_is_not_published(tmp_path, build, lessonlib_cli):
    """One kind of failure per door, its line counted past the front matter; every kind, located,
    runs in process (test_engine_run, test_engine_faults), and the pytest door in test_engine_faults."""
    site = make_site(tmp_path, {"index.md": "# Home\n", "sub/bad.md": FAILING})
    result = build(site)
    cli = lessonlib_cli(site, "run", "docs/sub/bad.md")
    assert result.returncode != 0 and cli.returncode == 1
    assert "docs/sub/bad.md:7: RuntimeError: no" in result.stderr, result.stderr
    assert not (site / "site/sub/bad/index.html").exists()
    assert "\ndocs/sub/bad.md:7: RuntimeError: no" in f"\n{cli.stderr}", cli.stderr  # editors jump to it


def test_cli_prints_outputs_and_inline_values_and_exports_notebooks(tmp_path, lessonlib_cli):
    site = make_site(tmp_path, {"good.md": GOOD})
    result = cli_process(site, "run", "docs/good.md")  # the CLI door itself: `python -m lessonlib` in a process
    assert result.returncode == 0, result.stderr
    assert "hello from the good page" in result.stdout
    assert "[figure: A line that rises from 0 to 1.]" in result.stdout
    assert "docs/good.md:10 `{py} value` = 42" in result.stdout
    exported = lessonlib_cli(site, "notebook", "docs/good.md", "-o", "good.ipynb")
    assert exported.returncode == 0, exported.stderr
    nbformat.validate(nbformat.read(site / "good.ipynb", as_version=4))
    missing = lessonlib_cli(site, "run", "docs/missing.md")
    assert missing.returncode == 2 and "no such page: docs/missing.md" in missing.stderr


@pytest.mark.parametrize(("output", "says"), [
    ("docs/good.md", "a notebook's name ends in .ipynb"),
    ("docs/other.ipynb", "is under the docs folder"),
    ("mkdocs.yml", "a notebook's name ends in .ipynb"),
    ("tracked.ipynb", "is a file git tracks"),
    ("missing/good.ipynb", "the folder missing does not exist"),
    ("sub", "is a folder: name the notebook file"),
])
def test_notebook_export_never_writes_over_an_authors_file_and_says_why_in_one_line(tmp_path, lessonlib_cli, output,
                                                                                      says):
    site = make_site(tmp_path, {"good.md": GOOD, "other.ipynb": "{}"})
    (site / "sub").mkdir()
    (site / "tracked.ipynb").write_text("{}")
    subprocess.run(["git", "init", "-q"], cwd=site, check=True)
    subprocess.run(["git", "add", "tracked.ipynb"], cwd=site, check=True)
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file() and ".git" not in p.parts}
    refused = lessonlib_cli(site, "notebook", "docs/good.md", "-o", output)
    assert refused.returncode == 2 and says in refused.stderr and len(refused.stderr.splitlines()) == 1, refused
    assert {p: p.read_bytes() for p in before} == before


# A page of random draws each, in random, NumPy and torch: the seed every page starts from, not
# the process it ran in, decides them; it prints a set too, whose order the hash seed decides,
# shows a figure and an inline value, and memoizes a call.
RANDOM_PAGE = """\
```python exec alt="Random points of page {n}."
import random
import matplotlib.pyplot as plt
import numpy as np
import torch
x = torch.randn(8)
plt.plot(x)
print(x[:3], np.random.randn(2), random.random(), {{"alpha", "beta", "gamma", "delta", "epsilon"}})
```

```python exec
def draw(n):
    return np.random.randn(n)
```

```python exec memo="draw"
drawn = draw(3)
```

The first memoized draw is `{{py}} float(drawn[0])`.
"""
SAME_SITE = {"index.md": "# Home\n", **{f"p{n}.md": RANDOM_PAGE.format(n=n) for n in range(3)}}
# As the course's mkdocs.yml: the pages' template imports these once, from a cold cache on (the
# pages fork with NumPy's state already drawn; each imports torch in a fraction of a second).
PRELOAD = "cache_dir: .cache\n      preload: [numpy, torch, matplotlib.pyplot]\n"


# MkDocs stamps the sitemap with the build date; everything else must be byte-identical, however
# the pages ran: in processes with another hash seed, three at a time, or on a real multi-process
# Dask cluster (ON_A_CLUSTER: the cluster's address, started for that case alone). Each case
# changes one of these from the one reference build: one hash seed, one page at a time, here.
ON_A_CLUSTER = "the address of a cluster started for the test"
REFERENCE = {"PYTHONHASHSEED": "1", "LESSONLIB_WORKERS": "1"}


@pytest.fixture(scope="module")
def reference_build(tmp_path_factory) -> Path:
    return _cold_build(tmp_path_factory.mktemp("reference"), REFERENCE)


@pytest.mark.parametrize("change", [
    {"PYTHONHASHSEED": "2"},  # a process each, its own hash seed: set order shows
    {"LESSONLIB_WORKERS": "3"},  # three pages at once
    {SCHEDULER: ON_A_CLUSTER},  # on `dask scheduler` + `dask worker --nworkers 2`
], ids=["hash-seeds", "workers", "cluster"])
def test_two_cold_builds_are_byte_identical_apart_from_the_dated_sitemap(tmp_path, reference_build, change):
    with contextlib.ExitStack() as cluster:
        if change.get(SCHEDULER) == ON_A_CLUSTER:
            change = {SCHEDULER: cluster.enter_context(dask_cluster(tmp_path))}
        tree = _cold_build(tmp_path / "b", {**REFERENCE, **change})
        if SCHEDULER in change:
            assert pages_run_on(change[SCHEDULER]) == 3
    differing = set(differences(filecmp.dircmp(reference_build, tree)))
    assert differing <= DATED, differing - DATED


def _cold_build(folder: Path, variables: dict[str, str]) -> Path:
    """SAME_SITE built from an empty cache, with the course's preload, in a process of its own."""
    site = make_site(folder, SAME_SITE)
    (site / "mkdocs.yml").write_text((site / "mkdocs.yml").read_text().replace("cache_dir: .cache\n", PRELOAD))
    result = build_process(site, **variables)
    assert result.returncode == 0, result.stderr
    assert "3 pages: 3 ran, 0 from cache" in result.stderr, result.stderr
    if variables.get("LESSONLIB_WORKERS", "1") != "1":
        assert f"with {variables['LESSONLIB_WORKERS']} workers" in result.stderr, result.stderr
    return site / "site"


def test_a_run_killed_while_its_page_runs_leaves_the_page_to_run_again(tmp_path, lessonlib_cli, killed_build_temp):
    """The killed run held the page's lock and stored nothing: the next run neither waits for
    it nor reads a result of it; it runs the page, and stores what the run after it reads."""
    log, go = tmp_path / "runs.log", tmp_path / "go"
    page = (f"```python exec\nimport os, time\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\nprint('page done')\n```\n")
    site = make_site(tmp_path / "site", {"held.md": page})
    # a process: it is killed
    victim = subprocess.Popen([*LESSONLIB, "run", "docs/held.md"], cwd=site, env=environment(TMPDIR=str(killed_build_temp)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until(lambda: log.exists() and log.read_text().endswith("\n"), "the victim's page to be running (holding its lock)")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    (worker,) = map(int, log.read_text().split())
    until(lambda: gone(worker), "the victim's page to end with it")
    go.write_text("")  # the page no longer holds; its text is the same, so are its lock and cache entry

    after = lessonlib_cli(site, "run", "docs/held.md")
    assert after.returncode == 0 and "page done" in after.stdout, after.stderr
    assert "waiting for another build" not in after.stderr and len(log.read_text().split()) == 2  # ran again
    assert "docs/held.md: from cache" in lessonlib_cli(site, "run", "docs/held.md").stderr


def test_a_warm_build_does_not_import_torch(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    assert build(site).returncode == 0
    probe = ("import sys\nfrom mkdocs.__main__ import cli\ntry:\n    cli(['build', '--strict'])\nexcept SystemExit as e:\n"
             "    assert not e.code, e.code\nprint('torch imported:', 'torch' in sys.modules)\n")
    warm = command([sys.executable, "-c", probe], site)  # a fresh process: this one has imported torch
    assert "docs/good.md: from cache" in warm.stderr
    assert "torch imported: False" in warm.stdout, warm.stdout + warm.stderr


def test_serve_rebuilds_when_a_file_the_page_read_outside_docs_changes_and_keeps_its_site_when_a_rebuild_fails(
        tmp_path, killed_build_temp):
    """mkdocs serve builds into a temporary folder (under TMPDIR) and serves it; a rebuild that
    fails its strict check must leave it as the last good build made it."""
    page = "```python exec\nvalue = open('../data/value.txt').read().strip()\n```\n\nThe value is `{py} value`.\n"
    site = make_site(tmp_path / "s", {"index.md": "# Home\n", "reads.md": page})
    (site / "data").mkdir()
    (site / "data" / "value.txt").write_text("first\n")
    log = tmp_path / "serve.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def page_shows(text: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/reads/", timeout=5) as response:
                return text in response.read().decode()
        except OSError:  # not serving yet
            return False

    with log.open("w") as err:  # a process: serve runs until it is stopped, rebuilding meanwhile
        server = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "-a", f"127.0.0.1:{port}"], cwd=site,
                                  env=environment(TMPDIR=str(killed_build_temp)), stdout=subprocess.DEVNULL,
                                  stderr=err)
    try:
        until(lambda: page_shows("The value is first."), "the first build")
        (site / "data" / "value.txt").write_text("second\n")
        until(lambda: page_shows("The value is second."), "the rebuild for the file outside docs")
        (served,) = killed_build_temp.glob("mkdocs_*")
        before = tree(served)
        (site / "docs/reads.md").write_text(page.replace("The value is", "Its value is") + "\nSee [the missing page](missing.md).\n")
        until(lambda: "An error happened during the rebuild" in log.read_text(), "the failed rebuild")
        assert tree(served) == before
    finally:
        server.terminate()
        server.wait()
