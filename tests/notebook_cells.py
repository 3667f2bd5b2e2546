"""Reading and running the course's notebooks in tests: cells by tag, the collapsed solutions,
a fresh kernel of this venv, and what a cell printed."""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def load(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def tagged(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"expected exactly one cell tagged {tag!r}, found {len(cells)}"
    return cells[0]


def assert_published_clean(nb: nbformat.NotebookNode, stub_tags: list[str]) -> None:
    """As a reader downloads it: no outputs, a stub in every cell the reader writes, the
    standard kernel."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "clear the notebook's outputs"
    for tag in stub_tags:
        assert "raise NotImplementedError" in tagged(nb, tag).source
    assert nb.metadata.kernelspec.name == "python3"


def solution_code(nb: nbformat.NotebookNode, summary: str = "Solution") -> str:
    """The code in the notebook's collapsed <details><summary>{summary}</summary> block."""
    marker = f"<summary>{summary}</summary>"
    for cell in nb.cells:
        if cell.cell_type == "markdown" and marker in cell.source:
            match = re.search(r"```python\n(.*?)```", cell.source.split(marker, 1)[1], re.S)
            assert match, f"the {summary} block has no ```python fence"
            return match.group(1)
    raise AssertionError(f"the notebook has no {marker} block")


def solved(path: Path, parts: dict[str, str], replace: dict[str, tuple[str, str]] | None = None
           ) -> nbformat.NotebookNode:
    """The notebook with each cell tagged in `parts` filled with the code of its collapsed solution,
    `parts` giving the solution's <summary>; `replace` edits one part's solution: {tag: (old, new)}."""
    nb = load(path)
    for tag, summary in parts.items():
        code = solution_code(nb, summary)
        if replace and tag in replace:
            old, new = replace[tag]
            assert old in code, f"{old!r} is not in the {summary}"
            code = code.replace(old, new)
        tagged(nb, tag).source = code
    return nb


def _client(nb: nbformat.NotebookNode, folder: Path, timeout: int) -> NotebookClient:
    """A client of a fresh kernel started in `folder`. Kernel "python3" is ipykernel's own spec,
    whose argv "python" jupyter_client replaces by sys.executable: this venv's interpreter. The
    kernel is killed once its outputs are read: asked to exit, it took a second or more on a busy
    machine."""
    return NotebookClient(nb, timeout=timeout, kernel_name="python3", shutdown_kernel="immediate",
                          resources={"metadata": {"path": str(folder)}})


@contextmanager
def _own_temp() -> Iterator[dict[str, str]]:
    """The environment for a kernel that is killed: what it would remove at exit (the folder of
    a memoized call that ran, lessonlib-reads-*) goes to a temporary folder of its own, removed
    here once the kernel is gone (in /tmp: a Unix socket's path in it has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kernel-") as temp:
        yield {**os.environ, "TMPDIR": temp}


def execute(nb: nbformat.NotebookNode, folder: Path, timeout: int = 300) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel started in `folder`."""
    with _own_temp() as env:
        _client(nb, folder, timeout).execute(env=env)
    return nb


@contextmanager
def kernel(folder: Path, timeout: int = 300) -> Iterator[Callable[[nbformat.NotebookNode], None]]:
    """One fresh kernel for many runs: run(nb) executes nb's code cells in order in it and raises
    CellExecutionError at the first that fails, as `execute` does. The runs share the kernel's
    state, so each must define what it uses (a whole notebook from its first cell does); it saves
    a kernel's start and its imports per run."""
    client = _client(nbformat.v4.new_notebook(), folder, timeout)

    def run(nb: nbformat.NotebookNode) -> None:
        client.nb = nb  # where execute_cell stores each executed cell
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)

    with _own_temp() as env, client.setup_kernel(env=env):
        yield run


def printed(cell: nbformat.NotebookNode) -> str:
    """What the cell printed (stdout and stderr, in order)."""
    return "".join(o.text for o in cell.get("outputs", []) if o.output_type == "stream")


def text(cell: nbformat.NotebookNode) -> str:
    """What the cell printed and the text of what it displayed."""
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            out.append(o.data.get("text/plain", ""))
    return "".join(out)
