"""Lesson 4's experiments: three character-level language models trained on the same plays.

The models (about the same number of parameters each, PROTOCOL.sizes):

- "rnn"   CharRNN with torch's tanh nn.RNN;
- "lstm"  CharRNN with nn.LSTM;
- "gpt"   CharTransformer, lesson 3's causal blocks with learned positions.

One protocol trains all three: the same characters in the same order, PROTOCOL.batch rows of
the training text read PROTOCOL.chunk characters at a time (2,048 characters per step), Adam,
the gradient norm clipped, the same number of steps and the same learning-rate schedule. The
recurrent models carry their hidden state from one chunk to the next and detach it (truncated
backpropagation through time, `train` below); the transformer reads each chunk as a window of
its own (its context is the chunk).

Evaluation reads the held-out play in PROTOCOL.eval_count windows of PROTOCOL.chunk characters,
at random places (the same for every model), every model starting each window from an empty
state, and averages the loss at each position of the window (`position_loss`): its mean over
positions is the validation loss, and its shape says how much each model gains from the characters before.

Every run is seeded: the seed fixes the initial weights; the data order is the same for every run.
On a CPU each run is single-threaded with subnormals flushed (steady_cpu), and `train_all`
spreads the runs over one process per core; the results do not depend on how many.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from joblib import Parallel, delayed
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from lessonlib.data import text
from lessonlib.device import cpus, steady_cpu
from lessonlib.models.char_rnn import CharRNN, detach_state
from lessonlib.models.char_transformer import CharTransformer
from lessonlib.models.gru import GRU
from lessonlib.models.lstm import LSTM
from lessonlib.models.multihead import KVCache
from lessonlib.models.recurrent_mixer import RecurrentMixer
from lessonlib.models.rnn import RNN

MODELS = ("rnn", "lstm", "gpt")
MIXERS = ("min_gru", "linear_attention")  # the GPT's blocks with a recurrent layer in attention's place
# the "linear_attention" model with Katharopoulos et al.'s feature map and normaliser, the same weights at the start
NORMALISED = "normalised_linear_attention"
Device = torch.device | str


@dataclass(frozen=True)
class LMProtocol:
    batch: int = 32  # rows of the training text read side by side
    chunk: int = 64  # characters per row per step: the truncation length, and the transformer's context
    steps: int = 2_000  # 2,000 x 2,048 characters: about 5.5 passes over the training text
    lr: float = 3e-3  # Adam's peak learning rate: reached after `warmup` steps, then a cosine down to lr / 10
    warmup: int = 50
    clip: float = 1.0  # max gradient norm
    eval_every: int = 50  # steps between looks at the validation loss, on the play's first eval_windows windows
    eval_windows: int = 256
    eval_count: int = 6_000  # the held-out play is read in this many windows, at random places
    embedding: int = 32  # the recurrent models' character embedding
    sizes: dict = field(default_factory=lambda: {"rnn": 256, "lstm": 128, "gpt": 64})  # hidden / d_model
    heads: int = 4
    layers: int = 2


PROTOCOL = LMProtocol()


@dataclass
class Corpus:
    tokenizer: text.CharTokenizer
    train: Tensor  # (N,) ids
    val: Tensor  # (M,) ids


def load() -> Corpus:
    """The plays as ids; the vocabulary is every character of all six."""
    parts = text.corpus()
    tokenizer = text.CharTokenizer(parts["train"] + parts["val"])
    return Corpus(tokenizer, tokenizer.encode(parts["train"]), tokenizer.encode(parts["val"]))


def build(name: str, vocab: int, protocol: LMProtocol = PROTOCOL, seed: int = 0,
          device: Device = "cpu") -> nn.Module:
    """The untrained model `name`, its weights drawn on the CPU from `seed`, then moved."""
    torch.manual_seed(seed)
    p = protocol
    if name in ("rnn", "lstm", "gru"):
        model = CharRNN(name, vocab, p.embedding, p.sizes[name])
    elif name == "gpt" or name in (*MIXERS, NORMALISED):
        model = CharTransformer(vocab, p.sizes["gpt"], p.heads, p.layers, context=p.chunk)
        if name != "gpt":  # the GPT but for its mixer, and trained as the GPT is, on windows
            for block in model.transformer.blocks:
                block.self_attn = RecurrentMixer("linear_attention" if name == NORMALISED else name, p.sizes["gpt"])
                if name == NORMALISED:  # the same parameters, drawn the same: only the formula changes
                    block.self_attn.layer.normalised = True
    else:
        raise ValueError(f"unknown model {name!r}, expected one of {(*MODELS, *MIXERS, NORMALISED)}")
    return model.to(device)


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train_chunk(model: CharRNN, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, state: object,
                clip: float) -> tuple[float, object]:
    """One step of truncated backpropagation through time on chunk x, y (B, T).

    The model starts from `state`, the hidden state the previous chunk ended in, so its forward
    pass sees the whole text so far; the state was detached, so the backward pass stops at this
    chunk's first character. Returns the chunk's loss and its final state, detached for the next.
    """
    logits, state = model(x, state)  # (B, T, V); the hidden state flows in from the last chunk
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # mean over the B * T predictions
    update(model, optimizer, loss, clip)  # backward through this chunk's T steps, and no further
    return loss.item(), detach_state(state)  # the same numbers, cut from this chunk's graph


def train_window(model: CharTransformer, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor,
                 clip: float) -> float:
    """One step on windows x, y (B, T) that stand alone: the transformer's context is the window."""
    logits, _ = model(x)  # (B, T, V), position t reading positions 0..t of its window
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    update(model, optimizer, loss, clip)
    return loss.item()


