"""One page = one session: a namespace in which the page's blocks run in order.

Runs inside the page's worker process (lessonlib.engine.worker.process); the build process, which
enforces time and memory limits from outside, never imports this module.
"""
from __future__ import annotations

import ast
import contextlib
import doctest
import io
import linecache
import random
import re
import sys
import traceback

from lessonlib.engine.config import SEED
from lessonlib.engine.worker import page_files, svg
from lessonlib.engine.worker.after_import import when_imported
from lessonlib.engine.worker.blocks import SOURCE, Block, Inline, ParsedPage
from lessonlib.engine.worker.capture import Capture, EscapedOutput
from lessonlib.engine.worker.errors import LessonError, SetupError
from lessonlib.engine.worker.memo import random_state_kept
from lessonlib.engine.worker.outputs import BlockOutput, Figure
from lessonlib.engine.worker.shown import NotFound, defined_at, memoized, source_of

ALT_LIMIT = 150  # characters of a figure's alt text
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def start_page(seed: int = SEED) -> None:
    """The state every page starts from: the same seed in random, and the house figure style;
    where they are installed, the same seed in NumPy, and in torch subnormal floats flushed to
    zero, one thread and the same seed too. Exported notebooks call it in their first cell.

    NumPy, torch and matplotlib are set up as they are imported, or now if they are loaded
    already: a page that never imports torch never pays for it, and its stamp names no torch.
    Subnormals first, before any thread exists, so that every thread torch starts inherits it
    (lessonlib.device.flush_subnormals says why). One thread, because a sum split over two
    threads can round differently from one over one (the lessons' models are tiny)."""
    random.seed(seed)
    when_imported("numpy", lambda numpy: numpy.random.seed(seed))
    when_imported("torch", lambda torch: (torch.set_flush_denormal(True), torch.set_num_threads(1),
                                          torch.manual_seed(seed)))
    svg.reset()


