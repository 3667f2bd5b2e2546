"""The memory task: remember the first token of a sequence until its end.

A sequence of `length` tokens starts with a clue, token 0 or 1, which is also the label; the
other length - 1 tokens are noise, drawn uniformly from the tokens 2..vocab-1. The model
embeds the tokens, runs a sequence layer over them (a recurrent layer, a causal transformer
layer for lesson 3, or a linear recurrence of RECURRENCE) and classifies the representation
of the last position, so the only way to beat chance (0.5) is to carry the clue across every noise step. Which models
learn it at which lengths is the gradient-reach picture (lessonlib.experiments.gradient_reach) put to work.

One protocol (MemoryProtocol) trains every model at every length and seed; nothing is tuned
per model. Why these settings (all measured with vocabulary 10, embedding 16, hidden 32):

- Adam at lr 1e-3. This is the setting that matters. At lr 3e-3 the open-gate LSTM at length
  100 stayed at chance for 2,000 steps on seed 0 (seeds 1 and 2 solved); at 1e-3 it solved
  every seed we tried (0-9) within 100 steps.
- Noise never uses the clue tokens, so a later 0 or 1 cannot pass for the clue and distance
  is the only difficulty. It also makes learning quicker: with noise from all ten tokens the
  open-gate LSTM at length 100 needed 160-270 steps (seeds 0-2) instead of 30-100.
- The gradient norm clipped to 1, the usual guard for recurrent nets. It never decided an
  outcome in our runs: without it the same runs solved or failed, at about the same step
  (seeds 0-2, lengths 10 and 100).
- 600 steps of batch 64. Over seeds 0-9, every run that solved did so within 230 steps (the
  open-gate LSTM within 100); the runs that failed (the RNN and the default LSTM from length
  30 on) were still at chance after 3,000 steps (seeds 0-2): the pattern is not the budget's.
- A run stops once it has solved the task: every 10 steps, if the whole training batch was
  classified correctly, the model is validated on the 1,000 held-out sequences, and accuracy
  >= 0.99 ends the run. The same rule for every model; it only skips steps of a run that has
  already succeeded, and the training batch makes the check nearly free.

Seeds: `seed` fixes the initial weights and the training batches; the validation set depends
only on the length, so every model is judged on the same sequences. All draws happen on the
CPU and are moved to the device, so a seed means the same model and data on any device, and
a CPU run gives bit-identical results every time.

Speed (the sweep is the longest part of the site's build): runs stop when solved; the three
RNN or GRU seeds of a length train together in one hand-written batched loop
(lessonlib.models.batched_rnn), which on a CPU is faster than nn.RNN and nn.GRU; the
transformer, linear attention and minGRU compute only the last position, the one classified
(`last=1`), which spares linear attention its (L, L) scores and minGRU its cumulative scan (a
training step took 2.7x less time for minGRU at length 100, 8x less for linear attention at 300,
1 thread); on a CPU the runs are spread over one single-threaded process per core.
scripts/bench_memory_task.py measures the batching and the processes against a plain loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from joblib import Parallel, delayed
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.device import cpus, steady_cpu
from lessonlib.models.batched_rnn import BatchedRNNClassifier
from lessonlib.models.gated_linear_attention import GatedLinearAttention
from lessonlib.models.gru import open_update_gate
from lessonlib.models.linear_attention import LinearAttention
from lessonlib.models.lstm import open_forget_gate
from lessonlib.models.min_gru import MinGRU
from lessonlib.models.selective_ssm import SelectiveSSM
from lessonlib.models.transformer import Transformer
from lessonlib.progress import progress as progress_bar

MODELS = ("rnn", "lstm", "lstm_open")  # the lesson's main sweep; the GRUs are built too
# the layers of the recurrence lesson (lessonlib.models.scan and the models built on it), decay open
RECURRENCE = ("min_gru", "linear_attention", "gla", "selective_ssm")
CLOSED = ("min_gru_closed",)  # the control: minGRU with its decay starting closed, all else the same
KNOWN = (*MODELS, "gru", "gru_open", "transformer", *RECURRENCE, *CLOSED)
LENGTHS = (10, 30, 50, 100)
SEEDS = (0, 1, 2)
BATCHED = ("rnn", "gru", "gru_open")  # a length's seeds train together in one batched loop
CLUES = 2  # tokens 0 and 1 are the clues (and the labels); the rest of the vocabulary is noise
Device = torch.device | str


@dataclass(frozen=True)
class MemoryProtocol:
    """Everything a training run depends on besides the model name, the length and the seed."""

    vocab: int = 10  # 2 clue tokens + 8 noise tokens
    embedding: int = 16
    hidden: int = 32
    batch: int = 64
    lr: float = 1e-3  # Adam
    clip: float = 1.0  # max gradient norm (math.inf: no clipping)
    steps: int = 600  # the full budget; a run that solves the task stops earlier
    val_size: int = 1000
    check_every: int = 10  # steps between looks at the training-batch accuracy
    solved: float = 0.99  # validation accuracy that counts as solved, and stops the run


PROTOCOL = MemoryProtocol()


class Run(NamedTuple):
    accuracy: float  # on the validation set, at the end of the run
    steps: int  # steps trained: the budget, or fewer if the task was solved


def make_batch(
    batch: int, length: int, generator: torch.Generator, device: Device, vocab: int = PROTOCOL.vocab
) -> tuple[Tensor, Tensor]:
    """tokens (batch, length) and labels (batch,): the label is the first token, 0 or 1, and
    every later token is noise from 2..vocab-1. Drawn on the generator's device, then moved."""
    labels = torch.randint(0, CLUES, (batch,), generator=generator, device=generator.device)
    tokens = torch.randint(CLUES, vocab, (batch, length), generator=generator, device=generator.device)
    tokens[:, 0] = labels
    return tokens.to(device), labels.to(device)


