"""Reused passes: a test under tests/ that passed on the very same inputs is reported passed
without running again, as Bazel reuses a cached test result.

A test's inputs are every file of the checkout that git sees (tracked, or new and not ignored),
with the test modules other than its own left out unless it imports them, and the environment:
Python, every installed distribution, the platform, the CUDA devices, Chromium's version, and
the LESSONLIB_* switches that change what a test sees. A second clone of the same commit on the
same machine then answers at once; any edit runs again every test whose inputs it touched
(an edit to a lesson or to lessonlib: every test). The pass of each test is kept in the
suite's cache (verdicts/), the latest one only.

Runs everything again: CI set (a run that must judge, as Bazel's --cache_test_results=no: CI
services set it, and so does .ci/run through scripts/test), LESSONLIB_REFRESH=1, an empty cache,
--screenshots (whose pictures come from running), or a checkout that is not a git repository. A
test marked `never_reused` (timing, load, concurrency: what one run cannot vouch for) always runs.
Lesson pages (docs/) are not reused here: the page cache already answers them.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

import pytest
from _pytest.reports import TestReport
from _pytest.runner import runtestprotocol

from lessonlib.engine.worker.store import write_atomically

NOT_INPUTS = {"LESSONLIB_CACHE_DIR", "LESSONLIB_REFRESH"}  # where answers are kept, and "run again"


@dataclass(frozen=True)
class Verdict:
    """A test's recorded pass on inputs with the given digest."""

    file: Path
    known: bool  # it passed on these very inputs

    def record(self) -> None:
        for other in self.file.parent.glob("*"):  # one pass per test: the latest inputs'
            other.unlink(missing_ok=True)
        write_atomically(self.file, b"passed\n")


def find_verdict(cache_dir: Path, test: str, inputs: list[bytes], refresh: bool) -> Verdict:
    digest = hashlib.sha256()
    for part in inputs:
        digest.update(hashlib.sha256(part).digest())
    file = cache_dir / "verdicts" / hashlib.sha256(test.encode()).hexdigest()[:32] / digest.hexdigest()[:32]
    return Verdict(file, file.exists() and not refresh)


@functools.cache
def checkout_files(root: Path) -> dict[str, bytes] | None:
    """Each file git sees under root (path -> its sha256), or None outside a git checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=root, capture_output=True)
    if listed.returncode != 0:
        return None
    files = {}
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        path = root / name
        if path.is_file():  # a tracked file deleted in the work tree is no input
            files[name] = hashlib.sha256(path.read_bytes()).digest()
    return files


@functools.cache
def environment() -> bytes:
    import torch

    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    chromium = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout \
        if Path("/usr/bin/chromium").exists() else "no chromium"
    switches = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("LESSONLIB_") and k not in NOT_INPUTS)
    return "\n".join([sys.version, platform.platform(), *installed, *devices, chromium, *switches]).encode()


def imported_test_modules(source: bytes) -> set[str]:
    """The test_*.py modules a test module imports by name (test_browser_model uses
    test_site_browser's fixtures)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {f"tests/{name}.py" for name in names if name.startswith("test_")}


@functools.cache
def cache_dir(root: Path) -> Path:
    from lessonlib.engine.config import load_settings

    return load_settings(root / "mkdocs.yml").cache_dir


def judging() -> str | None:
    """Why no pass may be reused in this run, or None: CI is set (not to 0 or false)."""
    ci = os.environ.get("CI", "").strip().lower()
    return f"CI={os.environ['CI']} is set, so every test ran" if ci not in ("", "0", "false", "no") else None


def verdict_for(item: pytest.Item) -> Verdict | None:
    """The item's recorded pass, or None where passes are not reused."""
    from lessonlib.engine.config import environment_settings

    root = Path(item.config.rootpath)
    if (root / "tests" not in item.path.parents or item.config.getoption("screenshots", False) or judging()
            or item.get_closest_marker("never_reused") is not None):
        return None
    inputs = module_inputs(root, item.path.relative_to(root).as_posix())
    if inputs is None:
        return None
    return find_verdict(cache_dir(root), item.nodeid, [inputs, environment()], refresh=environment_settings().refresh)


@functools.cache
def module_inputs(root: Path, module: str) -> bytes | None:
    """The checkout as the tests of `module` see it: each file but the test modules it does not
    import, as path and digest (once per module, not per test); None outside a git checkout."""
    files = checkout_files(root)
    if files is None:
        return None
    own = {module} | imported_test_modules((root / module).read_bytes())
    return b"\n".join(name.encode() + b"\0" + digest for name, digest in files.items()
                      if not (name.startswith("tests/test_") and name not in own))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """pytest's own protocol (runner.pytest_runtest_protocol), with a known pass reported
    instead of run, and a new pass recorded."""
    verdict = verdict_for(item)
    if verdict is None:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    if verdict.known:
        for when in ("setup", "call", "teardown"):
            item.ihook.pytest_runtest_logreport(report=TestReport(
                item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "passed", None, when,
                sections=[], duration=0.0, start=0.0, stop=0.0, user_properties=[("reused", True)]))
        # The fixtures no later item needs end here, as runtestprotocol would end them.
        item.session._setupstate.teardown_exact(nextitem)
    else:
        reports = runtestprotocol(item, nextitem=nextitem)
        if [r.when for r in reports] == ["setup", "call", "teardown"] and all(r.passed for r in reports):
            verdict.record()
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_terminal_summary(terminalreporter) -> None:
    """How many passes were reused, and why reuse was allowed or not."""
    reused = sum(1 for report in terminalreporter.stats.get("passed", [])
                 if report.when == "call" and ("reused", True) in report.user_properties)
    why = judging() or ("LESSONLIB_REFRESH=1 is set, so every test ran"
                        if os.environ.get("LESSONLIB_REFRESH") == "1" else None)
    allowed = "neither CI nor LESSONLIB_REFRESH=1 is set"
    terminalreporter.write_line(f"{reused} passes reused: " + (why or (
        f"each passed before on the very same inputs; {allowed}" if reused else f"none passed before on these inputs; {allowed}")))
