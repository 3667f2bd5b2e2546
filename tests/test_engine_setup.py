"""One clear line, never a traceback, for every bad value: an environment variable, an option in
mkdocs.yml, a block's timeout, a cache folder that is a file, read-only or on a full disk (the
cache's fault, not a lesson's), a file of the site that the disk refuses. And the author's view:
errors keep what Python says (the caret, "Did you mean"), `lessonlib run` shows the blocks before
a failure; documented calls work."""
from __future__ import annotations

import ast
import errno
import itertools
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import distribution, distributions
from pathlib import Path
from unittest import mock

import pytest
from fixture_sites import GOOD, LESSONLIB, MKDOCS_BUILD, MKDOCS_YML, make_site
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from site_support import can_mount_tmpfs, tree, with_cache_on_tmpfs

from lessonlib.__main__ import main as cli_main
from lessonlib.engine import config
from lessonlib.engine.builder.cache import prune
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.worker.errors import LessonError, SetupError

ROOT = Path(__file__).resolve().parents[1]


def one_clear_line(output: str, *words: str) -> None:
    assert "Traceback" not in output, output
    assert any(all(w in line for w in words) for line in output.splitlines()), (words, output)


ENVIRONMENT = {
    "LESSONLIB_WORKERS=abc": ("LESSONLIB_WORKERS", "abc", "not a whole number"),
    "LESSONLIB_WORKERS=2.5": ("LESSONLIB_WORKERS", "2.5", "not a whole number"),
    "LESSONLIB_WORKERS=-1": ("LESSONLIB_WORKERS", "-1", "not a whole number"),
    "LESSONLIB_REFRESH=yes": ("LESSONLIB_REFRESH", "yes", "must be 0 or 1"),
    "LESSONLIB_EXECUTE=no": ("LESSONLIB_EXECUTE", "no", "must be 0 or 1"),
    "LESSONLIB_PERTURB=sideways": ("LESSONLIB_PERTURB", "sideways", "is not a perturbation: subnormals or threads=N"),
    "LESSONLIB_PERTURB=threads=0": ("LESSONLIB_PERTURB", "threads=0", "is not a perturbation: subnormals or threads=N"),
    "LESSONLIB_SCHEDULER=nonsense": ("LESSONLIB_SCHEDULER", "nonsense", "is not a Dask scheduler's address"),
    "LESSONLIB_DEVICE=cuda:99": ("LESSONLIB_DEVICE", "cuda:99", "torch sees no such device on this machine"),
    "LESSONLIB_REFRSH=1": ("LESSONLIB_REFRSH", "1", "lessonlib has no such variable (misspelt?"),
}


def setup_error(config_file: Path) -> str:
    """The one line the doors print for a bad setting: both read the settings as load_settings
    does (the plugin through settings_from, with_build_environment), before any page."""
    with pytest.raises(SetupError) as info:
        load_settings(config_file)
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("case", ENVIRONMENT)
def test_a_bad_environment_value_is_one_line_naming_it_at_the_start_though_no_page_reads_it(tmp_path, case,
                                                                                              monkeypatch):
    name, value, words = ENVIRONMENT[case]
    site = make_site(tmp_path, {"index.md": "# Home, where no page runs code\n"})
    monkeypatch.setenv(name, value)
    one_clear_line(setup_error(site / "mkdocs.yml"), f"{name}: '{value}'", words)


def test_a_bad_environment_value_stops_every_door_in_one_line(tmp_path, build, lessonlib_cli):
    """One kind through the doors (the rest in process, above)."""
    name, value, words = ENVIRONMENT["LESSONLIB_WORKERS=abc"]
    site = make_site(tmp_path, {"index.md": "# Home, where no page runs code\n"})
    for result in (build(site, **{name: value}), lessonlib_cli(site, "run", "docs/index.md", **{name: value})):
        assert result.returncode != 0
        one_clear_line(result.stderr, f"{name}: '{value}'", words)


