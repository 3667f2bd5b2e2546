"""The course's exercise notebooks as one table, for the contract every exercise keeps
(tests/test_exercise_notebooks.py) and for each notebook's own tests (tests/test_exercise_*.py):
where it is, which cells the reader writes and the solution of each, what its checkers raise,
and the listed mistakes, each with what its checker must say.

`solved_run` runs a notebook with its solutions once per test session, for every test that reads
what the solved notebook printed.
"""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import nbformat
import notebook_cells
import pytest

LESSONS = Path(__file__).resolve().parents[1] / "docs" / "lessons"


@dataclass(frozen=True)
class Mistake:
    """A slip made in the published solution of the cell tagged `tag` (the text `old` becomes
    `new`): the checker cell after that cell must stop the notebook and say `message`."""

    tag: str
    old: str
    new: str
    message: str


@dataclass(frozen=True)
class Exercise:
    name: str
    path: Path
    parts: dict[str, str]  # the tag of each cell the reader writes -> the <summary> of its collapsed solution
    error: str  # the exception the checkers raise
    unsolved: str  # what the first checker says of the notebook as published
    mistakes: tuple[Mistake, ...]
    timeout: int = 300  # seconds a cell may take

    def solved(self, replace: dict[str, tuple[str, str]] | None = None) -> nbformat.NotebookNode:
        """The notebook with each reader's cell holding its published solution."""
        return notebook_cells.solved(self.path, self.parts, replace)


RNN_CELL = "torch.tanh(x @ W_x.T + h @ W_h.T + b)"

