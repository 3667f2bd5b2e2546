"""The worker side: one page, run in a fresh process forked from a template that has imported
the modules the site's pages use (lessonlib.engine.builder.pool starts it).

It tells the build which block it is starting and what each finished block printed, so that
whatever ends the process (an exit, a crash, a kill for time or memory) is located at that
block and the blocks before still show; it records what the page read; and it sends back the
inline values, the files it published and the manifest of inputs, or a located failure. A
write under the project fails the page at the line that made it (lessonlib.engine.worker.inputs); the
page's scratch folder is made before it runs and removed once its processes have ended
(lessonlib.engine.worker.page_files). Every process the page started
ends with the page: one still running when it ends fails it. The page's stdin is empty, and
its stdout and stderr (outside what blocks capture) are a pipe the build reads: no process of
a page holds the build's own. This module imports no torch: the build imports it for the
entry point and the messages.
"""
from __future__ import annotations

import ast
import atexit
import builtins
import faulthandler
import functools
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from lessonlib.engine.config import SEED
from lessonlib.engine.worker import capture, lifetime, page_files
from lessonlib.engine.worker.after_import import when_imported
from lessonlib.engine.worker.blocks import ParsedPage, parse_page
from lessonlib.engine.worker.cores import limit_cpus
from lessonlib.engine.worker.errors import LessonError, SetupError, WriteError
from lessonlib.engine.worker.inputs import Recorder
from lessonlib.engine.worker.outputs import BlockOutput

DUMP_STACK = signal.SIGUSR1  # the build asks for the page's stack before ending it for time or memory
PAGE_ENVIRONMENT = {"PYTHONHASHSEED": str(SEED)}  # sets and dicts of strings in one order, every build


@dataclass(frozen=True, kw_only=True)
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
    temp: str  # the build's folder for the page's temporary folders: removed with the build, however the page ended
    environment: str  # the environment fingerprint, for memo keys
    cores: int  # the build's `workers`: the most processes the page's experiments may start
    variables: tuple[tuple[str, str], ...]  # the build's environment variables now (the template's are older)
    keep_going: bool = False  # run on past a failed assert, then fail naming every one
    publish_limit: int = 10 * 2**20  # bytes a page may publish beside itself (lessonlib.publish)
    scheduler: str | None = None  # the Dask cluster the page runs on: its joblib calls run there too

    @property
    def folder(self) -> Path:
        return Path(self.root, self.path).parent


# --- what a worker tells the build, in order ----------------------------------------------------

@dataclass(frozen=True)
class Started:
    index: int | None  # the block's index; None: the inline values, after the last block


@dataclass(frozen=True)
class BlockDone:
    output: BlockOutput


@dataclass(frozen=True)
class Finished:
    values: dict[str, str]  # inline values by source
    manifest: dict  # Manifest.to_json()
    published: dict[str, bytes] = field(default_factory=dict)  # lessonlib.publish: name -> content
    imported: tuple[str, ...] = ()  # the installed top-level packages the process imported (pool.learned_preload)


@dataclass(frozen=True)
class Failed:
    path: str
    line: int
    message: str
    detail: str = ""
    written: str = ""  # a WriteError's file
    by_process: bool = False


@dataclass(frozen=True)
class SetupFailed:
    message: str  # a SetupError's (the cache folder is full ...): not the page's fault


def main(conn: Connection, output: Connection, job: PageJob) -> None:
    """The worker's entry point."""
    os.setpgrp()  # Ctrl-C in the build's terminal reaches the build, which ends its pages itself
    lifetime.become_subreaper()  # every process the page starts stays under this one
    _stdio(output)
    capture.keep_terminal()  # before any block takes descriptors 1 and 2
    stack = open(job.stack_file, "w")  # noqa: SIM115 (kept open for faulthandler until the end)
    faulthandler.enable(file=stack)
    faulthandler.register(DUMP_STACK, file=stack, all_threads=False)
    os.chdir(job.folder)  # a page reads its data files and imports its helpers from its own folder
    sys.path.insert(0, str(job.folder))
    os.environ.clear()
    os.environ.update({**dict(job.variables), **PAGE_ENVIRONMENT})
    tempfile.tempdir = job.temp  # the page's own temporary folders, its scratch and its records go in it
    imported = _noting_imports()
    limit_cpus(job.cores)
    if job.scheduler:
        _joblib_on(job.scheduler)
    page = parse_page(job.text, job.path)
    children = _Children(page)
    scratch = Path(tempfile.mkdtemp(prefix=f"lessonlib-scratch-{Path(job.path).stem[:40]}-"))  # a name fits
    message: object
    try:
        message = _run(conn, job, page, children, scratch, imported)
    except WriteError as e:
        message = Failed(e.path, e.line, e.message, e.detail, e.file, e.by_process)
    except LessonError as e:
        message = Failed(e.path, e.line, e.message, e.detail)
    except SetupError as e:
        message = SetupFailed(str(e))
    except BaseException:
        message = Failed(job.path, 1, "the engine failed while running this page", traceback.format_exc())
    try:
        message = _end_like_an_exit(children, message)
    except BaseException:
        message = Failed(job.path, 1, "the engine failed while ending the page's processes", traceback.format_exc())
    page_files.remove(scratch)  # its processes have ended: nothing writes there any more
    conn.send(message)
    conn.close()


