"""The worker side: one page, run in a fresh process forked from a template that has torch,
NumPy and matplotlib imported (lessonlib.engine.pool starts it).

It tells the build which block it is starting, so that whatever ends the process (an exit,
a crash, a kill for time or memory) is located at that block; it records what the page read;
and it sends back the outputs and the manifest of inputs, or a located LessonError.
This module imports no torch itself: the build process imports it to name the entry point.
"""
from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from lessonlib.device import limit_cpus
from lessonlib.engine.blocks import parse_page
from lessonlib.engine.errors import LessonError
from lessonlib.engine.inputs import Recorder

DUMP_STACK = signal.SIGUSR1  # the build asks for the page's stack before ending it for time or memory


@dataclass(frozen=True)
class PageJob:
    """Everything a worker needs, sent to it once (plain data: it is pickled)."""

    path: str  # as shown in messages, relative to root: docs/lessons/rnn.md
    text: str
    root: str  # the project's root: the folder of mkdocs.yml
    source_roots: tuple[str, ...]  # where the project's code lives: its inputs are recorded
    cache_dir: str | None  # memoized results live under it (never recorded as an input)
    refresh: bool  # run memoized calls again too
    output_limit: int  # bytes per block
    stack_file: str  # where the worker writes its Python stack on a crash or when asked
    environment: str  # the environment fingerprint, for memo keys
    cores: int  # the build's `workers`: the most processes the page's experiments may start
    variables: tuple[tuple[str, str], ...]  # the build's environment variables now (the template's are older)
    keep_going: bool = False  # run on past a failed assert, then fail naming every one

    @property
    def folder(self) -> Path:
        return Path(self.root, self.path).parent


def main(conn: Connection, job: PageJob) -> None:
    """The worker's entry point: messages ("block", i), ("inline", None), then ("done", ...) or
    ("error", path, line, message, detail)."""
    os.setpgrp()  # the build can end this page and every process it started, together
    stack = open(job.stack_file, "w")  # noqa: SIM115 (kept open for faulthandler until the end)
    faulthandler.enable(file=stack)
    faulthandler.register(DUMP_STACK, file=stack, all_threads=False)
    os.chdir(job.folder)  # a page reads its data files and imports its helpers from its own folder
    sys.path.insert(0, str(job.folder))
    os.environ.clear()
    os.environ.update(dict(job.variables))
    limit_cpus(job.cores)
    try:
        message = ("done", *_run(conn, job))
    except LessonError as e:
        message = ("error", e.path, e.line, e.message, e.detail)
    except BaseException:
        message = ("error", job.path, 1, "the engine failed while running this page", traceback.format_exc())
    try:
        _clean_up_like_an_exit()
    finally:
        conn.send(message)
        conn.close()


def _run(conn: Connection, job: PageJob) -> tuple:
    import matplotlib

    matplotlib.use("Agg")  # no display at build time

    from lessonlib.engine.memo import MemoStore, memo_store
    from lessonlib.engine.session import Session

    page = parse_page(job.text, job.path)
    cache = [Path(job.cache_dir)] if job.cache_dir else []
    recorder = Recorder([Path(r) for r in job.source_roots], cache, code_files={job.path})
    with recorder.recording():
        session = Session(page, job.output_limit, job.keep_going)
        store = MemoStore(Path(job.cache_dir, "memo"), [Path(r) for r in job.source_roots], cache,
                          session.namespace, job.refresh, job.environment) if job.cache_dir else None
        with memo_store(store):
            outputs = []
            for index, block in enumerate(page.blocks):
                conn.send(("block", index))
                outputs.append(session.run(block))
            conn.send(("inline", None))
            values = {inline.source: session.value(inline) for inline in page.inlines}
            session.assert_all_held()
    return (outputs, values), recorder.manifest().to_json()


def _clean_up_like_an_exit() -> None:
    """A worker ends with os._exit, which skips the exit handlers that let libraries clean up
    after themselves (joblib's shared-memory folders, its pool's semaphores): stop joblib's
    process pool if the page started one, then run the handlers, as a normal exit would."""
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:
        # Asked to stop, not killed: a killed worker leaves what it registered (tqdm's lock, a
        # semaphore) to the resource tracker, which then warns of leaks. Not stopped, exiting
        # would wait on its idle workers.
        executor.shutdown(wait=True, kill_workers=False)
    atexit._run_exitfuncs()
