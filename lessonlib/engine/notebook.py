"""Export a lesson page as a Jupyter notebook that reproduces it.

Prose becomes Markdown cells (inline values filled in as plain text), each ``python exec``
block a code cell with the page's output attached, and each ``>>>`` example of a ``pycon``
block a cell of its own, with its expected output. A first cell starts the kernel where every
page starts (seed 0 everywhere, the house figure style). Cells carry tags: ``timing`` for
measured timings, ``check`` for the asserts that back the prose (their source folded),
``pycon`` for examples, ``setup`` for the first one.
"""
from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from nbformat import NotebookNode, from_dict, v4

from lessonlib.engine.blocks import Block, ParsedPage
from lessonlib.engine.cache import (
    cache_errors,
    path_name,
    source_fingerprint,
    write_atomically,
)
from lessonlib.engine.outputs import BlockOutput, PageOutputs
from lessonlib.engine.render import DATA_TITLE, markdown_table, render_line

OWN_CODE = ("notebook", "render", "blocks")  # the engine modules a notebook's text comes from
SETUP = """\
# Start where every page of the site starts: one torch thread, seed 0 in random, NumPy and torch,
# and the house figure style. Run the notebook from the lesson's folder: pages read files there.
from lessonlib.engine.session import start_page

start_page()"""


def notebook_text(page: ParsedPage, outputs: PageOutputs, key: str, store: Path | None) -> str:
    """The page's notebook as written to disk. Building it is most of a warm build's own work,
    so with a `store` folder the text written last time for this page is reused while its cache
    key (code, versions), the code that exports it, its text and its outputs are the same. One
    file per page, replaced when anything changes. Not validated here (v4.writes, not nbformat.writes): the
    schema alone took longer to load than the notebook to build, and nbformat.writes only logs
    what it finds; the tests validate every exported notebook."""
    if store is None:
        return v4.writes(to_notebook(page, outputs))
    facts = [key, source_fingerprint(*OWN_CODE), "".join(page.lines), asdict(outputs)]
    version = hashlib.sha256(json.dumps(facts).encode()).hexdigest()
    path = store / f"{path_name(page.path)}.ipynb"
    try:
        head, text = path.read_text(encoding="utf-8").split("\n", 1)  # first line: the version, the text's hash
        if head == f"{version} {_digest(text)}":  # a cut-short or damaged text is made again
            return text
    except (OSError, ValueError):
        pass
    text = v4.writes(to_notebook(page, outputs))
    with cache_errors(store):
        write_atomically(path, f"{version} {_digest(text)}\n{text}")
    return text


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def to_notebook(page: ParsedPage, outputs: PageOutputs | None) -> NotebookNode:
    """Inline values are filled in and block outputs attached when the page has run."""
    blocks_out, values = (outputs.blocks, outputs.values) if outputs else (None, None)
    cells = [_code(SETUP, "setup")]
    prose: list[str] = []
    line = 0

    def flush() -> None:
        text = "".join(prose).strip()
        if text:
            cells.append(from_dict({"cell_type": "markdown", "metadata": {}, "source": text}))
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
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return from_dict({"nbformat": v4.nbformat, "nbformat_minor": v4.nbformat_minor,
                      "metadata": {"kernelspec": kernel}, "cells": cells})


def _code(source: str, tag: str | None = None, outputs: tuple[dict, ...] = ()) -> NotebookNode:
    """A code cell, built as plain data: nbformat's new_code_cell validates every cell, which
    costs more than the rest of the export."""
    metadata = {"tags": [tag]} if tag else {}
    if tag == "check":  # the page's evidence: there to run and read, folded away in Jupyter
        metadata["jupyter"] = {"source_hidden": True}
    return from_dict({"cell_type": "code", "execution_count": None, "metadata": metadata,
                      "source": source, "outputs": list(outputs)})


def _code_cell(block: Block, output: BlockOutput | None) -> NotebookNode:
    outputs = []
    if output is not None:
        if output.text:
            outputs.append({"output_type": "stream", "name": "stdout", "text": output.text})
        outputs += [{"output_type": "display_data", "metadata": {},
                     "data": {"image/svg+xml": figure.svg, "text/plain": figure.alt}} for figure in output.figures]
        outputs += [{"output_type": "display_data", "metadata": {},
                     "data": {"text/markdown": markdown_table(table),
                              "text/plain": DATA_TITLE}} for table in output.tables]
    tag = "check" if block.check else "timing" if "timing" in block.options else None
    return _code(_quiet(block.code.rstrip()), tag, tuple(outputs))


def _examples(block: Block) -> list[NotebookNode]:
    import doctest  # here: a warm build reuses its notebooks and need not load it

    cells = []
    for example in doctest.DocTestParser().get_examples(block.code):
        want = example.want.rstrip("\n")
        result = {"output_type": "execute_result", "execution_count": None, "metadata": {},
                  "data": {"text/plain": want}}
        cells.append(_code(example.source.rstrip(), "pycon", (result,) if example.want else ()))
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