def update(model: nn.Module, optimizer: torch.optim.Optimizer, loss: Tensor, clip: float) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()


@dataclass
class Trained:
    name: str
    model: nn.Module
    losses: list[float]  # training loss (nats per character) at every step
    val_steps: list[int]  # steps at which the validation loss was measured
    val_losses: list[float]  # nats per character on the first eval_windows validation windows
    position: Tensor  # (chunk,) validation loss at each position of a window, whole held-out play, nats

    @property
    def bits(self) -> float:
        """Bits per character on the held-out play."""
        return self.position.mean().item() / math.log(2)


def train(name: str, protocol: LMProtocol = PROTOCOL, seed: int = 0, device: Device = "cpu") -> Trained:
    """Train `name` under the protocol, its weights drawn from `seed`."""
    with steady_cpu(device):
        return _train(name, protocol, seed, torch.device(device))


def _train(name: str, p: LMProtocol, seed: int, device: torch.device) -> Trained:
    data = load()
    model = build(name, len(data.tokenizer), p, seed, device)
    recurrent = isinstance(model, CharRNN)
    rows = text.streams(data.train, p.batch).to(device)  # (B, N // B): contiguous stretches
    val_x, val_y = (t.to(device) for t in text.random_windows(data.val, p.chunk, p.eval_count))
    look_x, look_y = (t[: p.eval_windows].to(device) for t in text.windows(data.val, p.chunk))  # no overlap
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate(step, p) / p.lr)
    losses, val_steps, val_losses = [], [], []
    state = None  # the hidden state carried along the rows (recurrent models)
    batches = text.chunks(rows, p.chunk)
    for step in range(1, p.steps + 1):
        try:
            x, y = next(batches)
        except StopIteration:  # a full pass: start again at the top, with a fresh state
            batches, state = text.chunks(rows, p.chunk), None
            x, y = next(batches)
        if recurrent:
            loss, state = train_chunk(model, optimizer, x, y, state, p.clip)
        else:  # each chunk is a window of its own: no state to carry
            loss = train_window(model, optimizer, x, y, p.clip)
        schedule.step()
        losses.append(loss)
        if step % p.eval_every == 0:
            val_steps.append(step)
            val_losses.append(position_loss(model, look_x, look_y).mean().item())
    model.eval()
    by_position = position_loss(model.to(device), val_x, val_y).cpu()
    return Trained(name, model.cpu(), losses, val_steps, val_losses, by_position)