OPTIONS = {
    "workers: -3": ("workers", "-3", "whole number of 0 or more"),
    "cache_limit_mb: -5": ("cache_limit_mb", "-5", "0 or more"),
    "timeout: .nan": ("timeout", "nan", "positive, finite number of seconds"),
    "timeout: 0": ("timeout", "0", "positive, finite number of seconds"),
    "output_limit_kb: 0": ("output_limit_kb", "0", "positive, finite number of KB"),
    "memory_limit_mb: -1": ("memory_limit_mb", "-1", "positive, finite number of MB"),
    "scheduler: nonsense": ("scheduler", "nonsense", "is not a Dask scheduler's address"),  # every page cached
}


@pytest.mark.parametrize("option", OPTIONS)
def test_a_bad_option_is_one_line_naming_it(tmp_path, option):
    name, value, words = OPTIONS[option]
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", f"      {option}\n"))
    one_clear_line(setup_error(site / "mkdocs.yml"), f"mkdocs.yml, lessonlib option {name}: ", value, words)


def test_a_bad_option_stops_every_door_in_one_line_and_changes_nothing(tmp_path, build, lessonlib_cli):
    """One kind through the doors (the rest in process, above), on a site built before."""
    option = "workers: -3"
    name, value, words = OPTIONS[option]
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    assert build(site).returncode == 0
    before = tree(site / ".cache")  # and the site (test_engine_publish)
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", f"      {option}\n"))
    for result in (build(site), lessonlib_cli(site, "run", "docs/good.md")):
        assert result.returncode != 0
        one_clear_line(result.stderr, f"mkdocs.yml, lessonlib option {name}: ", value, words)
    assert tree(site / ".cache") == before


def test_a_misspelt_option_fails_a_strict_build(tmp_path, build):
    site = make_site(tmp_path, {"index.md": "# Home\n"})
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", "      timout: 60\n"))
    built = build(site)
    assert built.returncode != 0 and "timout" in built.stdout + built.stderr  # MkDocs' own line, in strict mode


def test_a_misspelt_option_is_refused_where_mkdocs_only_warns_not_ignored(tmp_path):
    """The settings every door reads (the CLI and the pytest door through load_settings), in process."""
    site = make_site(tmp_path, {"index.md": "# Home\n"})
    misspelt = MKDOCS_YML.replace("      timeout: 60\n", "      timout: 60\n").replace("strict: true\n", "")
    (site / "mkdocs.yml").write_text(misspelt)
    one_clear_line(setup_error(site / "mkdocs.yml"), "mkdocs.yml, lessonlib option timout: 60",
                   "lessonlib has no such option (misspelt?", "timeout")


def test_blank_variables_are_unset_and_a_cache_folder_may_start_at_home(tmp_path, monkeypatch):
    make_site(tmp_path, {"index.md": "# Home\n"})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in config.VARIABLES:
        monkeypatch.setenv(name, "  ")
    monkeypatch.delenv(config.BUILD_PID)
    settings = load_settings(tmp_path / "mkdocs.yml")
    assert (settings.cache_dir, settings.execute, settings.workers) == (tmp_path / ".cache", True, 0)
    assert (settings.device, settings.perturb, settings.scheduler) == ("cpu", (), None)

    (tmp_path / "mkdocs.yml").write_text(MKDOCS_YML.replace("cache_dir: .cache", "cache_dir: ~/lessonlib-cache"))
    assert load_settings(tmp_path / "mkdocs.yml").cache_dir == tmp_path / "home" / "lessonlib-cache"
    monkeypatch.setenv(config.CACHE_DIR, "~/elsewhere")
    assert load_settings(tmp_path / "mkdocs.yml").cache_dir == tmp_path / "home" / "elsewhere"


@pytest.mark.parametrize("where", ["cache_dir: .", "cache_dir: ..", "LESSONLIB_CACHE_DIR=.."])
def test_a_cache_folder_that_holds_the_project_is_refused(tmp_path, where, monkeypatch):
    site = make_site(tmp_path / "site", {"index.md": "# Home\n"})
    if where.startswith("LESSONLIB"):
        monkeypatch.chdir(site)  # as a door runs: a relative folder is the working folder's
        monkeypatch.setenv(config.CACHE_DIR, "..")
    else:
        (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("cache_dir: .cache", where))
    one_clear_line(setup_error(site / "mkdocs.yml"), where.split("=")[0].split(":")[0], "holds the project",
                   "a folder of its own")