class MemoryModel(nn.Module):
    """Embedding -> one recurrent layer -> linear classifier on the final hidden state."""

    def __init__(self, model_name: str, protocol: MemoryProtocol = PROTOCOL) -> None:
        super().__init__()
        p = protocol
        self.embed = nn.Embedding(p.vocab, p.embedding)
        if model_name == "rnn":
            self.rnn = nn.RNN(p.embedding, p.hidden, batch_first=True)
        elif model_name in ("gru", "gru_open"):
            self.rnn = nn.GRU(p.embedding, p.hidden, batch_first=True)
            if model_name == "gru_open":
                open_update_gate(self.rnn, 1.5)  # both biases: the update gate starts near sigmoid(3), keep
        elif model_name in ("lstm", "lstm_open"):
            self.rnn = nn.LSTM(p.embedding, p.hidden, batch_first=True)
            if model_name == "lstm_open":
                open_forget_gate(self.rnn, 1.5)  # both biases: the forget gate starts near sigmoid(3)
        elif model_name in (*RECURRENCE, *CLOSED):
            self.rnn = recurrence_layer(model_name, p.embedding, p.hidden)
        elif model_name == "transformer":
            # not recurrent, but it fills the same slot: (B, L, embedding) -> (outputs (B, L, hidden), _),
            # causal, so the last position is the only one that has read the whole sequence
            self.rnn = Transformer(p.hidden, heads=2, layers=1, d_in=p.embedding, positions="sinusoidal")
        else:
            raise ValueError(f"unknown model {model_name!r}, expected one of {KNOWN}")
        self.head = nn.Linear(p.hidden, CLUES)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, L, E)
        # only the last position is classified: the layers that can compute it alone do
        if isinstance(self.rnn, (Transformer, LinearAttention, MinGRU)):
            out, _ = self.rnn(x, last=1)  # (B, 1, H)
        else:
            out, _ = self.rnn(x)  # (B, L, H)
        return self.head(out[:, -1])  # (B, 2) logits from the final hidden state


def recurrence_layer(model_name: str, input_size: int, hidden_size: int) -> nn.Module:
    """One of RECURRENCE: (B, L, input_size) -> (outputs (B, L, hidden_size), final state), in its
    parallel (training) form. Each starts with its decay open, so a fresh layer carries its state:
    minGRU's 1 - z near 1 - sigmoid(-3) = 0.95 (log space, as the paper trains it), GLA's alpha near
    sigmoid(3) = 0.95, the SSM's delta in [0.001, 0.1]; linear attention has no decay at all.
    "min_gru_closed" (CLOSED) is minGRU with the sign of that bias flipped: 1 - z starts near 0.05."""
    if model_name in ("min_gru", "min_gru_closed"):
        decay_bias = -3.0 if model_name == "min_gru" else 3.0
        return MinGRU(input_size, hidden_size, log_space=True, decay_bias=decay_bias)
    if model_name == "linear_attention":
        return LinearAttention(input_size, hidden_size, key_size=16)
    if model_name == "gla":
        return GatedLinearAttention(input_size, hidden_size, key_size=16, decay_bias=3.0)
    if model_name == "selective_ssm":
        return SelectiveSSM(input_size, hidden_size, state_size=8)
    raise ValueError(f"unknown recurrence layer {model_name!r}, expected one of {RECURRENCE}")


def build(
    model_name: str, seed: int, protocol: MemoryProtocol = PROTOCOL, device: Device = "cpu"
) -> MemoryModel:
    """The untrained model for `seed`, initialised on the CPU, then moved."""
    torch.manual_seed(seed)
    return MemoryModel(model_name, protocol).to(device)


