"""Pages on a Dask cluster (the `scheduler` option, or LESSONLIB_SCHEDULER) instead of this machine's cores.

Each page is one Dask task: on a worker, `run_page` runs it with pool.run_pages, in a fresh process
of its own with its time and memory limits and its process tree ended, as a local build does; the
outcome comes back to the build, which caches and publishes it. Workers must be non-daemonic
(distributed.worker.daemon: False: a daemonic process cannot start one) and see the project and
the cache folder at the build's paths. A worker lost mid-page: the scheduler runs the page
elsewhere while distributed.scheduler.allowed-failures allows, then the page fails naming the worker,
at the line it was running (each worker tells the build the lines its page starts, as Dask events).
A page's joblib calls run on the cluster too (process._joblib_on): run_page secedes from its
Dask thread to leave it to them, so the build keeps no more pages in flight than there are threads.
A page, and each of those calls, crosses as bytes (lessonlib.engine.worker.cluster_calls): a worker
that cannot load it (no lessonlib there) fails it in one line naming the worker, where Dask's own
loading would stall that worker for good. No wait is silent: a peer that is not a scheduler is
one line within seconds, and while no worker has joined the build says so every SAY_SECONDS.

Build side: the build imports it only with a scheduler set; no page's process imports it.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from distributed import Client, as_completed, get_worker, secede
from distributed.comm import connect
from distributed.scheduler import KilledWorker
from distributed.security import Security

from lessonlib.engine.builder import pool
from lessonlib.engine.builder.pool import Outcome, Task
from lessonlib.engine.config import SCHEDULER, pages_temp_prefix, scheduler_address
from lessonlib.engine.worker import cluster_calls
from lessonlib.engine.worker.errors import LessonError, SetupError

CONNECT_SECONDS = 5  # an unreachable scheduler is said this quickly
ANSWER_SECONDS = 1  # ... and a peer that takes the connection but never answers as Dask does, this much later
SAY_SECONDS = 30  # a build waiting on the cluster says what it waits for at least this often
SETTLE_SECONDS = 10  # a stopped build waits this long for the workers to end its pages
LET_GO_SECONDS = SETTLE_SECONDS + 2 * CONNECT_SECONDS  # ... and at most this long for the cluster to answer at all
LINES = "lessonlib-lines"  # the Dask event topic: {"build", "page", "line"} as a page starts a line

def run_pages(tasks: list[Task], scheduler: str, memory_limit_mb: float | None,
              preload: Sequence[str] = ()) -> Iterator[tuple[Task, Outcome]]:
    """pool.run_pages on the cluster at `scheduler` (`preload`: its template's modules on a worker
    that starts one now): each task's page is a Dask task, submitted in
    the given order (first, first run); yield each task with its result as it finishes. Closed
    early (Ctrl-C, a failure), it cancels the pages and waits for the workers to end them (at most
    LET_GO_SECONDS: then the scheduler ends them as the build disconnects)."""
    client = _connect(scheduler)
    try:
        _await_workers(client, scheduler)
    except BaseException:  # Ctrl-C, or the scheduler lost: the build lets go of the cluster
        _let_go(client, [], LET_GO_SECONDS)
        raise
    build, futures, lines = uuid.uuid4().hex[:12], {}, {}

    def told(event: tuple[float, dict]) -> None:
        if event[1]["build"] == build:
            lines[event[1]["page"]] = event[1]["line"]

    def submit(i: int):
        path = tasks[i].job.path  # the page crosses as bytes: a worker that cannot load it fails it in one line
        future = client.submit(cluster_calls.run, f"the page {path}", cluster_calls.packed(run_page, tasks[i],
                               memory_limit_mb, build, tuple(preload)), key=f"lessonlib-{build}-{path}",
                               priority=len(tasks) - i, pure=False)
        futures[future] = tasks[i]
        return future

    client.subscribe_topic(LINES, told)
    waiting_for = _Heartbeat(client, scheduler, futures, lines)
    try:
        # as many pages at once as the cluster has threads: a page leaves its thread to its
        # joblib tasks (run_page secedes), so the scheduler would otherwise start them all
        waiting = iter(range(len(tasks)))
        done = as_completed([submit(i) for i in itertools.islice(waiting, max(1, sum(client.nthreads().values())))],
                            loop=client.loop)
        for future in done:
            for i in itertools.islice(waiting, 1):
                done.add(submit(i))
            task = futures[future]
            yield task, _outcome(future, task, scheduler, lines.get(task.job.path))
    finally:
        waiting_for.stop()
        if not _let_go(client, [f for f in futures if not f.done()], LET_GO_SECONDS):
            print(f"lessonlib: the Dask cluster at {scheduler} did not confirm within {LET_GO_SECONDS} s "
                  "that it ended this build's pages; its scheduler ends them as the build disconnects", file=sys.stderr)


def _let_go(client: Client, running: list, seconds: float) -> bool:
    """Cancel the running pages, wait for the workers to end them, and close the client, for at
    most `seconds` (a thread of its own: Dask's calls take no deadline, and a busy or stopping
    cluster may never answer); whether that finished."""
    ended = threading.Event()

    def end() -> None:
        with contextlib.suppress(Exception):  # a cluster that fails here is one that did not confirm
            if running:
                client.cancel(running)
                with contextlib.suppress(OSError, TimeoutError):  # the scheduler is gone: so are its workers' tasks
                    client.run(_settled, [f.key for f in running], SETTLE_SECONDS, on_error="ignore")
            client.close()
            ended.set()

    threading.Thread(target=end, name="lessonlib cluster let-go", daemon=True).start()
    return ended.wait(seconds)


def _connect(scheduler: str) -> Client:
    """A client of the scheduler, or a SetupError in one line within CONNECT_SECONDS (ANSWER_SECONDS
    more for a peer that takes the connection and then says nothing). Dask's Client waits forever on
    a peer that takes the connection but never answers as a Dask server does (an HTTP server): the
    peer is first asked what it is, under a deadline that leaves nothing running."""
    where = f"{SCHEDULER} or the scheduler option"
    scheduler_address(where, scheduler)  # Settings checked it at the build's start; a direct caller too
    unreachable = f"{where}: cannot reach the Dask scheduler {scheduler} within {CONNECT_SECONDS} s"
    asked = CONNECT_SECONDS + ANSWER_SECONDS  # the connection's own deadline, then a read
    try:
        peer = asyncio.run(asyncio.wait_for(_identity(scheduler), asked))
    except TimeoutError:
        peer = {}
    except Exception as e:  # noqa: BLE001 (any failure to connect is said in one line)
        raise SetupError(f"{unreachable} ({_one_line(e)})") from None
    if peer.get("type") == "Worker":
        raise SetupError(f"{where}: {scheduler} is a Dask worker's address; its scheduler's is {peer.get('scheduler')}")
    if peer.get("type") != "Scheduler":
        raise SetupError(f"{where}: {scheduler} did not answer as a Dask scheduler does within {asked} s")
    try:
        with _quiet_unraisable():  # a half-made Client's __del__ would print a traceback
            return Client(scheduler, timeout=CONNECT_SECONDS, set_as_default=False)
    except Exception as e:  # noqa: BLE001
        raise SetupError(f"{unreachable} ({_one_line(e)})") from None


async def _identity(address: str) -> dict:
    """What the Dask server at `address` says it is ({} if what answers is not one)."""
    comm = await connect(address, timeout=CONNECT_SECONDS, **Security().get_connection_args("client"))
    try:
        await comm.write({"op": "identity", "reply": True})
        answer = await comm.read()
    finally:
        comm.abort()
    return answer if isinstance(answer, dict) else {}


@contextlib.contextmanager
def _quiet_unraisable() -> Iterator[None]:
    hook = sys.unraisablehook
    sys.unraisablehook = lambda report: None if "Client.__del__" in repr(report.object) else hook(report)
    try:
        yield
    finally:
        sys.unraisablehook = hook


def _await_workers(client: Client, scheduler: str) -> None:
    """Pages need a worker: say so at once and every SAY_SECONDS while none has joined; a
    scheduler lost meanwhile is a SetupError."""
    try:
        while not client.nthreads():
            print(f"lessonlib: waiting for a Dask worker to join the scheduler at {scheduler} (none has yet)",
                  file=sys.stderr, flush=True)
            with contextlib.suppress(TimeoutError):
                client.wait_for_workers(1, timeout=SAY_SECONDS)
    except OSError as e:  # Dask's Client gave up reconnecting
        raise SetupError(f"the Dask scheduler at {scheduler} was lost while the build waited for a worker to join "
                         f"({_one_line(e)})") from None


class _Heartbeat:
    """While the build waits on the cluster, a line every SAY_SECONDS: which pages run where, at
    which line, and how many wait for a thread."""

    def __init__(self, client: Client, scheduler: str, futures: dict, lines: dict) -> None:
        self.client, self.scheduler, self.futures, self.lines = client, scheduler, futures, lines
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name="lessonlib cluster heartbeat", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(SAY_SECONDS):
            with contextlib.suppress(Exception):  # a line missed is better than a build stopped
                print(f"lessonlib: {self.line()}", file=sys.stderr, flush=True)

    def line(self) -> str:
        where = {key: worker for worker, keys in self.client.processing().items() for key in keys}
        pending = [(f, task) for f, task in list(self.futures.items()) if not f.done()]
        running = [f"{task.job.path} on {where[f.key]}" + (f" at line {self.lines[task.job.path]}"
                                                            if task.job.path in self.lines else "")
                   for f, task in pending if f.key in where]
        queued = len(pending) - len(running)
        return (f"waiting on the Dask cluster at {self.scheduler}: " + ("; ".join(running) or "no page running")
                + (f"; {queued} more waiting for a worker's thread" if queued else ""))


def _outcome(future, task: Task, scheduler: str, line: int | None) -> Outcome:
    """The page's outcome; a page whose workers were all lost fails at the line it was running
    last (its first block, if no worker told)."""
    try:
        return future.result()
    except KilledWorker as e:
        line = line or (task.page.blocks[0].start + 1 if task.page.blocks else 1)
        return LessonError(task.job.path, line, f"the Dask worker {e.last_worker.address} was lost while running this "
                           "page (it runs again on another worker as many times as distributed.scheduler."
                           f"allowed-failures allows: {e.allowed_failures})")
    except Exception as e:  # the cluster's fault, not the page's: no page ran code that raised it
        raise SetupError(f"the Dask cluster at {scheduler} could not run {task.job.path}: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


# --- on a Dask worker ------------------------------------------------------------------------------

def run_page(task: Task, memory_limit_mb: float | None, build: str, preload: tuple[str, ...]) -> Outcome | None:
    """Run one page as a local build does, in a process of its own, telling `build` each line it
    starts; None if the build stopped wanting it."""
    worker = get_worker()
    problem = _unfit(worker.address, task)
    if problem:
        return SetupError(problem)
    _keep_template(preload)
    key = worker.get_current_task()
    secede()  # the page's process waits here: the thread is free for its joblib tasks (process._joblib_on)
    # the build's folder is on its host: the page's stack and temporary folders go in one here
    with tempfile.TemporaryDirectory(prefix=pages_temp_prefix(os.getpid()), ignore_cleanup_errors=True) as folder:
        job = replace(task.job, stack_file=str(Path(folder, "page.stack")), temp=folder)
        stop = functools.partial(_unwanted, worker, key)

        def at_line(_: Task, line: int) -> None:
            worker.log_event(LINES, {"build": build, "page": task.job.path, "line": line})

        page = [replace(task, job=job)]
        with contextlib.closing(pool.run_pages(page, 1, memory_limit_mb, preload, stop, at_line)) as outcomes:
            return next((outcome for _, outcome in outcomes), None)


def _unfit(address: str, task: Task) -> str | None:
    """Why this worker cannot run the page, in one line, or None."""
    if multiprocessing.current_process().daemon:
        return (f"the Dask worker {address} is a daemonic process, which cannot start a page's process: "
                "start the workers with distributed.worker.daemon: False (DASK_DISTRIBUTED__WORKER__DAEMON=False)")
    job = task.job
    for path in [job.folder, *([Path(job.cache_dir)] if job.cache_dir else [])]:  # the page's working directory
        if not path.exists():
            return (f"the Dask worker {address} cannot see {path}: workers must see the project and the "
                    "cache folder at the build's paths (a shared filesystem)")
    return None


def _unwanted(worker, key: str) -> bool:
    """The scheduler let go of the page: the build cancelled it, stopped, or died."""
    task = worker.state.tasks.get(key)
    return task is None or task.state == "cancelled"


_keeper: threading.Thread | None = None
_keeper_lock = threading.Lock()


def _keep_template(preload: tuple[str, ...]) -> None:
    """Start the pages' template from a thread that lasts as long as this worker: the template
    ends when the thread that started it does, and Dask's task threads may come and go."""
    global _keeper
    with _keeper_lock:
        if _keeper is None:
            started = threading.Event()
            _keeper = threading.Thread(target=_keep, args=(started, preload), name="lessonlib template", daemon=True)
            _keeper.start()
            started.wait()


def _keep(started: threading.Event, preload: tuple[str, ...]) -> None:
    try:
        pool.start_template(preload)
    finally:
        started.set()
    threading.Event().wait()  # for as long as the worker lives


async def _settled(keys: list[str], seconds: float, dask_worker) -> None:
    """Wait until this worker has ended its cancelled pages (client.run runs it on every worker)."""
    deadline = time.monotonic() + seconds
    while any(key in dask_worker.state.tasks for key in keys) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