def test_a_cache_folder_that_holds_the_project_stops_every_door_and_clearing_the_cache_deletes_nothing(
        tmp_path, build, lessonlib_cli):
    """One kind through the doors (the rest in process, above)."""
    where = "LESSONLIB_CACHE_DIR=.."
    site = make_site(tmp_path / "site", {"index.md": "# Home\n"})
    variables = {config.CACHE_DIR: ".."} if where.startswith("LESSONLIB") else {}
    if not variables:
        (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("cache_dir: .cache", where))
    before = tree(tmp_path)
    for result in (build(site, **variables), lessonlib_cli(site, "cache", "--clear", **variables)):
        assert result.returncode != 0
        one_clear_line(result.stderr, where.split("=")[0].split(":")[0], "holds the project", "a folder of its own")
    assert tree(tmp_path) == before


def test_a_device_is_looked_for_here_only_when_pages_run_here(monkeypatch):
    monkeypatch.setenv(config.DEVICE, "cuda:99")
    monkeypatch.setenv(config.SCHEDULER, "tcp://127.0.0.1:8786")  # its workers have devices of their own
    assert Settings().with_build_environment().device == "cuda:99"
    monkeypatch.delenv(config.SCHEDULER)
    with pytest.raises(SetupError, match="LESSONLIB_DEVICE: 'cuda:99', but torch sees no such device"):
        Settings().with_build_environment()


FENCES = {
    "timeout=nan": "timeout: 'nan' must be a positive, finite number of seconds",
    "timeout=inf": "timeout: 'inf' must be a positive, finite number of seconds",
    "timeout=0": "timeout: '0' must be a positive, finite number of seconds",
    "timeout=-1": "timeout: '-1' must be a positive, finite number of seconds",
    "timeout=1 timeout=100": "timeout= is given twice on this fence: keep one",
}


@pytest.mark.parametrize("options", FENCES)
def test_a_bad_timeout_on_a_fence_fails_at_the_fence(tmp_path, options):
    (tmp_path / "docs").mkdir()
    with pytest.raises(LessonError) as info:
        execute_page(f"Text.\n\n```python exec {options}\nx = 1\n```\n", "docs/p.md", Settings(root=tmp_path))
    assert str(info.value) == f"docs/p.md:3: {FENCES[options]}"


def test_a_cache_folder_that_is_a_file_is_one_line(tmp_path, build, lessonlib_cli):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    (site / ".cache").write_text("not a folder")
    for result in (build(site), lessonlib_cli(site, "run", "docs/good.md")):
        assert result.returncode != 0
        one_clear_line(result.stderr, f"the cache folder {site / '.cache'} cannot be made", "is a file")


needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(), reason="no user namespace here to mount a small tmpfs in")
BIG_MEMO = GOOD + "\n```python exec\nimport lessonlib\nbig = lessonlib.memo(lambda n: b'x' * n)(2**20)\n```\n"


@needs_tmpfs
@pytest.mark.parametrize("cache", ["full", "read-only"])
def test_a_full_or_read_only_cache_is_one_line_and_the_site_stays_as_it_was(tmp_path, cache, build):
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    assert build(site).returncode == 0
    before = tree(site / "site")
    (site / "docs/good.md").write_text(GOOD.replace("hello from", "changed words from"))
    options, words = {"full": ("size=16k", "is on a full disk"), "read-only": ("ro", "cannot be written")}[cache]

    result = with_cache_on_tmpfs(MKDOCS_BUILD, site, site / ".cache", options)  # a process: in a mount namespace
    assert result.returncode != 0
    one_clear_line(result.stderr, f"the cache folder {site / '.cache'}", words, "LESSONLIB_CACHE_DIR")
    assert tree(site / "site") == before
    assert ".tmp" not in result.stdout.split("LEFT IN CACHE:")[1], result.stdout


def test_a_site_file_the_disk_refuses_is_one_line(tmp_path, build):
    """The site stays as it was: test_engine_publish."""
    site = make_site(tmp_path, {"index.md": "# Home\n", "good.md": GOOD})
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with mock.patch("lessonlib.engine.builder.plugin.write_atomically", side_effect=full):  # the page's figure is first
        result = build(site)
    assert result.returncode != 0
    one_clear_line(result.stdout + result.stderr, "cannot write good/figure-", "into the site being built",
                   os.strerror(errno.ENOSPC))


