"""Lesson 7's experiments, "Memory that edits itself": the recall tasks and the one training protocol.

The tasks (token ids: keys 0..keys-1, values keys..keys+values-1, then one separator; a model
answers with one of the `values` classes, read at every query position; no positions anywhere):

- recall (MQAR, Zoology, Arora et al., arXiv:2312.04927): N pairs k v, then all N keys in a new
  order as queries; each query's answer is its key's value.
      k3 v7 k1 v2 k5 v0 | k1 k5 k3        answers v2 v0 v7
- overwrite: N pairs, then the same N keys bound to new values (each differs from its old one), in
  a new order, then all N keys as queries; the answer is the NEW value. A model that cannot tell
  which write came last returns the old value about half the time: the stale-value rate is the
  fraction of answers equal to the OLD value. Training alternates overwrite and plain recall
  batches (step 1 overwrite, step 2 recall, ...), so a model cannot get by with "always the
  second block".
      k3 v7 k1 v2 | k1 v4 k3 v9 | k3 k1   answers v9 v4 (stale: v7 v2)
- reset: an old block of N pairs, a separator, a new block of N pairs (keys drawn afresh, so
  some are old keys with new values), then the new block's keys as queries. Made for the gated
  delta rule: its decay alpha_t, read at the separator against everywhere else, says whether it
  learned to wipe the state there without being told.

The model (EditingModel): embedding (width 64) -> one mixing layer -> a linear readout, the
mixer one of MIXERS:
- "linear": additive linear attention, Katharopoulos et al.'s elu + 1 feature map and normaliser
  (lessonlib.models.linear_attention's normalised form, here with heads);
- "delta", "gated": DeltaNet and Gated DeltaNet (lessonlib.models.deltanet), chunkwise;
- "softmax": causal softmax attention, no positional information.
Every mixer has 2 heads of 32 (a 32 x 32 state per head for the recurrent ones) and takes q, k and
v through the same front end, DeltaNet's: a projection, then a causal depthwise convolution of
width 4 (so the write at a value token can take its key from the token before), then silu on v.
The mixers differ only in what they do with q, k and v. That front end is why the course's
LinearAttention and MultiHeadAttention are not used as they are: each takes q, k and v from one
token, and a single such layer cannot bind a key to the value after it.

The protocol (EditingProtocol) keeps what issue 65's probe states (width 64, 2 heads, Adam at
3e-3, batch 64, 800 steps of overwrite, 600 of MQAR) and adds its own: a constant learning rate,
the gradient norm clipped to 1, N of each training batch uniform in `pairs` (overwrite 4-12, MQAR
8-32; MQAR is also scored at N = 48, never trained on), 64 keys and 64 values. Measured on this course's 2-core CPU,
seeds 0-2, one thread per run, by train_all (held-out sets of 512 sequences):

- overwrite, 800 steps (OVERWRITE), accuracy at N = 4 / 8 / 12: the delta rule 99.1-100% (stale
  answers 0-0.2%); additive linear attention 48.7-52.5% with 47.4-50.4% stale, at every N;
  softmax without positions 55.1-68.1%, every wrong answer the stale value (accuracy + stale rate
  = 100.0%). At 400 steps (OVERWRITE_SHORT), 3 of 3 seeds: delta 97.8-100% (stale 0-0.5%), linear
  45.8-49.7% (stale 45.1-52.1%), softmax 54.0-66.7%.
- MQAR, 600 steps (RECALL), N = 8 / 32 / 48: softmax 100% everywhere; linear attention
  99.8-100 / 96.8-97.3 / 90.7-92.0%; the delta rule 100 / 98.8-99.2 / 92.6-94.4%. Both recurrent
  mixers fall with N, the delta rule too at N = 48. It is ahead of linear attention at N = 32 and
  48 on 3 of 3 seeds at every budget from 200 steps on, but the gap shrinks with training
  (18-24 points at 200 steps, 2.4-3.6 at 400, 1.8-2.5 at 600): these runs show a faster learner,
  not a state that holds more. At 400 steps (RECALL_SHORT): linear 99.8-99.9 / 94.3-96.0 /
  85.9-89.1%, delta 100 / 97.7-98.6 / 88.3-92.7%, softmax 100%.
- reset, 600 steps (RESET), gated delta: accuracy 99.9-100%, alpha 0.000-0.009 at the separator
  and 0.997-0.999 elsewhere (per head). At 300 steps (RESET_SHORT, run as such): 99.8%, alpha
  0.0001-0.011 at the separator and 0.996-0.999 elsewhere.
Every run records held-out scores every eval_every steps (Result.history); with a constant
learning rate those are exactly the shorter runs' results (OVERWRITE_SHORT and RECALL_SHORT, run
as such, gave the same numbers to the bit), so one long run answers for every shorter budget.

Seeds: `seed` fixes the initial weights and the training batches (drawn on the CPU, then moved);
the evaluation sets depend only on the task and N, so every model and seed is judged on the same
sequences. On a CPU a run is single-threaded with subnormals flushed (steady_cpu), and train_all
spreads runs over one process per core; a run's result does not depend on how many.
"""
from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from joblib import Parallel, delayed
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.device import cpus, steady_cpu
from lessonlib.models.deltanet import DeltaNet, ShortConvolution
from lessonlib.models.linear_attention import feature_map

