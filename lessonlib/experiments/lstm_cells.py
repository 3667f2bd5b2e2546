"""Which of an LSTM's cells tracks something a reader can name? Karpathy's char-rnn post found
cells that switch on inside quotes or count along the line. Here each cell's value, tanh(c),
is read at every character of a held-out text and correlated with named features of that text;
the cell with the strongest correlation, either sign, is the one to look at.

    text (T characters) -> features: {name: (T,)}     cell values (T, H) -> correlations (F, H)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lessonlib.models.char_rnn import CharRNN


def features(text: str) -> dict[str, Tensor]:
    """Per character, after reading it: how far along its line it is, whether it starts a line,
    and whether it is in a line of capitals (in a play: mostly a speaker's name, such as "DUNCAN.",
    and the headings, "ACT I.")."""
    position, name, along = [], [], 0
    lines = text.split("\n")
    for n, line in enumerate(lines):
        speaker = line.isupper() and line.rstrip(".").replace(" ", "").isalpha()
        for ch in line + ("\n" if n < len(lines) - 1 else ""):
            along = 0 if ch == "\n" else along + 1
            position.append(along)
            name.append(speaker and ch != "\n")
    starts = [p == 1 for p in position]
    return {"position in the line": torch.tensor(position, dtype=torch.float64),
            "the first character of a line": torch.tensor(starts, dtype=torch.float64),
            "in a line of capitals": torch.tensor(name, dtype=torch.float64)}


@torch.no_grad()
def cell_values(model: CharRNN, tokens: Tensor) -> Tensor:
    """tokens (T,) -> tanh(c) (T, H): the LSTM's cell state after each character, read one at a time."""
    state, values = None, []
    for token in tokens:
        _, state = model(token.view(1, 1), state)  # state: h, c (1, 1, H)
        values.append(torch.tanh(state[1][0, 0]))
    return torch.stack(values)


def correlations(values: Tensor, named: dict[str, Tensor]) -> Tensor:
    """Pearson's r of every feature (F) with every cell (H): (F, H); 0 where a cell never moves."""
    v = values.double() - values.double().mean(0)
    f = torch.stack(list(named.values())) - torch.stack(list(named.values())).mean(1, keepdim=True)
    scale = torch.outer(f.norm(dim=1), v.norm(dim=0))
    return torch.where(scale > 0, f @ v / scale.clamp_min(1e-300), torch.zeros_like(scale))


@dataclass(frozen=True)
class NamedCell:
    cell: int
    feature: str
    r: float  # its correlation with the feature, on the held-out text


def best_cell(values: Tensor, named: dict[str, Tensor]) -> NamedCell:
    """The cell and feature with the largest |r|."""
    r = correlations(values, named)
    f, h = divmod(int(r.abs().argmax()), r.shape[1])
    return NamedCell(h, list(named)[f], float(r[f, h]))
