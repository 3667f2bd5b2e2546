"""The build side of running pages: a pool of worker processes, one fresh process per page.

Workers are forked from a template process that has imported, once, the modules the site's pages
use (multiprocessing's forkserver: the preload option, else what they imported when they last
ran), so a page starts in a fraction of a second with no state from any other page. The build
process itself never imports torch. It watches each worker: the block it is running, its time
limit, its memory; whatever ends a worker early becomes a LessonError at the line that was
running, in words — an exit status, a signal, a timeout, the memory limit. Lesson code cannot
catch any of these: they are enforced from outside its process, and end every process the page
started. The template starts with a fixed hash seed, and ends with the build
(lessonlib.engine.guard). What workers write to their own stdout and stderr (progress bars)
comes through a pipe each and goes to the build's stderr.
"""
from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import multiprocessing.forkserver
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from lessonlib.engine.config import BUILD_PID
from lessonlib.engine.worker import lifetime
from lessonlib.engine.worker import process as worker
from lessonlib.engine.worker.blocks import ParsedPage
from lessonlib.engine.worker.errors import LessonError, SetupError, WriteError
from lessonlib.engine.worker.inputs import Manifest
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs
from lessonlib.engine.worker.process import PAGE_ENVIRONMENT, PageJob

GUARD = "lessonlib.engine.guard"  # always imported first in the template (template_modules)
# Then the worker's own code, for the libraries it imports (joblib, psutil, and the Markdown parser
# it loads on first use): a page's time limit is the page's, never spent importing the engine.
# The guard drops lessonlib's modules in each worker, which imports them again, fresh, at a
# fraction of the cost.
WORKER = ("lessonlib.engine.worker.process", "lessonlib.engine.worker.session", "markdown_it")
POLL_SECONDS = 0.2  # how often memory and deadlines are checked
GRACE_SECONDS = 1.0  # between asking a worker to stop and killing it


@dataclass
class Ran:
    outputs: PageOutputs
    manifest: Manifest
    seconds: float
    imported: tuple[str, ...] = ()  # what the page's process imported: the learned preload (cache.PageCache)


@dataclass
class Task:
    job: PageJob
    page: ParsedPage
    timeout: float  # seconds per block, unless the block says otherwise


Outcome = Ran | LessonError | SetupError


@dataclass
class _Running:
    task: Task
    process: multiprocessing.process.BaseProcess
    conn: Connection
    output: Connection  # the worker's stdout and stderr
    started: float
    line: int = 0  # Markdown line of what it is running now
    told: int = 0  # the line at_line was last told
    deadline: float = float("inf")
    limit: float = 0.0  # the running block's time limit, for the message
    result: Outcome | None = None
    outputs: list[BlockOutput] = field(default_factory=list)  # of the blocks that finished
    gone: bool = False  # its end of the pipe closed: it has exited


def run_pages(tasks: list[Task], workers: int, memory_limit_mb: float | None, preload: Sequence[str] = (),
              stop: Callable[[], bool] = lambda: False,
              at_line: Callable[[Task, int], None] = lambda task, line: None) -> Iterator[tuple[Task, Outcome]]:
    """Run each task's page in its own process, at most `workers` at once, in the given order;
    yield each task with its result as it finishes. `preload`: the modules the template imports
    (template_modules), if this process has not started it yet. `stop`, asked at each poll: when
    it says True, end the pages running and return (a Dask worker whose build went away).
    `at_line` is told each Markdown line a page starts to run (a Dask worker tells its build)."""
    context = _context(preload)
    queue = list(tasks)
    running: list[_Running] = []
    try:
        while (queue or running) and not stop():
            while queue and len(running) < workers:
                running.append(_start(context, queue.pop(0)))
            ready = wait([r.conn for r in running if not r.gone] + [r.output for r in running if not r.output.closed],
                         timeout=POLL_SECONDS)
            for r in list(running):
                if r.output in ready:
                    _relay(r)
                outcome = _check(r, memory_limit_mb)
                if r.line != r.told:
                    r.told = r.line
                    at_line(r.task, r.line)
                if outcome is not None:
                    running.remove(r)
                    yield r.task, outcome
    finally:
        for r in running:  # interrupted (Ctrl-C, or the caller stopped early): end them all
            _end(r)


_template: multiprocessing.context.BaseContext | None = None