MIXERS = ("linear", "delta", "gated", "softmax")
TASKS = ("overwrite", "recall", "reset")
SEEDS = (0, 1, 2)
IGNORE = -100  # the target of a position that is not a query: no loss, not scored
Device = torch.device | str


@dataclass(frozen=True)
class EditingProtocol:
    """Everything a run depends on besides the mixer and the seed."""

    task: str = "overwrite"  # one of TASKS
    steps: int = 800
    pairs: tuple[int, int] = (4, 12)  # N of a training batch: uniform in [lo, hi], one N per batch
    eval_pairs: tuple[int, ...] = (4, 8, 12)  # N at which the trained model is scored
    keys: int = 64  # key tokens
    values: int = 64  # value tokens, and the readout's classes
    width: int = 64
    heads: int = 2  # 2 heads of 32
    batch: int = 64
    lr: float = 3e-3  # Adam
    clip: float = 1.0  # max gradient norm
    eval_size: int = 512  # sequences per evaluated N
    eval_every: int = 100  # steps between held-out scores (0: only at the end); see Result.history

    @property
    def vocab(self) -> int:
        return self.keys + self.values + 1  # the last token is the separator


OVERWRITE = EditingProtocol()  # the probe budget: 800 steps
RECALL = EditingProtocol(task="recall", steps=600, pairs=(8, 32), eval_pairs=(8, 32, 48))  # 48: never trained on
RESET = EditingProtocol(task="reset", steps=600, pairs=(4, 12), eval_pairs=(8,))
# the smallest budgets at which the findings above held on 3 of 3 seeds (from the 800- and 600-step runs' history)
OVERWRITE_SHORT = dataclasses.replace(OVERWRITE, steps=400)
RECALL_SHORT = dataclasses.replace(RECALL, steps=400)
RESET_SHORT = dataclasses.replace(RESET, steps=300)


class Batch(NamedTuple):
    tokens: Tensor  # (B, T) token ids
    targets: Tensor  # (B, T): the value class at a query position, IGNORE elsewhere
    old: Tensor  # (B, T): the key's stale value class where there is one, IGNORE elsewhere


def _distinct_keys(batch: int, n: int, keys: int, g: torch.Generator) -> Tensor:
    """(batch, n) distinct key ids per row."""
    if n > keys:
        raise ValueError(f"{n} pairs need {n} distinct keys, there are {keys}")
    return torch.rand(batch, keys, generator=g, device=g.device).argsort(-1)[:, :n]


def _shuffle(batch: int, n: int, g: torch.Generator) -> Tensor:
    """(batch, n): a random order of 0..n-1 per row."""
    return torch.rand(batch, n, generator=g, device=g.device).argsort(-1)


def _pairs(k: Tensor, v: Tensor, keys: int) -> Tensor:
    """keys (B, N), value classes (B, N) -> tokens k v k v ... (B, 2N)."""
    return torch.stack([k, v + keys], -1).flatten(1)


def _assemble(blocks: list[Tensor], queries: Tensor, answers: Tensor, old: Tensor | None, device: Device) -> Batch:
    """The blocks of tokens, then the queries (B, N) answered by `answers` (B, N)."""
    context = torch.cat(blocks, 1)
    B, C = context.shape
    pad = torch.full((B, C), IGNORE, dtype=torch.long, device=context.device)
    tokens = torch.cat([context, queries], 1)
    targets = torch.cat([pad, answers], 1)
    olds = torch.cat([pad, torch.full_like(answers, IGNORE) if old is None else old], 1)
    return Batch(tokens.to(device), targets.to(device), olds.to(device))