EXERCISES = {e.name: e for e in [
    Exercise(
        "rnn", LESSONS / "exercise-rnn.ipynb",
        {"exercise-cell": "Solution: rnn_cell", "exercise-forward": "Solution: rnn_forward",
         "exercise-train": "Solution: train", "exercise-open-forget": "Solution: open_forget_gate"},
        "RNNCheckError", "rnn_cell() is still the stub", (
            Mistake("exercise-cell", RNN_CELL, "torch.tanh(x @ W_x + h @ W_h + b)", "both weights need a transpose"),
            Mistake("exercise-cell", RNN_CELL, "(x @ W_x.T + h @ W_h.T + b)", "the tanh is missing"),
            Mistake("exercise-cell", RNN_CELL, "torch.sigmoid(x @ W_x.T + h @ W_h.T + b)", "a sigmoid"),
            Mistake("exercise-cell", RNN_CELL, "torch.tanh(x @ W_x.T + h @ W_h.T)", "the bias is missing"),
            Mistake("exercise-cell", RNN_CELL, "torch.tanh(x @ W_x.T + b)", "the old state is not used"),
            Mistake("exercise-forward", "    for t in range(L):\n",
                    "    for t in range(L):\n        h = xs.new_zeros(B, W_h.shape[0])\n", "not carried between steps"),
            Mistake("exercise-forward",
                    "    for t in range(L):\n        h = rnn_cell(xs[:, t], h, W_x, W_h, b)  # (B, H): carried to the next step\n",
                    "    states = []\n    for t in range(L):\n        h = rnn_cell(xs[:, t], h, W_x, W_h, b)\n"
                    "        states.append(h)\n    h = states[0]\n", "the first state is read out"),
            Mistake("exercise-train", "        optimizer.zero_grad()\n", "", "the gradients accumulate"),
            Mistake("exercise-train", "        loss.backward()\n", "", "loss.backward() is missing"),
            Mistake("exercise-train", "        optimizer.step()\n", "", "optimizer.step() is missing"),
            Mistake("exercise-open-forget", "[H : 2 * H]", "[0:H]", "the bias of the input gate changed"),
            Mistake("exercise-open-forget", "    with torch.no_grad():\n        lstm", "    if True:\n        lstm",
                    "inside the `with torch.no_grad():` block"),
        ), timeout=600),
    Exercise(
        "attention", LESSONS / "exercise-attention.ipynb",
        {"exercise": "Solution", "exercise-mask": "Solution, part 2"},
        "AttentionCheckError", "still the stub", (
            Mistake("exercise", "softmax(dim=-1)", "softmax(dim=1)", "softmax with dim=-1"),
            Mistake("exercise-mask",
                    '    if mask is not None:\n'
                    '        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))     # padding: exp(-inf) = 0\n'
                    '    weights = scores.softmax(dim=-1)',
                    '    weights = scores.softmax(dim=-1)\n'
                    '    if mask is not None:\n'
                    '        weights = weights * mask[:, None, :]  # the slip: masked after the softmax\n'
                    '    weights = weights', "after the softmax"),
        )),
    Exercise(
        "transformer", LESSONS / "exercise-transformer.ipynb",
        {"exercise-mask": "Solution: causal_mask", "exercise-attention": "Solution: masked_attention",
         "exercise-heads": "Solution: split_heads and merge_heads"},
        "AttentionCheckError", "causal_mask() is still the stub", (
            Mistake("exercise-mask", ".tril()", ".tril(-1)", "hides the diagonal"),
            Mistake("exercise-attention",
                    '    scores = scores.masked_fill(~mask, float("-inf"))       # hidden keys: exp(-inf) = 0\n'
                    '    weights = scores.softmax(dim=-1)                        # over the keys',
                    '    weights = scores.softmax(dim=-1) * mask', "after the softmax"),
            Mistake("exercise-heads", "x.transpose(1, 2).reshape", "x.permute(0, 2, 3, 1).reshape",
                    "merge_heads is transposed"),
        )),
    Exercise(
        "language-model", LESSONS / "exercise-language-model.ipynb",
        {"exercise-sample": "Solution: sample", "exercise-train-chunk": "Solution: train_chunk"},
        "LanguageModelCheckError", "sample() is still the stub", (
            Mistake("exercise-sample", "logits = logits / temperature", "logits = logits * temperature",
                    "works backwards"),
            Mistake("exercise-sample", "logits < kth", "logits <= kth", "off-by-one"),
            Mistake("exercise-train-chunk",
                    "state = tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()",
                    "state = state", "still attached"),
        ), timeout=600),
    Exercise(
        "scan", LESSONS / "exercise-scan.ipynb",
        {"exercise-combine": "Solution: combine", "exercise-scan": "Solution: scan"},
        "ScanCheckError", "combine() is still the stub", (
            Mistake("exercise-combine", "A2 * B1 + B2", "A1 * B2 + B1", "wrong order"),
            Mistake("exercise-scan", "a[:, :1] * h0.unsqueeze(1) + b[:, :1]", "b[:, :1]", "h0 is ignored"),
            Mistake("exercise-scan", "while d < a.shape[1]:", "while 2 * d < a.shape[1]:", "one round short"),
        )),
    Exercise(
        "delta-rule", LESSONS / "exercise-delta-rule.ipynb",
        {"exercise-read": "Solution: read", "exercise-step": "Solution: delta_step"},
        "DeltaRuleCheckError", "read() is still the stub", (
            Mistake("exercise-read", 'torch.einsum("bkv,bk->bv", S, q)', "(S @ q[:, :, None]).squeeze(-1)",
                    "S q where it needs Sᵀq"),
            Mistake("exercise-step", "(v - old)", "(v + old)", "the correction has the wrong sign"),
            Mistake("exercise-step", "beta[:, None] * (v - old)", "beta[:, None] * v - old", "beta multiplies v only"),
            Mistake("exercise-step", "beta[:, None] * (v - old)", "v - beta[:, None] * old", "beta multiplies Sᵀk only"),
            Mistake("exercise-step", "k = k / k.norm(dim=-1, keepdim=True)", "k = k", "k is not normalised"),
            Mistake("exercise-step", "read(S, k)", "(S @ k[:, :, None]).squeeze(-1)", "S k where it needs Sᵀk"),
            Mistake("exercise-step", "beta[:, None] * (v - old)", "beta[:, None] * v", "linear attention's write"),
        )),
]}


def solved_run(exercise: Exercise, tmp_path_factory: pytest.TempPathFactory) -> nbformat.NotebookNode:
    """The notebook with its solutions, run from top to bottom in a fresh kernel of this venv, once
    per test session: the first test to ask runs it, under a lock that the other pytest-xdist
    workers share, and keeps it for the others. Its first cell, added, prints the kernel's Python.
    The kernel inherits this process's environment: ask for the `exercise_memo` fixture first, so
    that the trainings come from the suite's memo store. A run that fails is not kept."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    kept = root / f"solved-{exercise.name}.ipynb"
    with open(root / f"solved-{exercise.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.exists():
            nb = exercise.solved()
            nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
            notebook_cells.execute(nb, exercise.path.parent, timeout=exercise.timeout)
            nbformat.write(nb, kept)
    return nbformat.read(kept, as_version=4)
