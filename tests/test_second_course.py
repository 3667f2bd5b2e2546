"""A second course (issue 64): lessonlib as another author gets it. The package is built from this
checkout as a wheel and installed, not editable, into a fresh virtual environment without torch,
with this project's pins (`pip install -c constraints.txt WHEEL matplotlib`); a tiny course of
three pages of its own (an executed block, a figure, an inline value, a memoized call, a claim,
an exploration) builds there cold, then warm. The site must be styled by the engine's assets,
carry nothing of this course, and a broken page must be named at its line. The course uses
MkDocs' own theme, not Material: in a browser its exploration shows one frame at a time, as on
this course's site (the engine's stylesheets are scoped to its own classes, not to Material's).

The environment and the course's cold and warm builds are made once per test run (the fixture
`course`), however many pytest-xdist workers run these tests: installing needs the package registry
(pip's cache makes it quick after the first time). The seconds each step took are printed
(`pytest -s`); no test depends on them."""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from browser_support import Reader
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "lessonlib" / "engine" / "assets"  # what the plugin must add to every site
ASSET_FOLDER = "assets/lessonlib"  # where a site gets them

MKDOCS_YML = """\
site_name: A second course
strict: true
plugins:
  - search
  - lessonlib:
      timeout: 120
markdown_extensions: [admonition, attr_list, md_in_html, pymdownx.superfences]
nav:
  - Home: index.md
  - Squares: squares.md
  - Powers: powers.md
"""
PAGES = {
    "index.md": """\
# A second course

```python exec
words = ["attention", "is", "all", "you", "need"]
longest = max(words, key=len)
print("the longest word is", longest)
```

The longest word is `{py} longest`, with `{py} len(longest)` letters.
""",
    "squares.md": """\
# Squares

```python exec alt="The squares rise from {squares[0]} to {squares[-1]}." caption="The squares of the first {len(xs)} whole numbers."
import matplotlib.pyplot as plt

import lessonlib


def square_all(n):
    return [k * k for k in range(n)]


xs = list(range(6))
squares = lessonlib.memo(square_all)(len(xs))
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot(xs, squares)
lessonlib.figure_data({"x": xs, "square": squares})
print("sum of the squares:", sum(squares))
```

Each square is larger than the one before it.

```python exec check
from lessonlib import claim

assert all(a < b for a, b in zip(squares, squares[1:])), claim("larger than the one before it")
```
""",
    "powers.md": """\
# Powers

Move the slider to pick the power.

```python exec hide-code html
import matplotlib.pyplot as plt

from lessonlib.exploration import Frame, exploration_html, frame_svg


def frame(p):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [x**p for x in (0, 1, 2)])
    ax.set_ylim(0, 8)
    return Frame(str(p), frame_svg(fig), f"With power {p} the curve ends at {2**p}.")


print(exploration_html([frame(p) for p in (1, 2, 3)], control="Power", caption="y = x to the chosen power."))
```
""",
}
BROKEN = """\
# Broken

```python exec
x = 1
raise ValueError("the second course's broken page")
```
"""
BROKEN_LINE = 5  # the raise, counted in the Markdown file