def _context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """The template, which keeps the modules it started with for as long as it lives (mkdocs serve:
    the first build's)."""
    global _template
    if _template is None:
        _template = multiprocessing.get_context("forkserver")
        _template.set_forkserver_preload(template_modules(preload))
    return _template


def template_modules(preload: Sequence[str]) -> list[str]:
    """What the template imports: the guard first, the worker's code, then those of `preload` installed here (their
    top-level package found, not imported), so that a site without torch starts no torch. The
    guard takes lessonlib's own modules out of each worker, so that no project code in the
    template can be stale: mkdocs serve keeps it across rebuilds."""
    installed = [name for name in preload if importlib.util.find_spec(name.partition(".")[0]) is not None]
    return list(dict.fromkeys([GUARD, *WORKER, *installed]))


def start_template(preload: Sequence[str] = ()) -> None:
    """Start the template now, from this thread: it ends when this thread does (guard)."""
    with _process_globals():
        _context(preload)
        multiprocessing.forkserver.ensure_running()


def _start(context: multiprocessing.context.BaseContext, task: Task) -> _Running:
    receive, send = context.Pipe(duplex=False)
    output, output_end = context.Pipe(duplex=False)
    Path(task.job.stack_file).write_text("")
    process = context.Process(target=worker.main, args=(send, output_end, task.job), name=f"lessonlib {task.job.path}")
    with _process_globals():
        process.start()
    send.close()
    output_end.close()
    os.set_blocking(output.fileno(), False)
    r = _Running(task, process, receive, output, time.monotonic())
    _enter(r, None, start=True)
    return r


_starting = threading.Lock()


@contextmanager
def _process_globals() -> Iterator[None]:
    """What a worker starts with: swapped in for the start alone, one thread at a time (a Dask worker
    may run pages in several threads; two interleaved swaps would leave the swapped values behind)."""
    with _starting, _no_main_module(), _template_environment():
        yield


@contextmanager
def _template_environment() -> Iterator[None]:
    """What the template (started by the first page) inherits: the workers' hash seed, and
    the build's pid, which the guard checks."""
    variables = {**PAGE_ENVIRONMENT, BUILD_PID: str(os.getpid())}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def _relay(r: _Running) -> None:
    """What the worker wrote to its stdout or stderr, to the build's stderr (fd 2: where a
    progress bar belongs, whatever sys.stderr is now)."""
    if r.output.closed:
        return
    try:
        while data := os.read(r.output.fileno(), 1 << 16):
            os.write(2, data)
    except BlockingIOError:
        return
    r.output.close()  # end of file: no process of the page holds it any more


@contextmanager
def _no_main_module() -> Iterator[None]:
    """Start a worker without the build's __main__: multiprocessing would otherwise import the
    main script again in every worker (mkdocs's, pytest's, an author's script that calls the
    engine without an `if __name__ == "__main__"` guard, which would then run in the worker)."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _enter(r: _Running, index: int | None, start: bool = False) -> None:
    """The worker starts a new phase (block `index`, or the inline values when None): set the
    line it is at and its deadline."""
    page, now = r.task.page, time.monotonic()
    if index is not None:
        block = page.blocks[index]
        r.line, r.limit = block.start + 1, block.timeout or r.task.timeout
    else:  # start-up, or the inline values after the last block
        r.line = page.inlines[0].line if not start and page.inlines else 1
        r.limit = r.task.timeout
    r.deadline = now + r.limit


def _check(r: _Running, memory_limit_mb: float | None) -> Outcome | None:
    """Read what the worker said; decide whether it finished, died, ran out of time or memory."""
    try:
        while r.conn.poll():
            _receive(r, r.conn.recv())
    except (EOFError, OSError):
        r.gone = True  # the worker is gone; its exit status says how
    if r.result is not None:
        _end(r)
        return r.result
    if r.gone or not _alive(r):
        r.process.join()
        _end(r)
        return _died(r)
    if time.monotonic() > r.deadline:
        return _stopped(r, f"block timed out after {r.limit:g} s")
    if memory_limit_mb and _memory_mb(r.process.pid) > memory_limit_mb:
        return _stopped(r, f"used more than the page's memory limit of {memory_limit_mb:,.0f} MB "
                           "(memory_limit_mb in mkdocs.yml)")
    return None


def _receive(r: _Running, message: object) -> None:
    if isinstance(message, worker.Started):
        _enter(r, message.index)
    elif isinstance(message, worker.BlockDone):
        r.outputs.append(message.output)
    elif isinstance(message, worker.Finished):
        outputs = PageOutputs(r.outputs, message.values, message.published)
        r.result = Ran(outputs, Manifest.from_json(message.manifest), time.monotonic() - r.started, message.imported)
    elif isinstance(message, worker.Failed) and message.written:
        r.result = WriteError(message.path, message.line, message.written, message.by_process,
                              outputs_before=r.outputs)
    elif isinstance(message, worker.Failed):
        r.result = LessonError(message.path, message.line, message.message, message.detail, r.outputs)
    elif isinstance(message, worker.SetupFailed):
        r.result = SetupError(message.message)


def _alive(r: _Running) -> bool:
    """Its exit is reported by the forkserver; if a page ended that, the worker may live on."""
    return r.process.is_alive() or lifetime.is_running(r.process.pid)


def _died(r: _Running) -> LessonError:
    code = r.process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        cause = f"was killed by signal {-code} ({name}: {signal.strsignal(-code)})"
        if -code == signal.SIGKILL:
            cause += "; if nothing else killed it, the machine ran out of memory"
        message = f"the page's process {cause} while running this block"
    else:
        message = f"the page's process exited with status {code} while running this block"
    return _located(r, message)


def _stopped(r: _Running, message: str) -> LessonError:
    """Ask for the page's stack (to name the line), then end the worker and its children."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(r.process.pid, worker.DUMP_STACK)
    _await_stack(Path(r.task.job.stack_file), r.task.job.path)
    _end(r)
    return _located(r, message)


