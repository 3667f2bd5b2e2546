"""The engine's two error types: a lesson's fault, located in its page, and a set-up fault
(a bad setting, a cache folder the build cannot use), which is nobody's page's."""
from __future__ import annotations


class LessonError(Exception):
    """A failure located in a lesson: ``docs/PATH.md:LINE: message`` then optional detail.
    `outputs_before`: what the blocks that finished before it printed (BlockOutput each)."""

    def __init__(self, path: str, line: int, message: str, detail: str = "",
                 outputs_before: list | None = None) -> None:
        self.path, self.line, self.message, self.detail = path, line, message, detail
        self.outputs_before = list(outputs_before or [])
        super().__init__(str(self))

    def __reduce__(self) -> tuple:  # pickled whole (a page's outcome from a Dask worker), not as its message
        return LessonError, (self.path, self.line, self.message, self.detail, self.outputs_before)

    def __str__(self) -> str:
        head = f"{self.path}:{self.line}: {self.message}"
        return f"{head}\n{self.detail.rstrip()}" if self.detail else head


class SetupError(Exception):
    """One line that names the bad value's source (an option, a variable, the cache folder)
    and how to fix it; shown as it is, never with a traceback."""


class WriteError(LessonError):
    """A page wrote a file under the project outside its scratch folder (lessonlib.engine.worker.inputs
    sees it), or into the build's cache. `file`: relative to the root (absolute: a file of the cache);
    `reader`: a page of the same build that reads it."""

    def __init__(self, path: str, line: int, file: str, by_process: bool = False, reader: str = "",
                 outputs_before: list | None = None) -> None:
        self.file, self.by_process, self.reader = file, by_process, reader
        who = "a process this block started writes" if by_process else "this block writes"
        what = (f"which {reader} reads" if reader else "a file under the project, where other pages read"
                if not file.startswith("/") else "in the build's cache, which only the build writes")
        message = (f"{who} {file}, {what}: pages are independent, so a page writes only into its scratch "
                   "folder (lessonlib.scratch()) or publishes beside its page (lessonlib.publish(name, data))")
        super().__init__(path, line, message, "", outputs_before)

    def __reduce__(self) -> tuple:
        return WriteError, (self.path, self.line, self.file, self.by_process, self.reader, self.outputs_before)

    def read_by(self, reader: str) -> WriteError:
        return WriteError(self.path, self.line, self.file, self.by_process, reader, self.outputs_before)