class Session:
    def __init__(self, page: ParsedPage, output_limit: int = 1 << 20, keep_going: bool = False) -> None:
        """keep_going: a failed assert is noted and the page runs on (failed_asserts lists them)."""
        self.page, self.path, self.output_limit = page, page.path, output_limit
        self.keep_going = keep_going
        self.failed_asserts: list[tuple[int, str]] = []  # (line, message), with keep_going
        self._where_they_stand: dict[int, str] = {}  # inline index -> its value right after the block before it
        # Named as its notebook's kernel names it: an `if __name__ == "__main__"` block runs in both.
        self.namespace: dict = {"__name__": "__main__", _NOTE_FAILURE: self._note_failure, _FORMAT: format}
        self.capture = Capture(output_limit, self.path)  # from here on, sys.stdout and sys.stderr are the page's
        # Tracebacks show the page's own lines, wherever the build runs from.
        linecache.cache[self.path] = (0, None, page.lines, self.path)
        start_page()

    def run(self, block: Block) -> BlockOutput:
        shown, calls = None, []
        with self.capture.block(block.start + 1) as captured:
            try:
                if block.kind == "pycon":
                    self._run_pycon(block)
                elif block.kind == SOURCE:
                    shown = source_of(block.options[SOURCE])
                else:
                    calls = defined_at(self.namespace, block.options.get("memo", ""))
                    with memoized(self.namespace, block.options.get("memo", "")):
                        self._run_exec(block)
            except (LessonError, SetupError):  # located already, or nobody's page's fault
                raise
            except page_files.Refused as e:  # a bad name or too much to publish: one line, at the call
                raise LessonError(self.path, e.line, e.message) from None
            except NotFound as e:  # a name on the fence: one line, no traceback
                option = SOURCE if block.kind == SOURCE else "memo"
                raise LessonError(self.path, block.start + 1, f"{option}={block.options[option]!r}: {e}") from None
            except SystemExit as e:
                # exit() would end the page's process as if it had finished: a failure, said so.
                message = f"the block called exit({e.code!r}): a page must run to its end"
                raise self._located(e, message, block) from None
            except BaseException as e:  # KeyboardInterrupt and the like too: only the page raised them
                raise self._located(e, _described(e, self.output_limit) + _suggestion(e), block) from None
        self._raise_escaped()
        page_files.check(self.path)
        [output] = captured
        svgs, tables = svg.take_figures(), svg.take_tables()
        result = BlockOutput(output.text, [], tables, shown, calls)
        if block.check and (result.text or svgs):
            raise LessonError(self.path, block.start + 1, "a check block shows nothing, so it must not print or draw: "
                              "move what it shows to a block of its own")
        if tables and not svgs:
            raise LessonError(self.path, block.start + 1, "figure_data is the data of a figure: call it in the block "
                              "that draws the figure")
        if svgs:
            alt, caption = self._alt_and_caption(block)
            result.figures = [Figure(s, alt, caption) for s in svgs]
        if output.overflowed or result.size > self.output_limit:
            raise LessonError(self.path, output.line or block.start + 1, "this block's output is larger than the "
                              f"limit of {self.output_limit / 1024:,.0f} KB (output_limit_kb in mkdocs.yml): "
                              "print less")
        self._note_values_after(block)
        return result

    def _raise_escaped(self) -> None:
        try:
            self.capture.raise_escaped()
        except EscapedOutput as e:
            when = f"while the block at line {e.during} ran" if e.during else "between blocks"
            raise LessonError(self.path, e.origin, f"a thread this block started wrote after the block ended ({when}), "
                              "where its output would land on another block: join the thread before the block "
                              "ends") from None

    def _note_values_after(self, block: Block) -> None:
        """The values of the inline expressions in the prose between this block and the next, as
        they stand there; one that cannot be evaluated yet (it names what a later block makes) is
        left to the end."""
        later = [b.start for b in self.page.blocks if b.start >= block.end]
        until = min(later, default=len(self.page.lines))
        for n, inline in enumerate(self.page.inlines):
            if block.end < inline.line <= until:
                with contextlib.suppress(Exception):
                    self._where_they_stand[n] = self.value(inline)

    def values(self) -> dict[str, str]:
        """Every inline value, evaluated after the page's last block. One that differs from what
        it was where it stands in the prose (a later block changed what it reads) fails at its line:
        the page would show a number that is not the one its sentence is about."""
        self._raise_escaped()
        values = {}
        for n, inline in enumerate(self.page.inlines):
            value = self.value(inline)
            there = self._where_they_stand.get(n, value)
            if there != value:
                raise LessonError(self.path, inline.line, f"inline value `{{py}} {inline.source}` is {there} "
                                  f"here but {value} once the page has run: a later block changed what it reads; "
                                  "give the later value a name of its own")
            values[inline.source] = value
        return values

    def _alt_and_caption(self, block: Block) -> tuple[str, str]:
        """A figure's alt text (required: its finding, in at most ALT_LIMIT characters) and its
        caption (optional: it may say more). Both are f-strings over the page's values once the
        block has run, so they can state what the block measured: alt="Accuracy falls to {acc:.0%}"."""
        line = block.start + 1
        alt, caption = (self._formatted(block, name) for name in ("alt", "caption"))
        if not alt.strip():
            raise LessonError(self.path, line, 'this block makes a figure but has no alt text: add alt="..." '
                              f"(what the figure shows, in at most {ALT_LIMIT} characters)")
        if len(alt) > ALT_LIMIT:
            raise LessonError(self.path, line, f"the alt text has {len(alt)} characters, more than {ALT_LIMIT}: "
                              "state the finding, and leave the rest to caption=")
        if alt.strip() == caption.strip():
            raise LessonError(self.path, line, "the alt text equals the caption, so a screen reader reads it twice: "
                              "let the alt text state the finding and the caption say what is drawn")
        return alt, caption

    # Alt text, captions and inline values are evaluated on the page only (a notebook has none)
    # and inline values twice: none of them may move a later block's random draws.
    def _formatted(self, block: Block, option: str) -> str:
        try:
            with random_state_kept():
                return eval("f" + repr(block.options.get(option, "")), self.namespace)
        except BaseException as e:
            raise LessonError(self.path, block.start + 1, f"{option}: {_described(e, self.output_limit)}") from None

    def value(self, inline: Inline) -> str:
        try:
            lines = "\n" * (inline.line - 1)
            compile(lines + inline.expr, self.path, "eval")  # its own syntax errors, unwrapped
            # formatted inside the evaluated code: a __format__ that hangs leaves this line on the stack
            code = compile(f"{lines}{_FORMAT}(({inline.expr}), {inline.spec!r})", self.path, "eval")
            with random_state_kept():
                text = eval(code, self.namespace)
        except BaseException as e:
            raise LessonError(self.path, inline.line,
                              f"inline value `{inline.source}`: {_described(e, self.output_limit)}") from None
        if len(text) > self.output_limit:
            raise LessonError(self.path, inline.line, f"inline value `{inline.source}` has {len(text):,} characters, "
                              f"more than the output limit of {self.output_limit / 1024:,.0f} KB "
                              "(output_limit_kb in mkdocs.yml): show less")
        return text

    def _run_exec(self, block: Block) -> None:
        source = "\n" * (block.first_line - 1) + block.code
        try:
            code = compile(_soft_asserts(source, self.path) if self.keep_going else source, self.path, "exec",
                           dont_inherit=True)
        except SyntaxError as e:  # with the source line and the caret under the fault
            detail = "".join(traceback.format_exception_only(type(e), e))
            raise LessonError(self.path, e.lineno or block.first_line, f"{type(e).__name__}: {e.msg}", detail) from None
        exec(code, self.namespace)

    def _note_failure(self, line: int, message: object) -> None:
        source = linecache.getline(self.path, line).strip()
        text = str(message) if message is not None else f"assertion failed: {source}"
        self.failed_asserts.append((line, text))

    def assert_all_held(self) -> None:
        """With keep_going, fail the page once it has run if any assert failed, naming each one."""
        if self.failed_asserts:
            line, _ = self.failed_asserts[0]
            n = len(self.failed_asserts)
            detail = "\n".join(f"{self.path}:{at}: {message}" for at, message in self.failed_asserts)
            raise LessonError(self.path, line, f"{n} assert{'s' if n > 1 else ''} failed", detail)

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

    def _located(self, exc: BaseException, message: str, block: Block) -> LessonError:
        """Name the page line that raised, with a traceback that starts in the page's code."""
        frames = traceback.extract_tb(exc.__traceback__)
        first = next((i for i, f in enumerate(frames) if f.filename == self.path), len(frames))
        frames = traceback.StackSummary.from_list(frames[first:])
        page_lines = [f.lineno for f in frames if f.filename == self.path]
        line = page_lines[-1] if page_lines else block.start + 1
        if isinstance(exc, AssertionError) and message == "AssertionError: ":
            message = f"assertion failed: {linecache.getline(self.path, line).strip()}"
        detail = "Traceback (most recent call last):\n" + "".join(frames.format()) if frames else ""
        if self.failed_asserts:  # keep_going: what failed before this stopped the page
            detail = "".join(f"{self.path}:{at}: earlier, {text}\n" for at, text in self.failed_asserts) + detail
        return LessonError(self.path, line, message, detail)