def recall_batch(batch: int, n: int, g: torch.Generator, device: Device = "cpu",
                 protocol: EditingProtocol = OVERWRITE) -> Batch:
    """MQAR: n pairs, then their n keys in a new order. Length 3n."""
    p = protocol
    k = _distinct_keys(batch, n, p.keys, g)
    v = torch.randint(0, p.values, (batch, n), generator=g, device=g.device)
    order = _shuffle(batch, n, g)
    return _assemble([_pairs(k, v, p.keys)], k.gather(1, order), v.gather(1, order), None, device)


def overwrite_batch(batch: int, n: int, g: torch.Generator, device: Device = "cpu",
                    protocol: EditingProtocol = OVERWRITE) -> Batch:
    """n pairs, the same n keys with new values (never the old one) in a new order, then the n keys
    in another order; answers: the new values, `old` the old ones. Length 5n."""
    p = protocol
    k = _distinct_keys(batch, n, p.keys, g)
    v_old = torch.randint(0, p.values, (batch, n), generator=g, device=g.device)
    v_new = (v_old + torch.randint(1, p.values, (batch, n), generator=g, device=g.device)) % p.values  # != old
    second, ask = _shuffle(batch, n, g), _shuffle(batch, n, g)
    blocks = [_pairs(k, v_old, p.keys), _pairs(k.gather(1, second), v_new.gather(1, second), p.keys)]
    return _assemble(blocks, k.gather(1, ask), v_new.gather(1, ask), v_old.gather(1, ask), device)


def reset_batch(batch: int, n: int, g: torch.Generator, device: Device = "cpu",
                protocol: EditingProtocol = RESET) -> Batch:
    """n old pairs, the separator, n new pairs (keys drawn afresh: old keys come back with fresh
    values at random), then the new keys in a new order; answers: the new values. `old` is a
    query's value in the old block where its key was there with another value. Length 5n + 1."""
    p = protocol
    k_a, k_b = _distinct_keys(batch, n, p.keys, g), _distinct_keys(batch, n, p.keys, g)
    v_a = torch.randint(0, p.values, (batch, n), generator=g, device=g.device)
    v_b = torch.randint(0, p.values, (batch, n), generator=g, device=g.device)
    ask = _shuffle(batch, n, g)
    q, answers = k_b.gather(1, ask), v_b.gather(1, ask)
    same = q[:, :, None] == k_a[:, None, :]  # (B, n, n): query i's key is old key j
    old = (same * v_a[:, None, :]).sum(-1)
    old = old.masked_fill(~same.any(-1) | (old == answers), IGNORE)
    separator = torch.full((batch, 1), p.vocab - 1, dtype=torch.long, device=g.device)
    return _assemble([_pairs(k_a, v_a, p.keys), separator, _pairs(k_b, v_b, p.keys)], q, answers, old, device)


def make_batch(protocol: EditingProtocol, batch: int, n: int, g: torch.Generator, device: Device = "cpu",
               step: int = 1) -> Batch:
    """The task's batch for training step `step` (1, 2, ...): overwrite alternates with plain recall,
    overwrite on the odd steps (an evaluation asks for step 1: overwrite)."""
    if protocol.task == "overwrite":
        make = overwrite_batch if step % 2 else recall_batch
    elif protocol.task in ("recall", "reset"):
        make = recall_batch if protocol.task == "recall" else reset_batch
    else:
        raise ValueError(f"unknown task {protocol.task!r}, expected one of {TASKS}")
    return make(batch, n, g, device, protocol)


class ConvAttention(nn.Module):
    """Multi-head attention with DeltaNet's front end: x (B, T, D) -> (y (B, T, D), None).

    q, k, v = conv(Linear(x)) each (causal, depthwise, width 4), v through silu as in DeltaNet;
    "linear":  y_t = sum_{s<=t} (phi(q_t) . phi(k_s)) v_s / sum_{s<=t} phi(q_t) . phi(k_s),
               phi = elu + 1 (Katharopoulos et al.), the parallel form of the state
               S_t = S_{t-1} + phi(k_t) v_t^T and its normaliser z_t = z_{t-1} + phi(k_t);
    "softmax": y_t = softmax over s <= t of q_t . k_s / sqrt(d), times v_s. No positions: both
    see the context as a set, apart from what the width-4 convolution sees.
    """

    def __init__(self, d_model: int, n_heads: int, kind: str, conv_size: int = 4) -> None:
        super().__init__()
        if kind not in ("linear", "softmax"):
            raise ValueError(f"unknown kind {kind!r}")
        self.kind, self.n_heads, self.head_dim = kind, n_heads, d_model // n_heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.q_conv, self.k_conv, self.v_conv = (ShortConvolution(d_model, conv_size) for _ in range(3))
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d)

    def forward(self, x: Tensor) -> tuple[Tensor, None]:
        q = self.heads(self.q_conv(self.q_proj(x)))
        k = self.heads(self.k_conv(self.k_proj(x)))
        v = self.heads(F.silu(self.v_conv(self.v_proj(x))))
        if self.kind == "softmax":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            T = x.shape[1]
            w = feature_map(q) @ feature_map(k).transpose(-1, -2)  # (B, H, T, T), positive
            w = w.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), 0)
            o = (w @ v) / w.sum(-1, keepdim=True)
        B, H, T, d = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * d)), None