class Separate(nn.Module):
    """M models side by side: tokens (M, B, L) -> logits (M, B, 2), model m reading tokens[m]."""

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        self.models = nn.ModuleList(models)

    def forward(self, tokens: Tensor) -> Tensor:
        return torch.stack([model(t) for model, t in zip(self.models, tokens)])

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Each model's gradient clipped on its own, as if trained alone: (M,) norms before clipping."""
        return torch.stack([nn.utils.clip_grad_norm_(model.parameters(), max_norm) for model in self.models])


def build_group(
    model_name: str, seeds: tuple[int, ...], protocol: MemoryProtocol = PROTOCOL, device: Device = "cpu"
) -> BatchedRNNClassifier | Separate:
    """One model per seed, to be trained together. The RNNs and GRUs share one batched loop
    (faster on a CPU than nn.RNN and nn.GRU, see lessonlib.models.batched_rnn); the LSTMs stay
    nn.LSTMs (a fused kernel), and the other layers run side by side."""
    models = [build(model_name, seed, protocol) for seed in seeds]
    group = BatchedRNNClassifier(models) if model_name in BATCHED else Separate(models)
    return group.to(device)


def validation_set(
    length: int, protocol: MemoryProtocol = PROTOCOL, device: Device = "cpu"
) -> tuple[Tensor, Tensor]:
    """The held-out sequences for `length`: the same for every model and seed."""
    generator = torch.Generator().manual_seed(10_000 + length)
    return make_batch(protocol.val_size, length, generator, device, protocol.vocab)


def data_streams(seeds: tuple[int, ...]) -> list[torch.Generator]:
    """One generator of training batches per seed, a stream apart from the initial weights."""
    return [torch.Generator().manual_seed(1_000 + seed) for seed in seeds]


def train_step(
    group: BatchedRNNClassifier | Separate,
    optimizer: torch.optim.Optimizer,
    generators: list[torch.Generator],
    length: int,
    protocol: MemoryProtocol = PROTOCOL,
    device: Device = "cpu",
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One step for every model of the group, each on its own fresh batch, its gradient clipped
    to protocol.clip on its own. Returns logits (M, B, 2), labels (M, B), each model's loss (M,)
    and each model's gradient norm before clipping (M,)."""
    p = protocol
    batches = [make_batch(p.batch, length, g, device, p.vocab) for g in generators]
    tokens = torch.stack([t for t, _ in batches])  # (M, B, L)
    labels = torch.stack([y for _, y in batches])  # (M, B)
    logits = group(tokens)  # (M, B, 2)
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1)  # (M,)
    optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()  # the sum of the models' losses: each model's gradient is that of its own loss
    norms = group.clip_grad_norm_(p.clip)
    optimizer.step()
    return logits, labels, losses.detach(), norms


@torch.no_grad()
def accuracies(group: nn.Module, tokens: Tensor, labels: Tensor, members: int) -> list[float]:
    """Accuracy of each of the group's `members` models on the same tokens (N, L), labels (N,)."""
    logits = group(tokens.expand(members, *tokens.shape))  # (M, N, 2)
    return (logits.argmax(-1) == labels).float().mean(1).tolist()


def train_seeds(
    model_name: str,
    length: int,
    seeds: tuple[int, ...],
    protocol: MemoryProtocol = PROTOCOL,
    device: Device = "cpu",
) -> list[Run]:
    """Train one model per seed under the protocol, in lockstep; one Run per seed.

    Each model gets its own batches, its own loss, its own gradient clipping and its own
    stop: models never interact, so a seed's Run does not depend on which seeds train with it.
    """
    with steady_cpu(device):  # tiny tensors: a second thread only adds waiting
        return _train_seeds(model_name, length, seeds, protocol, device)


def _train_seeds(
    model_name: str, length: int, seeds: tuple[int, ...], protocol: MemoryProtocol, device: Device
) -> list[Run]:
    p, M = protocol, len(seeds)
    group = build_group(model_name, seeds, p, device)
    val_tokens, val_labels = validation_set(length, p, device)
    generators = data_streams(seeds)
    optimizer = torch.optim.Adam(group.parameters(), lr=p.lr)  # elementwise, so per model as if alone
    runs: list[Run | None] = [None] * M
    for step in range(1, p.steps + 1):
        logits, labels, _, _ = train_step(group, optimizer, generators, length, p, device)
        if step % p.check_every == 0:
            # the training batch is a free first look; only a perfect batch pays for a validation
            perfect = (logits.argmax(-1) == labels).all(1).tolist()
            if any(perfect[m] and runs[m] is None for m in range(M)):
                accs = accuracies(group, val_tokens, val_labels, M)
                for m in range(M):
                    if perfect[m] and runs[m] is None and accs[m] >= p.solved:
                        runs[m] = Run(accs[m], step)  # solved: its result is final
            if all(run is not None for run in runs):
                break
    accs = accuracies(group, val_tokens, val_labels, M)
    return [run if run is not None else Run(accs[m], p.steps) for m, run in enumerate(runs)]


