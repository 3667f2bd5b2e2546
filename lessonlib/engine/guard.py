"""Imported first in the forkserver (and only there: importing it installs it), the process the
page workers are forked from (see lessonlib.engine.builder.pool): it ends every process under it,
workers and whatever their pages started, when the build ends in any way (SIGKILL included:
the kernel tells it), or when it is sent SIGTERM or SIGHUP, then exits; a build that is gone
leaves its pages' temporary folders to it. It is their subreaper, so none escapes by a new session.

In each worker forked from it, the signals are theirs again and lessonlib's modules leave
sys.modules: a worker imports the project's code itself, fresh, so none is stale (mkdocs serve
keeps the forkserver from build to build).
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import sys
import tempfile
import time

from lessonlib.engine.config import build_pid, pages_temp_prefix
from lessonlib.engine.worker import lifetime

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
GONE_SECONDS = 10  # a bound only: a build whose thread ended but which lives on keeps its folders


def _end_everything(signum: int, frame: object) -> None:
    lifetime.end_processes(os.getpid(), include_root=False)
    build = build_pid()
    if build and _gone(build):  # it removes its folders itself unless killed
        pattern = os.path.join(glob.escape(tempfile.gettempdir()), glob.escape(pages_temp_prefix(build)) + "*")
        for folder in glob.glob(pattern):
            shutil.rmtree(folder, ignore_errors=True)
    os._exit(128 + signum)


def _gone(build: str) -> bool:
    """Whether the build has ended. The kernel signals this process when the build's thread that
    started it ends; when the whole build is being killed, its other threads may still be ending,
    and this process their child, for a moment: wait for that moment to pass."""
    deadline = time.monotonic() + GONE_SECONDS
    while build == str(os.getppid()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _in_a_worker() -> None:
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    for name in [n for n in sys.modules if n == "lessonlib" or n.startswith("lessonlib.")]:
        del sys.modules[name]


for _sig in _SIGNALS:
    signal.signal(_sig, _end_everything)
lifetime.become_subreaper()
lifetime.signal_when_parent_dies(signal.SIGTERM)
if build_pid() not in (None, str(os.getppid())):  # the build died before that was set
    _end_everything(signal.SIGTERM, None)
os.register_at_fork(after_in_child=_in_a_worker)
