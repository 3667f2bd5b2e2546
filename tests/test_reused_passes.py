"""Reused passes (tests/reused_passes.py): a pass is reported again without running only on the
very inputs it passed on. Each case is a small checkout with its own suite, run by pytester."""
from __future__ import annotations

import subprocess

import mkdocs.config.defaults  # noqa: F401  (MkDocs once, here: pytester's inner runs drop the modules they import,
import mkdocs.theme  # noqa: F401  and MkDocs' YAML loader breaks when imported a second time)
import pytest
import reused_passes

pytest_plugins = ["pytester"]

CONFTEST = """
import reused_passes

def pytest_configure(config):
    config.pluginmanager.register(reused_passes, "reused_passes")
"""
TEST = """
from pathlib import Path

def test_counts():
    runs = Path({runs!r})
    runs.write_text(runs.read_text() + "ran\\n" if runs.exists() else "ran\\n")
    assert "fail" not in Path(__file__).parents[1].joinpath("lessonlib.py").read_text()
"""


@pytest.fixture
def checkout(pytester, tmp_path_factory, monkeypatch):
    """A git checkout with one counting test; run() runs its suite and returns how often the test ran."""
    runs = tmp_path_factory.mktemp("runs") / "runs"
    monkeypatch.setenv("LESSONLIB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("LESSONLIB_REFRESH", raising=False)
    monkeypatch.delenv("CI", raising=False)  # the inner suites reuse passes, whether or not this suite runs on CI
    pytester.makefile(".yml", mkdocs="site_name: t\nplugins:\n  - lessonlib\n")
    (pytester.path / "docs").mkdir()
    pytester.makepyfile(conftest=CONFTEST, lessonlib="ok = True\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_a.py").write_text(TEST.format(runs=str(runs)))
    subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=pytester.path, check=True)

    def run(*args: str) -> tuple[pytest.RunResult, int]:
        forget()
        before = runs.read_text().count("ran") if runs.exists() else 0
        result = pytester.runpytest("-p", "no:cacheprovider", *args)
        return result, (runs.read_text().count("ran") if runs.exists() else 0) - before

    yield run
    forget()  # this suite's own keys are computed again, from its own checkout and environment


def forget() -> None:
    for cached in (reused_passes.checkout_files, reused_passes.module_inputs, reused_passes.cache_dir,
                   reused_passes.environment):
        cached.cache_clear()


def test_a_pass_is_reused_on_the_same_inputs_only(checkout, pytester, monkeypatch):
    result, ran = checkout()
    result.assert_outcomes(passed=1)
    assert ran == 1
    result, ran = checkout()
    result.assert_outcomes(passed=1)
    assert ran == 0, "the same checkout: the pass is reused"
    (pytester.path / "lessonlib.py").write_text("ok = False\n")
    assert checkout()[1] == 1, "an edited file runs it again"
    (pytester.path / "notes.txt").write_text("new\n")
    assert checkout()[1] == 1, "a new file git sees runs it again"
    assert checkout()[1] == 0
    monkeypatch.setenv("LESSONLIB_REFRESH", "1")
    assert checkout()[1] == 1, "LESSONLIB_REFRESH runs it"
    monkeypatch.delenv("LESSONLIB_REFRESH")
    monkeypatch.setenv("LESSONLIB_DEVICE", "cpu")
    assert checkout()[1] == 1, "a switch it sees runs it again"


def test_a_failure_is_never_reused(checkout, pytester):
    (pytester.path / "lessonlib.py").write_text("fail\n")
    for _ in range(2):
        result, ran = checkout()
        result.assert_outcomes(failed=1)
        assert ran == 1


def test_another_test_module_is_an_input_only_when_imported(checkout, pytester):
    checkout()
    (pytester.path / "tests" / "test_b.py").write_text("def test_b():\n    pass\n")
    result, ran = checkout()
    result.assert_outcomes(passed=2)
    assert ran == 0, "test_a does not import test_b"
    source = (pytester.path / "tests" / "test_a.py").read_text()
    (pytester.path / "tests" / "test_a.py").write_text("import test_b  # noqa\n" + source)
    assert checkout()[1] == 1
    (pytester.path / "tests" / "test_b.py").write_text("def test_b():\n    assert True\n")
    assert checkout()[1] == 1, "test_a imports test_b"


def test_outside_a_git_checkout_every_test_runs(checkout, pytester):
    checkout()
    subprocess.run(["rm", "-rf", ".git"], cwd=pytester.path, check=True)
    assert checkout()[1] == 1
    assert checkout()[1] == 1


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_run_with_ci_set_reuses_no_pass_and_says_why(checkout, monkeypatch, ci):
    checkout()[0].assert_outcomes(passed=1)
    monkeypatch.setenv("CI", ci)
    result, ran = checkout()
    result.assert_outcomes(passed=1)
    assert ran == 1 and f"0 passes reused: CI={ci} is set, so every test ran" in result.stdout.str()


def test_a_test_marked_never_reused_always_runs(checkout, pytester):
    marked = (pytester.path / "tests" / "test_a.py").read_text().replace(
        "def test_counts", "import pytest\n\n@pytest.mark.never_reused\ndef test_counts")
    (pytester.path / "tests" / "test_a.py").write_text(marked)
    assert [checkout()[1] for _ in range(2)] == [1, 1]
