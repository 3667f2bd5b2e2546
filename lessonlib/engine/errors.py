"""The one error type the engine raises for a lesson's fault."""
from __future__ import annotations


class LessonError(Exception):
    """A failure located in a lesson: ``docs/PATH.md:LINE: message`` then optional detail."""

    def __init__(self, path: str, line: int, message: str, detail: str = "") -> None:
        self.path, self.line, self.message, self.detail = path, line, message, detail
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.path}:{self.line}: {self.message}"
        return f"{head}\n{self.detail.rstrip()}" if self.detail else head
