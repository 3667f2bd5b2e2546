"""Export a lesson page as a Jupyter notebook: prose as Markdown cells, code as code cells."""
from __future__ import annotations

import doctest

import nbformat
from nbformat import v4

from lessonlib.engine.blocks import ParsedPage
from lessonlib.engine.cache import PageOutputs
from lessonlib.engine.render import render_line


def to_notebook(page: ParsedPage, outputs: PageOutputs | None) -> nbformat.NotebookNode:
    """Inline values are filled in and block outputs attached when the page has run."""
    blocks_out, values = outputs if outputs else (None, None)
    cells, prose, line = [], [], 0

    def flush() -> None:
        text = "".join(prose).strip()
        if text:
            cells.append(v4.new_markdown_cell(text))
        prose.clear()

    for index, block in enumerate(page.blocks):
        prose += [render_line(page, i, values) for i in range(line, block.start)]
        flush()
        if block.kind == "pycon":
            examples = doctest.DocTestParser().get_examples(block.code)
            cells.append(v4.new_code_cell("".join(e.source for e in examples).rstrip()))
        else:
            cell = v4.new_code_cell(block.code.rstrip())
            if blocks_out:
                cell.outputs = _outputs(blocks_out[index])
            cells.append(cell)
        line = block.end
    prose += [render_line(page, i, values) for i in range(line, len(page.lines))]
    flush()
    for number, cell in enumerate(cells):
        cell.id = f"cell-{number}"  # nbformat's ids are random; the same page must export the same bytes
    notebook = v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def _outputs(output) -> list:
    result = []
    if output.text:
        result.append(v4.new_output("stream", name="stdout", text=output.text))
    for figure in output.figures:
        result.append(v4.new_output("display_data", data={"image/svg+xml": figure.svg, "text/plain": figure.alt}))
    return result
