"""The Caesar task: its data, its loss floor, and what the trained models' measurements mean."""
import dataclasses
import math

import torch

from lessonlib.experiments import caesar
from lessonlib.models.transformer import TokenModel


def test_batch_is_key_plaintext_separator_ciphertext(device):
    tokens = caesar.make_batch(256, torch.Generator().manual_seed(0), digits=5, device=device)
    assert tokens.shape == (256, 12) and tokens.device.type == device.type
    key, plain, sep, cipher = tokens[:, :1], tokens[:, 1:6], tokens[:, 6], tokens[:, 7:]
    assert (sep == caesar.SEP).all()
    assert torch.equal(cipher, (plain + key) % 10)
    assert set(key.flatten().tolist()) == set(range(10)) and set(plain.flatten().tolist()) == set(range(10))
    same = caesar.make_batch(256, torch.Generator().manual_seed(0), digits=5)
    assert torch.equal(tokens.cpu(), same), "drawn on the CPU: the same data on any device"


def test_loss_floor_is_the_unpredictable_share():
    assert math.isclose(caesar.loss_floor(8), 8 * math.log(10) / 17)
    # a model that is perfect except on the plaintext, where it spreads its bets evenly
    tokens = caesar.make_batch(50, torch.Generator().manual_seed(1))
    logits = torch.full((50, 17, caesar.VOCAB), -1e9)
    logits[:, :8, :10] = 0.0  # positions 0-7 predict plaintext digits 1-8: uniform over 10 digits
    targets = tokens[:, 1:]
    logits[:, 8:].scatter_(-1, targets[:, 8:, None], 0.0)  # separator and ciphertext: certain
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert math.isclose(loss.item(), caesar.loss_floor(), rel_tol=1e-6)


SMALL = dataclasses.replace(caesar.PROTOCOL, steps=3, d_model=16)


def test_train_differs_only_in_the_mask():
    untrained = [caesar.train(c, seed=3, protocol=dataclasses.replace(SMALL, steps=0), progress=False).model
                 for c in (True, False)]
    assert [m.transformer.causal for m in untrained] == [True, False]
    assert all(torch.equal(p, q) for p, q in zip(untrained[0].parameters(), untrained[1].parameters())), \
        "the same initial weights"
    a = caesar.train(True, seed=3, protocol=SMALL, progress=False)
    assert len(a.losses) == 3
    again = caesar.train(True, seed=3, protocol=SMALL, progress=False)
    assert again.losses == a.losses, "bit-identical on the CPU"
    other_seed = caesar.train(True, seed=4, protocol=SMALL, progress=False)
    assert other_seed.losses != a.losses


def test_train_both_is_train_twice():
    both = caesar.train_both(seed=3, protocol=SMALL, workers=1)
    assert both["masked"].losses == caesar.train(True, 3, SMALL, progress=False).losses
    assert both["unmasked"].losses == caesar.train(False, 3, SMALL, progress=False).losses


class Oracle(torch.nn.Module):
    """A fake model that attends as told and predicts `predict(tokens)`; for the measurement functions."""

    def __init__(self, predict, weights=None):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.predict, self.weights = predict, weights
        self.transformer = TokenModel(caesar.VOCAB, 8, 2).transformer

    def forward(self, tokens, need_weights=False, caches=None):
        logits = torch.nn.functional.one_hot(self.predict(tokens), caesar.VOCAB).float()
        return logits, ([self.weights(tokens)] if need_weights else [])

    generate = TokenModel.generate


def from_the_past(tokens):
    """What position p should predict, computed from tokens 0..p only: the ciphertext where it is
    determined (p > n), anything (0) elsewhere."""
    n = caesar.PROTOCOL.digits
    out = torch.zeros_like(tokens)
    for p in range(n + 1, tokens.shape[1]):
        out[:, p] = (tokens[:, p - n] + tokens[:, 0]) % 10
    return out


def test_generation_scores_a_perfect_and_a_copying_model():
    perfect = Oracle(from_the_past)
    score = caesar.generation(perfect, n=200)
    assert score == {"teacher_forced": 1.0, "generated": 1.0, "exact": 1.0}
    # a model that reads the next input (the leak): right when it is there, the key when it is not
    copying = Oracle(lambda t: torch.cat([t[:, 1:], t[:, :1]], dim=1))
    score = caesar.generation(copying, n=200)
    n = caesar.PROTOCOL.digits
    assert score["teacher_forced"] > (n - 1) / n  # every ciphertext token it can see; the last at chance
    assert score["exact"] < 0.2


def test_head_roles_reads_key_and_digit_shares():
    n, L = caesar.PROTOCOL.digits, caesar.PROTOCOL.length - 1

    def alternate(tokens):  # query q: head q % 2 on the key, the other head on the digit q - n
        w = torch.zeros(tokens.shape[0], 2, L, L)
        for q in range(n + 1, 2 * n + 1):
            w[:, q % 2, q, 0] = 1.0
            w[:, 1 - q % 2, q, q - n] = 1.0
        return w

    roles = caesar.head_roles(Oracle(lambda t: t, alternate), n=10)
    assert torch.equal(roles["key"], torch.tensor([0.5, 0.5])) and roles["split"] == 1.0
    assert torch.equal(roles["other"], torch.zeros(2))

    def both_on_key(tokens):
        w = torch.zeros(tokens.shape[0], 2, L, L)
        w[:, :, :, 0] = 1.0
        return w

    roles = caesar.head_roles(Oracle(lambda t: t, both_on_key), n=10)
    assert roles["split"] == 0.0 and torch.equal(roles["key"], torch.ones(2))
