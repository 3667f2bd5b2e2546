"""The contract of every exercise notebook (docs/lessons/exercise-*.ipynb, the table in
tests/exercise_notebooks.py), each executed as a reader would run it.

Published, a notebook is clean: no outputs, a stub in each cell the reader writes, its solution
collapsed below it. With the published solutions pasted into the reader's cells, it runs from top
to bottom in this venv's kernel and every checker passes; as published, it stops at its first
checker, which says the stub is still there; a part left as its stub, or with a listed mistake,
stops at the checker cell after it, which names the mistake. What each notebook shows besides
(its outcome, its checkers' messages) is tested in its own tests/test_exercise_*.py.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import nbformat
import notebook_cells
import pytest
from exercise_notebooks import EXERCISES, Exercise, Mistake, solved_run
from nbclient.exceptions import CellExecutionError
from notebook_cells import tagged, text

PARTS = [(e, tag) for e in EXERCISES.values() for tag in e.parts]
MISTAKES = [(e, m) for e in EXERCISES.values() for m in e.mistakes]


def tags(cell: nbformat.NotebookNode) -> list[str]:
    return cell.metadata.get("tags", [])


def is_checker(cell: nbformat.NotebookNode) -> bool:
    return any(t.startswith("check") for t in tags(cell))


def checker_after(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    """The first checker cell after the reader's cell tagged `tag`."""
    start = nb.cells.index(tagged(nb, tag))
    return next(c for c in nb.cells[start:] if is_checker(c))


def up_to_the_checker(exercise: Exercise, nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    """The cells a checker needs, up to the checker after the reader's cell `tag`: the set-up (the
    first code cell), then the reader's cells and their checkers, without the outcome checkers
    (tagged *-learned: they judge a training, which no other checker needs)."""
    checker = checker_after(nb, tag)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    cells = [setup]
    for cell in nb.cells[nb.cells.index(setup) + 1: nb.cells.index(checker) + 1]:
        if set(tags(cell)) & set(exercise.parts) or (is_checker(cell) and not any(
                t.endswith("-learned") for t in tags(cell))):
            cells.append(cell)
    nb.cells = cells
    return nb


def stopped_at(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The cells that raised."""
    return [c for c in nb.cells if any(o.output_type == "error" for o in c.get("outputs", []))]


@pytest.fixture(scope="module")
def kernel() -> Iterator[Callable[[Exercise, nbformat.NotebookNode], None]]:
    """One kernel per notebook for its runs that stop at a checker: each run executes its cells from
    the notebook's set-up on."""
    with ExitStack() as stack:
        runs: dict[str, Callable[[nbformat.NotebookNode], None]] = {}

        def run(exercise: Exercise, nb: nbformat.NotebookNode) -> None:
            if exercise.name not in runs:
                runs[exercise.name] = stack.enter_context(notebook_cells.kernel(exercise.path.parent, exercise.timeout))
            runs[exercise.name](nb)

        yield run


def assert_stops(exercise: Exercise, kernel, nb: nbformat.NotebookNode, checker: nbformat.NotebookNode,
                 message: str) -> None:
    with pytest.raises(CellExecutionError) as info:
        kernel(exercise, nb)
    assert info.value.ename == exercise.error, str(info.value)
    assert message in str(info.value)
    raised = stopped_at(nb)
    assert len(raised) == 1 and raised[0] is checker, "the notebook must stop at the checker after the reader's cell"


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES)
def test_the_notebook_is_published_clean(exercise):
    """No stored outputs (the reader runs it), a stub in each reader's cell and a checker after it,
    each solution only collapsed, the standard kernel."""
    nb = notebook_cells.load(exercise.path)
    notebook_cells.assert_published_clean(nb, list(exercise.parts))
    prose = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for tag, summary in exercise.parts.items():
        assert f"<details><summary>{summary}</summary>" in prose, summary
        checker_after(nb, tag)


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES)
def test_the_solved_notebook_runs_top_to_bottom_and_passes_every_checker(exercise, exercise_memo, tmp_path_factory):
    nb = solved_run(exercise, tmp_path_factory)
    assert text(nb.cells[0]).strip() == sys.executable, "the kernel must be this venv's python"
    checkers = [c for c in nb.cells if is_checker(c)]
    assert checkers
    for cell in checkers:
        assert text(cell).startswith("✓"), (tags(cell), text(cell))
    report = "".join(text(c) for c in nb.cells)
    assert "✗" not in report, report


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES)
def test_the_published_notebook_stops_at_its_first_checker(exercise, kernel):
    nb = notebook_cells.load(exercise.path)
    first = next(c for c in nb.cells if is_checker(c))
    assert_stops(exercise, kernel, nb, first, exercise.unsolved)


@pytest.mark.parametrize("exercise, tag", PARTS, ids=[f"{e.name}-{tag}" for e, tag in PARTS])
def test_a_part_left_unsolved_stops_at_its_checker(exercise, tag, kernel):
    nb = exercise.solved()
    tagged(nb, tag).source = tagged(notebook_cells.load(exercise.path), tag).source  # the published stub
    nb = up_to_the_checker(exercise, nb, tag)
    assert_stops(exercise, kernel, nb, checker_after(nb, tag), "still the stub")


@pytest.mark.parametrize("exercise, mistake", MISTAKES, ids=[f"{e.name}-{m.message}" for e, m in MISTAKES])
def test_a_listed_mistake_stops_at_its_checker_and_names_it(exercise, mistake: Mistake, kernel):
    nb = up_to_the_checker(exercise, exercise.solved({mistake.tag: (mistake.old, mistake.new)}), mistake.tag)
    assert_stops(exercise, kernel, nb, checker_after(nb, mistake.tag), mistake.message)