def learning_rate(step: int, p: LMProtocol = PROTOCOL) -> float:
    """The learning rate of step `step` (0 = the first): a linear warm-up, then a cosine to lr / 10."""
    if step < p.warmup:
        return p.lr * (step + 1) / p.warmup
    done = (step - p.warmup) / max(1, p.steps - p.warmup)
    return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))


@torch.no_grad()
def position_loss(model: nn.Module, x: Tensor, y: Tensor, batch: int = 256) -> Tensor:
    """(L,): the mean loss, in nats, at each position of windows x, y (W, L), every window read
    from an empty state. Position 0 has seen one character, position L - 1 all L of the window."""
    total = x.new_zeros(x.shape[1], dtype=torch.float64)
    for i in range(0, len(x), batch):
        logits, _ = model(x[i : i + batch])  # (b, L, V)
        nll = F.cross_entropy(logits.transpose(1, 2), y[i : i + batch], reduction="none")  # (b, L)
        total += nll.sum(0).double()
    return (total / len(x)).float()


# nanoGPT's "baby GPT" for a CPU (its README, shakespeare_char): 4 layers, 4 heads, width 128, a context of
# 64 characters, 2,000 steps of 12 windows at a peak learning rate of 1e-3 (100 steps of warm-up), no dropout.
# Its README reports a validation loss of 1.88 nats per character, on the last tenth of its one-file Shakespeare.
NANOGPT_CPU = LMProtocol(batch=12, steps=2_000, lr=1e-3, warmup=100, sizes={"gpt": 128}, layers=4)
NANOGPT_CPU_NATS = 1.88

SEEDS = (0, 1, 2)
RUNS = tuple((name, seed) for name in ("gpt", "rnn", "lstm") for seed in SEEDS)  # the longest runs first


def train_all(runs: Sequence[tuple[str, int]] = RUNS, protocol: LMProtocol = PROTOCOL,
              device: Device = "cpu", workers: int | None = None) -> dict[tuple[str, int], Trained]:
    """train() for every (name, seed) of `runs`, by default the lesson's: the three models from
    three seeds each. On a CPU the runs are spread over one process per core, each
    single-threaded; the results do not depend on how many."""
    device = torch.device(device)
    workers = (1 if device.type != "cpu" else cpus()) if workers is None else workers
    sent = Parallel(n_jobs=workers)(delayed(_trained_weights)(n, protocol, s, str(device)) for n, s in runs)
    vocab = len(load().tokenizer)
    trained = {}
    for (name, seed), (weights, run) in zip(runs, sent):
        with torch.random.fork_rng(devices=[]):  # build() seeds: the caller's random state is left alone
            model = build(name, vocab, protocol, seed)
        model.load_state_dict(weights)
        trained[name, seed] = replace(run, model=model.eval())
    return trained


def _trained_weights(name: str, protocol: LMProtocol, seed: int, device: str) -> tuple[dict[str, Tensor], Trained]:
    """train()'s model as its weights, and the rest of its Trained: plain data, which crosses from a
    worker process (or a Dask cluster's worker) back to the caller, where a live model may not."""
    run = train(name, protocol, seed, device)
    return run.model.state_dict(), replace(run, model=None)


def ngram_bits(train_ids: Tensor, val_ids: Tensor, vocab: int, order: int, alpha: float = 0.1) -> float:
    """Bits per character on val of a count model: the next character's frequency after the
    previous order - 1 characters in the training text (order 1: the unigram, no context; 2: the
    bigram, one character), with alpha added to every count so that nothing has probability 0."""
    if order == 1:
        counts = torch.bincount(train_ids, minlength=vocab).double() + alpha  # (V,)
        logp = (counts / counts.sum()).log()
        return (-logp[val_ids].mean() / math.log(2)).item()
    if order != 2:
        raise ValueError("order 1 (unigram) or 2 (bigram)")
    pairs = torch.zeros(vocab, vocab, dtype=torch.float64)
    pairs.index_put_((train_ids[:-1], train_ids[1:]), torch.ones(len(train_ids) - 1, dtype=torch.float64),
                     accumulate=True)  # pairs[a, b]: how often b follows a
    pairs += alpha
    logp = (pairs / pairs.sum(1, keepdim=True)).log()  # row a: the distribution of what follows a
    return (-logp[val_ids[:-1], val_ids[1:]].mean() / math.log(2)).item()