def _described(error: BaseException, limit: int) -> str:
    """'Type: message', also for an exception whose __str__ itself raises; a message longer than
    the output limit is cut there."""
    try:
        text = str(error)
    except Exception as inner:
        text = f"<its message could not be made: {type(inner).__name__} in __str__>"
    if len(text) > limit:
        text = f"{text[:limit]} ... (cut: {len(text):,} characters, more than the output limit)"
    return f"{type(error).__name__}: {text}"


def _suggestion(error: BaseException) -> str:
    """Python's "Did you mean: ...?" for a misspelt name or attribute, which it adds only when
    it prints a traceback (in C, before Python 3.12): as its own exception hook prints it."""
    if not isinstance(error, (NameError, AttributeError)):
        return ""
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        sys.__excepthook__(type(error), error, error.__traceback__)
    hint = re.search(r"\. Did you mean: .*\?$", printed.getvalue().rstrip("\n"))
    return hint.group(0) if hint else ""


_NOTE_FAILURE = "__lessonlib_assert_failed__"  # what a soft assert calls
_FORMAT = "__lessonlib_format__"  # format(), out of the page's reach: inline values call it


def _soft_asserts(source: str, path: str) -> ast.Module:
    """The block's code with every `assert test, message` made `if not test: note(line, message)`."""

    class Soften(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> ast.If:
            note = ast.Call(ast.Name(_NOTE_FAILURE, ast.Load()),
                            [ast.Constant(node.lineno), node.msg or ast.Constant(None)], [])
            return ast.copy_location(ast.If(ast.UnaryOp(ast.Not(), node.test), [ast.Expr(note)], []), node)

    return ast.fix_missing_locations(Soften().visit(ast.parse(source, path)))


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