def test_a_memoized_result_that_fills_the_disk_is_the_caches_fault_and_leaves_nothing_half_written(tmp_path):
    site = make_site(tmp_path, {"big.md": BIG_MEMO})
    # a process: in a mount namespace
    result = with_cache_on_tmpfs([*LESSONLIB, "run", "docs/big.md"], site, site / ".cache", "size=256k")
    assert result.returncode == 2
    one_clear_line(result.stderr, "lessonlib: the cache folder", "memo is on a full disk")
    assert "docs/big.md:" not in result.stderr, "not blamed on the lesson's line"
    assert ".tmp" not in result.stdout.split("LEFT IN CACHE:")[1], result.stdout


def test_prune_removes_what_a_killed_write_left_and_nothing_a_live_one_is_writing(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that has ended: a writer's pid that is gone
    ended.wait()
    (tmp_path / "memo").mkdir()
    abandoned = tmp_path / f"memo/.key.pkl.{ended.pid}.0123456789ab.tmp"
    in_progress = tmp_path / f"memo/.other.pkl.{os.getpid()}.0123456789ab.tmp"
    for tmp in (abandoned, in_progress):
        tmp.write_bytes(b"x" * 1000)
        os.utime(tmp, (100, 100))
    prune(tmp_path, limit_mb=1024, since=1000)
    assert not abandoned.exists() and in_progress.exists()


# --- the author's view -------------------------------------------------------------------------

def test_a_syntax_error_shows_its_line_and_caret(tmp_path):
    (tmp_path / "docs").mkdir()
    with pytest.raises(LessonError) as info:
        execute_page("```python exec\nx = 1\ny = (x +\n```\n", "docs/p.md", Settings(root=tmp_path))
    assert info.value.line == 3 and info.value.message.startswith("SyntaxError: ")
    assert re.search(r"\n    y = \(x \+\n\s+\^", info.value.detail), info.value.detail


def test_a_misspelt_name_keeps_pythons_suggestion(tmp_path):
    (tmp_path / "docs").mkdir()
    with pytest.raises(LessonError) as info:
        execute_page("```python exec\nvalue = 1\nprint(valeu)\n```\n", "docs/p.md", Settings(root=tmp_path))
    assert str(info.value).startswith("docs/p.md:3: NameError: name 'valeu' is not defined. Did you mean: 'value'?")


def test_lessonlib_run_on_a_failing_page_prints_what_the_blocks_before_printed(tmp_path, lessonlib_cli):
    page = ("```python exec\nprint('first block')\n```\n\n```python exec\nprint('second block')\n```\n\n"
            "```python exec\nprint('third, partly')\nraise RuntimeError('no')\n```\n")
    site = make_site(tmp_path, {"fails.md": page})
    result = lessonlib_cli(site, "run", "docs/fails.md")
    assert result.returncode == 1
    assert "--- docs/fails.md:1 (exec)\nfirst block\n--- docs/fails.md:5 (exec)\nsecond block\n" in result.stdout
    assert "docs/fails.md:11: RuntimeError: no" in result.stderr


def test_the_documented_device_calls_work(monkeypatch):
    """cpus(): one process per core this process may run on, and no more than the build's workers."""
    import lessonlib
    from lessonlib.engine.worker import cores  # the engine's, which lessonlib.device re-exports

    assert lessonlib.device().type == "cpu"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    monkeypatch.setattr(cores, "_core_budget", None)
    assert lessonlib.device.cpus() == 3  # the cores it may run on, not the machine's
    cores.limit_cpus(2)
    assert lessonlib.device.cpus() == 2
    cores.limit_cpus(64)
    assert lessonlib.device.cpus() == 3


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("#")[0].strip():
            name, version = line.split("#")[0].strip().split("==")
            pins[canonicalize_name(name)] = version
    return pins


def _requirements() -> list[Requirement]:
    """The project's requirements: the engine's and every extra's (not lessonlib[cluster], an extra's own extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in [*project["dependencies"], *itertools.chain(*project["optional-dependencies"].values())]]
    return [r for r in requirements if r.name != project["name"]]


def test_every_dependency_is_pinned_to_the_version_installed():
    """What the README's "Adding a dependency" asks for, true of the checkout: every requirement of
    pyproject.toml is pinned exactly in constraints.txt, and each pin is what .venv holds."""
    pins = _pins()
    assert not [r.name for r in _requirements() if canonicalize_name(r.name) not in pins]
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version).public for d in distributions()}
    assert {name: (pin, installed.get(name)) for name, pin in pins.items() if installed.get(name) != pin} == {}


def test_every_package_a_dependency_brings_is_pinned():
    pins, unpinned, todo, seen = _pins(), set(), _requirements(), set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        if name not in pins:
            unpinned.add(name)
        todo += [r for r in map(Requirement, distribution(name).requires or [])
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    assert unpinned == set()


def test_a_downloaded_notebook_needs_the_python_the_wheel_requires():
    """The README's "Running one needs Python X or newer" is the wheel's Requires-Python."""
    needs = re.search(r"Running one needs Python (\d+\.\d+) or newer", (ROOT / "README.md").read_text())
    assert needs, "the README says which Python a downloaded notebook needs"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == f">={needs[1]}"


def test_the_cache_is_the_users_own_shared_by_every_clone_unless_a_setting_names_another(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LESSONLIB_CACHE_DIR", raising=False)
    clones = [tmp_path / "one", tmp_path / "two"]
    for clone in clones:
        make_site(clone, {"index.md": "# Home\n"})
        (clone / "mkdocs.yml").write_text(MKDOCS_YML.replace("      cache_dir: .cache\n", ""))
    assert [load_settings(c / "mkdocs.yml").cache_dir for c in clones] == [tmp_path / "xdg" / "lessonlib"] * 2

    (clones[0] / "mkdocs.yml").write_text(MKDOCS_YML)
    assert load_settings(clones[0] / "mkdocs.yml").cache_dir == clones[0] / ".cache"
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert load_settings(clones[1] / "mkdocs.yml").cache_dir == tmp_path / "elsewhere"


def test_lessonlib_cache_says_where_the_cache_is_and_how_much_it_holds_and_clears_it(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    (cache / "pages").mkdir(parents=True)
    (cache / "pages" / "entry.json").write_bytes(b"x" * 3 * 2**20)
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)  # no mkdocs.yml here: the environment alone decides

    assert cli_main(["cache"]) == 0
    assert capsys.readouterr().out == f"the cache at {cache} holds 3.0 MB in 1 files (limit 1024 MB)\n"
    assert cli_main(["cache", "--clear"]) == 0
    assert capsys.readouterr().out == f"cleared the cache at {cache} (3.0 MB in 1 files)\n"
    assert not cache.exists()


def lessonlib_variables_read(tree: ast.AST) -> list[int]:
    """Lines that read a LESSONLIB_* variable (by name or through config's constants)."""
    names = {name for name in vars(config) if getattr(config, name) in config.VARIABLES}

    def names_a_variable(node: ast.AST) -> bool:
        return ((isinstance(node, ast.Constant) and str(node.value).startswith("LESSONLIB_"))
                or (isinstance(node, ast.Name) and node.id in names))

    lines = []
    for node in ast.walk(tree):
        reads = (isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv", "environ.get")
                 and node.args and names_a_variable(node.args[0]))
        reads |= (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                  and ast.unparse(node.value).endswith("environ") and names_a_variable(node.slice))
        if reads:
            lines.append(node.lineno)
    return lines


def test_settings_is_the_only_reader_of_lessonlib_variables():
    assert lessonlib_variables_read(ast.parse("import os\nos.environ.get('LESSONLIB_DEVICE', 'cpu')\n"
                                              "os.environ[DEVICE]\n")) == [2, 3]
    readers = {}
    for file in [*(ROOT / "lessonlib").rglob("*.py"), *(ROOT / "scripts").rglob("*.py"),
                 *(p for p in (ROOT / "scripts").iterdir() if p.is_file() and p.read_text().startswith("#!/usr/bin/env python"))]:
        if file.name != "config.py" and (lines := lessonlib_variables_read(ast.parse(file.read_text()))):
            readers[file.relative_to(ROOT).as_posix()] = lines
    assert readers == {}
    declared = re.findall(r'^([A-Z_]+) = "(LESSONLIB_\w+)"  # (.+)$', (ROOT / "lessonlib/engine/config.py").read_text(), re.M)
    assert sorted(v for _, v, _ in declared) == sorted(config.VARIABLES)
