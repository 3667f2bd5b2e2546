"""execute_pages: the one executor behind the MkDocs plugin, the pytest collector and the CLI.

For each page: parse it, look it up in the cache (its static key, then its recorded inputs),
run the pages that missed in worker processes (lessonlib.engine.pool), store what they
produced, and render every page back to Markdown. Concurrent builds of one checkout share the
cache: a page another build is running is waited for, then read from the cache.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import IO

import lessonlib
from lessonlib.device import cpus
from lessonlib.engine import SEED
from lessonlib.engine.blocks import ParsedPage, parse_page
from lessonlib.engine.cache import Entry, PageCache, environment_fingerprint, file_clock, page_key, prune
from lessonlib.engine.errors import LessonError
from lessonlib.engine.inputs import Manifest
from lessonlib.engine.outputs import PageOutputs
from lessonlib.engine.pool import PageJob, Ran, Task, run_pages
from lessonlib.engine.render import render

PACKAGE_ROOT = Path(lessonlib.__file__).resolve().parent  # lessonlib's own code is the project's too


@dataclass(frozen=True)
class Settings:
    root: Path = field(default_factory=Path.cwd)  # the project: the folder of mkdocs.yml
    timeout: float = 600.0  # seconds per block, unless the block says otherwise
    cache_dir: Path | None = None  # None: neither read nor write a cache
    execute: bool = True  # False: show the code, run nothing (LESSONLIB_EXECUTE=0)
    refresh: bool = False  # run even on a cache hit, memoized experiments too (LESSONLIB_REFRESH=1)
    workers: int = 0  # pages at once, and processes a page's experiments start; 0: one per core (LESSONLIB_WORKERS)
    memory_limit_mb: float | None = None  # per page, its child processes included; None: no limit
    output_limit_kb: float = 1024  # per block, text and figures
    cache_limit_mb: float = 1024  # page entries and memoized results; the least recently used go first
    keep_going: bool = False  # run a page on past a failed assert, then fail it naming every failed assert

    def __post_init__(self) -> None:
        # Pages run in their own folders: every path the engine hands to a worker is absolute.
        object.__setattr__(self, "root", Path(self.root).resolve())
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", Path(self.cache_dir).resolve())

    def with_environment(self) -> Settings:
        """Apply the LESSONLIB_EXECUTE, LESSONLIB_REFRESH, LESSONLIB_CACHE_DIR and LESSONLIB_WORKERS switches."""
        cache_dir = os.environ.get("LESSONLIB_CACHE_DIR")
        workers = os.environ.get("LESSONLIB_WORKERS")
        return replace(
            self,
            cache_dir=Path(cache_dir) if cache_dir else self.cache_dir,
            execute=self.execute and os.environ.get("LESSONLIB_EXECUTE", "1") != "0",
            refresh=self.refresh or os.environ.get("LESSONLIB_REFRESH", "0") == "1",
            workers=int(workers) if workers else self.workers,
        )


@dataclass
class PageResult:
    page: ParsedPage
    markdown: str
    outputs: PageOutputs | None = None  # None when nothing ran (no code, or execution off)
    inputs: Manifest | None = None  # what the run read
    blocks_run: int = 0
    from_cache: bool = False
    seconds: float = 0.0
    key: str = ""  # the cache key it ran under: its code and the environment

    @property
    def summary(self) -> str:
        how = "from cache" if self.from_cache else f"ran {self.blocks_run} blocks"
        return f"{self.page.path}: {how} in {self.seconds:.2f} s"


Report = Callable[[str], None]


def execute_page(text: str, path: str, settings: Settings) -> PageResult:
    """One page; raises its LessonError, located at ``path:LINE``, on any failure."""
    (result,) = execute_pages([(text, path)], settings)
    if isinstance(result, LessonError):
        raise result
    return result


def execute_pages(sources: list[tuple[str, str]], settings: Settings,
                  report: Report = lambda line: None) -> list[PageResult | LessonError]:
    """Every page's result (or its error), in the order given. `sources` are (text, path) pairs,
    path relative to ``settings.root``. Pages that must run, run in parallel; nothing failed is cached."""
    results: list[PageResult | LessonError | None] = [None] * len(sources)
    todo: list[tuple[int, ParsedPage]] = []
    for index, (text, path) in enumerate(sources):
        try:
            page = parse_page(text, path)
        except LessonError as e:
            results[index] = e
            continue
        folder = (settings.root / path).parent
        if page.executable and settings.execute and not folder.is_dir():
            results[index] = LessonError(path, 1, f"the page's folder {folder} does not exist (it is its working directory)")
        elif page.executable and settings.execute:
            todo.append((index, page))
        else:
            results[index] = PageResult(page, render(page, None, None))
    if todo:
        _Run(settings, report).execute(todo, results)
    return results  # type: ignore[return-value]


class _Run:
    """One call of execute_pages: lookups, locks, the pool, storing and rendering."""

    def __init__(self, settings: Settings, report: Report) -> None:
        self.settings, self.report = settings, report
        self.environment = environment_fingerprint()
        self.torch = version("torch")  # for the stamp; read once: each read parses its metadata
        self.cache = PageCache(settings.cache_dir) if settings.cache_dir else None
        self.started = file_clock(settings.cache_dir) if self.cache else 0.0  # what is used from now on stays

    def execute(self, todo: list[tuple[int, ParsedPage]], results: list) -> None:
        with tempfile.TemporaryDirectory(prefix="lessonlib-stacks-") as stacks:
            self.stacks = Path(stacks)  # each worker's Python stack, written when it crashes or is stopped
            self._execute(todo, results)

    def _execute(self, todo: list[tuple[int, ParsedPage]], results: list) -> None:
        started = time.perf_counter()
        keys = {index: page_key(page, self.environment) for index, page in todo}
        misses, locks = [], {}
        for index, page in todo:
            hit = self._lookup(page, keys[index])
            if hit is not None:
                results[index] = hit
            else:
                misses.append((index, page))
        misses.sort(key=self._longest_first)
        claimed, held_elsewhere = [], []
        for index, page in misses:
            lock = self.cache.lock(keys[index], wait=False) if self.cache else None
            if self.cache and lock is None:
                held_elsewhere.append((index, page))
                continue
            locks[index] = lock
            claimed.append((index, page))
        try:
            self._run(claimed, keys, locks, results, total=len(misses))
            for index, page in held_elsewhere:  # another build is running them: wait, then read its result
                self.report(f"{page.path}: waiting for another build that is running this page")
                locks[index] = self.cache.lock(keys[index], wait=True)
                hit = self._lookup(page, keys[index])
                if hit is not None:
                    results[index] = hit
                else:
                    self._run([(index, page)], keys, locks, results, total=1)
        finally:
            for lock in locks.values():
                if lock is not None:
                    lock.close()
        if self.cache and misses:  # only a page that ran can have stored something
            self._prune()
        ran = sum(1 for i, _ in misses if isinstance(results[i], PageResult) and not results[i].from_cache)
        pages = f"{len(todo)} page{'s' if len(todo) != 1 else ''}"
        workers = self._workers(len(misses))
        self.report(f"{pages}: {ran} ran, {len(todo) - len(misses)} from cache, in "
                    f"{time.perf_counter() - started:.1f} s" + (f" with {workers} workers" if workers > 1 else ""))

    def _lookup(self, page: ParsedPage, key: str) -> PageResult | None:
        """A result from the cache if every recorded input is unchanged."""
        started = time.perf_counter()
        entry = self.cache.load(key) if self.cache else None
        if entry is None:
            return None
        changed = entry.manifest.changed()
        if changed or self.settings.refresh:
            if changed:
                self.report(f"{page.path}: runs again: {changed}")
            return None
        result = self._result(page, key, entry.outputs, entry.manifest)
        result.from_cache, result.seconds = True, time.perf_counter() - started
        self.report(result.summary)
        return result

    def _prune(self) -> None:
        limit = self.settings.cache_limit_mb
        dropped = prune(self.settings.cache_dir, limit, since=self.started)
        if dropped:
            entries = "entry" if dropped == 1 else "entries"
            self.report(f"cache: dropped the {dropped} {entries} used least recently, to stay under {limit:g} MB")

    def _longest_first(self, miss: tuple[int, ParsedPage]) -> tuple[float, int]:
        """Start the longest pages first, so that no worker ends the build on a long page alone:
        as long as last time (any version of the page); a page never run first, the most code first."""
        page = miss[1]
        seconds = self.cache.last_seconds(page.path) if self.cache else None
        return (-(seconds if seconds is not None else float("inf")), -sum(len(b.code) for b in page.blocks))

    def _run(self, claimed: list[tuple[int, ParsedPage]], keys: dict, locks: dict[int, IO | None],
             results: list, total: int) -> None:
        tasks = [Task(self._job(page), page, self.settings.timeout) for _, page in claimed]
        index_of = {id(task): index for task, (index, _) in zip(tasks, claimed)}
        workers = self._workers(len(tasks))
        for done, (task, outcome) in enumerate(run_pages(tasks, workers, self.settings.memory_limit_mb), start=1):
            index = index_of[id(task)]
            if isinstance(outcome, Ran):
                if self.cache:
                    self.cache.store(keys[index], Entry(outcome.outputs, outcome.manifest))
                    self.cache.note_seconds(task.page.path, outcome.seconds)
                result = self._result(task.page, keys[index], outcome.outputs, outcome.manifest)
                result.blocks_run, result.seconds = len(task.page.blocks), outcome.seconds
                results[index] = result
                self.report(f"[{done}/{total}] {result.summary}")
            else:
                results[index] = outcome
                self.report(f"[{done}/{total}] {task.page.path}: failed at line {outcome.line}")
            lock = locks.pop(index, None)
            if lock is not None:
                lock.close()

    def _job(self, page: ParsedPage) -> PageJob:
        cache_dir = str(self.settings.cache_dir) if self.settings.cache_dir else None
        roots = tuple(dict.fromkeys([str(self.settings.root), str(PACKAGE_ROOT)]))
        stack = self.stacks / f"{page_key(page, self.environment)[:16]}.stack"
        return PageJob(page.path, "".join(page.lines), str(self.settings.root), roots, cache_dir,
                       self.settings.refresh, int(self.settings.output_limit_kb * 1024), str(stack),
                       self.environment, self._cores(), tuple(os.environ.items()),
                       self.settings.keep_going)

    def _cores(self) -> int:
        """The build's `workers`: pages at once, and processes a page's experiments may start."""
        return self.settings.workers or cpus()

    def _workers(self, pages: int) -> int:
        return max(1, min(self._cores(), pages))

    def _result(self, page: ParsedPage, key: str, outputs: PageOutputs, inputs: Manifest) -> PageResult:
        return PageResult(page, render(page, *outputs, footer=stamp(key, self.torch)), outputs, inputs, key=key)


def stamp(key: str, torch: str) -> str:
    """The build stamp under every executed page: how its numbers were produced (`torch`: its version)."""
    device = os.environ.get("LESSONLIB_DEVICE", "cpu")
    return (
        f'<p class="lessonlib-stamp">Numbers and figures on this page were computed when the site was built: '
        f"torch {torch}, device <code>{device}</code>, seed {SEED}, "
        f"code hash <code>{key[:12]}</code>.</p>"
    )
