"""Export a lesson page as a Jupyter notebook that reproduces it.

Prose becomes Markdown cells (inline values filled in as plain text), each ``python exec``
block a code cell with the page's output attached, and each ``>>>`` example of a ``pycon``
block a cell of its own, with its expected output. A first cell starts the kernel where every
page starts (seed 0 everywhere, the house figure style). Cells carry tags: ``timing`` for
measured timings, ``pycon`` for examples, ``setup`` for the first one.
"""
from __future__ import annotations

import ast
import doctest

import nbformat
from nbformat import v4

from lessonlib.engine.blocks import Block, ParsedPage
from lessonlib.engine.outputs import BlockOutput, PageOutputs
from lessonlib.engine.render import render_line

SETUP = """\
# Start where every page of the site starts: one torch thread, seed 0 in random, NumPy and torch,
# and the house figure style. Run the notebook from the lesson's folder: pages read files there.
from lessonlib.engine.session import start_page

start_page()"""


def to_notebook(page: ParsedPage, outputs: PageOutputs | None) -> nbformat.NotebookNode:
    """Inline values are filled in and block outputs attached when the page has run."""
    blocks_out, values = outputs if outputs else (None, None)
    cells = [_tagged(v4.new_code_cell(SETUP), "setup")]
    prose: list[str] = []
    line = 0

    def flush() -> None:
        text = "".join(prose).strip()
        if text:
            cells.append(v4.new_markdown_cell(text))
        prose.clear()

    for index, block in enumerate(page.blocks):
        prose.extend(render_line(page, i, values, escape=False) for i in range(line, block.start))
        flush()
        if block.kind == "pycon":
            cells.extend(_examples(block))
        else:
            cells.append(_code_cell(block, blocks_out[index] if blocks_out else None))
        line = block.end
    prose.extend(render_line(page, i, values, escape=False) for i in range(line, len(page.lines)))
    flush()
    for number, cell in enumerate(cells):
        cell.id = f"cell-{number}"  # nbformat's ids are random; the same page must export the same bytes
    notebook = v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def _code_cell(block: Block, output: BlockOutput | None) -> nbformat.NotebookNode:
    cell = v4.new_code_cell(_quiet(block.code.rstrip()))
    if output is not None:
        if output.text:
            cell.outputs.append(v4.new_output("stream", name="stdout", text=output.text))
        for figure in output.figures:
            cell.outputs.append(v4.new_output("display_data", data={"image/svg+xml": figure.svg, "text/plain": figure.alt}))
    return _tagged(cell, "timing") if "timing" in block.options else cell


def _examples(block: Block) -> list[nbformat.NotebookNode]:
    cells = []
    for example in doctest.DocTestParser().get_examples(block.code):
        cell = _tagged(v4.new_code_cell(example.source.rstrip()), "pycon")
        if example.want:
            cell.outputs.append(v4.new_output("execute_result", data={"text/plain": example.want.rstrip("\n")},
                                              execution_count=None))
        cells.append(cell)
    return cells


def _quiet(code: str) -> str:
    """A page shows what a block prints, not the value of its last line (a notebook would):
    end such a line with a semicolon, which silences it."""
    try:
        last = ast.parse(code).body[-1] if code.strip() else None
    except SyntaxError:
        return code
    if not isinstance(last, ast.Expr) or (isinstance(last.value, ast.Call) and _is_print(last.value)):
        return code
    lines = code.split("\n")
    row = lines[last.end_lineno - 1].encode()  # col offsets count bytes
    if row[last.end_col_offset:].lstrip().startswith(b";"):
        return code  # silenced already
    lines[last.end_lineno - 1] = (row[: last.end_col_offset] + b";" + row[last.end_col_offset:]).decode()
    return "\n".join(lines)


def _is_print(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "print"


def _tagged(cell: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    cell.metadata["tags"] = [tag]
    return cell