@dataclass
class Course:
    root: Path  # the course's folder: mkdocs.yml, docs/, the built site/
    python: Path  # the fresh environment's interpreter
    cache: Path  # LESSONLIB_CACHE_DIR for its builds
    builds: dict[str, subprocess.CompletedProcess]  # the cold and the warm build

    def run(self, *args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        """A command of the fresh environment, in the course's folder, with none of this
        checkout's switches or paths: the course sees only the installed lessonlib."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LESSONLIB_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(PATH=f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}", LESSONLIB_CACHE_DIR=str(self.cache),
                   NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
        return subprocess.run([str(self.python), *args], cwd=cwd or self.root, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def build(self) -> subprocess.CompletedProcess:
        return self.run("-m", "mkdocs", "build", "--strict")

    def copy(self, folder: Path) -> Course:
        """The course's files, site and cache copied into `folder`, with the same environment: for
        a test that writes into them, since the other tests, in any worker, read the originals."""
        shutil.copytree(self.root, folder / "course")
        shutil.copytree(self.cache, folder / "cache")
        return replace(self, root=folder / "course", cache=folder / "cache")


BUILDS = "builds.json"  # in the made course's folder: the logs of its builds, written last


def _course(base: Path, builds: dict[str, subprocess.CompletedProcess]) -> Course:
    return Course(base / "course", base / "venv" / "bin" / "python", base / "cache", builds)


def _timed(seconds: dict[str, float], name: str, args: list[str], **kwargs) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    seconds[name] = time.perf_counter() - started
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _make(base: Path) -> None:
    """Into `base`: the wheel of this checkout, installed with its pins into a fresh venv; the
    course's files; its builds, cold then warm, their logs written last to BUILDS."""
    seconds: dict[str, float] = {}
    # The wheel, built from a copy of the package: setuptools writes build/ and an egg-info
    # beside the sources it builds, which must not land in the checkout.
    source = base / "source"
    shutil.copytree(ROOT / "lessonlib", source / "lessonlib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    shutil.copy2(ROOT / "pyproject.toml", source / "pyproject.toml")
    _timed(seconds, "wheel", [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                              "--quiet", "-w", str(base / "dist")])
    (wheel,) = (base / "dist").glob("lessonlib-*.whl")
    venv = base / "venv"
    started = time.perf_counter()
    _timed(seconds, "venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    # This checkout's pip installs into it (pip --python): quicker than a pip of its own.
    _timed(seconds, "install", [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                                "--quiet", "-c", str(ROOT / "constraints.txt"), str(wheel), "matplotlib"])
    seconds["venv + install"] = time.perf_counter() - started

    course = _course(base, {})
    (course.root / "docs").mkdir(parents=True)
    (course.root / "mkdocs.yml").write_text(MKDOCS_YML)
    for name, text in PAGES.items():
        (course.root / "docs" / name).write_text(text)
    builds = {}
    for name in ("cold", "warm"):
        started = time.perf_counter()
        builds[name] = vars(course.build())  # args, returncode, stdout, stderr
        seconds[f"build {name}"] = time.perf_counter() - started
    (base / BUILDS).write_text(json.dumps(builds))
    print("\nsecond course, seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))


@pytest.fixture(scope="session")
def course(tmp_path_factory) -> Course:
    """The second course, made once per test run: the first pytest-xdist worker to ask makes it,
    under a lock the workers share, and the others wait for it and reuse it (its venv cannot
    move: its scripts name its path). The tests only read it; one that writes works on a copy
    (Course.copy). An attempt that failed is not kept: the next worker to ask starts again."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    base = shared / "second-course"
    with FileLock(shared / "second-course.lock"):
        if not (base / BUILDS).exists():
            shutil.rmtree(base, ignore_errors=True)  # what a failed attempt left
            _make(base)
    builds = json.loads((base / BUILDS).read_text())
    return _course(base, {name: subprocess.CompletedProcess(**build) for name, build in builds.items()})


def _log(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def test_the_environment_has_lessonlib_from_the_wheel_and_no_torch(course):
    where = course.run("-c", "import lessonlib, sys; print(lessonlib.__file__); print(sys.prefix)")
    assert where.returncode == 0, _log(where)
    module, prefix = where.stdout.split()
    assert Path(module).is_relative_to(Path(prefix)) and not Path(module).is_relative_to(ROOT), module  # not editable
    torch = course.run("-c", "import torch")
    assert torch.returncode != 0 and "No module named 'torch'" in torch.stderr, \
        "lessonlib's base dependencies (or matplotlib's) brought torch into the second course's environment"


def test_the_course_builds_cold_then_warm_from_the_cache(course):
    cold, warm = course.builds["cold"], course.builds["warm"]
    assert cold.returncode == 0, _log(cold)
    assert warm.returncode == 0, _log(warm)
    for page in PAGES:
        assert re.search(rf"docs/{page}: ran \d+ blocks", _log(cold)), _log(cold)
        assert re.search(rf"docs/{page}: from cache", _log(warm)), _log(warm)
    assert "square_all: computed in" in _log(cold)  # the memoized call ran once, in the cold build
    assert "computed in" not in _log(warm) and "Traceback" not in _log(cold) + _log(warm)


def test_the_pages_show_what_their_code_computed(course):
    site = course.root / "site"
    index = (site / "index.html").read_text()
    assert "the longest word is attention" in index and "The longest word is attention, with 9 letters." in index
    squares = (site / "squares" / "index.html").read_text()
    assert "sum of the squares: 55" in squares
    assert 'alt="The squares rise from 0 to 25."' in squares and "The squares of the first 6 whole numbers." in squares
    (figure,) = re.findall(r'<img src="(figure-[0-9a-f]+\.svg)"', squares)
    assert (site / "squares" / figure).read_text().lstrip().startswith(("<?xml", "<svg"))
    assert "larger than the one before it" in squares  # the claim, in the page's list of checks
    powers = (site / "powers" / "index.html").read_text()
    assert powers.count('class="lessonlib-exploration"') == 1 and "With power 3 the curve ends at 8." in powers
    checked = course.run("-m", "lessonlib", "check", *(f"docs/{page}" for page in PAGES))
    assert checked.returncode == 0, _log(checked)  # no numeral typed by hand, every claim quoted


def test_every_page_is_styled_by_the_engines_assets(course):
    site = course.root / "site"
    assets = sorted(p for p in ASSETS.iterdir() if p.suffix in (".css", ".js"))
    assert any(p.suffix == ".css" for p in assets), assets
    for asset in assets:  # the checkout's: one missing from the wheel (package data) fails here
        copied = site / ASSET_FOLDER / asset.name
        assert copied.is_file() and copied.read_bytes() == asset.read_bytes(), asset.name
    for page in ("index.html", "squares/index.html", "powers/index.html"):
        html = (site / page).read_text()
        css = re.findall(r'<link[^>]+href="([^"]+)"', html)
        js = re.findall(r'<script[^>]+src="([^"]+)"', html)
        for asset in assets:
            links = css if asset.suffix == ".css" else js
            assert any(link.split("?")[0].endswith(f"{ASSET_FOLDER}/{asset.name}") for link in links), (page, asset.name)


def test_the_site_carries_nothing_of_this_course(course):
    site = course.root / "site"
    files = [p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()]
    assert not (site / "downloads").exists(), "publish_package is off: no wheel, no constraints"
    assert not [f for f in files if f.endswith((".whl", "constraints.txt"))], files
    pages = sorted(f for f in files if f.endswith(".html"))
    assert pages == ["404.html", "index.html", "powers/index.html", "squares/index.html"], pages  # no lessons, no code/
    stamps = [stamp for page in pages for stamp in re.findall(r'<p class="lessonlib-stamp">.*?</p>',
                                                               (site / page).read_text(), re.S)]
    assert len(stamps) == len(PAGES), stamps
    assert all("torch" not in stamp and "seed 0" in stamp for stamp in stamps), stamps
    assert "Sequences to Attention" not in (site / "index.html").read_text()


def test_a_broken_page_fails_the_build_at_its_line_and_leaves_the_site_as_it_was(course, tmp_path):
    course = course.copy(tmp_path)
    before = (course.root / "site" / "index.html").read_bytes()
    (course.root / "docs" / "broken.md").write_text(BROKEN)
    result = course.build()
    assert result.returncode != 0
    assert f"docs/broken.md:{BROKEN_LINE}: ValueError: the second course's broken page" in _log(result), _log(result)
    assert (course.root / "site" / "index.html").read_bytes() == before
    assert not (course.root / "site" / "broken").exists()


VISIBLE_FRAMES = """() => [...document.querySelectorAll('.lessonlib-exploration__frame')]
    .flatMap((frame, i) => frame.checkVisibility() ? [i] : [])"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def served_site(course):
    """The second course's built site, served on a free port of 127.0.0.1."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(course.root / "site")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def test_the_exploration_shows_one_frame_at_a_time_on_mkdocs_own_theme(course, served_site, new_reader):
    assert "theme" not in MKDOCS_YML  # MkDocs' default theme, which has no .md-typeset
    reader: Reader = new_reader()
    page = reader.page
    page.goto(f"{served_site}powers/")
    page.wait_for_function("() => document.querySelector('.lessonlib-exploration').dataset.explorationReady")
    assert "md-typeset" not in page.content()
    assert page.evaluate("() => document.querySelectorAll('.lessonlib-exploration__frame').length") == 3
    assert page.evaluate(VISIBLE_FRAMES) == [0], "before the control moves, the first frame alone is on view"
    page.focus('.lessonlib-exploration input[type="range"]')
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('.lessonlib-exploration').dataset.frame === '1'")
    assert page.evaluate(VISIBLE_FRAMES) == [1], "moving the slider shows the next frame, and it alone"
    assert page.locator(".lessonlib-exploration__value").inner_text() == "2"
    # MkDocs' theme loads highlight.js from a CDN, which an offline machine cannot reach: its
    # failed requests and its `hljs is not defined` are the theme's; any other error is not.
    errors = [e for e in reader.errors if "ERR_NAME_NOT_RESOLVED" not in e and e != "hljs is not defined"]
    assert not errors, errors
