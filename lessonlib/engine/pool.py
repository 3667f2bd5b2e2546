"""The build side of running pages: a pool of worker processes, one fresh process per page.

Workers are forked from a template process that has imported torch, NumPy and matplotlib once
(multiprocessing's forkserver), so a page starts in a fraction of a second with no state from
any other page. The build process itself never imports torch. It watches each worker: the block
it is running, its time limit, its memory; whatever ends a worker early becomes a LessonError at
the line that was running, in words — an exit status, a signal, a timeout, the memory limit.
Lesson code cannot catch any of these: they are enforced from outside its process.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from lessonlib.engine import worker
from lessonlib.engine.blocks import ParsedPage
from lessonlib.engine.errors import LessonError
from lessonlib.engine.inputs import Manifest
from lessonlib.engine.outputs import PageOutputs
from lessonlib.engine.worker import PageJob

# Imported once, in the process workers fork from: third-party only, so that no project code
# in the template can be stale (mkdocs serve keeps it across rebuilds).
TEMPLATE = ["numpy", "torch", "matplotlib", "matplotlib.pyplot", "joblib", "markdown_it", "doctest"]
POLL_SECONDS = 0.2  # how often memory and deadlines are checked
GRACE_SECONDS = 1.0  # between asking a worker to stop and killing it


@dataclass
class Ran:
    outputs: PageOutputs
    manifest: Manifest
    seconds: float


@dataclass
class Task:
    job: PageJob
    page: ParsedPage
    timeout: float  # seconds per block, unless the block says otherwise


@dataclass
class _Running:
    task: Task
    process: multiprocessing.process.BaseProcess
    conn: Connection
    started: float
    line: int = 0  # Markdown line of what it is running now
    deadline: float = float("inf")
    limit: float = 0.0  # the running block's time limit, for the message
    result: Ran | LessonError | None = None
    messages: list = field(default_factory=list)


def run_pages(tasks: list[Task], workers: int, memory_limit_mb: float | None) -> Iterator[tuple[Task, Ran | LessonError]]:
    """Run each task's page in its own process, at most `workers` at once, in the given order;
    yield each task with its result as it finishes."""
    context = _context()
    queue = list(tasks)
    running: list[_Running] = []
    try:
        while queue or running:
            while queue and len(running) < workers:
                running.append(_start(context, queue.pop(0)))
            wait([r.conn for r in running] + [r.process.sentinel for r in running], timeout=POLL_SECONDS)
            for r in list(running):
                outcome = _check(r, memory_limit_mb)
                if outcome is not None:
                    running.remove(r)
                    yield r.task, outcome
    finally:
        for r in running:  # interrupted (Ctrl-C, or the caller stopped early): end them all
            _end(r)


_template: multiprocessing.context.BaseContext | None = None


def _context() -> multiprocessing.context.BaseContext:
    global _template
    if _template is None:
        _template = multiprocessing.get_context("forkserver")
        _template.set_forkserver_preload(TEMPLATE)
    return _template


def _start(context: multiprocessing.context.BaseContext, task: Task) -> _Running:
    receive, send = context.Pipe(duplex=False)
    Path(task.job.stack_file).write_text("")
    process = context.Process(target=worker.main, args=(send, task.job), name=f"lessonlib {task.job.path}")
    with _no_main_module():
        process.start()
    send.close()
    r = _Running(task, process, receive, time.monotonic())
    _enter(r, "start", None)
    return r


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


def _enter(r: _Running, kind: str, index: int | None) -> None:
    """The worker starts a new phase: set the line it is at and its deadline."""
    page, now = r.task.page, time.monotonic()
    if kind == "block":
        block = page.blocks[index]
        r.line, r.limit = block.start + 1, block.timeout or r.task.timeout
    else:  # start-up, or the inline values after the last block
        r.line = page.inlines[0].line if kind == "inline" and page.inlines else 1
        r.limit = r.task.timeout
    r.deadline = now + r.limit


def _check(r: _Running, memory_limit_mb: float | None) -> Ran | LessonError | None:
    """Read what the worker said; decide whether it finished, died, ran out of time or memory."""
    try:
        while r.conn.poll():
            message = r.conn.recv()
            if message[0] in ("block", "inline"):
                _enter(r, *message)
            elif message[0] == "done":
                _, (blocks, values), manifest = message
                r.result = Ran((blocks, values), Manifest.from_json(manifest), time.monotonic() - r.started)
            else:
                _, path, line, text, detail = message
                r.result = LessonError(path, line, text, detail)
    except (EOFError, OSError):
        pass  # the worker is gone; its exit status says how
    if r.result is not None:
        _end(r)
        return r.result
    if not r.process.is_alive():
        r.process.join()
        return _died(r)
    if time.monotonic() > r.deadline:
        return _stopped(r, f"block timed out after {r.limit:g} s")
    if memory_limit_mb and _memory_mb(r.process.pid) > memory_limit_mb:
        return _stopped(r, f"used more than the page's memory limit of {memory_limit_mb:,.0f} MB "
                           "(memory_limit_mb in mkdocs.yml)")
    return None


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
    _signal(r.process.pid, worker.DUMP_STACK, group=False)
    stack = Path(r.task.job.stack_file)
    for _ in range(25):  # faulthandler writes from its signal handler, even inside a C call
        if stack.stat().st_size:
            break
        time.sleep(0.02)
    _end(r)
    return _located(r, message)


def _end(r: _Running) -> None:
    if r.process.is_alive():
        _signal(r.process.pid, signal.SIGTERM)
        r.process.join(GRACE_SECONDS)
    _signal(r.process.pid, signal.SIGKILL)  # the page's own child processes too
    r.process.join()
    r.conn.close()


def _signal(pid: int, sig: int, group: bool = True) -> None:
    try:
        if group:
            os.killpg(pid, sig)  # the worker leads its own process group
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        if group:
            _signal(pid, sig, group=False)  # not yet a group leader: it only just started


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
        return LessonError(path, r.line, message)
    # faulthandler lists the most recent call first: keep the page's frames and what they called
    kept = [row.strip() for row in stack.splitlines() if row.strip().startswith("File")][: in_page[-1] + 1]
    return LessonError(path, frames[in_page[0]][1], message, "Stack (most recent call first):\n  " + "\n  ".join(kept))


def _memory_mb(pid: int) -> float:
    import psutil  # here: a build whose pages all come from the cache watches no process

    def rss(process: psutil.Process) -> int:
        try:
            return process.memory_info().rss
        except psutil.Error:
            return 0

    try:
        process = psutil.Process(pid)
        return sum(rss(p) for p in [process, *process.children(recursive=True)]) / 2**20
    except psutil.Error:
        return 0.0