def mixing_layer(mixer: str, width: int, heads: int) -> nn.Module:
    """One of MIXERS: x (B, T, width) -> (y (B, T, width), state or None)."""
    if mixer in ("delta", "gated"):
        return DeltaNet(width, heads, gated=mixer == "gated")
    if mixer in ("linear", "softmax"):
        return ConvAttention(width, heads, mixer)
    raise ValueError(f"unknown mixer {mixer!r}, expected one of {MIXERS}")


class EditingModel(nn.Module):
    """tokens (B, T) -> logits over the value classes (B, T, values): embedding, one mixer, readout."""

    def __init__(self, mixer: str, protocol: EditingProtocol = OVERWRITE) -> None:
        super().__init__()
        p = protocol
        self.mixer_name = mixer
        self.embed = nn.Embedding(p.vocab, p.width)
        self.mixer = mixing_layer(mixer, p.width, p.heads)
        self.readout = nn.Linear(p.width, p.values)

    def forward(self, tokens: Tensor) -> Tensor:
        y, _ = self.mixer(self.embed(tokens))
        return self.readout(y)


def build(mixer: str, seed: int, protocol: EditingProtocol = OVERWRITE, device: Device = "cpu") -> EditingModel:
    """The untrained model for `seed`, initialised on the CPU, then moved."""
    torch.manual_seed(seed)
    return EditingModel(mixer, protocol).to(device)


class Score(NamedTuple):
    accuracy: float  # answers equal to the target, over every query
    stale: float  # answers equal to the old value, over the queries that have one (nan if none)


def score(logits: Tensor, batch: Batch) -> Score:
    answer = logits.argmax(-1)  # (B, T)
    asked, has_old = batch.targets != IGNORE, batch.old != IGNORE
    right = (answer == batch.targets)[asked].float().mean().item()
    stale = (answer == batch.old)[has_old].float().mean().item() if has_old.any() else math.nan
    return Score(right, stale)


def eval_set(protocol: EditingProtocol, n: int, device: Device = "cpu") -> Batch:
    """The held-out sequences for N = n: the same for every mixer and seed."""
    g = torch.Generator().manual_seed(10_000 + 100 * TASKS.index(protocol.task) + n)
    return make_batch(protocol, protocol.eval_size, n, g, device, step=1)


@torch.no_grad()
def evaluate(model: EditingModel, protocol: EditingProtocol, n: int, device: Device = "cpu") -> Score:
    was = model.training
    model.eval()
    batch = eval_set(protocol, n, device)
    out = score(model(batch.tokens), batch)
    model.train(was)
    return out


@torch.no_grad()
def gate_at_separator(model: EditingModel, protocol: EditingProtocol = RESET, n: int | None = None,
                      device: Device = "cpu") -> tuple[list[float], list[float]]:
    """The gated mixer's alpha on the reset task's held-out set: per head, its mean at the separator
    and its mean at every other position. ([], []) for a mixer without a gate."""
    if not (isinstance(model.mixer, DeltaNet) and model.mixer.gated):
        return [], []
    n = protocol.eval_pairs[0] if n is None else n
    tokens = eval_set(protocol, n, device).tokens
    alpha = model.mixer.inputs(model.embed(tokens))[4]  # (B, H, T)
    at = (tokens == protocol.vocab - 1)[:, None, :].expand_as(alpha)
    heads = alpha.shape[1]
    sep = [alpha[:, h][at[:, h]].mean().item() for h in range(heads)]
    rest = [alpha[:, h][~at[:, h]].mean().item() for h in range(heads)]
    return sep, rest