def _joblib_on(scheduler: str) -> None:
    """The page's joblib.Parallel calls run as tasks on the Dask cluster at `scheduler` (joblib's
    Dask backend), beside the pages: their functions must be importable on its workers. Each
    call and its outcome cross as bytes (cluster_calls.ClusterBackend): one that cannot fails
    the call, in the page, where Dask would wait forever. The page connects when it first makes
    a Parallel: a page that makes none pays nothing."""
    import joblib

    @functools.cache
    def client():
        from distributed import Client

        return Client(scheduler, set_as_default=False)

    def backend(**_):  # joblib passes its nesting level, which the Dask backend takes no part in
        from lessonlib.engine.worker.cluster_calls import ClusterBackend

        return ClusterBackend(client=client())

    joblib.register_parallel_backend("lessonlib-cluster", backend, make_default=True)


def _stdio(output: Connection) -> None:
    """stdin empty, stdout and stderr the build's pipe (what blocks print is captured apart)."""
    with open(os.devnull, "rb") as empty:
        os.dup2(empty.fileno(), 0)
    for fd in (1, 2):
        os.dup2(output.fileno(), fd)
    output.close()


def _run(conn: Connection, job: PageJob, page: ParsedPage, children: _Children, scratch: Path,
         imported: Callable[[], set[str]]) -> Finished:
    when_imported("matplotlib", lambda matplotlib: matplotlib.use("Agg"))  # no display at build time

    from lessonlib.engine.worker.memo import MemoStore, memo_store
    from lessonlib.engine.worker.session import Session

    cache = [Path(job.cache_dir)] if job.cache_dir else []
    roots = [Path(r) for r in job.source_roots]
    recorder = Recorder(Path(job.root), roots, [*cache, scratch], code_files={job.path}, refuse_writes=True,
                        cache=cache, environment=dict(job.variables))  # the build's: what it checks again
    page_files.begin(job.path, scratch, job.publish_limit)
    for line, name in shadowed_imports(page, Path(job.folder), {m.partition(".")[0] for m in sys.modules}):
        raise LessonError(page.path, line, f"the helper {name}.py beside the page has the name of the module "
                          f"`{name}`, which the build loads before any page runs, so this import finds "
                          "that module instead: rename the helper")
    with recorder.recording():
        session = Session(page, job.output_limit, job.keep_going)
        store = MemoStore(Path(job.cache_dir, "memo"), Path(job.root), roots, cache, session.namespace,
                          job.refresh, job.environment) if job.cache_dir else None
        with memo_store(store):
            for index, block in enumerate(page.blocks):
                conn.send(Started(index))
                try:
                    output = session.run(block)
                finally:  # a refused write is why a block failed, and fails one that caught it
                    _no_writes(recorder, page.path, block.start + 1)
                children.seen_after(index)
                conn.send(BlockDone(output))
            conn.send(Started(None))
            try:
                values = session.values()
            finally:
                _no_writes(recorder, page.path, page.inlines[0].line if page.inlines else 1)
            session.assert_all_held()
            children.seen_after(len(page.blocks))
    return Finished(values, recorder.manifest(namespaces=[session.namespace]).to_json(),
                    page_files.take_published(), _installed(imported(), recorder))


