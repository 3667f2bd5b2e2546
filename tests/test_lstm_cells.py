"""Finding the LSTM cell that tracks a named feature of the text (lessonlib.experiments.lstm_cells)."""
from __future__ import annotations

import torch

from lessonlib.experiments import lstm_cells
from lessonlib.models.char_rnn import CharRNN


def test_the_features_of_a_play_are_counted_per_character():
    named = lstm_cells.features("DUNCAN.\nSo well.\n")
    assert named["position in the line"].tolist() == [1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]
    assert named["the first character of a line"].tolist() == [1] + [0] * 7 + [1] + [0] * 8
    assert named["in a line of capitals"].tolist() == [1] * 7 + [0] * 10


def test_cell_values_are_the_lstms_own_cell_state_after_each_character():
    torch.manual_seed(0)
    model = CharRNN("lstm", vocab=5, embedding=3, hidden=4).eval()
    tokens = torch.tensor([0, 3, 1, 4, 2])
    values = lstm_cells.cell_values(model, tokens)
    for t in range(1, len(tokens) + 1):
        _, (_, c) = model(tokens[:t].view(1, -1))
        torch.testing.assert_close(values[t - 1], torch.tanh(c[0, 0]))


def test_the_best_cell_is_the_one_that_follows_a_feature_either_way():
    line = torch.tensor([1.0, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0])
    noise = torch.tensor([0.3, -0.1, 0.2, 0.1, -0.2, 0.4, 0.0, -0.3, 0.1, 0.2, -0.1, 0.3])
    values = torch.stack([noise, -0.2 * line + 0.01 * noise, noise.flip(0)], dim=1)  # cell 1 follows it, negated
    named = {"start": (line == 1).double(), "position in the line": line.double()}
    found = lstm_cells.best_cell(values, named)
    assert (found.cell, found.feature) == (1, "position in the line") and found.r < -0.99
    still = torch.zeros(12, 1)
    assert lstm_cells.correlations(still, named).tolist() == [[0.0], [0.0]]