def train(
    model_name: str, length: int, seed: int, protocol: MemoryProtocol = PROTOCOL, device: Device = "cpu"
) -> Run:
    """Train one model under the protocol; returns its validation accuracy and the steps it took."""
    return train_seeds(model_name, length, (seed,), protocol, device)[0]


def sweep(
    models: tuple[str, ...] = MODELS,
    lengths: tuple[int, ...] | dict[str, tuple[int, ...]] = LENGTHS,
    seeds: tuple[int, ...] = SEEDS,
    protocol: MemoryProtocol = PROTOCOL,
    device: Device = "cpu",
    progress: bool = True,
    workers: int | None = None,
) -> dict[tuple[str, int, int], Run]:
    """train() for every (model, length, seed): {(model, length, seed): Run}, in that order.
    `lengths` holds every model's lengths, or each model's own ({"gru": (10, 30), "gru_open":
    (100,)}): one sweep keeps every core busy until its last run, where two sweeps in a row
    would each end on a lone run.

    A job is one run, except that an RNN's or GRU's seeds train together in one batched loop (the
    faster way on a CPU; the results are the same bits either way). On a CPU the jobs are
    spread over `workers` processes (default: one per core), each run single-threaded; on a
    GPU they run one after another in this process. The results do not depend on `workers`.
    A progress bar goes to the terminal (stderr).
    """
    device = torch.device(device)
    if workers is None:
        workers = 1 if device.type != "cpu" else cpus()
    if isinstance(lengths, dict) and set(lengths) != set(models):
        raise ValueError(f"lengths per model must name exactly the models {models}, not {tuple(lengths)}")
    lengths_of = lengths if isinstance(lengths, dict) else dict.fromkeys(models, lengths)
    jobs = []  # (model, length, the seeds that train together)
    for m in models:
        for L in lengths_of[m]:
            if m in BATCHED:
                jobs.append((m, L, tuple(seeds)))
            else:
                jobs.extend((m, L, (s,)) for s in seeds)
    jobs.sort(key=lambda job: -job[1] * len(job[2]))  # biggest first, so no worker ends on a long one
    runs = Parallel(n_jobs=workers, return_as="generator")(
        delayed(train_seeds)(m, L, job_seeds, protocol, str(device)) for m, L, job_seeds in jobs
    )
    results = {}
    runs = progress_bar(runs, "memory task", total=len(jobs), enabled=progress)
    for (m, L, job_seeds), job_runs in zip(jobs, runs):
        results.update({(m, L, s): run for s, run in zip(job_seeds, job_runs)})
    return {(m, L, s): results[m, L, s] for m in models for L in lengths_of[m] for s in seeds}


def recurrent_gradient_terms(model: MemoryModel, tokens: Tensor, labels: Tensor) -> Tensor:
    """(L, H, H): what each step contributes to the gradient of the loss with respect to the
    RNN's recurrent weight W_hh, for tokens (B, L) and labels (B,); the terms sum to it.

    The gradient of a shared weight is a sum with one term per step, the step's error signal
    times the state it read. To see the terms, the loop is written out with a copy of W_hh per
    step: each copy's gradient is one term, and the terms add up to W_hh's gradient."""
    rnn = model.rnn
    if not isinstance(rnn, nn.RNN):
        raise ValueError("the per-step gradient is written out for the plain RNN (model 'rnn')")
    x = model.embed(tokens)  # (B, L, E)
    copies = rnn.weight_hh_l0.detach().expand(x.shape[1], -1, -1).clone().requires_grad_()  # (L, H, H)
    h = x.new_zeros(x.shape[0], rnn.hidden_size)  # (B, H)
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ copies[t].T + rnn.bias_hh_l0)
    loss = F.cross_entropy(model.head(h), labels)
    (terms,) = torch.autograd.grad(loss, copies)
    return terms


def format_table(results: dict[tuple[str, int, int], Run]) -> str:
    """One row per (model, length): the validation accuracy of each seed, then the steps each took."""
    rows = list(dict.fromkeys((m, L) for m, L, _ in results))
    seeds = sorted({s for _, _, s in results})
    width = max(len("model"), *(len(m) for m, _ in rows))
    header = " ".join(f"{'seed ' + str(s):>8}" for s in seeds)
    lines = [f"{'model':<{width}} {'length':>6}  {header}   steps"]
    for m, L in rows:
        accs = " ".join(f"{results[m, L, s].accuracy:8.3f}" for s in seeds)
        steps = ",".join(str(results[m, L, s].steps) for s in seeds)
        lines.append(f"{m:<{width}} {L:>6}  {accs}   {steps}")
    return "\n".join(lines)