def _noting_imports() -> Callable[[], set[str]]:
    """What imported() gives: the names of the imports this process makes from now on, those the
    template made already included (an import of those only looks one up): top-level, or dotted
    where one package imports another's module (matplotlib.pyplot: most of the time it takes);
    and the top-level names of modules loaded without an import statement (importlib.import_module).
    What the next build's template preloads: a module stays preloaded only while some page imports it."""
    before, names = set(sys.modules), set()
    real = builtins.__import__

    def noting(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            top = name.partition(".")[0]
            names.add(name if top != (globals or {}).get("__name__", "").partition(".")[0] else top)
        return real(name, globals, locals, fromlist, level)

    builtins.__import__ = noting
    return lambda: names | {name.partition(".")[0] for name in list(sys.modules) if name not in before}


_NEVER_PRELOADED = {"lessonlib", "sitecustomize", "usercustomize"}  # the guard drops lessonlib from every worker


def _installed(imported: set[str], recorder: Recorder) -> tuple[str, ...]:
    """Those of `imported` that were loaded from installed packages: not the standard library's,
    not the project's code, no private module."""
    def installed(name: str) -> bool:
        file = getattr(sys.modules.get(name), "__file__", None)  # None: not loaded (a failed import), or no file
        return isinstance(file, str) and not recorder.watches(os.path.abspath(file))

    return tuple(sorted(name for name in imported if name.partition(".")[0] not in sys.stdlib_module_names
                        and name.partition(".")[0] not in _NEVER_PRELOADED
                        and not any(part.startswith("_") for part in name.split(".")) and installed(name)))


def _no_writes(recorder: Recorder, path: str, line: int) -> None:
    written = recorder.first_write()
    if written is not None:
        file, at, by_process = written
        raise WriteError(path, at or line, file, by_process)


def shadowed_imports(page: ParsedPage, folder: Path, loaded: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each import in the page's blocks of a helper beside the page (name.py or a
    package) that bears the name of a module already loaded: Python would hand over that module."""
    found = []
    for block in page.blocks:
        if block.kind != "exec":
            continue
        try:
            tree = ast.parse("\n" * (block.first_line - 1) + block.code)
        except SyntaxError:  # the session reports it, at its line
            continue
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [])
            for top in {n.partition(".")[0] for n in names}:
                helper = (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file()
                if helper and top in loaded:
                    found.append((node.lineno, top))
    return sorted(found)


@dataclass
class _Children:
    """The page's processes, each with the block after which it was first seen running."""

    page: ParsedPage
    first_seen: dict[int, int] = field(default_factory=dict)

    def seen_after(self, index: int) -> None:
        for process in lifetime.running_descendants(os.getpid()):
            self.first_seen.setdefault(process.pid, index)

    def left_running(self, spare: frozenset[int]) -> Failed | None:
        """A failure at the block that started the first process still running, if any."""
        for process in lifetime.running_descendants(os.getpid()):
            if process.pid in spare:
                continue
            index = self.first_seen.get(process.pid, len(self.page.blocks))
            line = (self.page.blocks[index].start + 1 if index < len(self.page.blocks)
                    else self.page.inlines[0].line if self.page.inlines else self.page.blocks[-1].start + 1)
            return Failed(self.page.path, line, f"this block left process {process.pid} running "
                          f"({_command(process)}): wait for it (Popen.wait, Process.join) or end it in the block")
        return None


def _command(process: object) -> str:
    try:
        return " ".join(process.cmdline())[:120] or process.name()  # type: ignore[attr-defined]
    except Exception:  # it ended meanwhile, or cannot be read
        return "a process"


def _end_like_an_exit(children: _Children, message: object) -> object:
    """A worker ends with os._exit, which skips the exit handlers that let libraries clean up
    after themselves (joblib's shared-memory folders, its pool's semaphores): stop joblib's
    process pool if the page started one, end every process the page left (a page that
    otherwise finished fails for it), run the handlers, as a normal exit would, then stop the
    resource trackers. Returns the message to send."""
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:
        # Asked to stop, not killed: a killed worker leaves what it registered (tqdm's lock, a
        # semaphore) to the resource tracker, which then warns of leaks. Not stopped, exiting
        # would wait on its idle workers.
        executor.shutdown(wait=True, kill_workers=False)
    trackers = _helpers(_TRACKERS)
    forkserver = lifetime.forkserver_pid()  # one the page started: ended last, below
    spare = frozenset([pid for pid, _ in trackers] + ([forkserver] if forkserver is not None else []))
    if isinstance(message, Finished):
        message = children.left_running(spare) or message
    lifetime.end_processes(os.getpid(), include_root=False, spare=spare)
    atexit._run_exitfuncs()  # joblib's unregister what they made with the trackers
    for _, tracker in trackers:
        tracker._stop()  # its pipe closes: it cleans up what is still registered, then exits
    lifetime.end_processes(os.getpid(), include_root=False)  # a forkserver the page started
    return message


# The resource trackers multiprocessing and joblib start for themselves when a page uses them,
# which last as long as the page's process: (module, its singleton, the attribute with the pid).
_TRACKERS = (("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
             ("joblib.externals.loky.backend.resource_tracker", "_resource_tracker", "_pid"))


def _helpers(which: tuple[tuple[str, str, str], ...]) -> list[tuple[int, object]]:
    """Those of `which` the page started, still running, with their pids."""
    mine = {p.pid for p in lifetime.running_descendants(os.getpid())}
    found = []
    for module, name, pid_attribute in which:
        helper = getattr(sys.modules.get(module), name, None)
        pid = getattr(helper, pid_attribute, None)
        if pid in mine:
            found.append((pid, helper))
    return found
