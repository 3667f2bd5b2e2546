"""execute_pages: the one executor behind the MkDocs plugin, the pytest collector and the CLI.

For each page: parse it, look it up in the cache (its static key, then its recorded inputs),
run the pages that missed in worker processes (lessonlib.engine.builder.pool), store what they
produced, and render every page back to Markdown (a cached page's outputs with the page lines
they name moved to where its prose has moved its blocks since: render.relocated). Concurrent
builds of one checkout share the cache: a page another build is running is waited for, then
read from the cache.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import lessonlib
from lessonlib.engine.builder.cache import (
    Entry,
    PageCache,
    file_clock,
    page_key,
    parsed_page,
    prune,
)
from lessonlib.engine.builder.render import relocated, render
from lessonlib.engine.config import SEED, Settings, pages_temp_prefix
from lessonlib.engine.worker.blocks import ParsedPage
from lessonlib.engine.worker.cores import cpus
from lessonlib.engine.worker.errors import LessonError, SetupError, WriteError
from lessonlib.engine.worker.inputs import Manifest
from lessonlib.engine.worker.outputs import PageOutputs
from lessonlib.engine.worker.store import cache_errors, environment_fingerprint

if TYPE_CHECKING:
    from filelock import FileLock

    from lessonlib.engine.builder.pool import Outcome, PageJob, Ran, Task

PACKAGE_ROOT = Path(lessonlib.__file__).resolve().parent  # lessonlib's own code is the project's too


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
            with cache_errors(settings.cache_dir) if settings.cache_dir else contextlib.nullcontext():
                page = parsed_page(text, path, settings.cache_dir / "parsed" if settings.cache_dir else None)
        except LessonError as e:
            results[index] = e
            continue
        folder = (settings.root / path).parent
        if page.executable and settings.execute and not folder.is_dir():
            missing = f"the page's folder {folder} does not exist (it is its working directory)"
            results[index] = LessonError(path, 1, missing)
        elif page.executable and settings.execute:
            todo.append((index, page))
        else:
            results[index] = PageResult(page, render(page, None, None))
    if todo:
        _PagesRun(settings, report).execute(todo, results)
    return _readers_named(results)  # type: ignore[arg-type]


def _readers_named(results: list[PageResult | LessonError]) -> list[PageResult | LessonError]:
    """A page that wrote a file another page of this run read (or probed) fails naming that page."""
    readers: dict[str, str] = {}
    for result in results:
        if isinstance(result, PageResult) and result.inputs is not None:
            for name in [*result.inputs.files, *result.inputs.probes]:
                readers.setdefault(name, result.page.path)
    return [r.read_by(readers[r.file]) if isinstance(r, WriteError) and r.file in readers else r for r in results]


class _PagesRun:
    """One call of execute_pages: lookups, locks, the pool, storing and rendering."""

    def __init__(self, settings: Settings, report: Report) -> None:
        self.settings, self.report = settings, report
        self.environment = environment_fingerprint(settings.device)
        self.cache = PageCache(settings.cache_dir) if settings.cache_dir else None
        with self._cache_errors():  # a cache folder that cannot be used is said before anything runs
            self.started = file_clock(settings.cache_dir) if self.cache else 0.0  # what is used from now on stays

    def _cache_errors(self) -> contextlib.AbstractContextManager[None]:
        return cache_errors(self.settings.cache_dir) if self.settings.cache_dir else contextlib.nullcontext()

    def execute(self, todo: list[tuple[int, ParsedPage]], results: list) -> None:
        # Each worker's Python stack (written when it crashes or is stopped), and the temporary
        # folders of its page: removed with the build, however each page ended. A page on a cluster
        # gets one on its worker (cluster.run_page): here no forkserver would remove a killed build's.
        with (contextlib.nullcontext("") if self.settings.scheduler else
              tempfile.TemporaryDirectory(prefix=pages_temp_prefix(os.getpid()), ignore_cleanup_errors=True)) as temp:
            self.temp = temp
            self._execute(todo, results)

    def _execute(self, todo: list[tuple[int, ParsedPage]], results: list) -> None:
        started = time.perf_counter()
        keys = {index: page_key(page, self.environment) for index, page in todo}
        misses, locks, now = [], {}, {}
        for index, page in todo:
            hit = self._lookup(page, keys[index], now)
            if hit is not None:
                results[index] = hit
            else:
                misses.append((index, page))
        misses.sort(key=self._longest_first)
        claimed, held_elsewhere = [], []
        for index, page in misses:
            with self._cache_errors():
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
                    lock.release()
        if self.cache and misses:  # only a page that ran can have stored something
            with self._cache_errors():
                self._prune()
        workers = 0 if self.settings.scheduler else self._workers(len(misses))  # a cluster's are not this machine's
        self.report(_summary([results[i] for i, _ in todo], time.perf_counter() - started, workers))

    def _lookup(self, page: ParsedPage, key: str, now: dict | None = None) -> PageResult | None:
        """A result from the cache if every recorded input is unchanged (`now`: see Manifest.changed)."""
        started = time.perf_counter()
        entry = self.cache.load(key) if self.cache else None
        if entry is None:
            return None
        changed = entry.manifest.changed(self.settings.root, now)
        if sum(map(len, entry.outputs.published.values())) > self.settings.publish_limit_mb * 2**20:
            changed = "its published files are over publish_limit_mb"  # the limit was lowered: it fails
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

    def _run(self, claimed: list[tuple[int, ParsedPage]], keys: dict, locks: dict[int, FileLock | None],
             results: list, total: int, again: bool = True) -> None:
        """Run the pages; one whose input changed while it ran runs once more (`again`), and
        is stored only from a run during which its inputs held still."""
        if not claimed:  # every page came from the cache
            return
        from lessonlib.engine.builder.pool import Task  # here: a warm build starts no process

        tasks = [Task(self._job(page), page, self.settings.timeout) for _, page in claimed]
        index_of = {id(task): index for task, (index, _) in zip(tasks, claimed)}
        rerun = []
        with contextlib.closing(self._outcomes(tasks)) as outcomes:
            for done, (task, outcome) in enumerate(outcomes, start=1):
                index = index_of[id(task)]
                if isinstance(outcome, SetupError):
                    raise outcome
                ran = not isinstance(outcome, LessonError)
                changed = outcome.manifest.changed(self.settings.root) if ran else None
                unseen = ran and bool(outcome.manifest.unseen)  # changed says why; running again would not help
                if changed and again and not unseen:
                    self.report(f"[{done}/{total}] {task.page.path}: runs again: {changed} while it ran")
                    rerun.append((index, task.page))
                    continue
                results[index] = self._outcome(task, outcome, keys[index], store=not changed)
                self.report(f"[{done}/{total}] " + (results[index].summary if ran else
                                                    f"{task.page.path}: failed at line {outcome.line}")
                            + (f" (not cached: {changed}{'' if unseen else ' while it ran'})" if changed else ""))
                lock = locks.pop(index, None)
                if lock is not None:
                    lock.release()
        if rerun:
            self._run(rerun, keys, locks, results, total=len(rerun), again=False)

    def _outcomes(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        """pool.run_pages, on this machine or on the Dask cluster at `scheduler`."""
        if self.settings.scheduler:
            from lessonlib.engine.builder import cluster  # here: only a build on a cluster imports Dask

            return cluster.run_pages(tasks, self.settings.scheduler, self.settings.memory_limit_mb,
                                     self.preload(tasks))
        from lessonlib.engine.builder.pool import run_pages

        return run_pages(tasks, self._workers(len(tasks)), self.settings.memory_limit_mb, self.preload(tasks))

    def preload(self, tasks: list[Task]) -> list[str]:
        """What the template preloads: the preload option, else what these pages imported when they last ran."""
        if self.settings.preload is not None:
            return list(self.settings.preload)
        return self.cache.learned_preload([task.page.path for task in tasks]) if self.cache else []

    def _outcome(self, task: Task, outcome: Ran | LessonError, key: str, store: bool) -> PageResult | LessonError:
        if isinstance(outcome, LessonError):
            return outcome
        if self.cache and store:
            with self._cache_errors():
                made_at = [block.start for block in task.page.blocks]  # for a later page whose prose moved them
                self.cache.store(key, Entry(replace(outcome.outputs, fences=made_at), outcome.manifest))
                self.cache.note_seconds(task.page.path, outcome.seconds)
                self.cache.note_imports(task.page.path, outcome.imported)
        result = self._result(task.page, key, outcome.outputs, outcome.manifest)
        result.blocks_run, result.seconds = len(task.page.blocks), outcome.seconds
        return result

    def _job(self, page: ParsedPage) -> PageJob:
        from lessonlib.engine.builder.pool import PageJob

        cache_dir = str(self.settings.cache_dir) if self.settings.cache_dir else None
        roots = tuple(dict.fromkeys([str(self.settings.root), str(PACKAGE_ROOT)]))
        # none on a cluster: cluster.run_page gives the page its stack file and folder on its worker
        stack = str(Path(self.temp, f"{page_key(page, self.environment)[:16]}.stack")) if self.temp else ""
        return PageJob(path=page.path, text="".join(page.lines), root=str(self.settings.root), source_roots=roots,
                       cache_dir=cache_dir, refresh=self.settings.refresh, temp=self.temp,
                       output_limit=int(self.settings.output_limit_kb * 1024), stack_file=stack,
                       environment=self.environment, cores=self._cores(), variables=tuple(os.environ.items()),
                       keep_going=self.settings.keep_going,
                       publish_limit=int(self.settings.publish_limit_mb * 2**20), scheduler=self.settings.scheduler)

    def _cores(self) -> int:
        """The build's `workers`: pages at once, and processes a page's experiments may start."""
        return self.settings.workers or cpus()

    def _workers(self, pages: int) -> int:
        return max(1, min(self._cores(), pages))

    def _result(self, page: ParsedPage, key: str, outputs: PageOutputs, inputs: Manifest) -> PageResult:
        outputs = relocated(outputs, page)  # from the cache: the page lines they name, where its blocks stand now
        footer = stamp(key, inputs.dists.get("torch"), self.settings.device)  # torch's version if the page used it
        markdown = render(page, outputs.blocks, outputs.values, footer=footer)
        return PageResult(page, markdown, outputs, inputs, key=key)


def _summary(results: list[PageResult | LessonError], seconds: float, workers: int) -> str:
    """One line for the run: what it ran, what came from the cache (waited for or not), what failed."""
    ran = sum(isinstance(r, PageResult) and not r.from_cache for r in results)
    cached = sum(isinstance(r, PageResult) and r.from_cache for r in results)
    failed = len(results) - ran - cached
    pages = f"{len(results)} page{'s' if len(results) != 1 else ''}"
    return (f"{pages}: {ran} ran, {cached} from cache" + (f", {failed} failed" if failed else "")
            + f", in {seconds:.1f} s" + (f" with {workers} workers" if workers > 1 else ""))


def stamp(key: str, torch: str | None, device: str) -> str:
    """The build stamp under every executed page: how its numbers were produced. `torch`: the
    version of torch the page used, None where it used none (then no torch and no device are named)."""
    used = f"torch {torch}, device <code>{device}</code>, " if torch else ""
    return (
        f'<p class="lessonlib-stamp">Numbers and figures on this page were computed when the site was built: '
        f"{used}seed {SEED}, code hash <code>{key[:12]}</code>.</p>"
    )