@dataclass
class Result:
    mixer: str
    seed: int
    task: str
    steps: int
    accuracy: dict[int, float]  # N -> held-out accuracy
    stale: dict[int, float]  # N -> stale-value rate (nan where no query has an old value)
    curve: list[float] = field(default_factory=list)  # training-batch accuracy of each scored step
    curve_steps: list[int] = field(default_factory=list)  # the steps of `curve` (overwrite: the odd ones)
    alpha_separator: list[float] = field(default_factory=list)  # per head (gated, reset task)
    alpha_elsewhere: list[float] = field(default_factory=list)
    history: dict[int, dict[int, Score]] = field(default_factory=dict)  # step -> N -> held-out Score
    seconds: float = 0.0  # wall-clock time of the run (training and evaluation)
    cpu_seconds: float = 0.0  # CPU time of the process meanwhile: less sensitive to others' load

    def first_step_at(self, level: float) -> int | None:
        """The first step whose training batch (of the task proper) was answered at `level` or better."""
        return next((s for s, a in zip(self.curve_steps, self.curve) if a >= level), None)


def train(protocol: EditingProtocol, mixer: str, seed: int, device: Device = "cpu") -> Result:
    """Train `mixer` on the protocol's task from `seed`; the trained model is scored at every
    protocol.eval_pairs N, and so is the model of every eval_every-th step (Result.history).

    The learning rate is constant and the batches of step s do not depend on the budget, so the
    first s steps of a run are exactly the s-step run: history[s] is what a protocol of s steps
    would report (on the CPU, to the bit), and one run answers for every shorter budget."""
    with steady_cpu(device):
        return _train(protocol, mixer, seed, device)[0]


def train_model(
    protocol: EditingProtocol, mixer: str, seed: int, device: Device = "cpu"
) -> tuple[Result, EditingModel]:
    """train(), and the trained model."""
    with steady_cpu(device):
        return _train(protocol, mixer, seed, device)


def _train(p: EditingProtocol, mixer: str, seed: int, device: Device) -> tuple[Result, EditingModel]:
    wall, cpu = time.perf_counter(), time.process_time()
    model = build(mixer, seed, p, device)
    g = torch.Generator().manual_seed(1_000 + seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    curve, curve_steps, history = [], [], {}
    lo, hi = p.pairs
    for step in range(1, p.steps + 1):
        n = int(torch.randint(lo, hi + 1, (), generator=g))
        batch = make_batch(p, p.batch, n, g, device, step)
        logits = model(batch.tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), p.clip)
        optimizer.step()
        if p.task != "overwrite" or step % 2:  # overwrite: only its own batches count, not recall's
            curve.append(score(logits.detach(), batch).accuracy)
            curve_steps.append(step)
        if step == p.steps or (p.eval_every and step % p.eval_every == 0):
            history[step] = {n: evaluate(model, p, n, device) for n in p.eval_pairs}
    scores = history[p.steps]
    sep, rest = gate_at_separator(model, p, device=device) if p.task == "reset" else ([], [])
    result = Result(
        mixer, seed, p.task, p.steps, {n: s.accuracy for n, s in scores.items()},
        {n: s.stale for n, s in scores.items()}, curve, curve_steps, sep, rest, history,
        time.perf_counter() - wall, time.process_time() - cpu,
    )
    return result, model


# loky replaces a pool worker whose memory grew past its leak threshold and says so from a thread
# of its own, after the call that started it has returned (so as output of whatever runs next);
# the jobs are not lost and the results are the same.
warnings.filterwarnings("ignore", "A worker stopped while some jobs were given to the executor", UserWarning)


def train_all(protocol: EditingProtocol = OVERWRITE, mixers: Sequence[str] = ("linear", "delta", "softmax"),
              seeds: Sequence[int] = SEEDS, device: Device = "cpu",
              workers: int | None = None) -> dict[tuple[str, int], Result]:
    """train() for every (mixer, seed): {(mixer, seed): Result}. On a CPU the runs are spread over
    `workers` processes (default: one per core), each single-threaded; on a GPU they run one after
    another here. The results do not depend on `workers`."""
    device = torch.device(device)
    workers = (1 if device.type != "cpu" else cpus()) if workers is None else workers
    runs = [(m, s) for m in mixers for s in seeds]
    results = Parallel(n_jobs=workers)(delayed(train)(protocol, m, s, str(device)) for m, s in runs)
    return dict(zip(runs, results))
