"""The Caesar task for next-token models: what the causal mask is for, and what two heads do.

A sequence is a key k (a digit), n plaintext digits, a separator ":", and the same digits
shifted by k (mod 10), the ciphertext:

    3 | 1 4 1 5 9 2 6 5 | : | 4 7 4 8 2 5 9 8

A next-token model is trained on every position at once: position t predicts token t + 1 from
tokens 0..t. The plaintext is random, so no model can predict it better than chance (a loss of
ln 10 per digit); the separator and the ciphertext follow from what came before. The least
average loss a model that cannot see the future can reach is therefore n ln 10 / (2n + 1).

Without the causal mask, position t also sees token t + 1, the very token it must predict, and
copying it drives the training loss to zero. At generation time there is no token t + 1 yet,
so that model has learned nothing it can use. `generation` measures both sides: next-token
accuracy with the true sequence as input (teacher forcing), and the ciphertext the model writes
itself, token by token, from the key, the plaintext and the separator.

Each ciphertext token needs two things from the past, the key (position 0) and its plaintext
digit (n + 1 positions back), which makes it a small, readable case for two attention heads:
`head_roles` measures where each head's weight goes.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from joblib import Parallel, delayed
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.device import cpus, steady_cpu
from lessonlib.models.multihead import MultiHeadAttention
from lessonlib.models.transformer import TokenModel
from lessonlib.progress import progress as progress_bar

SEP = 10  # the separator ":"; tokens 0-9 are digits
VOCAB = 11
SYMBOLS = [str(d) for d in range(10)] + [":"]
Device = torch.device | str


@dataclass(frozen=True)
class CaesarProtocol:
    """The task's size, the model and its training: the same for the masked and unmasked model."""

    digits: int = 8  # plaintext length n; a sequence is 2n + 2 tokens
    d_model: int = 64
    heads: int = 2
    layers: int = 1
    batch: int = 64
    lr: float = 3e-3  # Adam
    steps: int = 800

    @property
    def length(self) -> int:
        return 2 * self.digits + 2


PROTOCOL = CaesarProtocol()


def make_batch(batch: int, generator: torch.Generator, digits: int = PROTOCOL.digits,
               device: Device = "cpu") -> Tensor:
    """(batch, 2 digits + 2) sequences: key, plaintext, separator, ciphertext. Drawn on the CPU, then moved."""
    key = torch.randint(0, 10, (batch, 1), generator=generator)
    plain = torch.randint(0, 10, (batch, digits), generator=generator)
    sep = torch.full((batch, 1), SEP)
    return torch.cat([key, plain, sep, (plain + key) % 10], dim=1).to(device)


def loss_floor(digits: int = PROTOCOL.digits) -> float:
    """The least mean loss without seeing the future: n unpredictable digits among 2n + 1 targets."""
    return digits * math.log(10) / (2 * digits + 1)


@dataclass
class Trained:
    model: TokenModel
    losses: list[float]  # the training loss at every step


