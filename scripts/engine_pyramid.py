"""The engine's test pyramid, measured: what each engine test actually started.

    .venv/bin/python scripts/engine_pyramid.py [-n N] [--list] [FILE ...] [-- PYTEST_ARGS ...]

Runs the engine's tests (by default tests/test_engine_*.py; FILE ... runs those instead) with
pytest, CI=true (a reused pass, tests/reused_passes.py, would start nothing and so look in
process), and this module loaded as a pytest plugin in every pytest process, xdist workers
included. The plugin watches, in each pytest process, what a test starts, its fixtures' setup
included (a module or session fixture's process counts for every test that uses it, not only
the first), and puts each test in the highest kind it reached:

    subprocess  a child process that is not a page's worker: subprocess.Popen (a CLI or
                `mkdocs` command, a fresh interpreter), MkDocs' build or lessonlib's CLI run in
                the pytest process (mkdocs.commands.build.build, lessonlib.__main__.main), or a
                multiprocessing process started outside the page pool (a Dask LocalCluster's
                workers);
    worker      a page run in a worker process (lessonlib.engine.builder.pool._start), or the
                pool's forkserver template started;
    in process  none of these.

Each process writes what it saw to a folder; this script adds them up and prints the counts,
per kind and per file, and the in-process share. A test skipped or failed here is not counted
(a failed one may have stopped before it started what it tests). --list prints every test with
its kind and what it started. Arguments after `--` go to pytest (-k, -m ...). --save JSON keeps
each test's record; --count JSON counts a kept record and runs nothing; --over JSON FILE ...
runs only those files and takes every other file's tests, and those -k or -m deselects, from
that record (the files a change touched, measured again). The exit status is pytest's.
Standard library and pytest only.

tests/test_second_course.py (a second course built by MkDocs in a subprocess) is not one of the
engine's tests and is not counted unless named; it would count as subprocess.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("in process", "worker", "subprocess")
OUT = "--engine-pyramid-out"
# tests/conftest.py's session warm-up, autouse: every pytest process starts the pages' template once,
# before its first test, as a build does. It counts for no test: what a test starts itself does.
WARM_UP = {"page_template"}

# --- the plugin (loaded by pytest as `-p engine_pyramid`) -------------------------------------

_lock = threading.Lock()
_active: dict[int, list[tuple[str, str]]] = {}  # the recorders open now: the running test, fixtures in setup
_fixtures: dict[int, list[tuple[str, str]]] = {}  # id(fixturedef) -> what its setup started
_tests: dict[str, dict] = {}
_local = threading.local()


def _record(kind: str, what: str) -> None:
    with _lock:
        for recorder in _active.values():
            recorder.append((kind, what))


def _instrument() -> None:
    import multiprocessing.forkserver
    import multiprocessing.process

    popen_init = subprocess.Popen.__init__

    def init(self, args, *a, **kw):
        shown = args if isinstance(args, str) else " ".join(str(x) for x in list(args)[:4])
        _record("subprocess", f"Popen {shown}")
        return popen_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = init

    start = multiprocessing.process.BaseProcess.start

    def process_start(self):
        if not getattr(_local, "in_pool", False):
            _record("subprocess", f"multiprocessing {type(self).__name__} {self.name}")
        return start(self)

    multiprocessing.process.BaseProcess.start = process_start

    from lessonlib.engine.builder import pool

    pool_start = pool._start

    def _start(context, task):
        _record("worker", f"page {task.job.path}")
        _local.in_pool = True
        try:
            return pool_start(context, task)
        finally:
            _local.in_pool = False

    pool._start = _start

    server = multiprocessing.forkserver._forkserver
    ensure = server.ensure_running

    def ensure_running():
        before = server._forkserver_pid
        result = ensure()
        if server._forkserver_pid != before:
            _record("worker", "forkserver template")
        return result

    server.ensure_running = ensure_running
    multiprocessing.forkserver.ensure_running = ensure_running

    def wrap(module, name: str, what: str) -> None:
        original = getattr(module, name)

        def wrapper(*a, **kw):
            _record("subprocess", what)
            return original(*a, **kw)

        setattr(module, name, wrapper)

    try:
        import mkdocs.commands.build
    except ImportError:
        pass
    else:
        wrap(mkdocs.commands.build, "build", "MkDocs build in process")
    import lessonlib.__main__

    wrap(lessonlib.__main__, "main", "lessonlib CLI in process")


def pytest_addoption(parser) -> None:
    parser.addoption(OUT, default=None, help="folder for engine_pyramid's record (scripts/engine_pyramid.py)")


def pytest_configure(config) -> None:
    if config.getoption(OUT):
        _instrument()


@contextlib.contextmanager
def _recording() -> Iterator[list[tuple[str, str]]]:
    """What is started while inside, (kind, what) each; read it under _lock once the block ends."""
    recorder: list[tuple[str, str]] = []
    with _lock:
        _active[id(recorder)] = recorder
    try:
        yield recorder
    finally:
        with _lock:
            del _active[id(recorder)]


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    with _recording() as recorder:
        yield
    with _lock:
        _fixtures.setdefault(id(fixturedef), []).extend(recorder)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _recording() as recorder:
        yield
    with _lock:
        started = list(recorder)
        for name, defs in getattr(item, "_fixtureinfo").name2fixturedefs.items():
            if name in WARM_UP:
                continue
            for fixturedef in defs:
                started.extend(_fixtures.get(id(fixturedef), []))
        kinds = {kind for kind, _ in started}
        kind = "subprocess" if "subprocess" in kinds else "worker" if "worker" in kinds else "in process"
        _tests[item.nodeid] = {"kind": kind, "started": sorted({what for _, what in started}),
                               "skipped": item.nodeid in _skipped, "failed": item.nodeid in _failed}


_skipped: set[str] = set()
_failed: set[str] = set()
_deselected: set[str] = set()


def pytest_deselected(items) -> None:
    _deselected.update(item.nodeid for item in items)


def pytest_runtest_logreport(report) -> None:
    if report.skipped and report.when in ("setup", "call"):
        _skipped.add(report.nodeid)
    if report.failed and report.when in ("setup", "call"):
        _failed.add(report.nodeid)


def pytest_sessionfinish(session) -> None:
    out = session.config.getoption(OUT)
    if out and (_tests or _deselected):
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (Path(out) / f"{name}-{os.getpid()}.json").write_text(json.dumps({"tests": _tests,
                                                                           "deselected": sorted(_deselected)}))


# --- the script --------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files (default tests/test_engine_*.py)")
    parser.add_argument("-n", default="2", help="pytest-xdist processes (default 2)")
    parser.add_argument("--list", action="store_true", help="print every test, its kind and what it started")
    parser.add_argument("--save", metavar="JSON", help="write each test's record there")
    parser.add_argument("--count", metavar="JSON", help="count a saved record; run nothing")
    parser.add_argument("--over", metavar="JSON", help="a saved record: run only FILE ... and count every other "
                        "file as that record has it (re-measure the files a change touched)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_engine_*.py"))
    if args.over and not args.files:
        parser.error("--over needs the files to run again")
    if args.count:
        return report(json.loads(Path(args.count).read_text()), args.list)
    rc = 0
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "CI": "true",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "scripts"), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "engine_pyramid",
                   f"{OUT}={out}", "-n", args.n, *extra, *files]
        rc = subprocess.run(command, cwd=ROOT, env=env).returncode
        tests: dict[str, dict] = {}
        deselected: set[str] = set()
        for record in Path(out).glob("*.json"):
            process = json.loads(record.read_text())
            tests.update(process["tests"])
            deselected.update(process["deselected"])
    if args.over:  # a test deselected now (-k, -m) keeps its record
        again = {Path(f).as_posix() for f in files}
        kept = json.loads(Path(args.over).read_text())
        tests.update({nodeid: test for nodeid, test in kept.items()
                      if nodeid.split("::")[0] not in again or nodeid in deselected})
    if args.save:
        Path(args.save).write_text(json.dumps(tests, indent=1, sort_keys=True))
    return report(tests, args.list) or rc


def report(tests: dict[str, dict], listed: bool) -> int:
    skipped = sorted(nodeid for nodeid, test in tests.items() if test["skipped"])
    failed = sorted(nodeid for nodeid, test in tests.items() if test.get("failed"))
    tests = {nodeid: test for nodeid, test in tests.items() if not test["skipped"] and not test.get("failed")}
    if listed:
        for nodeid, test in sorted(tests.items()):
            print(f"{test['kind']}\t{nodeid}\t{'; '.join(test['started'])}")  # tabs: an id may hold spaces
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for nodeid, test in tests.items():
        by_file[nodeid.split("::")[0]][test["kind"]] += 1
    print(f"\n{'file':<40} {'in process':>10} {'worker':>7} {'subprocess':>10}")
    for file, counts in sorted(by_file.items()):
        print(f"{file:<40} {counts['in process']:>10} {counts['worker']:>7} {counts['subprocess']:>10}")
    total = collections.Counter(test["kind"] for test in tests.values())
    n = sum(total.values())
    print(f"\n{n} engine tests: " + ", ".join(f"{total[k]} {k} ({total[k] / n:.0%})" for k in KINDS if n))
    if n:
        print(f"in-process share: {total['in process'] / n:.1%}")
    if skipped:
        print(f"not counted, skipped here: {len(skipped)} ({', '.join(skipped)})")
    if failed:  # it may have failed before it started what it tests
        print(f"not counted, failed here: {len(failed)} ({', '.join(failed)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
