"""The engine stands alone (issue 64): another MkDocs site builds with lessonlib, without this
course's project and without torch."""
from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest
from fixture_sites import GOOD, build_process, make_site
from fresh_process import output_of

from lessonlib.engine.builder import plugin
from lessonlib.engine.builder.cache import PageCache
from lessonlib.engine.builder.page import _PagesRun, execute_page, stamp
from lessonlib.engine.builder.plugin import STYLESHEET, STYLESHEET_URI
from lessonlib.engine.builder.pool import GUARD, WORKER, Task, template_modules
from lessonlib.engine.builder.wheel import read_project, wheel_bytes
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.after_import import cancel, when_imported
from lessonlib.engine.worker.errors import SetupError

PUBLISHING = ("cache_dir: .cache\n", "cache_dir: .cache\n      publish_package: true\n")


def test_a_site_without_publish_package_reads_no_project_and_offers_notebooks_without_an_install_cell(
        tmp_path, build, monkeypatch):
    def no_project(*args):  # as in a normal install, where lessonlib's pyproject.toml is nowhere
        raise SetupError("read_project called")

    monkeypatch.setattr(plugin, "read_project", no_project)
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    result = build(site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (site / "site" / "downloads").exists()
    notebook = nbformat.read(site / "site/good/good.ipynb", as_version=4)
    assert [c.metadata.get("tags") for c in notebook.cells[:1]] == [["setup"]]
    assert not any("pip" in c.source for c in notebook.cells)


def test_publish_package_publishes_the_sites_own_project_and_its_notebooks_install_it(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n\n```python exec\nprint(1)\n```\n"})
    publishing = PUBLISHING[1] + "      publish_extras: [course]\n"
    (site / "mkdocs.yml").write_text((site / "mkdocs.yml").read_text().replace(PUBLISHING[0], publishing))
    (site / "pyproject.toml").write_text('[project]\nname = "minicourse"\nversion = "0.2.0"\ndependencies = ["numpy"]\n')
    (site / "minicourse").mkdir()
    (site / "minicourse" / "__init__.py").write_text("ANSWER = 42\n")
    (site / "constraints.txt").write_text("numpy==2.0.0\n")
    result = build(site)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (p.name for p in (site / "site" / "downloads").glob("*.whl"))
    assert wheel.startswith("minicourse-0.2.0+"), wheel  # the site's project, not lessonlib's checkout
    assert (site / "site" / "downloads" / "constraints.txt").read_text() == "numpy==2.0.0\n"
    install = nbformat.read(site / "site/index.ipynb", as_version=4).cells[0]
    assert install.metadata.tags == ["install"] and f'"minicourse[course] @ " + DOWNLOADS + "{wheel}"' in install.source


NO_TORCH = "import sys\nsys.modules['torch'] = None  # as if torch were not installed: `import torch` fails\n"
PLAIN = "# Plain\n\n```python exec\nprint('hello without torch')\n```\n"

@pytest.mark.parametrize("page", [PLAIN, GOOD], ids=["print", "matplotlib"])
def test_a_site_builds_where_torch_cannot_be_imported(tmp_path, page):
    hide = tmp_path / "no-torch"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(NO_TORCH)
    site = make_site(tmp_path / "site", {"index.md": "# Home\n", "page.md": page})
    result = build_process(site, PYTHONPATH=os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")])))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    html = (site / "site/page/index.html").read_text()
    assert "hello" in html and (page == PLAIN or ("The value is 42." in html and '<img src="figure-' in html))
    (stamp,) = re.findall(r'<p class="lessonlib-stamp">.*?</p>', html)
    assert "torch" not in stamp and "seed 0" in stamp, stamp  # the page used no torch: the stamp names none
    learned = PageCache(site / ".cache").learned_preload(["docs/page.md"])  # what the next build's template imports
    assert "torch" not in learned and "lessonlib" not in learned
    assert ("matplotlib.pyplot" in learned) == (page == GOOD)  # only a page that draws imports pyplot


def test_a_matplotlib_page_records_as_inputs_only_the_distributions_its_code_reaches(tmp_path):
    (tmp_path / "docs").mkdir()
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")
    result = execute_page(GOOD, "docs/good.md", settings)
    assert set(result.inputs.dists) == {"matplotlib"}, result.inputs.dists  # not the engine's torch, psutil, filelock


def test_the_plugin_adds_the_engines_stylesheet_before_the_sites_own(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    (site / "docs" / "own.css").write_text(".lessonlib-stamp { color: red; }\n")
    (site / "mkdocs.yml").write_text((site / "mkdocs.yml").read_text() + "extra_css: [own.css]\n")
    assert build(site).returncode == 0
    assert (site / "site" / STYLESHEET_URI).read_bytes() == STYLESHEET.read_bytes()
    css = STYLESHEET.read_text()
    assert all(f".{name}" in css for name in ("lessonlib-figure", "lessonlib-stamp", "lessonlib-download"))
    html = (site / "site/good/index.html").read_text()
    links = re.findall(r'<link rel="stylesheet" href="([^"]+)"', html)
    assert links.index(f"../{STYLESHEET_URI}") < links.index("../own.css"), links  # the site's own may override it


def test_the_stamp_names_torch_and_the_device_only_for_a_page_that_used_torch():
    key = "0123456789ab" * 4
    assert "torch 2.5.1, device <code>cpu</code>, seed 0," in stamp(key, "2.5.1", "cpu")
    unused = stamp(key, None, "cpu")
    assert "torch" not in unused and "device" not in unused and "seed 0, code hash <code>0123456789ab</code>" in unused


def test_start_page_seeds_random_and_numpy_where_torch_is_not_installed():
    script = NO_TORCH + """
import random, numpy
from lessonlib.engine.worker.session import start_page
start_page(5)
print(random.random() == random.Random(5).random(), numpy.random.random() == numpy.random.RandomState(5).random_sample())
"""
    assert output_of(script).split() == ["True", "True"]


def test_start_page_sets_torch_up_as_a_page_imports_it_and_never_imports_it_itself():
    script = """
import subprocess
import sys
from lessonlib.engine.worker.session import start_page
start_page(5)
print("torch" in sys.modules)
import torch
drawn = torch.rand(3)
torch.manual_seed(5)
print(torch.equal(drawn, torch.rand(3)), torch.get_num_threads())
"""
    assert output_of(script).split() == ["False", "True", "1"]  # a fresh interpreter: torch not yet loaded


def test_the_page_template_imports_the_guard_then_the_preloaded_modules_that_are_installed(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
    assert template_modules(["numpy", "torch", "matplotlib.pyplot"]) == [GUARD, *WORKER, "numpy", "matplotlib.pyplot"]
    assert template_modules([]) == [GUARD, *WORKER]  # nothing learned yet: a site's first build starts no torch


def test_the_template_preloads_the_preload_option_else_what_the_pages_imported_when_they_last_ran(tmp_path):
    (tmp_path / "docs").mkdir()
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")
    result = execute_page("```python exec\nimport markdown_it\n```\n", "docs/reads.md", settings)
    other = execute_page("# No code\n", "docs/never-ran.md", settings)
    tasks = [Task(None, result.page, 1.0)]  # type: ignore[arg-type]
    assert {"markdown_it", "joblib"} <= set(_PagesRun(settings, print).preload(tasks))  # the page's, the engine's
    assert _PagesRun(settings, print).preload([Task(None, other.page, 1.0)]) == []  # type: ignore[arg-type]
    explicit = Settings(root=tmp_path, cache_dir=tmp_path / "cache", preload=("numpy",))
    assert _PagesRun(explicit, print).preload(tasks) == ["numpy"]


@pytest.mark.parametrize("value", [["num py"], ["numpy", 3]])
def test_a_preload_that_names_no_module_stops_the_build_in_one_line(tmp_path, value):
    with pytest.raises(SetupError, match=r"^preload: .* is not a module's name"):
        Settings(root=tmp_path, preload=tuple(value))


ENGINE_MODULES = {"engine", "progress", "exploration", "__main__"}  # the rest of lessonlib is the course's


def test_the_engine_imports_none_of_the_course():
    script = f"""
import pkgutil, sys
import lessonlib
import lessonlib.__main__, lessonlib.exploration
import lessonlib.engine.builder.plugin, lessonlib.engine.builder.pytest_plugin
import lessonlib.engine.worker.process, lessonlib.engine.worker.session
course = tuple("lessonlib." + m.name for m in pkgutil.iter_modules(lessonlib.__path__) if m.name not in {ENGINE_MODULES!r})
print(sorted(name for name in sys.modules if name.startswith(course)) or "none", len(course))
"""
    loaded, count = output_of(script).split()
    assert loaded == "none" and int(count) >= 6, (loaded, count)  # device, models, experiments ... are the course


def test_a_start_waits_for_a_real_import_and_starts_run_in_the_order_asked(tmp_path, monkeypatch):
    (tmp_path / "lessonlib_probe_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lessonlib_probe_module", raising=False)
    started = []
    first = when_imported("lessonlib_probe_module", lambda m: started.append(("first", m.VALUE)))
    when_imported("lessonlib_probe_module", lambda m: started.append(("second", m.VALUE)))
    dropped = when_imported("lessonlib_probe_module", lambda m: started.append(("dropped", m.VALUE)))
    cancel(dropped)
    assert importlib.util.find_spec("lessonlib_probe_module") is not None and started == []  # a probe is no import
    import lessonlib_probe_module  # noqa: F401

    assert started == [("first", 1), ("second", 1)] and first not in sys.meta_path
    when_imported("lessonlib_probe_module", lambda m: started.append(("loaded", m.VALUE)))  # loaded: at once
    assert started[-1] == ("loaded", 1)


def test_a_memoized_call_that_first_imports_torch_leaves_it_as_the_page_would_find_it():
    script = """
import subprocess
import sys
from lessonlib.engine.worker.memo import _seeded_and_restored
from lessonlib.engine.worker.session import start_page
start_page(7)
with _seeded_and_restored():  # as a memoized call runs
    import torch
    inside = torch.rand(3)
after = torch.rand(3)
torch.manual_seed(0)
same_as_seed_0 = torch.equal(inside, torch.rand(3))
torch.manual_seed(7)
print(same_as_seed_0, torch.equal(after, torch.rand(3)))
"""
    assert output_of(script).split() == ["True", "True"]  # the call's seed inside; the page's after it


def test_a_hyphenated_project_publishes_its_package_and_one_without_a_package_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "my-course"\nversion = "0.2.0"\n')
    with pytest.raises(SetupError, match=r"the project my-course has no package my_course/ beside it"):
        read_project(tmp_path)
    (tmp_path / "my_course").mkdir()
    (tmp_path / "my_course" / "__init__.py").write_text("ANSWER = 42\n")
    project = read_project(tmp_path)
    names = zipfile.ZipFile(io.BytesIO(wheel_bytes(project))).namelist()
    assert project.wheel_name.startswith("my_course-0.2.0+") and "my_course/__init__.py" in names
    assert any(n.startswith("my_course-0.2.0+") and n.endswith(".dist-info/METADATA") for n in names), names


def test_the_notebook_command_works_where_git_is_not_installed(tmp_path):
    site = make_site(tmp_path / "site", {"index.md": "# Home\n", "page.md": PLAIN})
    (tmp_path / "bin").mkdir()  # PATH: a folder without git (the command runs this Python by its path)
    out = tmp_path / "page.ipynb"
    result = subprocess.run([sys.executable, "-m", "lessonlib", "notebook", "docs/page.md", "-o", str(out)], cwd=site,
                            env={**os.environ, "PATH": str(tmp_path / "bin")}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "hello without torch" in out.read_text()