def bptt_gradient(model: CharRNN, x: Tensor, y: Tensor, truncation: int) -> Tensor:
    """The gradient of the mean loss over x, y (B, T) with respect to all of the model's
    parameters, flattened, as truncated backpropagation through time computes it: the sequence
    is read in chunks of `truncation` characters, the hidden state carried from one chunk to the
    next and detached, and each chunk's gradient added up. A truncation of T or more is full
    backpropagation through time."""
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    state, T = None, x.shape[1]
    for start in range(0, T, truncation):
        logits, state = model(x[:, start : start + truncation], state)
        loss = F.cross_entropy(logits.flatten(0, 1), y[:, start : start + truncation].flatten(), reduction="sum")
        for acc, g in zip(total, torch.autograd.grad(loss / y.numel(), params)):
            acc += g
        state = detach_state(state)
    return torch.cat([g.flatten() for g in total])


# ----------------------------------------------------------------------------- what a character costs

class _ProductCounter(TorchDispatchMode):
    """Counts the matrix products (mm, addmm, bmm) that run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm):
            self.count += 1
        return func(*args, **(kwargs or {}))


def written_out(model: nn.Module) -> Callable[..., tuple[Tensor, object]]:
    """(tokens (B, T), state) -> (logits, state), the model's own computation through layers
    whose every matrix product a counter can see: lessonlib's step-by-step RNN, GRU or LSTM with
    the model's weights, or the transformer with its attention written out (need_weights=True);
    torch's fused kernels hide their products. The state is a recurrent layer's, or a list of KV
    caches."""
    if isinstance(model, CharRNN):
        layer = {"rnn": RNN, "lstm": LSTM, "gru": GRU}[model.kind].from_torch(model.rnn)
        layer.batch_first = True

        def recurrent(tokens: Tensor, state: object = None) -> tuple[Tensor, object]:
            if state is not None and not isinstance(state, tuple):
                state = (state,)
            out, state = layer.scan(model.embed(tokens), state)
            return model.head(out), state

        return recurrent

    def transformer(tokens: Tensor, state: list[KVCache] | None = None) -> tuple[Tensor, list[KVCache] | None]:
        return model(tokens, caches=state, need_weights=True)[0], state

    return transformer


def cost(model: nn.Module, length: int) -> dict[str, int]:
    """Counted on one window of `length` characters: "flops" of the forward pass, "train_flops" of
    the forward and backward pass, and "products", the matrix products the forward pass makes."""
    forward = written_out(model)
    tokens = torch.zeros(1, length, dtype=torch.long, device=next(model.parameters()).device)
    products = _ProductCounter()
    with FlopCounterMode(display=False) as fwd:
        with products:
            forward(tokens)
    with FlopCounterMode(display=False) as both:
        forward(tokens)[0].sum().backward()
    model.zero_grad(set_to_none=True)
    return {"flops": fwd.get_total_flops(), "train_flops": both.get_total_flops(), "products": products.count}


@torch.no_grad()
def generation_flops(model: nn.Module, length: int, use_cache: bool = True) -> list[int]:
    """Forward flops to write each character of a text of `length`, from a one-character prompt:
    entry n - 1 is the cost of the character written after n characters. With use_cache, each
    step reads only the newest character (a recurrent model's state, a transformer's KV cache);
    without, it rereads the whole text so far."""
    forward = written_out(model)
    tokens = torch.zeros(1, length, dtype=torch.long, device=next(model.parameters()).device)
    state = None if isinstance(model, CharRNN) else [KVCache() for _ in model.transformer.blocks]
    out = []
    for n in range(1, length):
        with FlopCounterMode(display=False) as flops:
            if use_cache:
                _, state = forward(tokens[:, n - 1 : n], state)  # the newest character only
            else:
                forward(tokens[:, :n])  # everything so far, from scratch
        out.append(flops.get_total_flops())
    return out
