"""Numbers typed by hand, and numbers from code the reader cannot see.

`hand_typed_numerals`: numerals in a page's prose and figure captions that do not come from code.

A lesson's numbers should be inline values (`{py} expr`) or printed output, so the page cannot
drift from its code. This finds every numeral in the prose, outside code spans (inline values
and `{lit} text` literals among them), math, code blocks and raw HTML; and in the alt texts and
captions of figures, outside their `{expr}` fields. A deliberate literal (a year, a citation,
"Figure 2") is written `{lit} 1997` in prose, `{'1997'}` in a caption.

`hidden_values`: inline values and caption fields that read a name a `hide-code` block computed.
A hidden block may draw a figure, but a number the page states comes from code a reader can
see or open: a shown block, a collapsed one, or a library module (whose code page the site has),
so a name a hidden block binds by importing it is fine.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

from lessonlib.engine.worker.blocks import parse_page

# The same block structure the engine sees (fences nested in admonitions found), plus the
# tables and $...$ math of the site's Markdown.
_md = MarkdownIt("commonmark").disable("code").enable("table").use(dollarmath_plugin, allow_space=False)
# A number standing on its own: not the 2 of seq2seq or the 64 of float64.
NUMERAL = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_BREAKS = {"softbreak", "hardbreak"}
_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")  # a caption's {expr} fields and {{ }} escapes


@dataclass(frozen=True)
class Numeral:
    line: int  # 1-based Markdown line
    text: str  # the numeral, e.g. "1,600"
    context: str  # the prose around it

    in_caption: bool = False

    def __str__(self) -> str:
        if self.in_caption:
            return (f"numeral {self.text!r} typed in a caption: {self.context!r} (a caption is an f-string over "
                    "the page's values: write {value:.2f})")
        return f"numeral {self.text!r} typed in prose: {self.context!r}"


def hand_typed_numerals(text: str) -> list[Numeral]:
    """Every numeral in the page's prose and captions, in order of lines."""
    found = []
    for token in _md.parse(text):
        if token.type == "inline" and token.map:
            found += _in_inline(token)
    for block in parse_page(text, "<page>").blocks:
        for option in ("alt", "caption"):
            caption = _FIELD.sub("", block.options.get(option, ""))
            found += [Numeral(block.start + 1, m.group(), _around(caption, m), in_caption=True)
                      for m in NUMERAL.finditer(caption)]
    return sorted(found, key=lambda n: n.line)


def _in_inline(token: Token) -> list[Numeral]:
    found, line = [], token.map[0] + 1
    for child in token.children or []:
        if child.type in _BREAKS:
            line += 1
        elif child.type == "text":
            found += [Numeral(line, m.group(), _around(child.content, m)) for m in NUMERAL.finditer(child.content)]
    return found


def _around(text: str, match: re.Match[str]) -> str:
    return text[max(0, match.start() - 30) : match.end() + 30].strip()


@dataclass(frozen=True)
class HiddenValue:
    line: int  # 1-based Markdown line of the value (a caption's: its block's fence)
    source: str  # the inline value or caption field as written
    name: str
    block_line: int  # the hidden block that computed it

    def __str__(self) -> str:
        return (f"{self.source!r} reads {self.name}, computed in the hidden block at line {self.block_line}: "
                "compute what the page states in a block the reader can see or open")


def hidden_values(text: str, path: str = "<page>") -> list[HiddenValue]:
    """Every inline value and caption field whose names were last bound, before it, by a
    computation in a hide-code block."""
    page = parse_page(text, path)
    uses = [(inline.line, inline.source, inline.expr) for inline in page.inlines]
    for block in page.blocks:
        for option in ("alt", "caption"):  # evaluated once the block has run: it counts as before them
            uses += [(block.start + 1.5, field[1:-1], field[1:-1].split(":")[0])
                     for field in _FIELD.findall(block.options.get(option, "")) if field not in ("{{", "}}")]
    found = []
    for line, source, expr in uses:
        for name in sorted(_names_read(expr)):
            last = None
            for block in page.blocks:
                if block.start + 1 < line and block.kind == "exec" and name in _bound(block.code):
                    last = block
            if last is not None and "hide-code" in last.options and _bound(last.code)[name] == "computed":
                found.append(HiddenValue(int(line), source, name, last.start + 1))
    return sorted(found, key=lambda v: v.line)


def _names_read(expr: str) -> set[str]:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:  # the run reports it
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _bound(code: str) -> dict[str, str]:
    """The names a block binds at its top level: "imported" or "computed" (the last binding wins)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}
    bound: dict[str, str] = {}

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update({(a.asname or a.name).split(".")[0]: "imported" for a in node.names})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = "computed"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound[node.id] = "computed"
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                 ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for child in ast.iter_child_nodes(node):
                visit(child)

    visit(tree)
    return bound
