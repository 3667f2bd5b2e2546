"""What a block writes, at the Python and at the file-descriptor level, in the order it wrote it.

In a page's worker, while a block runs, descriptors 1 and 2 are one temporary file of the block's
own, and sys.stdout and sys.stderr write straight through to them: print, os.write(1, ...), a
subprocess's output and os.system's land in one stream, in order, read back up to the output
limit (a block that writes more fails, and the build's log never sees it). The write that takes
a block over the limit is located at its page line where Python code made it (print, sys.stdout
and its buffer, os.write: os.write is wrapped to see it); one that another process or C code
made at the descriptor is not, and the block's own line is named.

Output that arrives after its block ended never lands in another block. A thread that a block
started and that writes through sys.stdout or sys.stderr after that block ended (during a later
block, or between blocks) fails the page at the block that started it; the rule is the writing
thread's origin, not the timing, so the block named is always the right one. What is not seen:
a thread or a process that an earlier block started and that writes to descriptor 1 or 2
directly during a later block lands in that block (a descriptor carries no origin); between
blocks such output goes to the build's terminal, as a process that outlives the page is ended
with it (lessonlib.engine.worker.process).

lessonlib's own terminal lines (progress bars, "computed in N s") go to `terminal()`: in a worker
a descriptor of its own, never a page; in a notebook, never a cell. Nothing here imports torch.
"""
from __future__ import annotations

import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TextIO

_terminal: TextIO | None = None
_current: Capture | None = None  # the worker's


def terminal() -> TextIO:
    """Where lessonlib's own lines go: the build's terminal, whatever a block has made of
    descriptors 1 and 2 (sys.__stderr__ outside a page's worker). In a Jupyter kernel, which shows
    what reaches descriptor 2 in the running cell, the console of the kernel's server (ipykernel's
    sys.stderr.fileno()): a notebook shows what its page shows."""
    global _terminal
    if _terminal is None and type(sys.stderr).__module__ == "ipykernel.iostream":
        with suppress(OSError):  # no descriptor of its own: the kernel leaves descriptor 2 alone
            _terminal = open(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8",  # noqa: SIM115
                             errors="backslashreplace")
    return _terminal or sys.__stderr__


def keep_terminal() -> None:
    """In a worker, before any block: give the terminal a descriptor of its own."""
    global _terminal
    _terminal = open(os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115


@dataclass(frozen=True)
class Captured:
    text: str
    overflowed: bool  # more than the limit was written (text holds the first `limit` bytes)
    line: int | None = None  # overflowed: the page line whose write took it over, if Python code wrote it


class EscapedOutput(Exception):
    """A thread wrote after the block that started it had ended."""

    def __init__(self, origin: int, during: int | None) -> None:
        super().__init__(origin, during)
        self.origin, self.during = origin, during  # block lines (1-based); during None: between blocks


class Capture:
    """The page's sys.stdout and sys.stderr, and descriptors 1 and 2 for one block at a time."""

    def __init__(self, limit: int, path: str) -> None:
        self.limit, self.path = limit, path  # path: the page's, as its code is compiled
        self._origins: dict[int, int] = {}  # thread ident -> line of the block that started it
        self._line: int | None = None  # the block running now
        self._over_at: int | None = None  # the page line whose write took the running block over the limit
        self._escaped: EscapedOutput | None = None
        sys.stdout, sys.stderr = _Stream(1, self), _Stream(2, self)
        os.write = _write
        global _current
        _current = self

    @contextmanager
    def block(self, line: int) -> Iterator[list[Captured]]:
        """Capture one block (`line`: its fence's); the list holds its Captured once it ended."""
        before = {t.ident for t in threading.enumerate()}
        saved = os.dup(1), os.dup(2)
        captured: list[Captured] = []
        with tempfile.TemporaryFile() as file:
            os.dup2(file.fileno(), 1)
            os.dup2(file.fileno(), 2)  # one file description: one offset, so the order is kept
            self._line, self._over_at = line, None
            try:
                yield captured
            finally:
                self._line = None
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for fd in saved:
                    os.close(fd)
                for thread in threading.enumerate():
                    if thread.ident not in before and thread.ident is not None:
                        self._origins[thread.ident] = line
                captured.append(self._read(file.fileno()))

    def raise_escaped(self) -> None:
        """Raise EscapedOutput if a thread wrote outside the block that started it."""
        if self._escaped is not None:
            raise self._escaped

    def _note_writer(self) -> None:
        origin = self._origins.get(threading.get_ident())
        if origin is not None and origin != self._line and self._escaped is None:
            self._escaped = EscapedOutput(origin, self._line)

    def _note_written(self, written: int) -> None:
        """After a write of `written` bytes to descriptor 1 or 2 from Python code: if it took the
        block over the limit, note the page line that made it."""
        if self._line is None or self._over_at is not None:
            return
        with suppress(OSError):  # a descriptor the page replaced with one that has no offset (a pipe)
            end = os.lseek(1, 0, os.SEEK_CUR)
            if end - written <= self.limit < end:
                self._over_at = _page_line(self.path)

    def _read(self, fd: int) -> Captured:
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, self.limit), 0)
        over = size > self.limit
        return Captured(data.decode("utf-8", errors="replace"), over, self._over_at if over else None)


_os_write = os.write


def _write(fd: int, data, /) -> int:
    """os.write in a page's worker (Capture sets it): a write to descriptor 1 or 2 that takes the
    running block over its output limit is noted at its page line."""
    written = _os_write(fd, data)
    if fd in (1, 2) and _current is not None:
        _current._note_written(written)
    return written


def _page_line(path: str) -> int | None:
    """The line of the innermost frame of the page's code in this thread's stack, if it has one."""
    frame = sys._getframe()
    while frame is not None and frame.f_code.co_filename != path:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else None


def offset() -> int | None:
    """Where the running block's output ends now (None outside a captured block)."""
    return os.lseek(1, 0, os.SEEK_CUR) if _current is not None and _current._line is not None else None


def written_since(start: int) -> str:
    """The running block's output from `start` on (a memoized call's, stored to replay it)."""
    end = os.lseek(1, 0, os.SEEK_CUR)
    return os.pread(1, end - start, start).decode("utf-8", errors="replace")


class _Stream(io.TextIOBase):
    """sys.stdout or sys.stderr in a worker: straight to the descriptor, with no buffer, so that
    Python's writes and the descriptor's keep their order. Its `buffer` takes bytes."""

    def __init__(self, fd: int, capture: Capture) -> None:
        self._fd, self.buffer = fd, _Bytes(fd, capture)

    @property
    def encoding(self) -> str:
        return "utf-8"

    def write(self, text: str) -> int:
        self.buffer.write(text.encode("utf-8", errors="backslashreplace"))
        return len(text)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False


class _Bytes(io.RawIOBase):
    """sys.stdout.buffer or sys.stderr.buffer in a worker: bytes straight to the descriptor."""

    def __init__(self, fd: int, capture: Capture) -> None:
        self._fd, self._capture = fd, capture

    def write(self, data) -> int:
        self._capture._note_writer()
        rest = data = bytes(data)
        with suppress(BrokenPipeError):
            while rest:
                rest = rest[os.write(self._fd, rest):]
        return len(data)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd
