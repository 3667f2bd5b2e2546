"""Split a lesson page into prose and executable blocks, keeping Markdown line numbers.

markdown-it-py finds the fences; its indented-code rule is disabled so that fences nested in
admonitions, tabs and lists (indented by four spaces) are found too. Its inline parsing is
disabled as well: only block tokens are read.
"""
from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lessonlib.engine.worker import options as checks
from lessonlib.engine.worker.errors import LessonError, SetupError

FLAGS = {"check", "hide-code", "hide-output", "html", "timing"}
KEYED = {"alt", "caption", "memo", "timeout"}
SOURCE = "source"  # ```python source="module:object"```: that object's code, shown as the page runs it

# Code spans are matched whole, so `` `{py} x` `` (double backticks) shows the syntax literally;
# an inline value is a single-backtick span `{py} expr` or `{py} expr:spec`, and a deliberate
# literal in prose (a year, "Figure 2") is `{lit} text`, shown as plain text.
SLOT_CLASS = "lessonlib-html-slot"  # render.py's placeholders for block outputs, filled after Markdown
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_INLINE_VALUE = re.compile(r"\{py\}\s+(.+?)\s*")
_LITERAL = re.compile(r"\{lit\}\s+(.+?)\s*")
_FORMAT_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?")


@dataclass(frozen=True)
class Block:
    kind: str  # "exec", "pycon" or "source"
    code: str  # dedented source (a source block has none: its code is the object's)
    options: dict[str, str] = field(hash=False)
    start: int  # 0-based index of the opening fence line
    end: int  # 0-based index one past the closing fence line
    indent: str  # whitespace before the fence marker

    @property
    def first_line(self) -> int:
        """1-based Markdown line of the block's first code line."""
        return self.start + 2

    @property
    def check(self) -> bool:
        """A block of asserts that back the prose: run in place, shown only in the page's
        collapsed list of checks (and in its notebook, folded)."""
        return "check" in self.options

    @property
    def timeout(self) -> float | None:
        return float(self.options["timeout"]) if "timeout" in self.options else None


@dataclass(frozen=True)
class Inline:
    source: str  # text between `{py} and the closing backtick, e.g. "cos:.4f"
    expr: str
    spec: str
    line: int  # 1-based Markdown line


@dataclass(frozen=True)
class ParsedPage:
    path: str  # as shown in messages, e.g. docs/lessons/rnn.md
    lines: list[str]  # the page's lines, with their line endings
    blocks: list[Block]
    inlines: list[Inline]
    prose: list[bool]  # per line: True outside every fence

    @property
    def executable(self) -> bool:
        return bool(self.blocks or self.inlines)


@functools.cache
def _markdown():  # made on first use: a warm build takes its parsed pages from the cache
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").disable(["code", "inline"])


