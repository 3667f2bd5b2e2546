"""One page = one session: a namespace in which the page's blocks run in order."""
from __future__ import annotations

import contextlib
import doctest
import io
import linecache
import random
import signal
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from lessonlib.engine import svg
from lessonlib.engine.blocks import Block, Inline, ParsedPage
from lessonlib.engine.errors import LessonError

SEED = 0
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Figure:
    svg: str
    alt: str


@dataclass
class BlockOutput:
    text: str = ""
    figures: list[Figure] = field(default_factory=list)


class BlockTimeout(Exception):
    pass


class Session:
    def __init__(self, page: ParsedPage, timeout: float) -> None:
        self.page, self.path, self.timeout = page, page.path, timeout
        self.namespace: dict = {"__name__": "__lesson__"}
        # Tracebacks show the page's own lines, wherever the build runs from.
        linecache.cache[self.path] = (0, None, page.lines, self.path)
        random.seed(SEED)
        np.random.seed(SEED)
        torch.manual_seed(SEED)
        svg.reset()

    def run(self, block: Block) -> BlockOutput:
        output = io.StringIO()
        seconds = block.timeout or self.timeout
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            with _time_limit(seconds):
                try:
                    if block.kind == "pycon":
                        self._run_pycon(block)
                    else:
                        self._run_exec(block)
                except LessonError:
                    raise
                except BlockTimeout as e:
                    raise self._located(e, f"block timed out after {seconds:g} s", block, callees=False) from None
                except Exception as e:
                    raise self._located(e, f"{type(e).__name__}: {e}", block) from None
        svgs = svg.take_figures()
        if svgs and not block.options.get("caption", "").strip():
            raise LessonError(self.path, block.start + 1, 'this block makes a figure but has no alt text: add caption="..."')
        return BlockOutput(output.getvalue(), [Figure(svg, block.options.get("caption", "")) for svg in svgs])

    def value(self, inline: Inline) -> str:
        try:
            code = compile("\n" * (inline.line - 1) + inline.expr, self.path, "eval")
            return format(eval(code, self.namespace), inline.spec)
        except Exception as e:
            raise LessonError(self.path, inline.line, f"inline value `{inline.source}`: {type(e).__name__}: {e}") from None

    def _run_exec(self, block: Block) -> None:
        try:
            code = compile("\n" * (block.first_line - 1) + block.code, self.path, "exec", dont_inherit=True)
        except SyntaxError as e:
            raise LessonError(self.path, e.lineno or block.first_line, f"SyntaxError: {e.msg}") from None
        exec(code, self.namespace)

    def _run_pycon(self, block: Block) -> None:
        examples = doctest.DocTestParser().get_examples(block.code)
        test = doctest.DocTest(examples, {}, self.path, self.path, block.start, None)
        test.globs = self.namespace  # DocTest copies the globals it is given; share the page's instead
        runner = _StopAtFirstFailure(optionflags=DOCTEST_FLAGS)
        try:
            runner.run(test, clear_globs=False)
        except _PyconFailure as f:
            line = block.first_line + f.example.lineno
            raise LessonError(self.path, line, f.message, f.detail) from None

    def _located(self, exc: Exception, message: str, block: Block, callees: bool = True) -> LessonError:
        """Name the page line that raised, with a traceback that starts in the page's code
        (and, for a timeout, ends there too: the engine's alarm handler is no news to an author)."""
        frames = traceback.extract_tb(exc.__traceback__)
        first = next((i for i, f in enumerate(frames) if f.filename == self.path), len(frames))
        frames = traceback.StackSummary.from_list(
            [f for f in frames[first:] if callees or f.filename == self.path]
        )
        page_lines = [f.lineno for f in frames if f.filename == self.path]
        line = page_lines[-1] if page_lines else block.start + 1
        if isinstance(exc, AssertionError) and not str(exc):
            message = f"assertion failed: {linecache.getline(self.path, line).strip()}"
        detail = "Traceback (most recent call last):\n" + "".join(frames.format()) if frames else ""
        return LessonError(self.path, line, message, detail)


class _PyconFailure(Exception):
    def __init__(self, example: doctest.Example, message: str, detail: str) -> None:
        self.example, self.message, self.detail = example, message, detail


class _StopAtFirstFailure(doctest.DocTestRunner):
    def report_start(self, out, test, example) -> None:
        pass

    def report_success(self, out, test, example, got) -> None:
        pass

    def report_failure(self, out, test, example, got) -> None:
        diff = self._checker.output_difference(example, got, self.optionflags)
        raise _PyconFailure(example, f"pycon output differs for >>> {example.source.strip()}", diff)

    def report_unexpected_exception(self, out, test, example, exc_info) -> None:
        exc_type, exc, tb = exc_info
        while tb and not tb.tb_frame.f_code.co_filename.startswith("<doctest"):
            tb = tb.tb_next
        detail = "".join(traceback.format_exception(exc_type, exc, tb))
        raise _PyconFailure(example, f"{exc_type.__name__}: {exc} (in >>> {example.source.strip()})", detail)


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise BlockTimeout inside the block after `seconds` (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise BlockTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
