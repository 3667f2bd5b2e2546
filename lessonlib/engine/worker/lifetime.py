"""Process trees, so that no process a page starts outlives its page, and none outlives the build.

A page's worker is a child subreaper: whatever its processes start, in new sessions or with
double forks, stays its descendant when the process in between ends, so listing the worker's
descendants finds every one. The forkserver the workers come from is a subreaper too, and ends
every process under it when the build dies (lessonlib.engine.guard): what a worker that crashed
left in a new session is ended then, the rest of its process group at once. Linux only:
elsewhere these calls do nothing and a page's processes are found only while their parents live.
"""
from __future__ import annotations

import ctypes
import signal
import sys

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants of this process become its children, not init's."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def signal_when_parent_dies(sig: int) -> None:
    """The kernel sends `sig` to this process when the thread that started it ends (the build's
    thread that ran the first page: its main thread, under mkdocs build and serve alike)."""
    _prctl(_PR_SET_PDEATHSIG, int(sig))


def forkserver_pid() -> int | None:
    """The pid of the forkserver multiprocessing started in this process, or None if it started
    none. multiprocessing keeps it private: this is the one place that reads it."""
    forkserver = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    return getattr(forkserver, "_forkserver_pid", None)


def running_descendants(pid: int) -> list[psutil.Process]:
    """Every process under `pid` that still runs (zombies are done), parents first."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if _running(p)]


def is_running(pid: int) -> bool:
    try:
        return _running(psutil.Process(pid))
    except psutil.Error:
        return False


def end_processes(pid: int, include_root: bool, spare: frozenset[int] = frozenset()) -> None:
    """Kill every process under `pid` (and `pid` itself if `include_root`), but not those in
    `spare`: stop them all first, so that none can start another while they are being killed,
    and repeat until nothing is left (a fork may have been under way)."""
    while True:
        stopped: dict[int, psutil.Process] = {}
        while found := [p for p in _tree(pid, include_root) if p.pid not in stopped and p.pid not in spare]:
            for process in found:
                _send(process, signal.SIGSTOP)
                stopped[process.pid] = process
        if not stopped:
            return
        for process in stopped.values():
            _send(process, signal.SIGKILL)


def _tree(pid: int, include_root: bool) -> list[psutil.Process]:
    found = running_descendants(pid)
    if include_root and is_running(pid):
        try:
            found.insert(0, psutil.Process(pid))
        except psutil.NoSuchProcess:  # it ended between the two looks
            pass
    return found


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(process: psutil.Process, sig: int) -> None:
    try:
        process.send_signal(sig)
    except psutil.Error:
        pass  # it ended meanwhile


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