def read_page(file: Path, path: str) -> str:
    """The page's text; a page that is not UTF-8 is a LessonError at the line of its first bad byte."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        data = file.read_bytes()
        raise LessonError(path, data.count(b"\n", 0, e.start) + 1, f"the page is not UTF-8 (byte "
                          f"0x{data[e.start]:02x} at offset {e.start}): save it as UTF-8") from None


def parse_page(text: str, path: str) -> ParsedPage:
    lines = text.splitlines(keepends=True)
    prose = [True] * len(lines)
    blocks = []
    for token in _markdown().parse(text):
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        for i in range(start, min(end, len(lines))):
            prose[i] = False
        kind, options = _classify(token.info, path, start + 1)
        if kind and not _closes(token.markup, lines[start + 1 : end]):
            raise LessonError(path, start + 1, f"this block's fence is never closed, so the rest of the page "
                              f"became its code: end the block with a line {token.markup}")
        if kind == SOURCE and token.content.strip():
            raise LessonError(path, start + 1, "a source block shows the code of the object it names: "
                              "leave it empty (code to run goes in a ```python exec block)")
        if kind:
            fence_line = lines[start]
            indent = fence_line[: len(fence_line) - len(fence_line.lstrip())]
            blocks.append(Block(kind, token.content, options, start, end, indent))
    for i, line in enumerate(lines):
        if prose[i] and SLOT_CLASS in CODE_SPAN.sub("", line):
            raise LessonError(path, i + 1, f"this line holds the engine's own markup for block outputs ({SLOT_CLASS}), "
                              "which the build replaces: put it in a code span to show it")
    inlines = [
        _inline(source, i + 1)
        for i, line in enumerate(lines)
        if prose[i]
        for span in CODE_SPAN.finditer(line)
        if (source := inline_source(span))
    ]
    return ParsedPage(path, lines, blocks, inlines, prose)


def inline_source(span: re.Match[str]) -> str | None:
    """The source of an inline value (``expr`` or ``expr:spec``) if this code span is one."""
    value = _INLINE_VALUE.fullmatch(span.group(2)) if span.group(1) == "`" else None
    return value.group(1) if value else None


def literal_text(span: re.Match[str]) -> str | None:
    """The text of a deliberate literal `{lit} text` if this code span is one."""
    literal = _LITERAL.fullmatch(span.group(2)) if span.group(1) == "`" else None
    return literal.group(1) if literal else None


# A fence that means to run but would be shown as plain code: `py exec`, `{python exec}`,
# `python3 exec`, `python hide-code` (exec forgotten) ...
_LOOKS_EXECUTABLE = re.compile(
    r"\bexec\b|^\W*py\w*\b.*(?:\b(?:" + "|".join(map(re.escape, FLAGS)) + r")\b|\b(?:"
    + "|".join(sorted(KEYED | {SOURCE})) + r")=)", re.I)
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _closes(markup: str, body: list[str]) -> bool:
    """The fence's last line closes it (``` or longer, nothing else): markdown-it ends an
    unclosed fence where its container ends, taking the prose after it as code."""
    last = body[-1].strip() if body else ""
    return last.startswith(markup) and set(last) == {markup[0]}


def _classify(info: str, path: str, line: int) -> tuple[str | None, dict[str, str]]:
    words = info.split(maxsplit=2)
    if words[:1] == ["pycon"]:
        return "pycon", {}
    if words[:1] == ["python"] and words[1:2] and words[1].startswith(f"{SOURCE}="):
        return SOURCE, {SOURCE: _source_target(info.split(maxsplit=1)[1], path, line)}
    if words[:2] != ["python", "exec"]:
        if _LOOKS_EXECUTABLE.search(info):
            raise LessonError(path, line, f"this fence ({info.strip()!r}) looks like a block to run but is not one: "
                              "it must start ```python exec, then its options")
        return None, {}
    try:
        items = shlex.split(words[2]) if len(words) > 2 else []
    except ValueError as e:
        raise LessonError(path, line, f"cannot read the options of this block: {e}") from None
    options: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if (eq and key in KEYED) or (not eq and key in FLAGS):
            if key in options:
                raise LessonError(path, line, f"{key}{eq} is given twice on this fence: keep one")
            options[key] = value
        else:
            known = ", ".join(sorted(FLAGS) + [f"{k}=..." for k in sorted(KEYED)])
            raise LessonError(path, line, f"unknown block option {item!r} (known: {known})")
    if "memo" in options and not all(map(_DOTTED.fullmatch, options["memo"].split() or [""])):
        raise LessonError(path, line, f"memo={options['memo']!r} must name the callables to memoize, separated by "
                          'spaces, as the block calls them: memo="memory_task.sweep train"')
    if "timeout" in options:
        try:
            checks.positive("timeout", options["timeout"], "seconds")
        except SetupError as e:
            raise LessonError(path, line, str(e)) from None
    return "exec", options


def _source_target(rest: str, path: str, line: int) -> str:
    """The `module:object` a source block names (object: a dotted name inside the module)."""
    try:
        items = shlex.split(rest)
    except ValueError as e:
        raise LessonError(path, line, f"cannot read the options of this block: {e}") from None
    target = items[0].removeprefix(f"{SOURCE}=")
    module, colon, name = target.partition(":")
    if len(items) > 1 or not (colon and _DOTTED.fullmatch(module) and _DOTTED.fullmatch(name)):
        raise LessonError(path, line, f"{' '.join(items)!r}: a source block takes one option, "
                          'source="module:object", e.g. source="lessonlib.experiments.gradient_reach:reach"')
    return target


def _inline(source: str, line: int) -> Inline:
    expr, colon, spec = source.rpartition(":")
    if colon and _FORMAT_SPEC.fullmatch(spec) and _is_expression(expr):
        return Inline(source, expr.strip(), spec, line)
    return Inline(source, source.strip(), "", line)


def _is_expression(text: str) -> bool:
    try:
        compile(text.strip(), "<inline>", "eval")
    except SyntaxError:
        return False
    return True
