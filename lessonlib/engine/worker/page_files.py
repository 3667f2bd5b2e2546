"""What a page may write besides its output: its scratch folder, and the files it publishes.

A page writes nothing under the project (lessonlib.engine.worker.inputs refuses it): another page could
read the file, and its cached result would then depend on a run it cannot see.

- ``scratch()``: a folder private to the page's run, for the files its code makes for itself (a
  checkpoint, a subprocess's output). The build makes it empty before the page runs, outside the
  project (under the system's temporary folder), and removes it with everything in it once the
  page's processes have ended. Nothing in it is an input. Outside a build (a notebook), a fresh
  temporary folder, removed when the process exits.
- ``publish(name, data)``: a file the build writes into the site beside the page, as it writes
  the page's figures (a model's weights for a live demo). It is part of the page's result, so a
  cached page publishes it again. A name is a plain file name; a page's files together stay
  under the publish limit (publish_limit_mb in mkdocs.yml). The names are checked again as the
  build takes them (take_published): one set through lessonlib's internals, past publish(), fails
  the page as a bad call would. Outside a build there is no site: the file goes into scratch(), so
  a notebook that runs the page's code leaves its folder as it was.
"""
from __future__ import annotations

import atexit
import re
import shutil
import sys
import tempfile
from pathlib import Path

from lessonlib.engine.worker.errors import LessonError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_BUILD_WRITES = (".html", ".htm", ".md", ".ipynb")  # the page itself and its notebook


class _Run:
    page: str | None = None  # the page's path, in a build
    scratch: Path | None = None
    limit: int = 0  # bytes, all of a page's files together
    published: dict[str, bytes] = {}  # noqa: RUF012 (one run per process)
    refused: tuple[int, str] | None = None  # (line, message): a refusal the page's code may have caught


def begin(page: str, scratch: Path, limit: int) -> None:
    """In the page's worker, before its first block."""
    _Run.page, _Run.scratch, _Run.limit, _Run.published, _Run.refused = page, scratch, limit, {}, None


class Refused(ValueError):
    """A publish call the build refuses; the page fails at `line` with `message`, one line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


def scratch() -> Path:
    """The page's own folder for files its code makes for itself; never an input."""
    if _Run.scratch is None:
        _Run.scratch = Path(tempfile.mkdtemp(prefix="lessonlib-scratch-"))
        atexit.register(shutil.rmtree, _Run.scratch, ignore_errors=True)
    return _Run.scratch


def publish(name: str, data: bytes | str) -> None:
    """Publish `data` as the file `name` beside the page in the site (str: as UTF-8)."""
    data = data.encode() if isinstance(data, str) else bytes(data)
    problem = _problem(name, data)
    if _Run.page is None:  # a notebook, a script: no site to publish into
        if problem:
            raise ValueError(problem)
        (scratch() / name).write_bytes(data)
        return
    if problem:
        _Run.refused = _Run.refused or (_page_line(), problem)
        raise Refused(_Run.refused[0], problem)
    _Run.published[name] = data


def _problem(name: object, data: bytes) -> str | None:
    shown = repr(name)[:80]
    if type(name) is not str or not _NAME.fullmatch(name) or ".." in name:  # a subclass may say otherwise
        return (f"lessonlib.publish({shown}): a published file's name is a plain file name (letters, digits, "
                "'.', '-', '_'; no folder, no '..')")
    if name.lower().endswith(_BUILD_WRITES):
        return f"lessonlib.publish({shown}): the build writes the page's own {name.rsplit('.', 1)[1]} files"
    if name in _Run.published:
        return f"lessonlib.publish({shown}): this page already published a file of that name"
    total = len(data) + sum(map(len, _Run.published.values()))
    if _Run.page is not None and total > _Run.limit:
        return (f"lessonlib.publish({shown}): the page's published files would take {total / 2**20:,.1f} MB, "
                f"more than the limit of {_Run.limit / 2**20:,.1f} MB (publish_limit_mb in mkdocs.yml)")
    return None


def check(path: str) -> None:
    """After each block: a refused publish fails the page even if its code caught the error."""
    if _Run.refused is not None:
        line, message = _Run.refused
        raise LessonError(path, line, message)


def take_published() -> dict[str, bytes]:
    """What the page published, each file checked as publish() checks it."""
    taken, _Run.published = dict(_Run.published), {}
    for name, data in taken.items():
        problem = _problem(name, bytes(data))
        if problem:
            raise LessonError(_Run.page or "", 1, f"{problem} (set past lessonlib.publish)")
        _Run.published[name] = bytes(data)
    return dict(_Run.published)


def _page_line() -> int:
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename != _Run.page:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else 1


def remove(folder: Path) -> None:
    """The scratch folder, once the page's processes have ended."""
    shutil.rmtree(folder, ignore_errors=True)