def _await_stack(stack: Path, page: str, most: float = 5.0) -> None:
    """Wait until the worker's stack names a line of the page, or stops growing: faulthandler
    writes it from a signal handler (even inside a C call), a few bytes at a time, and a loaded
    machine may pause it between the heading and the first frame."""
    start, seen, still = time.monotonic(), "", 0
    while time.monotonic() - start < most:
        time.sleep(0.02)
        text = stack.read_text(errors="replace")
        if text == seen and text.endswith("\n"):
            still += 1
            if still >= 25 or any(m.group(1) == page for m in _FRAME.finditer(text)):
                return  # the page's line is there, or nothing was written for half a second
        else:
            seen, still = text, 0


def _end(r: _Running) -> None:
    """End the worker and every process under it (a finished one is given a moment to exit)."""
    if r.result is not None:
        r.process.join(GRACE_SECONDS)
    lifetime.end_processes(r.process.pid, include_root=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(r.process.pid, signal.SIGKILL)  # what a worker that crashed left: its group
    r.process.join()
    _relay(r)
    r.output.close()
    r.conn.close()


_FRAME = re.compile(r'File "(.*)", line (\d+)')


def _located(r: _Running, message: str) -> LessonError:
    """At the page line on the worker's last stack, if it left one; else at the block."""
    path = r.task.job.path
    try:
        stack = Path(r.task.job.stack_file).read_text(errors="replace")
    except OSError:
        stack = ""
    frames = [(m.group(1), int(m.group(2)), m.group(0)) for m in _FRAME.finditer(stack)]
    in_page = [i for i, (file, _, _) in enumerate(frames) if file == path]
    if not in_page:
        return LessonError(path, r.line, message, outputs_before=r.outputs)
    # faulthandler lists the most recent call first: keep the page's frames and what they called
    kept = [row.strip() for row in stack.splitlines() if row.strip().startswith("File")][: in_page[-1] + 1]
    # an inline value being evaluated is a frame at a prose line: its line, wherever it hung below
    in_code = [range(b.start, b.end) for b in r.task.page.blocks]
    in_prose = [i for i in in_page if not any(frames[i][1] - 1 in lines for lines in in_code)]
    line = frames[in_prose[-1] if in_prose else in_page[0]][1]
    return LessonError(path, line, message, "Stack (most recent call first):\n  " + "\n  ".join(kept), r.outputs)


def _memory_mb(pid: int) -> float:
    import psutil  # here: a build whose pages all come from the cache watches no process

    def rss(process: psutil.Process) -> int:
        try:
            return process.memory_info().rss
        except psutil.Error:
            return 0

    try:
        process = psutil.Process(pid)
    except psutil.Error:
        return 0.0
    return sum(rss(p) for p in [process, *lifetime.running_descendants(pid)]) / 2**20