def train(causal: bool, seed: int = 0, protocol: CaesarProtocol = PROTOCOL, device: Device = "cpu",
          progress: bool = True, attention: Callable[[MultiHeadAttention], nn.Module] | None = None) -> Trained:
    """Train a next-token model with or without the causal mask. The same seed gives the same
    initial weights and the same batches either way, so the mask is the only difference.
    attention(layer), if given, replaces each block's self-attention (the exercise plugs in the
    reader's functions, on the layer's weights)."""
    p, device = protocol, torch.device(device)
    model = initial_model(causal, seed, p)
    if attention is not None:
        for block in model.transformer.blocks:
            block.self_attn = attention(block.self_attn)
    model.to(device)
    data = torch.Generator().manual_seed(1_000 + seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    losses = []
    steps = progress_bar(range(p.steps), f"Caesar, {'with' if causal else 'without'} the mask", enabled=progress)
    with steady_cpu(device):
        for _ in steps:
            tokens = make_batch(p.batch, data, p.digits, device)
            logits, _ = model(tokens[:, :-1])  # (B, L-1, V): position t predicts token t + 1
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return Trained(model.eval(), losses)


def initial_model(causal: bool, seed: int = 0, protocol: CaesarProtocol = PROTOCOL) -> TokenModel:
    """The untrained model `train` starts from, drawn from `seed` on the CPU; the caller's random
    state is left alone."""
    p = protocol
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TokenModel(VOCAB, p.d_model, p.heads, p.layers, max_len=p.length, causal=causal)


def train_both(seed: int = 0, protocol: CaesarProtocol = PROTOCOL, device: Device = "cpu",
               workers: int | None = None) -> dict[str, Trained]:
    """{"masked": ..., "unmasked": ...}: train() with and without the mask. On a CPU the two run
    side by side in `workers` processes (default: one per core, at most two); the results do not
    depend on it."""
    device = torch.device(device)
    if workers is None:
        workers = 1 if device.type != "cpu" else min(2, cpus())
    runs = Parallel(n_jobs=workers)(
        delayed(_trained_weights)(causal, seed, protocol, str(device)) for causal in (True, False))
    trained = {}
    for name, causal, (weights, losses) in zip(("masked", "unmasked"), (True, False), runs):
        model = initial_model(causal, seed, protocol)
        model.load_state_dict(weights)
        trained[name] = Trained(model.to(device).eval(), losses)
    return trained


def _trained_weights(causal: bool, seed: int, protocol: CaesarProtocol, device: str) -> tuple[dict, list[float]]:
    """train()'s weights, on the CPU, and its losses: plain data, which crosses from a worker
    process (or a Dask cluster's worker) back to the caller, where a live model may not."""
    run = train(causal, seed, protocol, device, progress=False)
    return run.model.cpu().state_dict(), run.losses


def held_out(n: int, protocol: CaesarProtocol = PROTOCOL, device: Device = "cpu") -> Tensor:
    """n fixed sequences, the same for every model."""
    return make_batch(n, torch.Generator().manual_seed(12_345), protocol.digits, device)


@torch.no_grad()
def generation(model: TokenModel, n: int = 1000, protocol: CaesarProtocol = PROTOCOL) -> dict[str, float]:
    """Accuracy on the ciphertext of n held-out sequences, two ways.

    teacher_forced: the next-token prediction at each ciphertext position, given the true sequence.
    generated: the model writes the ciphertext itself from key, plaintext and separator, each
    token fed back; per token, and whole ciphertexts exactly right (exact).
    """
    device = next(model.parameters()).device
    tokens = held_out(n, protocol, device)
    start = protocol.digits + 2  # the first ciphertext position
    logits, _ = model(tokens[:, :-1])
    teacher_forced = (logits[:, start - 1:].argmax(-1) == tokens[:, start:]).float().mean().item()
    written = model.generate(tokens[:, :start], protocol.digits, use_cache=False)[:, start:]
    right = written == tokens[:, start:]
    return {"teacher_forced": teacher_forced, "generated": right.float().mean().item(),
            "exact": right.all(1).float().mean().item()}


@torch.no_grad()
def head_roles(model: TokenModel, n: int = 500, protocol: CaesarProtocol = PROTOCOL) -> dict[str, Tensor]:
    """Where each head's weight goes from the ciphertext positions, averaged over n sequences.

    The query at position digits + i (i = 1..digits) predicts the i-th ciphertext token, which
    needs the key (position 0) and the i-th plaintext digit (position i). Returns (heads,) tensors
    "key", "digit" and "other" (shares of each head's weight), and "split", the share of queries
    at which one head's strongest weight is on the key while the other's is on the digit.
    """
    if protocol.heads != 2:
        raise ValueError("head_roles compares two heads")
    device = next(model.parameters()).device
    tokens = held_out(n, protocol, device)
    _, weights = model(tokens[:, :-1], need_weights=True)
    w = weights[0]  # the first block: (n, heads, L-1, L-1)
    queries = torch.arange(protocol.digits + 1, 2 * protocol.digits + 1, device=device)
    digit = queries - protocol.digits  # the plaintext position each query needs
    on_key = w[:, :, queries, 0].mean((0, 2))  # (heads,)
    on_digit = w[:, :, queries, digit].mean((0, 2))
    peak = w[:, :, queries].argmax(-1)  # (n, heads, digits)
    split = ((peak[:, 0] == 0) & (peak[:, 1] == digit)) | ((peak[:, 1] == 0) & (peak[:, 0] == digit))
    return {"key": on_key.cpu(), "digit": on_digit.cpu(), "other": (1 - on_key - on_digit).cpu(),
            "split": split.float().mean().cpu()}
